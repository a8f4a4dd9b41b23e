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
Leaves alone: decode pools (``_build_hybrid_mamba_decode_req_pool``), unified-memory
pools, draft workers (they share the target's pool) and ReplaySSM rings.
"""

from __future__ import annotations

import logging

from sglang_pd_lean.gates import GB, Hook, no_draft_tokens, temporarily
from sglang_pd_lean.role import judge

logger = logging.getLogger(__name__)

NAME = "pool"
SUMMARY = "no MambaPool.SpeculativeState on a prefill target"
TARGET = (
    "sglang.srt.mem_cache.kv_cache_configurator."
    "KVCacheConfigurator._build_hybrid_req_pool"
)


def build_hybrid_req_pool(original, configurator, *args, **kwargs):
    server_args = configurator.server_args
    worker = judge(server_args, is_draft_worker=configurator.is_draft_worker)
    if worker.can_run_target_verify:
        return original(configurator, *args, **kwargs)
    draft_tokens = getattr(server_args, "max_speculative_num_draft_tokens", None)
    if draft_tokens is None:
        draft_tokens = server_args.speculative_num_draft_tokens
    with temporarily(configurator, server_args=no_draft_tokens(server_args)):
        pool = original(configurator, *args, **kwargs)
    skipped = _ssm_snapshot_bytes(pool, draft_tokens)
    logger.info(
        f"[sglang-pd-lean] pool gate: {worker.describe()} cannot run TARGET_VERIFY; "
        f"built MambaPool without SpeculativeState ({draft_tokens} draft tokens): "
        f"{skipped / GB:.2f} GB of intermediate ssm snapshots (plus conv windows) "
        f"not allocated"
    )
    return pool


def _ssm_snapshot_bytes(pool, draft_tokens: int) -> int:
    """Bytes upstream's intermediate ssm snapshots would hold: one temporal state per
    draft token for each request slot (``max_num_reqs + 1``, the padding slot too)."""
    temporal = pool.mamba_pool.mamba_cache.temporal
    per_slot = temporal.numel() // temporal.shape[1] * temporal.element_size()
    return per_slot * (pool.size + 1) * int(draft_tokens)


def hooks() -> list[Hook]:
    return [Hook(TARGET, build_hybrid_req_pool, "AROUND")]


def native() -> str | None:
    from sglang_pd_lean import compat

    return compat.native_reason(NAME)
