"""Pool gate: only a PD-prefill speculative target loses MambaPool.SpeculativeState.

Drives the real ``KVCacheConfigurator._build_req_to_token_pool`` (the configurator
filled in as a plain dataclass, SGLang's configuration published with
``override_server_args``) and the real pool constructors under FakeTensorMode.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; ``test_hardening.py`` drives the gate's own hook on every release.
"""

from __future__ import annotations

import itertools

import pytest

from sglang_pd_lean import census
from sglang_pd_lean.role import upstream_behaviour

VERIFY_STATE = {"intermediate_ssm", "intermediate_conv_window"}
MODELS = ["qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "nemotron-h-8b"]
CELLS = list(
    itertools.product(["prefill", "decode", "null"], [True, False], [False, True])
)


def build(model: str, role: str, speculative: bool, is_draft_worker: bool):
    """(plugin build, upstream build) of the request pool for one worker."""
    inputs = census.Inputs(
        model=model, tp=2, max_running_requests=8, context_length=512
    )
    mc, linear = census.prepare(inputs)
    fields = census.server_fields(inputs, role, speculative=speculative)
    with census.parallel(tp=inputs.tp), census.published(**fields) as server_args:
        layers = (0, mc.num_hidden_layers)
        conf = census.configurator(
            mc, server_args, is_draft_worker=is_draft_worker, layers=layers
        )
        plugin = census.build_request_pool(conf, inputs.max_running_requests)
        with upstream_behaviour():
            upstream = census.build_request_pool(conf, inputs.max_running_requests)
    return plugin, upstream


def layout(pool) -> dict:
    """Tensor name -> (shape, dtype): what the pool allocated, by upstream's names."""
    return {
        name: (tuple(t.shape), t.dtype)
        for name, t in census.pool_tensors(pool).items()
        if not name.startswith("mamba_pool._intermediate_conv_window_phys")
    }


def has_verify_state(pool) -> bool:
    from sglang.srt.mem_cache.memory_pool import MambaPool

    return isinstance(pool.mamba_pool.mamba_cache, MambaPool.SpeculativeState)


@pytest.mark.parametrize("model", MODELS)
def test_prefill_target_pool_has_no_verify_state(model):
    plugin, upstream = build(model, "prefill", speculative=True, is_draft_worker=False)
    assert not has_verify_state(plugin)
    lean = layout(plugin)
    assert not VERIFY_STATE & {name.split("[")[0] for name in lean}
    # Persistent state (handed to the decode server) is exactly upstream's.
    kept = {
        name: spec
        for name, spec in layout(upstream).items()
        if name.split("[")[0] not in VERIFY_STATE
    }
    assert lean == kept


@pytest.mark.parametrize("model", MODELS)
def test_upstream_prefill_target_pool_without_plugin(model):
    """Without the gate, 0.5.16/0.5.17 build the verify state; 0.5.18+ do not."""
    from conftest import upstream_has

    _, upstream = build(model, "prefill", speculative=True, is_draft_worker=False)
    assert has_verify_state(upstream) is (not upstream_has("pool"))


@pytest.mark.parametrize(
    "role,speculative,is_draft_worker",
    [cell for cell in CELLS if cell != ("prefill", True, False)],
)
@pytest.mark.parametrize("model", MODELS)
def test_other_workers_pool_is_upstream(model, role, speculative, is_draft_worker):
    plugin, upstream = build(model, role, speculative, is_draft_worker)
    assert layout(plugin) == layout(upstream)
    assert has_verify_state(plugin) == has_verify_state(upstream)


@pytest.mark.parametrize("model", MODELS)
def test_decode_target_keeps_verify_state(model):
    plugin, _ = build(model, "decode", speculative=True, is_draft_worker=False)
    assert has_verify_state(plugin)
