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
from formulas import (
    GIB,
    MAMBA_FULL_MEMORY_RATIO,
    automatic_split,
    binary,
    gdn_dims,
    load_config,
)
from helpers import (
    LAYOUTS,
    server_fields,
    sglang_minor,
    sizing_pad,
    upstream_has,
)
from placeholder import Inputs, prepare

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import budget
from sglang_pd_lean.role import setting, upstream_behaviour

AVAILABLE_GIB = 100.0
MODEL = "qwen3-next-80b-a3b"
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
    inputs = Inputs(model=model, tp=tp, max_running_requests=128, **BRANCHES[branch])
    mc, _ = prepare(inputs)
    fields = server_fields(inputs, role, sizing=True)
    column = upstream_behaviour() if upstream else contextlib.nullcontext()
    with census.parallel(tp=tp), census.published(**fields) as server_args, column:
        conf = census.configurator(mc, server_args, is_draft_worker=False)
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
    if sglang_minor() <= 16:
        # Up to 0.5.16 the budget charges the persistent state without the pool's
        # padding slot (any role, upstream's own accounting): one slot less.
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
    inputs = Inputs(
        model="qwen3-next-80b-a3b", tp=4, max_running_requests=128, **BRANCHES[branch]
    )
    mc, _ = prepare(inputs)
    results = []
    for column in (upstream_behaviour(), contextlib.nullcontext()):
        fields = server_fields(inputs, "prefill", sizing=True)
        with census.parallel(tp=4), census.published(**fields) as server_args, column:
            conf = census.configurator(mc, server_args, is_draft_worker=True)
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


def prefill_target(configurator, **inputs):
    """SGLang's configurator of a TP 4 prefill target at 256 requests, sizing on."""
    _, conf = configurator(
        "prefill", tp=4, requests=256, context_length=None, sizing=True, **inputs
    )
    return conf


def budget_line(configurator, unhooked, caplog, **inputs) -> tuple[float, str, dict]:
    """The budget gate's hook on a prefill target given 100 GiB: (KV GiB it returned,
    its INFO line, the record's budget)."""
    conf = prefill_target(configurator, **inputs)
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


# --- the figures operators and ``check`` read ---------------------------------

# SGLang sizes its own budget inside a config snapshot it restores
# (``RuntimeContext.preserve_config``) on 0.5.17 only: added in 0.5.17, gone in
# 0.5.18. There the gate gives both sizings; elsewhere the plugin's alone.
SIZES_UPSTREAM_IN_A_SNAPSHOT = sglang_minor() == 17


def sglang_sizing(conf, server_args, available_gib: float) -> dict:
    """SGLang's own sizing of ``available_gib`` on ``conf``, every gate stepping
    aside: KV bytes, KV tokens (SGLang's ``config_from_budget``), mamba slots."""
    with upstream_behaviour():
        kv_bytes = int(conf._handle_max_mamba_cache(available_gib) * GIB)
    return {
        "kv_bytes": kv_bytes,
        "kv_tokens": conf.config_from_budget(kv_bytes).max_total_num_tokens,
        "mamba_slots": setting("get_schedule", "max_mamba_cache_size", server_args),
    }


def hooked_sizing(configurator, unhooked, caplog, branch: str, **kwargs) -> tuple:
    """The budget gate's hook on a prefill target given AVAILABLE_GIB (by position,
    or by name with ``by_name=True``): (its INFO line, the record's budget, the
    budget it returned, SGLang's own KV tokens for that budget)."""
    by_name = kwargs.pop("by_name", False)
    conf = prefill_target(configurator, **BRANCHES[branch], **kwargs)
    given = {"total_rest_memory": AVAILABLE_GIB} if by_name else {}
    args = () if by_name else (AVAILABLE_GIB,)
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        rest = budget.GATE.around(unhooked(budget.GATE), conf, *args, **given)
    lines = [r.getMessage() for r in caplog.records if "budget gate" in r.getMessage()]
    assert len(lines) == 1, lines
    tokens = conf.config_from_budget(int(rest * GIB)).max_total_num_tokens
    return lines[0], record.snapshot()["budget"], rest, tokens


@pytest.mark.parametrize("branch", BRANCHES)
def test_budget_line_gives_upstreams_own_sizing_beside_the_plugins(
    configurator, unhooked, caplog, branch
):
    """Where SGLang can size in a snapshot, the line and ``/server_info`` give
    upstream's figures (SGLang's own sizing of the same prefill target, plugin out
    of the way) before the plugin's, and the plugin's KV tokens are what SGLang's
    ``config_from_budget`` makes of the budget the hook returned."""
    if upstream_has("budget") or not SIZES_UPSTREAM_IN_A_SNAPSHOT:
        pytest.skip("upstream's sizing is given only on 0.5.17 (config snapshots)")
    conf = prefill_target(configurator, **BRANCHES[branch])
    upstream = sglang_sizing(conf, conf.server_args, AVAILABLE_GIB)
    line, sized, rest, tokens = hooked_sizing(configurator, unhooked, caplog, branch)
    assert sized["upstream"] == upstream
    assert sized["plugin"]["kv_bytes"] == int(rest * GIB)
    assert sized["plugin"]["kv_tokens"] == tokens
    kv_before, kv = upstream["kv_bytes"], sized["plugin"]["kv_bytes"]
    assert f"KV cache {binary(kv_before)} -> {binary(kv)}, " in line
    assert f"mamba slots {upstream['mamba_slots']} -> " in line


@pytest.mark.parametrize("by_name", [False, True])
def test_budget_record_keeps_the_budget_the_sizing_received(
    configurator, unhooked, caplog, by_name
):
    """``check`` re-sizes a running server at the budget the record kept: the budget
    SGLang handed the sizing, whether it was passed by position or by name, and
    the hook returns the same budget either way."""
    if upstream_has("budget"):
        pytest.skip("upstream sizes a prefill target without the phantom itself")
    _, sized, rest, _ = hooked_sizing(
        configurator, unhooked, caplog, "explicit", by_name=by_name
    )
    assert sized["available_gib"] == AVAILABLE_GIB
    assert sized["plugin"]["kv_bytes"] == int(rest * GIB)
    assert sized["plugin"]["mamba_slots"] == 600


def test_budget_line_gives_the_plugins_sizing_where_upstream_would_not_fit(
    configurator, unhooked, caplog
):
    """A budget too small for upstream's mamba state plus its verify reservation
    (0.5.17 to 0.5.21 refuse to start): the gate sizes as a worker without
    speculation and its line gives that one sizing, the figures of SGLang's
    automatic split solved by hand (``formulas.automatic_split``)."""
    if upstream_has("budget"):
        pytest.skip("upstream sizes a prefill target without the phantom itself")
    dims = gdn_dims(load_config(MODEL), tp=4)
    per_slot = dims["layers"] * (dims["ssm"] + dims["conv"])
    # Room for a few mamba slots only, as the automatic split shares the budget.
    available = round(4 * per_slot * 1.9 / 0.9 / GIB, 4)
    slots, kv_gib = automatic_split(
        per_slot, available, 256, 4, verify=False, pad=sizing_pad()
    )
    _, conf = configurator(
        "prefill", tp=4, requests=256, context_length=None, sizing=True
    )
    if sglang_minor() >= 17:
        with upstream_behaviour(), pytest.raises(RuntimeError, match="Not enough"):
            unhooked(budget.GATE)(conf, available)
        _, conf = configurator(
            "prefill", tp=4, requests=256, context_length=None, sizing=True
        )
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        rest = budget.GATE.around(unhooked(budget.GATE), conf, available)
    lines = [r.getMessage() for r in caplog.records if "budget gate" in r.getMessage()]
    assert rest == pytest.approx(kv_gib, abs=1e-9)
    assert len(lines) == 1
    kv = int(kv_gib * GIB)
    assert lines[0].endswith(
        f"no verify-state reservation: KV cache {binary(kv)}, mamba slots {slots}"
    )
    assert record.snapshot()["budget"]["upstream"] is None


def test_budget_gate_steps_aside_where_upstream_reserves_no_verify_state(unhooked):
    """With ReplaySSM on, upstream charges no per-draft-token snapshots: the gate's
    comparison with upstream's own sizing finds nothing to give back, so it steps
    aside, says why and returns upstream's budget. (SGLang refuses ReplaySSM on a
    prefill server at launch; published here directly, it is the sizing where
    upstream's budget holds no verify reservation.)"""
    if upstream_has("budget") or not SIZES_UPSTREAM_IN_A_SNAPSHOT:
        pytest.skip("upstream's sizing is compared only on 0.5.17 (config snapshots)")
    inputs = Inputs(model=MODEL, tp=4, max_running_requests=256)
    mc, _ = prepare(inputs)
    fields = dict(server_fields(inputs, "prefill", sizing=True))
    fields["enable_linear_replayssm_spec"] = True
    rests = []
    for column in (upstream_behaviour(), contextlib.nullcontext()):
        with census.parallel(tp=4), census.published(**fields) as server_args:
            conf = census.configurator(mc, server_args, is_draft_worker=False)
            with column:
                rests.append(budget.GATE.around(unhooked(budget.GATE), conf, 100.0))
    assert rests[1] == rests[0]
    snapshot = record.snapshot()
    assert snapshot["gates"]["budget"] == record.Outcome.STEPPED_ASIDE
    assert snapshot["stepped_aside_because"]["budget"] == (
        "upstream reserves no verify state here"
    )
    assert snapshot["budget"] == {}


def test_budget_line_says_the_kv_cache_kept_its_size_where_slots_took_it_all(
    configurator, unhooked, caplog
):
    """SGLang's automatic split can spend exactly the freed share on mamba slots:
    with 4 draft tokens and 3 slots per request, a mamba share of 75.5 slots gives
    upstream 30 slots and 11 requests' snapshots, the plugin 74 slots, and the
    same KV cache to the byte (``formulas.automatic_split``). The line says the
    slots grew and the KV cache did not shrink."""
    if upstream_has("budget") or not SIZES_UPSTREAM_IN_A_SNAPSHOT:
        pytest.skip("upstream's sizing is given only on 0.5.17 (config snapshots)")
    dims = gdn_dims(load_config(MODEL), tp=4)
    per_slot = dims["layers"] * (dims["ssm"] + dims["conv"])
    share = 75.5 * per_slot * (1 + MAMBA_FULL_MEMORY_RATIO) / MAMBA_FULL_MEMORY_RATIO
    available = round(share / GIB * 2**20) / 2**20  # whole KiB: exact in GiB floats
    solve = dict(requests=256, draft=4, pad=sizing_pad())
    slots_before, kv_before = automatic_split(per_slot, available, verify=True, **solve)
    slots, kv = automatic_split(per_slot, available, verify=False, **solve)
    assert (kv, slots_before, slots) == (kv_before, 30, 74)
    _, conf = configurator(
        "prefill", tp=4, requests=256, context_length=None, sizing=True
    )
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        budget.GATE.around(unhooked(budget.GATE), conf, available)
    lines = [r.getMessage() for r in caplog.records if "budget gate" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].endswith(
        f"KV cache {binary(int(kv * GIB))} -> {binary(int(kv * GIB))}, "
        f"mamba slots 30 -> 74 ({binary(0)} more KV cache)"
    )
