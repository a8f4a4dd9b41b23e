"""A prefill rank built by the pool gate hands the decode rank the state it expects.

A PD prefill rank registers its transferable buffers with the transfer engine
(``disaggregation.utils.setup_state_kv_args`` over the KV pool's and the request
pool's ``get_state_buf_infos`` / ``get_state_dim_per_tensor`` /
``get_state_slice_outer_counts`` / ``get_state_conv_shard_groups`` /
``get_state_layer_ids``, plus the KV pool's ``get_contiguous_buf_infos``); the decode
rank pairs the entries by position and item length. Removing
``MambaPool.SpeculativeState`` on the prefill side is safe only while SGLang keeps
its verify snapshots out of that list.

Both ranks' pools are built the way the configurator builds them (the census road:
a real ``KVCacheConfigurator``, its ``_build_req_to_token_pool`` and
``_build_token_to_kv_pool``, the real pool constructors under FakeTensorMode) and
compared through upstream's own methods: counts, order, lengths, dims, slice counts,
shard groups and layer ids, never buffer addresses (fake tensors have none worth
comparing). "Upstream" is the same build inside ``role.upstream_behaviour()``.
Where a release lacks a method, its cases skip and say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
import warnings
from unittest import mock

import pytest
from helpers import server_fields, upstream_has
from placeholder import Inputs, prepare

from sglang_pd_lean import census, compat
from sglang_pd_lean.role import upstream_behaviour

MODELS = census.bundled_models()
REQUESTS = 8
KV_TOKENS = 64
POOLS = ("req_to_token_pool", "token_to_kv_pool")
STATE_QUERIES = (
    "get_state_buf_infos",
    "get_state_dim_per_tensor",
    "get_state_slice_outer_counts",
    "get_state_conv_shard_groups",
    "get_state_layer_ids",
)
KEYS = [
    *(f"{pool}.{query}" for pool in POOLS for query in STATE_QUERIES),
    "token_to_kv_pool.get_contiguous_buf_infos",
    "setup_state_kv_args",
]
# Sized by the pool's slot or token count, which two roles may legitimately differ
# in; the decode rank pairs entries by position and item length, not total length.
TOTAL_LENGTHS = ("data_lens", "state_data_lens")


def kv_copy_stand_in(self) -> None:
    """Stands in for ``_init_kv_copy_and_warmup`` (a speculative server's KV pool
    tunes and launches a Triton copy kernel, impossible on a CPU): no copy config.
    It runs after the buffers are allocated and changes none of them."""
    self._kv_copy_config = None


def without_pointers(infos: tuple) -> dict:
    """``(data_ptrs, data_lens, item_lens)`` without the addresses."""
    data_ptrs, data_lens, item_lens = infos
    return {"count": len(data_ptrs), "data_lens": data_lens, "item_lens": item_lens}


def registered(req_pool, kv_pool) -> dict | None:
    """What SGLang's own bootstrap code registers for the state buffers, addresses
    left out; None where the release has no ``setup_state_kv_args``."""
    try:
        from sglang.srt.disaggregation.utils import setup_state_kv_args
    except ImportError:
        return None
    kv_args = types.SimpleNamespace()
    setup_state_kv_args(kv_args, kv_pool, req_to_token_pool=req_pool)
    return {name: value for name, value in vars(kv_args).items() if "ptrs" not in name}


def transfer_layout(req_pool, kv_pool) -> dict:
    """Every answer the transfer set-up reads, by ``pool.method`` (absent where the
    release lacks the method)."""
    layout = {}
    with warnings.catch_warnings():
        # A FakeTensor's data_ptr() warns; the pointers are dropped anyway.
        warnings.simplefilter("ignore")
        for name, pool in zip(POOLS, (req_pool, kv_pool), strict=True):
            for query in STATE_QUERIES:
                method = getattr(pool, query, None)
                if method is None:
                    continue
                value = method()
                if query == "get_state_buf_infos":
                    value = without_pointers(value)
                layout[f"{name}.{query}"] = value
        layout["token_to_kv_pool.get_contiguous_buf_infos"] = without_pointers(
            kv_pool.get_contiguous_buf_infos()
        )
        setup = registered(req_pool, kv_pool)
    if setup is not None:
        layout["setup_state_kv_args"] = setup
    return layout


def pool_sizes():
    """The pool sizes ``_build_token_to_kv_pool`` reads, for a small MHA KV pool."""
    from sglang.srt.mem_cache.kv_cache_configurator import _PoolSizes

    return _PoolSizes(
        max_total_num_tokens=KV_TOKENS,
        max_running_requests=REQUESTS,
        full_max_total_num_tokens=None,
        swa_max_total_num_tokens=None,
        c4_max_total_num_tokens=0,
        c128_max_total_num_tokens=0,
        c4_state_pool_size=0,
        c128_state_pool_size=0,
        c4_state_dtype=None,
        c128_state_dtype=None,
    )


@contextlib.contextmanager
def built_pools(model: str, role: str):
    """(request pool, KV pool) of a speculative target of ``role``, as the
    configurator builds them, with whatever gates are registered."""
    from sglang.srt.mem_cache import memory_pool
    from torch._subclasses.fake_tensor import FakeTensorMode

    inputs = Inputs(
        model=model, tp=2, max_running_requests=REQUESTS, context_length=512
    )
    mc, _ = prepare(inputs)
    with contextlib.ExitStack() as stack:
        stack.enter_context(census.parallel(tp=inputs.tp))
        server_args = stack.enter_context(
            census.published(**server_fields(inputs, role))
        )
        conf = census.configurator(mc, server_args, is_draft_worker=False)
        stack.enter_context(
            mock.patch.object(
                memory_pool.MHATokenToKVPool,
                "_init_kv_copy_and_warmup",
                kv_copy_stand_in,
            )
        )
        if not hasattr(conf, "_build_token_to_kv_pool"):  # 0.5.14-0.5.15.post1
            stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
            yield conf.build_pools(REQUESTS, KV_TOKENS)
            return
        req_pool = census.build_request_pool(conf, REQUESTS)
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        kv_pool = conf._build_token_to_kv_pool(
            sizes=pool_sizes(),
            is_dsa_model=False,
            is_dsv4_model=False,
            req_to_token_pool=req_pool,
        )
        yield req_pool, kv_pool


def has_verify_state(req_pool) -> bool:
    from sglang.srt.mem_cache.memory_pool import MambaPool

    cache = req_pool.mamba_pool.mamba_cache
    return isinstance(cache, MambaPool.SpeculativeState)


@functools.cache
def layout_of(model: str, build: str) -> dict:
    """The transfer layout of one build: "prefill" (the plugin as registered),
    "prefill upstream" or "decode" (the plugin as registered; it steps aside)."""
    role = build.split()[0]
    context = upstream_behaviour() if build.endswith("upstream") else None
    with context or contextlib.nullcontext():
        with built_pools(model, role) as (req_pool, kv_pool):
            if build == "prefill":
                # On every release the prefill target's pool is the lean one
                # (the gate's or upstream's own): the comparison is not vacuous.
                assert not has_verify_state(req_pool)
            return transfer_layout(req_pool, kv_pool)


def answer(model: str, build: str, key: str):
    layout = layout_of(model, build)
    if key not in layout:
        import sglang

        pytest.skip(f"SGLang {sglang.__version__} has no {key}")
    return layout[key]


def without_total_lengths(value):
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in TOTAL_LENGTHS}
    return value


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("model", MODELS)
def test_prefill_target_transfer_layout_is_upstreams(model, key):
    """With the pool gate the prefill rank registers exactly what upstream's prefill
    rank registers (on 0.5.16/0.5.17 upstream holds the verify state; 0.5.18+ drop
    it themselves)."""
    assert answer(model, "prefill", key) == answer(model, "prefill upstream", key)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("model", MODELS)
def test_prefill_target_transfer_layout_matches_the_decode_rank(model, key):
    """The decode rank (which keeps its verify state) registers the same entries,
    in the same order, with the same item lengths, dims, slice counts, shard groups
    and layer ids."""
    prefill = without_total_lengths(answer(model, "prefill", key))
    decode = without_total_lengths(answer(model, "decode", key))
    assert prefill == decode


@pytest.mark.parametrize("model", MODELS)
def test_every_release_keeps_verify_state_out_of_transfer(model):
    """A pool holding ``SpeculativeState`` registers what the same pool registers
    with only its persistent ``State``: SGLang never hands the verify snapshots to
    the other rank, so a prefill rank without them loses nothing the decode rank
    reads. (0.5.16 skips them by name, 0.5.17+ by ``_NON_TRANSFER_STATE_FIELDS``.)"""
    from sglang.srt.mem_cache.memory_pool import MambaPool

    with built_pools(model, "decode") as (req_pool, kv_pool):
        mamba_pool = req_pool.mamba_pool
        cache = mamba_pool.mamba_cache
        assert has_verify_state(req_pool)
        assert cache.intermediate_ssm is not None
        assert cache.intermediate_conv_window
        full = transfer_layout(req_pool, kv_pool)
        persistent = MambaPool.State(
            **{
                f.name: getattr(cache, f.name)
                for f in dataclasses.fields(MambaPool.State)
            }
        )
        with mock.patch.object(mamba_pool, "mamba_cache", persistent):
            lean = transfer_layout(req_pool, kv_pool)
    assert full == lean


def test_pool_gate_is_not_registered_where_sglang_would_transfer_verify_state():
    """A release that starts handing the verify snapshots to the decode rank (here:
    the installed one with ``_NON_TRANSFER_STATE_FIELDS`` narrowed) gets no pool
    gate: removing them on the prefill side would break the pairing."""
    import sglang
    from sglang.srt.mem_cache.memory_pool import MambaPool

    if upstream_has("pool"):
        pytest.skip(f"SGLang {sglang.__version__} builds a lean prefill pool itself")
    fields = getattr(MambaPool, "_NON_TRANSFER_STATE_FIELDS", None)
    if fields is None:
        pytest.skip(f"SGLang {sglang.__version__} names no _NON_TRANSFER_STATE_FIELDS")
    verify = {"intermediate_ssm", "intermediate_conv_window"}
    with mock.patch.object(MambaPool, "_NON_TRANSFER_STATE_FIELDS", fields - verify):
        # The narrowed release really would transfer more from a decode pool.
        with built_pools(MODELS[0], "decode") as pools:
            transferred = transfer_layout(*pools)
        decision = compat.decide()
    key = "req_to_token_pool.get_state_buf_infos"
    assert transferred[key]["count"] > layout_of(MODELS[0], "decode")[key]["count"]
    assert not [
        h for h in decision.hooks if h.target.endswith("_build_hybrid_req_pool")
    ]
    (plan,) = [plan for plan in decision.plans if plan.name == "pool"]
    assert "intermediate_ssm" in plan.detail
