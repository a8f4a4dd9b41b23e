"""SGLang's request pool built for one role, under ``FakeTensorMode``, and its bytes.

    with parallel(tp=4), published(**fields) as server_args:
        conf = configurator(mc, server_args, is_draft_worker=False)
        pool = build_request_pool(conf, max_num_reqs=256)
    summarize(component_bytes(pool), slots=768, requests=256).verify_only_bytes

The configuration is published through SGLang's own runtime context, the
``KVCacheConfigurator`` is the real class (filled in as the plain dataclass it is),
and the pool is built by upstream's ``_build_req_to_token_pool``: every byte is
counted from the tensors upstream asked for (``sglang_pd_lean.accounting``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import types
from collections.abc import Iterator
from typing import Any

import sglang_pd_lean.census.older as older
from sglang_pd_lean.accounting import COMPONENT_ORDER, VERIFY_ONLY
from sglang_pd_lean.census.results import PoolSummary
from sglang_pd_lean.role import upstream_behaviour
from sglang_pd_lean.shims import setting

_NO_KERNEL_WARMUP = "SGLANG_DISABLE_FUSED_MAMBA_SLOT_OPS"


@contextlib.contextmanager
def published(**fields: Any) -> Iterator[Any]:
    """Publish a ServerArgs carrying ``fields`` as SGLang's configuration for the block."""
    from sglang.srt.runtime_context import get_context

    fields.setdefault("page_size", 1)
    context = get_context()
    if hasattr(context, "override_server_args"):  # 0.5.16+
        with context.override_server_args(**fields) as server_args:
            yield server_args
        return
    with older.published(context, fields) as server_args:  # 0.5.14-0.5.15.post1
        yield server_args


@contextlib.contextmanager
def parallel(*, tp: int) -> Iterator[None]:
    """A TP-only layout of TP rank 0 (no attention DP or CP, one pipeline stage)
    published for the block: a test's or benchmark's input. The census publishes
    the layout SGLang derives for the launch (``rank.parallel_layout``)."""
    from sglang_pd_lean.census.rank import Widths, parallel_layout

    widths = Widths(
        tp_size=tp, attn_tp_size=tp, attn_dp_size=1, attn_cp_size=1, pp_size=1
    )
    with parallel_layout(widths):
        yield


def configurator(
    mc,
    server_args,
    *,
    is_draft_worker: bool,
    pp_rank: int = 0,
    page_size: int = 1,
    spec_aux: Any = None,
):
    """A real KVCacheConfigurator for TP rank 0 of pipeline stage ``pp_rank``,
    filled in as a plain dataclass with what the target's ModelRunner derives
    (``rank.derive``, each field's source in ``rank.FIELD_SOURCES``). ``spec_aux``:
    SGLang's draft-model description (default: the model's own MTP depth). On
    0.5.14 to 0.5.15.post1, which size on the ModelRunner, SGLang's ModelRunner
    holding the same (``older.sizing_runner``)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean.census.rank import derive, rank_widths

    derived = derive(mc, server_args, rank_widths(server_args), pp_rank)
    spec_aux = spec_aux if spec_aux is not None else spec_aux_config(mc)
    if not older.has_configurator():
        return older.sizing_runner(
            mc,
            server_args,
            derived,
            is_draft_worker=is_draft_worker,
            page_size=page_size,
            spec_aux=spec_aux,
        )
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    fields = [f for f in dataclasses.fields(KVCacheConfigurator) if f.init]
    required = {
        f.name: None
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    values = dict(required)
    known = dict(
        device="cuda",
        gpu_id=0,
        model_config=mc,
        server_args=server_args,
        page_size=page_size,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            setting("get_spec", "speculative_algorithm", server_args)
        ),
        is_draft_worker=is_draft_worker,
        post_capture_kv_active=False,
        spec_aux_config=spec_aux,
        **derived.configurator_fields(),
    )
    names = {f.name for f in fields}
    values.update({k: v for k, v in known.items() if k in names})
    return KVCacheConfigurator(**values)


def spec_aux_config(mc) -> Any:
    """Upstream's draft-model description: an MTP draft of the model's own MTP depth
    (one layer where the config does not say), which shares the KV budget (0.5.14
    to 0.5.15.post1 keep it on the ModelRunner: a namespace of the same name)."""
    text = mc.hf_text_config
    layers = getattr(text, "num_nextn_predict_layers", None) or getattr(
        text, "mtp_num_hidden_layers", None
    )
    if not older.has_configurator():
        return types.SimpleNamespace(eagle_draft_num_layers=int(layers or 1))
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        SpecAuxHiddenStateConfig,
    )

    return SpecAuxHiddenStateConfig(eagle_draft_num_layers=int(layers or 1))


def build_request_pool(conf, max_num_reqs: int, *, fake: bool = True):
    """Run upstream's request-pool build; under FakeTensorMode (no memory used)
    unless ``fake`` is False (real CUDA allocations, for the GPU check)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # 0.5.23 warms a Triton slot-copy kernel as the pool is built: a launch, not an
    # allocation, and impossible without a GPU. SGLang's own switch turns it off.
    saved = os.environ.get(_NO_KERNEL_WARMUP)
    os.environ[_NO_KERNEL_WARMUP] = "1"
    try:
        mode = (
            FakeTensorMode(allow_non_fake_inputs=True)
            if fake
            else contextlib.nullcontext()
        )
        with mode:
            return conf._build_req_to_token_pool(max_num_reqs=max_num_reqs)
    finally:
        if saved is None:
            del os.environ[_NO_KERNEL_WARMUP]
        else:
            os.environ[_NO_KERNEL_WARMUP] = saved


def summarize(components: dict[str, int], slots: int, requests: int) -> PoolSummary:
    """A pool's bytes per component (every named one), its verify-only and total
    bytes, and the slot counts it was built with."""
    every = {name: 0 for name in COMPONENT_ORDER}
    every.update(components)
    return PoolSummary(
        components=dict(sorted(every.items())),
        verify_only_bytes=sum(components.get(c, 0) for c in VERIFY_ONLY),
        total_bytes=sum(components.values()),
        mamba_slots=slots,
        request_slots=requests,
    )


def column_behaviour(column: str):
    """``upstream``: every gate steps aside; ``plugin``: the gates as registered."""
    return upstream_behaviour() if column == "upstream" else contextlib.nullcontext()
