"""Budget gate: a prefill target's budget reserves exactly what its pool allocates.

Runs upstream's real sizing (``KVCacheConfigurator._handle_max_mamba_cache``) and
then the real pool build for the sizes it chose (under FakeTensorMode), for the
three sizing branches upstream has, several models and layouts, and every role.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; the tests at the end drive the gate's own hook on every release.
"""

from __future__ import annotations

import contextlib
import logging

import pytest
from formulas import GIB, binary
from helpers import LAYOUTS, server_fields, sglang_minor, upstream_has

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import budget
from sglang_pd_lean.role import setting, upstream_behaviour

AVAILABLE_GIB = 100.0
MAMBA_COMPONENTS = (
    "conv state",
    "ssm state",
    "verify ssm snapshots",
    "verify conv windows",
    "replayssm rings",
)
BRANCHES = {
    "explicit": dict(max_mamba_cache_size=600),
    "radix_off": dict(disable_radix_cache=True),
    "automatic": dict(),
}


def size_and_build(
    model: str, tp: int, role: str, branch: str, *, upstream: bool
) -> dict:
    """Reservation (bytes the budget took for mamba state) and the pool's mamba bytes."""
    inputs = census.Inputs(
        model=model, tp=tp, max_running_requests=128, **BRANCHES[branch]
    )
    mc, _ = census.prepare(inputs)
    fields = server_fields(inputs, role, sizing=True)
    column = upstream_behaviour() if upstream else contextlib.nullcontext()
    with census.parallel(tp=tp), census.published(**fields) as server_args, column:
        conf = census.configurator(
            mc, server_args, is_draft_worker=False, layers=(0, mc.num_hidden_layers)
        )
        kv_gib = conf._handle_max_mamba_cache(AVAILABLE_GIB)
        slots = setting("get_schedule", "max_mamba_cache_size", server_args)
        requests = conf.resolve_max_num_reqs(10**9)  # the pool's request count
        pool = census.build_request_pool(conf, requests)
    components = census.component_bytes(pool)
    return {
        "kv_gib": kv_gib,
        "slots": slots,
        "reserved": round((AVAILABLE_GIB - kv_gib) * GIB),
        "allocated": sum(components.get(c, 0) for c in MAMBA_COMPONENTS),
    }


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("model,tp", LAYOUTS)
def test_prefill_target_reserves_what_its_pool_allocates(model, tp, branch):
    lean = size_and_build(model, tp, "prefill", branch, upstream=False)
    expected = lean["allocated"]
    if sglang_minor() == 16:
        # 0.5.16's budget charges the persistent state without the pool's padding
        # slot (any role, upstream's own accounting): one slot less.
        expected -= lean["allocated"] // (lean["slots"] + 1)
    assert lean["reserved"] == pytest.approx(expected, abs=64)


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("model,tp", LAYOUTS[:2])
def test_prefill_target_upstream_reserves_a_phantom_before_0_5_22(model, tp, branch):
    upstream = size_and_build(model, tp, "prefill", branch, upstream=True)
    lean = size_and_build(model, tp, "prefill", branch, upstream=False)
    if upstream_has("budget"):
        assert upstream == lean
    elif branch == "automatic":
        # The phantom shrinks upstream's mamba slot count; the plugin sizes it back.
        assert lean["slots"] > 2 * upstream["slots"]
    else:
        # Upstream reserves the verify state a lean prefill pool never allocates.
        assert upstream["slots"] == lean["slots"]
        assert upstream["reserved"] > lean["allocated"] + GIB
        assert lean["kv_gib"] > upstream["kv_gib"] + 1


@pytest.mark.parametrize("role", ["decode", "null"])
@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("model,tp", LAYOUTS)
def test_decode_and_null_budgets_are_upstream_to_the_byte(model, tp, branch, role):
    lean = size_and_build(model, tp, role, branch, upstream=False)
    upstream = size_and_build(model, tp, role, branch, upstream=True)
    assert lean == upstream


@pytest.mark.parametrize("branch", BRANCHES)
def test_draft_worker_budget_is_upstream(branch):
    inputs = census.Inputs(
        model="qwen3-next-80b-a3b", tp=4, max_running_requests=128, **BRANCHES[branch]
    )
    mc, _ = census.prepare(inputs)
    results = []
    for column in (upstream_behaviour(), contextlib.nullcontext()):
        fields = server_fields(inputs, "prefill", sizing=True)
        with census.parallel(tp=4), census.published(**fields) as server_args, column:
            conf = census.configurator(
                mc, server_args, is_draft_worker=True, layers=(0, mc.num_hidden_layers)
            )
            kv_gib = conf._handle_max_mamba_cache(AVAILABLE_GIB)
            results.append(
                (kv_gib, setting("get_schedule", "max_mamba_cache_size", server_args))
            )
    assert results[0] == results[1]


# --- the gate's own hook, on every release ------------------------------------


def test_budget_hook_on_a_configurator_without_is_draft_worker_sizes_as_upstream(
    configurator, unhooked, outcome
):
    original = unhooked(budget.GATE)
    _, conf = configurator("prefill")
    del conf.is_draft_worker
    with upstream_behaviour():
        expected = outcome(lambda: original(conf, 40.0))
    assert outcome(lambda: budget.GATE.around(original, conf, 40.0)) == expected


def budget_line(configurator, unhooked, caplog, **inputs) -> tuple[float, str, dict]:
    """The budget gate's hook on a prefill target given 100 GiB: (KV GiB it returned,
    its INFO line, the record's budget)."""
    _, conf = configurator(
        "prefill",
        tp=4,
        requests=256,
        context_length=None,
        sizing=True,
        available_gib=AVAILABLE_GIB,
        **inputs,
    )
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        rest = budget.GATE.around(unhooked(budget.GATE), conf, AVAILABLE_GIB)
    lines = [r.getMessage() for r in caplog.records if "budget gate" in r.getMessage()]
    assert len(lines) == 1, lines
    return rest, lines[0], record.snapshot()["budget"]


def test_budget_line_says_the_automatic_split_bought_mamba_slots(
    configurator, unhooked, caplog
):
    """Radix cache on, no fixed slot count: upstream's ratio spends the freed share
    on mamba slots and the KV cache shrinks; the line must say so, with numbers
    equal to upstream's own sizing of the same budget with and without the phantom."""
    if upstream_has("budget"):
        pytest.skip("upstream sizes a prefill target without the phantom itself")
    rest, line, sized = budget_line(configurator, unhooked, caplog)
    assert sized["available_gib"] == AVAILABLE_GIB
    assert sized["plugin"]["kv_bytes"] == int(rest * GIB)
    if sized["upstream"] is not None:  # 0.5.16 has no config snapshot to size in
        assert sized["plugin"]["mamba_slots"] > sized["upstream"]["mamba_slots"]
        assert sized["plugin"]["kv_bytes"] < sized["upstream"]["kv_bytes"]
        assert "automatic split spent the freed bytes on mamba slots" in line
        shrank = sized["upstream"]["kv_bytes"] - sized["plugin"]["kv_bytes"]
        assert f"the KV cache shrank by {binary(shrank)})" in line
        assert "more KV cache" not in line


def test_budget_line_gives_the_kv_cache_the_returned_reservation_as_a_gain(
    configurator, unhooked, caplog
):
    """A fixed slot count: the phantom reservation goes back to the KV cache, and the
    line says how much more KV cache, a positive figure."""
    if upstream_has("budget"):
        pytest.skip("upstream sizes a prefill target without the phantom itself")
    _, line, sized = budget_line(configurator, unhooked, caplog, **BRANCHES["explicit"])
    if sized["upstream"] is None:
        pytest.skip("0.5.16 has no config snapshot to size upstream's budget in")
    gained = sized["plugin"]["kv_bytes"] - sized["upstream"]["kv_bytes"]
    assert gained > GIB
    assert sized["plugin"]["mamba_slots"] == sized["upstream"]["mamba_slots"] == 600
    assert line.endswith(f"mamba slots 600 -> 600 ({binary(gained)} more KV cache)")
