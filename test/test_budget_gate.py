"""Budget gate: a prefill target's budget reserves exactly what its pool allocates.

Runs upstream's real sizing (``KVCacheConfigurator._handle_max_mamba_cache``) and
then the real pool build for the sizes it chose (under FakeTensorMode), for the
three sizing branches upstream has, several models and layouts, and every role.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; ``test_hardening.py`` drives the gate's own hook on every release.
"""

from __future__ import annotations

import contextlib

import pytest
from conftest import sglang_minor, upstream_has

from sglang_pd_lean import census
from sglang_pd_lean.role import setting, upstream_behaviour

GIB = 1 << 30
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
LAYOUTS = [
    ("qwen3-next-80b-a3b", 4),
    ("qwen3.5-397b-a17b", 8),
    ("kimi-linear-48b-a3b", 2),
    ("nemotron-h-8b", 2),
]


def size_and_build(
    model: str, tp: int, role: str, branch: str, *, upstream: bool
) -> dict:
    """Reservation (bytes the budget took for mamba state) and the pool's mamba bytes."""
    inputs = census.Inputs(
        model=model, tp=tp, max_running_requests=128, **BRANCHES[branch]
    )
    mc, _ = census.prepare(inputs)
    fields = census.server_fields(inputs, role, sizing=True)
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
        fields = census.server_fields(inputs, "prefill", sizing=True)
        with census.parallel(tp=4), census.published(**fields) as server_args, column:
            conf = census.configurator(
                mc, server_args, is_draft_worker=True, layers=(0, mc.num_hidden_layers)
            )
            kv_gib = conf._handle_max_mamba_cache(AVAILABLE_GIB)
            results.append(
                (kv_gib, setting("get_schedule", "max_mamba_cache_size", server_args))
            )
    assert results[0] == results[1]
