"""SGLang's start-up sizing of a rank's memory: mamba slots, KV budget, KV tokens and
request slots, from the ``total_rest_memory`` its mamba sizing receives.

    sized = size_budget(conf, available_gib=80.0, server_args=server_args)
    sized.fits, sized.kv_tokens, sized.reason  # a census.results.Sizing

Upstream's own functions run in upstream's order (``_handle_max_mamba_cache``,
``config_from_budget``, ``resolve_max_num_reqs``, ``finalize_with_max_running_requests``
where the release has it: 0.5.15+);
where SGLang would stop the server the result says so with SGLang's reason.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

from sglang_pd_lean.census.inputs import failure
from sglang_pd_lean.census.results import Sizing
from sglang_pd_lean.shims import setting
from sglang_pd_lean.units import GIB


def size_budget(conf, available_gib: float, server_args) -> Sizing:
    """SGLang's start-up sizing from ``available_gib``, the ``total_rest_memory``
    that ``_handle_max_mamba_cache`` receives (a model without linear-attention
    layers skips it, as SGLang does): mamba slots, then the KV budget,
    KV tokens and running requests as ``_resolve_memory_pool_config`` derives them.
    Where SGLang would stop the server: ``fits`` False and SGLang's reason."""
    from sglang.srt.model_executor.pool_configurator import (
        create_memory_pool_configurator,
    )

    hybrid = conf.mambaish_config is not None  # SGLang's own condition
    try:
        kv_gib = (
            conf._handle_max_mamba_cache(available_gib) if hybrid else available_gib
        )
        slots = (
            int(setting("get_schedule", "max_mamba_cache_size", server_args))
            if hybrid
            else 0
        )
        if kv_gib <= 0:
            return Sizing(
                fits=False,
                reason=f"the mamba budget leaves {kv_gib:.2f} GiB for the KV "
                f"cache; SGLang stops: 'Loaded weights leave no GPU memory for the "
                f"KV cache'",
            )
        config = conf.config_from_budget(int(kv_gib * GIB))
        config.max_running_requests = conf.resolve_max_num_reqs(
            config.max_total_num_tokens
        )
        sizes = create_memory_pool_configurator(conf)
        if hasattr(sizes, "finalize_with_max_running_requests"):  # 0.5.15+
            config = sizes.finalize_with_max_running_requests(config)
    except (RuntimeError, ValueError, AssertionError) as exc:
        return Sizing(
            fits=False,
            reason=f"SGLang stops: {failure(exc)}",
        )
    return Sizing(
        fits=True,
        kv_cache_gib=kv_gib,
        kv_cache_bytes=int(kv_gib * GIB),
        kv_tokens=int(config.max_total_num_tokens),
        mamba_slots=slots,
        max_running_requests=int(config.max_running_requests),
        mamba_state_and_verify_gib=available_gib - kv_gib,
    )


@contextlib.contextmanager
def stages_agree(agreed: int | None, asked: list[int]) -> Iterator[None]:
    """One process plays every pipeline stage. SGLang's sizing all-reduces each
    stage's KV token capacity over the world group's CPU group (MIN: the stages
    agree on the smallest); in the block that collective records the capacity
    it is given in ``asked`` and answers ``agreed`` where it is smaller (None: the
    stage's own). Every other collective is torch's own. Without PP SGLang asks
    no collective and the block changes nothing it reads."""
    import torch.distributed as dist
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import get_parallel

    stages = object()  # the stand-in world's CPU group
    world = types.SimpleNamespace(cpu_group=stages)  # all the sizing reads of it
    collective = dist.all_reduce

    def all_reduce(tensor, *args, group=None, **kwargs):
        if group is not stages:
            return collective(tensor, *args, group=group, **kwargs)
        own = int(tensor.item())
        asked.append(own)
        tensor.fill_(own if agreed is None else min(own, agreed))
        return None

    saved = parallel_state._WORLD
    if saved is None:  # up to 0.5.22 SGLang asks get_world_group() for it
        parallel_state._WORLD = world
    dist.all_reduce = all_reduce
    try:
        with get_parallel().override(world_group=world):
            yield
    finally:
        dist.all_reduce = collective
        parallel_state._WORLD = saved
