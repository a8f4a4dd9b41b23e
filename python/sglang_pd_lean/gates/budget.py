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

import contextlib
import logging

from sglang_pd_lean.gates import Hook, ReadThrough, temporarily
from sglang_pd_lean.role import judge

logger = logging.getLogger(__name__)

NAME = "budget"
SUMMARY = "no phantom verify-state reservation in a prefill target's memory budget"
TARGET = (
    "sglang.srt.mem_cache.kv_cache_configurator."
    "KVCacheConfigurator._handle_max_mamba_cache"
)


@contextlib.contextmanager
def as_pool_is_built(configurator):
    """The configurator as the pool gate builds the pool: no verify step."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    no_draft_tokens = ReadThrough(
        configurator.server_args,
        speculative_num_draft_tokens=None,
        max_speculative_num_draft_tokens=None,
    )
    with temporarily(
        configurator,
        spec_algorithm=SpeculativeAlgorithm.NONE,
        server_args=no_draft_tokens,
    ):
        yield


def handle_max_mamba_cache(original, configurator, total_rest_memory, *args, **kwargs):
    worker = judge(
        configurator.server_args, is_draft_worker=configurator.is_draft_worker
    )
    if worker.can_run_target_verify:
        return original(configurator, total_rest_memory, *args, **kwargs)
    upstream_rest = _upstream_result(original, configurator, total_rest_memory)
    with as_pool_is_built(configurator):
        rest = original(configurator, total_rest_memory, *args, **kwargs)
    returned = (
        f"{rest - upstream_rest:.2f} GiB returned to the KV-cache budget"
        if upstream_rest is not None
        else "verify-state reservation dropped"
    )
    logger.info(
        f"[sglang-pd-lean] budget gate: {worker.describe()} cannot run "
        f"TARGET_VERIFY; {returned} ({rest:.2f} GiB left for the KV cache, "
        f"max_mamba_cache_size={_max_mamba_cache_size(configurator)})"
    )
    return rest


def _upstream_result(original, configurator, total_rest_memory):
    """Upstream's answer for the log line, computed in a config snapshot that is
    restored afterwards (upstream publishes its mamba slot count as it sizes)."""
    try:
        from sglang.srt.runtime_context import get_context

        preserve = get_context().preserve_config
    except (ImportError, AttributeError):
        return None
    with preserve():
        return original(configurator, total_rest_memory)


def _max_mamba_cache_size(configurator):
    try:
        from sglang.srt.runtime_context import get_schedule

        return get_schedule().max_mamba_cache_size
    except (ImportError, AttributeError, ValueError):
        return configurator.server_args.max_mamba_cache_size


def hooks() -> list[Hook]:
    return [Hook(TARGET, handle_max_mamba_cache, "AROUND")]


def native() -> str | None:
    from sglang_pd_lean import compat

    return compat.native_reason(NAME)
