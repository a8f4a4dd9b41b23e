"""Speculative algorithms besides NEXTN on real servers (``e2e_algos.ALGO_RUNS``):
EAGLE3 and STANDALONE with a separate tiny draft checkpoint, NGRAM with none.

Each algorithm runs as a PD prefill server and as a unified server, with the plugin
and with SGLang's allow-list leaving it out, on the same flags. The plugin's
effect is read against the run without it, never against fixed figures:

- SGLang's own ``Mamba Cache is allocated`` line: with the plugin the prefill
  server logs no verify state (``intermediate_*_cache``) where the same server
  without it logs them (0.5.16/0.5.17; from 0.5.18 upstream builds none there).
- On a CPU, 0.5.16/0.5.17 allocate that verify state with ``device="cuda"``, which
  the e2e stand-in moves to the CPU and logs (shape, dtype): the bytes upstream
  allocated equal the ``not_allocated_bytes`` the plugin's record reports.
- The gates' log lines and ``/server_info`` (``internal_states[i]["pd_lean"]``):
  the gates a start-up reaches acted where upstream does the work they remove,
  stepped aside (with the reason the line gives) where it does not; none acted on
  the unified server, which logs the same verify state as without the plugin.

NGRAM builds no draft model (no draft weights are loaded): its worker uses the
target's pools, so only target-side gates can apply, and the draft-graph gate is
never asked. Where an algorithm cannot start on a CPU (SGLang's JIT C++ build
fails) its tests skip with the compiler's error, file and line.
"""

from __future__ import annotations

import re

import pytest
import sglang
from e2e_algos import (
    ALGORITHMS,
    jit_build_failure,
    redirected_allocations,
    redirected_bytes,
)
from e2e_runs import (
    PLUGIN_PREFIX,
    WEIGHTS_LINE,
    gate_lines,
    logged_sizes,
)
from helpers import upstream_has

pytestmark = pytest.mark.e2e

VERIFY_COMPONENTS = ("verify ssm snapshots", "verify conv windows")
WITHOUT_US = "allow-list without us"
# (algorithm, device) -> why it cannot start here, from its first run's log.
_CANNOT_START: dict[tuple[str, str], str] = {}


def started(runs, algo: str, role: str, device: str):
    """The finished run "ALGO role" (``e2e_algos.ALGO_RUNS``), ready; skips where
    the algorithm cannot start on this device, saying why (asked once)."""
    if (algo, device) in _CANNOT_START:
        pytest.skip(_CANNOT_START[algo, device])
    run = runs.get(f"{algo} {role}", device)
    if not run.ready and device == "cpu":
        failure = jit_build_failure(run)
        if failure is not None:
            _CANNOT_START[algo, device] = (
                f"{algo} cannot start on a CPU with SGLang {sglang.__version__}: "
                f"{failure}"
            )
            pytest.skip(_CANNOT_START[algo, device])
    assert run.ready, run.explain(f"the {algo} {role} server did not start")
    return run


def expected_gates(runs, algo: str, device: str) -> dict[str, str]:
    """gate -> "acted" / "stepped aside": the gates a prefill start-up of ``algo``
    reaches (the warmup and autotune gates sit on a warmup forward, which a CPU
    never runs). Pool and budget act where upstream builds the verify state; the
    graph gates where upstream captures graphs, read from the same algorithm's
    unified server without the plugin; the draft-graph gate only where there is a
    draft model (NGRAM has none)."""
    expected = {gate: "acted" for gate in ("pool", "budget") if not upstream_has(gate)}
    upstream = started(runs, algo, f"null, {WITHOUT_US}", device)
    outcome = "acted" if upstream.lines(r"Capture .* begin") else "stepped aside"
    if not upstream_has("graph"):
        expected["graph"] = outcome
    if ALGORITHMS[algo].draft is not None:
        expected["draft_graph"] = outcome
    return expected


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_prefill_gates_act_where_upstream_does_the_work(runs, device, algo):
    run = started(runs, algo, "prefill", device)
    expected = expected_gates(runs, algo, device)
    lines = gate_lines(run)
    if device == "cpu":
        assert set(lines) == set(expected), run.explain(f"gate lines: {lines}")
    else:  # a GPU start-up may also reach the warmup/autotune gates
        assert set(lines) >= set(expected), run.explain(f"gate lines: {lines}")
    for state in run.internal_states():
        record = state["pd_lean"]
        assert record["sglang_version"] == sglang.__version__
        asked = {
            g for g, s in record["gates"].items() if s in ("acted", "stepped aside")
        }
        assert asked == set(lines), run.explain(f"record: {record}")
        for gate, outcome in expected.items():
            assert record["gates"][gate] == outcome, run.explain(f"{gate}: {record}")
        for gate in asked:
            line = lines[gate]
            assert f"prefill target ({algo}) cannot run TARGET_VERIFY" in line, line
            if record["gates"][gate] == "stepped aside":
                reason = record["stepped_aside_because"][gate]
                assert line.endswith(f"stepped aside: {reason}"), line
            else:
                assert "stepped aside" not in line, line
        assert set(record["stepped_aside_because"]) == {
            g for g in asked if record["gates"][g] == "stepped aside"
        }


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_prefill_builds_no_verify_state_where_upstream_does(runs, device, algo):
    on = started(runs, algo, "prefill", device)
    off = started(runs, algo, f"prefill, {WITHOUT_US}", device)
    upstream_builds = not upstream_has("pool")
    logged_off = logged_sizes(off)
    assert all(
        (c in logged_off) == upstream_builds for c in VERIFY_COMPONENTS
    ), off.explain(f"upstream's Mamba Cache line: {logged_off}")
    logged_on = logged_sizes(on)
    assert not any(c in logged_on for c in VERIFY_COMPONENTS), on.explain(
        f"with the plugin: {logged_on}; without it: {logged_off}"
    )
    record = on.internal_states()[0]["pd_lean"]
    assert set(record["not_allocated_bytes"]) == (
        set(VERIFY_COMPONENTS) if upstream_builds else set()
    ), on.explain(f"record: {record}")
    if device == "cpu":
        # The bytes upstream's MambaPool allocated on "cuda" (moved by the
        # stand-in) are the bytes the record says the plugin did not allocate.
        assert redirected_allocations(on) == [], on.explain("verify state built")
        assert redirected_bytes(off) == sum(record["not_allocated_bytes"].values())


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_prefill_record_has_the_budget_the_server_sized_with(runs, device, algo):
    run = started(runs, algo, "prefill", device)
    logged = logged_sizes(run)
    for state in run.internal_states():
        record = state["pd_lean"]
        assert record["total_rest_memory_gib"] == run.budget_gib()
        if upstream_has("budget"):
            assert record["budget"] == {}, run.explain(f"record: {record}")
            continue
        plugin = record["budget"]["plugin"]
        assert record["budget"]["available_gib"] == run.budget_gib()
        assert plugin["kv_tokens"] == logged["kv_tokens"]
        assert plugin["mamba_slots"] == logged["mamba_slots"]
        upstream = record["budget"]["upstream"]
        assert upstream["kv_bytes"] > plugin["kv_bytes"] or (
            upstream["mamba_slots"] < plugin["mamba_slots"]
        ), run.explain(f"the budget gate freed nothing: {record['budget']}")


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_the_draft_checkpoint_is_loaded_only_where_the_algorithm_has_one(
    runs, device, algo
):
    for role in ("prefill", f"prefill, {WITHOUT_US}"):
        run = started(runs, algo, role, device)
        drafts = [m for m in run.lines(WEIGHTS_LINE) if m["draft"] == "True"]
        if ALGORITHMS[algo].draft is None:
            assert drafts == [], run.explain("NGRAM loaded a draft model")
        else:
            assert drafts and int(drafts[0]["bytes"]) > 0, run.explain("no draft")


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("role", ["prefill", "null"])
def test_without_the_plugin_nothing_of_ours_runs(runs, device, algo, role):
    run = started(runs, algo, f"{role}, {WITHOUT_US}", device)
    assert PLUGIN_PREFIX not in run.log, run.explain("the plugin spoke")
    for state in run.internal_states():
        assert "pd_lean" not in state


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_unified_server_is_upstream_with_the_plugin(runs, device, algo):
    on = started(runs, algo, "null", device)
    off = started(runs, algo, f"null, {WITHOUT_US}", device)
    assert gate_lines(on) == {}, on.explain("a gate spoke on a unified server")
    summary = on.lines(rf"{re.escape(PLUGIN_PREFIX)} SGLang \S+: ")
    assert len(summary) == len(on.internal_states()), on.explain("not registered")
    for state in on.internal_states():
        record = state["pd_lean"]
        assert "acted" not in record["gates"].values(), on.explain(f"{record}")
        assert record["not_allocated_bytes"] == {} and record["budget"] == {}
    logged_on, logged_off = logged_sizes(on), logged_sizes(off)
    for component in VERIFY_COMPONENTS:
        assert logged_on.get(component) == logged_off.get(component), on.explain(
            f"with the plugin: {logged_on}; without it: {logged_off}"
        )
    assert redirected_allocations(on) == redirected_allocations(off)
