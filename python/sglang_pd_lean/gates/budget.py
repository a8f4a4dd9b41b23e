"""Budget gate: a prefill target's memory budget reserves only what its pool allocates.

Hooks (AROUND) ``KVCacheConfigurator._handle_max_mamba_cache`` in
``sglang/srt/mem_cache/kv_cache_configurator.py``. Upstream subtracts the verify
snapshot budget (``per-request state x (running requests + 1) x draft tokens``) from
the KV-cache budget whenever speculative decoding is on, and its automatic mamba
sizing solves for slots *with* that snapshot budget. On a prefill target the pool
gate (or upstream 0.5.18+) never allocates it: a phantom. On a worker that cannot
verify, the hook runs upstream's sizing with the worker's ``spec_algorithm`` set to
NONE and a ``server_args`` view without a draft-token count, exactly the inputs the
pool is built with, so the reservation equals the allocation. Persistent mamba state
stays charged. Applies to SGLang 0.5.16 to 0.5.21; 0.5.22+ does this natively.
Leaves alone: decode, null and draft workers (same numbers as upstream, to the byte).
"""

from __future__ import annotations

import logging

from sglang_pd_lean.gates import Hook, no_draft_tokens, without_speculation
from sglang_pd_lean.role import judge, setting

logger = logging.getLogger(__name__)

NAME = "budget"
SUMMARY = "no phantom verify-state reservation in a prefill target's memory budget"
TARGET = (
    "sglang.srt.mem_cache.kv_cache_configurator."
    "KVCacheConfigurator._handle_max_mamba_cache"
)


def handle_max_mamba_cache(original, configurator, total_rest_memory, *args, **kwargs):
    worker = judge(
        configurator.server_args, is_draft_worker=configurator.is_draft_worker
    )
    if worker.can_run_target_verify:
        return original(configurator, total_rest_memory, *args, **kwargs)
    upstream = _upstream_sizing(original, configurator, total_rest_memory)
    # Exactly the inputs the pool is built with: no verify step.
    with without_speculation(
        configurator, server_args=no_draft_tokens(configurator.server_args)
    ):
        rest = original(configurator, total_rest_memory, *args, **kwargs)
    slots = _mamba_slots(configurator)
    if upstream is None:
        sizes = f"KV cache {rest:.2f} GB, mamba slots {slots}"
    else:
        sizes = (
            f"KV cache {upstream[0]:.2f} -> {rest:.2f} GB "
            f"({rest - upstream[0]:+.2f} GB), mamba slots {upstream[1]} -> {slots}"
        )
    logger.info(
        f"[sglang-pd-lean] budget gate: {worker.describe()} cannot run "
        f"TARGET_VERIFY; verify-state reservation returned to the budget: {sizes}"
    )
    return rest


def _upstream_sizing(original, configurator, total_rest_memory):
    """Upstream's (KV GiB, mamba slots) for the log line, sized inside a config
    snapshot that is restored afterwards (upstream publishes its slot count as it
    sizes). None on releases without snapshots (0.5.16)."""
    try:
        from sglang.srt.runtime_context import get_context

        preserve = get_context().preserve_config
    except (ImportError, AttributeError):
        return None
    with preserve():
        rest = original(configurator, total_rest_memory)
        return rest, _mamba_slots(configurator)


def _mamba_slots(configurator):
    return setting("get_schedule", "max_mamba_cache_size", configurator.server_args)


def hooks() -> list[Hook]:
    return [Hook(TARGET, handle_max_mamba_cache, "AROUND")]


def native() -> str | None:
    from sglang_pd_lean import compat

    return compat.native_reason(NAME)
