"""Pool gate: only a PD-prefill speculative target loses MambaPool.SpeculativeState.

Drives the real ``KVCacheConfigurator._build_req_to_token_pool`` (the configurator
filled in as a plain dataclass, SGLang's configuration published with
``override_server_args``) and the real pool constructors under FakeTensorMode.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; the tests at the end (and ``test_gates.py``) drive the gate's own hook
on every release.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import json
import logging
from unittest import mock

import pytest
from formulas import binary, gdn_expected, load_config
from helpers import server_fields, upstream_has
from placeholder import Inputs, prepare

from sglang_pd_lean import accounting, census, record
from sglang_pd_lean.census import older
from sglang_pd_lean.gates import pool
from sglang_pd_lean.gates.base import temporarily
from sglang_pd_lean.role import upstream_behaviour

VERIFY_STATE = {"intermediate_ssm", "intermediate_conv_window"}
MODEL = "qwen3-next-80b-a3b"
MODELS = ["qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "nemotron-h-8b"]
POOL_LOGGER = "sglang.srt.mem_cache.memory_pool"
MAMBA_LINE = "Mamba Cache is allocated"  # SGLang's allocation line, every release
CELLS = list(
    itertools.product(["prefill", "decode", "null"], [True, False], [False, True])
)


def build(model: str, role: str, speculative: bool, is_draft_worker: bool):
    """(plugin build, upstream build) of the request pool for one worker."""
    inputs = Inputs(model=model, tp=2, max_running_requests=8, context_length=512)
    mc, linear = prepare(inputs)
    fields = server_fields(inputs, role, speculative=speculative)
    with census.parallel(tp=inputs.tp), census.published(**fields) as server_args:
        conf = census.configurator(mc, server_args, is_draft_worker=is_draft_worker)
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

    # 0.5.14 to 0.5.15.post1 give a Nemotron-H MTP draft (no mamba layers) a
    # plain request pool: no mamba state, no verify state.
    mamba = getattr(pool, "mamba_pool", None)
    return mamba is not None and isinstance(
        mamba.mamba_cache, MambaPool.SpeculativeState
    )


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
    from helpers import upstream_has

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


# --- the gate's own hook, on every release ------------------------------------


def pool_build(build, conf, requests: int, *, whole: bool = False):
    """The request pool ``build`` (the gate's target, hooked or not) makes for
    ``requests``: the configurator's ``_build_hybrid_req_pool`` returns it; the
    ``_init_pools`` of 0.5.14 to 0.5.15.post1 sets it on the runner, then goes on
    to the KV pool, where the census's runner stops it, or, ``whole``, builds the
    KV pool too and returns, as on a server (a hook sees the call end)."""
    if not hasattr(conf, "build_pools"):
        return build(conf, max_num_reqs=requests, extra_max_context_len=4)
    conf.max_running_requests = requests
    conf.req_to_token_pool = None
    if whole:
        conf.max_total_num_tokens = KV_TOKENS
        conf.token_to_kv_pool_allocator = None
        with kv_pool_on_cpu(), temporarily(conf, _whole=True):
            build(conf)
        return conf.req_to_token_pool
    with contextlib.suppress(older.RequestPoolBuilt):
        build(conf)
    return conf.req_to_token_pool


KV_TOKENS = 64  # the KV pool a whole _init_pools builds beside the request pool


def kv_pool_on_cpu():
    """A speculative server's KV pool tunes and launches a Triton copy kernel
    once its buffers are allocated (``_init_kv_copy_and_warmup``), impossible on a
    CPU: no copy config instead; no buffer changes."""
    from sglang.srt.mem_cache import memory_pool

    def no_copy_config(self) -> None:
        self._kv_copy_config = None

    return mock.patch.object(
        memory_pool.MHATokenToKVPool, "_init_kv_copy_and_warmup", no_copy_config
    )


def test_pool_hook_on_a_configurator_without_is_draft_worker_builds_upstreams_pool(
    configurator, unhooked, no_pool_kernel_warmup, caplog
):
    """Upstream's pool build never reads ``is_draft_worker``; a caller (upstream's own
    unit tests) may leave it out, and the hook must then not be the one to fail."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = unhooked(pool.GATE)
    inputs, conf = configurator("decode")
    del conf.is_draft_worker
    requests = inputs.max_running_requests
    with FakeTensorMode(allow_non_fake_inputs=True):
        with caplog.at_level(logging.DEBUG, logger="sglang_pd_lean"):
            hooked = pool_build(
                functools.partial(pool.GATE.around, original), conf, requests
            )
        expected = pool_build(original, conf, requests)
    assert census.component_bytes(hooked) == census.component_bytes(expected)
    assert any("if in doubt, keep the bytes" in r.getMessage() for r in caplog.records)


def test_pool_gate_survives_a_mock_pool_constructor(configurator, caplog):
    """Upstream's tests stub the pool constructor with a Mock: the gate returns it
    and logs what it can instead of crashing on its byte figure."""
    stub = mock.Mock(name="pool")
    _, conf = configurator("prefill")
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        if hasattr(conf, "build_pools"):  # 0.5.14-0.5.15.post1: in _init_pools
            result = mocked_request_pool_in_init_pools(stub, conf)
        else:
            result = pool.GATE.around(
                lambda *a, **k: stub, conf, max_num_reqs=8, extra_max_context_len=4
            )
    assert result is stub
    lines = [r.getMessage() for r in caplog.records if "pool gate" in r.getMessage()]
    assert len(lines) == 1 and "verify state not allocated" in lines[0]


def mocked_request_pool_in_init_pools(stub, conf):
    """The request pool upstream's ``_init_pools`` builds, its class stubbed with a
    Mock returning ``stub`` (then the KV pool: as a server, the call ends)."""
    from sglang.srt.model_executor import model_runner_kv_cache_mixin as mixin
    from torch._subclasses.fake_tensor import FakeTensorMode

    around = functools.partial(
        pool.GATE.around, inspect.unwrap(mixin.ModelRunnerKVCacheMixin._init_pools)
    )
    with mock.patch.object(mixin, "HybridReqToTokenPool", mock.Mock(return_value=stub)):
        with FakeTensorMode(allow_non_fake_inputs=True):
            return pool_build(around, conf, 8, whole=True)


def acting_pool_build(configurator, unhooked, caplog, **inputs) -> tuple:
    """The pool gate's hook on a prefill target: (pool built, INFO lines, record)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if upstream_has("pool"):
        pytest.skip("upstream builds a prefill target's pool lean itself: no figure")
    requests = inputs.setdefault("requests", 8)
    _, conf = configurator("prefill", **inputs)
    with FakeTensorMode(allow_non_fake_inputs=True):
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            around = functools.partial(pool.GATE.around, unhooked(pool.GATE))
            built = pool_build(around, conf, requests, whole=True)
    lines = [r.getMessage() for r in caplog.records if "pool gate" in r.getMessage()]
    return built, lines, record.snapshot()


@pytest.mark.parametrize("requests,draft", [(8, 4), (64, 2)])
def test_pool_gate_records_and_logs_the_verify_bytes_of_the_config_formula(
    requests, draft, configurator, unhooked, no_pool_kernel_warmup, caplog
):
    """The gate's own figure, padding slot included, against the config formula."""
    built, lines, recorded = acting_pool_build(
        configurator,
        unhooked,
        caplog,
        requests=requests,
        speculative_num_draft_tokens=draft,
    )
    assert census.component_bytes(built).get("verify ssm snapshots", 0) == 0
    expected = gdn_expected(MODEL, tp=2, requests=requests, slots=0, draft=draft)
    verify = {k: v for k, v in expected.items() if k.startswith("verify")}
    assert recorded["not_allocated_bytes"] == verify
    assert recorded["gates"]["pool"] == "acted"
    assert len(lines) == 1
    figures = ", ".join(f"{binary(n)} of {c}" for c, n in verify.items())
    assert f"SpeculativeState: {figures} not allocated" in lines[0]
    assert "verify state not allocated" not in lines[0]  # the unmeasured wording


def test_pool_gate_files_no_component_of_zero_bytes(
    configurator, unhooked, no_pool_kernel_warmup, tmp_path, caplog
):
    """A short-convolution hybrid (conv windows, no ssm state): the record and the
    line name the conv windows only, never "0 B of verify ssm snapshots"."""
    cfg = load_config(MODEL)
    cfg["linear_num_value_heads"] = 0
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _, lines, recorded = acting_pool_build(
        configurator, unhooked, caplog, model=None, config=str(tmp_path)
    )
    expected = gdn_expected(MODEL, tp=2, requests=8, slots=0, draft=4, cfg=cfg)
    assert expected["verify ssm snapshots"] == 0
    assert recorded["not_allocated_bytes"] == {
        "verify conv windows": expected["verify conv windows"]
    }
    assert len(lines) == 1 and "verify ssm snapshots" not in lines[0]


def test_verify_only_keeps_the_components_that_hold_bytes():
    sizes = {
        "ssm state": 10,
        "verify ssm snapshots": 0,
        "verify conv windows": 7,
        "replayssm rings": 0,
    }
    assert accounting.verify_only(sizes) == {"verify conv windows": 7}


def test_sglangs_mamba_cache_line_is_logged_once_for_the_pool_kept(
    configurator, unhooked, no_pool_kernel_warmup, caplog
):
    """Operators read SGLang's "Mamba Cache is allocated" line as the pool this rank
    holds: the gate's measuring build (SGLang's pool logger muted) adds none, so
    the hook logs it once, as upstream's own single build does."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def lines_logged(build) -> int:
        caplog.clear()
        _, conf = configurator("prefill")
        with FakeTensorMode(allow_non_fake_inputs=True):
            with caplog.at_level(logging.INFO, logger=POOL_LOGGER):
                pool_build(build, conf, 8)
        return sum(MAMBA_LINE in r.getMessage() for r in caplog.records)

    original = unhooked(pool.GATE)
    assert lines_logged(original) == 1
    assert lines_logged(lambda *a, **k: pool.GATE.around(original, *a, **k)) == 1


def test_pool_gate_steps_aside_where_upstream_builds_no_verify_state(
    configurator, unhooked, no_pool_kernel_warmup, caplog
):
    """From 0.5.18 upstream builds a prefill target's pool lean itself: the gate's
    hook has nothing to remove, returns upstream's own pool and says why."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not upstream_has("pool"):
        pytest.skip("upstream builds verify state for a prefill target here")
    original = unhooked(pool.GATE)
    kwargs = dict(max_num_reqs=8, extra_max_context_len=4)
    with FakeTensorMode(allow_non_fake_inputs=True):
        _, conf = configurator("prefill")
        expected = census.component_bytes(original(conf, **kwargs))
        _, conf = configurator("prefill")
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            built = pool.GATE.around(original, conf, **kwargs)
    assert census.component_bytes(built) == expected
    assert not has_verify_state(built)
    snapshot = record.snapshot()
    assert snapshot["gates"]["pool"] == record.Outcome.STEPPED_ASIDE
    assert snapshot["stepped_aside_because"]["pool"] == (
        "upstream allocates no verify state for this pool"
    )


def test_pool_gate_applies_where_sglang_keeps_verify_state_out_of_transfer():
    """Every supported release keeps the verify snapshots out of what it hands the
    decode server (``test_transfer_layout``): the pool gate applies on each, whether
    the release lists them (0.5.17+) or skips them by name (0.5.16)."""
    assert pool.transferred_removed_fields() == []
    assert pool.GATE.applicable() is None


def test_pool_gate_names_the_verify_state_a_release_would_transfer(monkeypatch):
    """A release that hands the verify snapshots to the decode server: ``doctor``
    and the start-up WARNING name each field the gate would have removed."""
    from sglang.srt.mem_cache.memory_pool import MambaPool

    fields = getattr(MambaPool, "_NON_TRANSFER_STATE_FIELDS", None)
    if fields is None:
        pytest.skip("this release names no _NON_TRANSFER_STATE_FIELDS")
    monkeypatch.setattr(
        MambaPool,
        "_NON_TRANSFER_STATE_FIELDS",
        type(fields)(set(fields) - VERIFY_STATE),
    )
    assert pool.GATE.applicable() == (
        "SGLang transfers intermediate_ssm, intermediate_conv_window to the decode "
        "server; removing it would change the transfer layout"
    )
