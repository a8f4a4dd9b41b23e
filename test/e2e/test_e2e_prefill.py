"""A real PD prefill server with speculative decoding (NEXTN) and the plugin.

The server finds the plugin through SGLang's own ``load_plugins()`` in its scheduler
process; the gates act at the real call sites. Checked against independent sources:
the release oracle of ``test/conftest.py`` (which gates the release needs), the
server's own start-up lines (``Mamba Cache is allocated ...``, ``KV Cache is
allocated ...``), the budget the server sized with (the probe in ``site/``), and
``sglang-pd-lean report`` run as a separate process for the same config file, flags
and budget.
"""

from __future__ import annotations

import re

import pytest
import sglang
from e2e_runs import (
    PLUGIN_PREFIX,
    gate_lines,
    logged_sizes,
    reported_sizes,
)
from helpers import NATIVE_FROM, upstream_has

pytestmark = pytest.mark.e2e

# Gates a start-up reaches on a prefill server with --skip-server-warmup: the
# warmup and autotune gates sit on the warmup forward, which a CPU never runs.
REACHED_AT_START_UP = ("budget", "pool", "graph", "draft_graph")
VERIFY_COMPONENTS = ("verify ssm snapshots", "verify conv windows")


@pytest.fixture(scope="module")
def prefill(runs, device):
    run = runs.get("prefill", device)
    assert run.ready, run.explain("the prefill server did not start")
    return run


# The gates for other speculative workers than NEXTN's EAGLEWorkerV2 (and its
# EagleDraftWorker): their code is never imported by this launch.
NOT_EAGLES = ("frozen_kv_graph", "multi_layer_graph", "dflash_graph")


def expected_summary() -> str:
    """The registration summary this release gets for the NEXTN launch (from the
    release oracle)."""
    states = [
        f"{gate} gate "
        + (
            "not used by this launch"
            if gate in NOT_EAGLES
            else "native upstream" if upstream_has(gate) else "applied by the plugin"
        )
        for gate in NATIVE_FROM
    ]
    return f"{PLUGIN_PREFIX} SGLang {sglang.__version__}: " + ", ".join(
        states + ["replayssm gate not applicable"]
    )


def test_prefill_server_starts_with_the_plugin(prefill):
    assert prefill.server_info["internal_states"], prefill.explain("no ranks")


def test_every_rank_logs_the_registration_summary(prefill):
    ranks = len(prefill.internal_states())
    summaries = prefill.lines(rf"{re.escape(PLUGIN_PREFIX)} SGLang \S+: .*")
    assert [m.group(0) for m in summaries] == [expected_summary()] * ranks


def upstream_captures_graphs(runs, device) -> bool | None:
    """Whether upstream SGLang captures decode/verify graphs on this device with
    these flags, read from a real upstream server's log (the decode or unified
    server with the plugin left out); None where no such server starts here."""
    for name in ("decode, allow-list without us", "null, allow-list without us"):
        run = runs.get(name, device)
        if run.ready:
            return bool(run.lines(r"Capture .* begin"))
    return None


def expected_outcomes(runs, device) -> dict[str, str]:
    """gate -> "acted" / "stepped aside" for the gates a start-up reaches, where
    upstream's own behaviour tells: a gate acts only where upstream would have done
    the work it removes (allocated the verify state, reserved its budget, captured
    a graph)."""
    expected = {gate: "acted" for gate in ("pool", "budget") if not upstream_has(gate)}
    captures = upstream_captures_graphs(runs, device)
    if captures is not None:
        outcome = "acted" if captures else "stepped aside"
        expected["draft_graph"] = outcome
        if not upstream_has("graph"):
            expected["graph"] = outcome
    return expected


def test_each_gate_acts_only_where_upstream_would_have_done_the_work(
    prefill, runs, device
):
    expected = expected_outcomes(runs, device)
    lines = gate_lines(prefill)
    for state in prefill.internal_states():
        record = state["pd_lean"]
        for gate, outcome in expected.items():
            assert record["gates"][gate] == outcome, prefill.explain(
                f"{gate}: {record}"
            )
            line = lines[gate]
            assert "prefill target (EAGLE) cannot run TARGET_VERIFY" in line
            if outcome == "stepped aside":
                reason = record["stepped_aside_because"][gate]
                assert line.endswith(f"stepped aside: {reason}"), line
            else:
                assert (
                    "stepped aside" not in line
                    and gate not in record["stepped_aside_because"]
                )


def test_only_the_gates_this_release_needs_speak(prefill, device):
    reached = {gate for gate in REACHED_AT_START_UP if not upstream_has(gate)}
    lines = gate_lines(prefill)
    if device == "cpu":
        assert set(lines) == reached, prefill.explain(f"gate lines: {lines}")
    else:  # a GPU start-up may also reach the warmup/autotune gates
        assert set(lines) >= reached, prefill.explain(f"gate lines: {lines}")


def test_logged_pool_and_kv_sizes_equal_report(prefill, runs):
    logged = logged_sizes(prefill)
    report = runs.report_for(prefill)
    assert logged == reported_sizes(report, "prefill", "plugin", run=prefill)
    assert not any(c in logged for c in VERIFY_COMPONENTS)  # no SpeculativeState


def test_server_info_reports_what_each_rank_did(prefill, runs):
    for state in prefill.internal_states():
        record = state["pd_lean"]
        assert record["sglang_version"] == sglang.__version__
        asked = {
            gate
            for gate, s in record["gates"].items()
            if s in ("acted", "stepped aside")
        }
        assert asked == set(gate_lines(prefill))
        assert set(record["stepped_aside_because"]) == {
            gate for gate in asked if record["gates"][gate] == "stepped aside"
        }
        for gate in NATIVE_FROM:
            if gate not in asked:
                if gate in NOT_EAGLES:
                    expected = "not used by this launch"
                elif upstream_has(gate):
                    expected = "native upstream"
                else:
                    expected = "applied by the plugin"
                assert record["gates"][gate] == expected


def test_server_info_budget_equals_the_logged_sizing(prefill, runs):
    record = prefill.internal_states()[0]["pd_lean"]
    assert record["total_rest_memory_gib"] == prefill.budget_gib()
    if upstream_has("budget"):
        assert record["budget"] == {}  # upstream sizes it; nothing of ours to report
        return
    budget = record["budget"]
    logged = logged_sizes(prefill)
    assert budget["available_gib"] == prefill.budget_gib()
    assert budget["plugin"]["kv_tokens"] == logged["kv_tokens"]
    assert budget["plugin"]["mamba_slots"] == logged["mamba_slots"]
    capacity = runs.report_for(prefill)["capacity"]["prefill"]
    for column in ("upstream", "plugin"):
        assert budget[column] == {
            "kv_bytes": capacity[column]["kv_cache_bytes"],
            "kv_tokens": capacity[column]["kv_tokens"],
            "mamba_slots": capacity[column]["mamba_slots"],
        }


def test_server_info_not_allocated_bytes_equal_report(prefill, runs):
    record = prefill.internal_states()[0]["pd_lean"]
    if upstream_has("pool"):
        assert record["not_allocated_bytes"] == {}
        return
    upstream = runs.report_for(prefill)["roles"]["prefill"]["upstream"]
    assert record["not_allocated_bytes"] == {
        c: upstream["components"][c] for c in VERIFY_COMPONENTS
    }
