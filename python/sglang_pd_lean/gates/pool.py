"""Pool gate: a prefill target builds its hybrid request pool without verify state.

Hooks (AROUND) ``KVCacheConfigurator._build_hybrid_req_pool`` in
``sglang/srt/mem_cache/kv_cache_configurator.py``. Upstream hands the draft-token
count to ``HybridReqToTokenPool`` -> ``MambaPool``, which then allocates
``MambaPool.SpeculativeState``: per-draft-token snapshots of every ssm state
(``intermediate_ssm``) and conv window (``intermediate_conv_window``), read only by
``TARGET_VERIFY``. On a worker that cannot verify, the hook lets upstream build the
pool from a ``server_args`` view whose draft-token count is None, so ``MambaPool``
builds its plain ``State``. Persistent conv/ssm state (handed to the decode server)
is untouched. Applies to SGLang 0.5.16 and 0.5.17; 0.5.18+ does this natively.
The bytes not allocated are measured, not re-derived: upstream's own build of the
pool it would have made runs once more under ``FakeTensorMode`` (no memory, its
allocation log line muted) and the census counts its verify-only tensors; best
effort, a failure there only loses the figure. Leaves alone: decode pools (``_build_hybrid_mamba_decode_req_pool``), unified-memory
pools, draft workers (they share the target's pool) and ReplaySSM rings.
"""

from __future__ import annotations

import contextlib
import logging

from sglang_pd_lean import record
from sglang_pd_lean.gates import Hook, no_draft_tokens, temporarily
from sglang_pd_lean.role import judge_owner
from sglang_pd_lean.units import human_bytes

logger = logging.getLogger(__name__)

NAME = "pool"
SUMMARY = "no MambaPool.SpeculativeState on a prefill target"
TARGET = (
    "sglang.srt.mem_cache.kv_cache_configurator."
    "KVCacheConfigurator._build_hybrid_req_pool"
)
# Upstream does this itself when TARGET's source asks one of these (compat).
NATIVE_MARKERS = ("disaggregation_mode", "_pd_prefill_skips_mamba_spec_state")
# SGLang's logger of the pool constructors, muted while the phantom pool is measured.
_POOL_LOGGER = "sglang.srt.mem_cache.memory_pool"


def build_hybrid_req_pool(original, configurator, *args, **kwargs):
    worker = judge_owner(configurator)
    if worker.can_run_target_verify:
        record.stepped_aside(NAME)
        return original(configurator, *args, **kwargs)
    server_args = configurator.server_args
    not_allocated = verify_state_bytes(original, configurator, *args, **kwargs)
    with temporarily(configurator, server_args=no_draft_tokens(server_args)):
        pool = original(configurator, *args, **kwargs)
    record.acted(NAME, **not_allocated)
    figures = ", ".join(
        f"{human_bytes(nbytes)} of {component}"
        for component, nbytes in not_allocated.items()
    )
    logger.info(
        f"[sglang-pd-lean] pool gate: {worker.describe()} cannot run TARGET_VERIFY; "
        f"built MambaPool without SpeculativeState: "
        f"{figures or 'verify state'} not allocated"
    )
    return pool


def verify_state_bytes(original, configurator, *args, **kwargs) -> dict[str, int]:
    """Bytes of each verify-only component in the pool upstream would build here,
    counted on a ``FakeTensorMode`` build; {} where that cannot be measured."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        from sglang_pd_lean.accounting import component_bytes, verify_only

        pool_logger = logging.getLogger(_POOL_LOGGER)
        with contextlib.ExitStack() as stack:
            stack.enter_context(temporarily(pool_logger, disabled=True))
            stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
            phantom = original(configurator, *args, **kwargs)
        return verify_only(component_bytes(phantom))
    except Exception as exc:  # a log figure never breaks a start-up
        logger.debug(f"[sglang-pd-lean] pool gate: verify state not measured: {exc!r}")
        return {}


def hooks() -> list[Hook]:
    return [Hook(TARGET, build_hybrid_req_pool, "AROUND")]
