"""Draft-graph gate: a prefill server's draft worker captures no decode or
draft-extend CUDA graph.

Hooks (AROUND) ``EagleDraftWorker._capture_cuda_graphs`` in
``sglang/srt/speculative/eagle_worker_v2.py`` (EAGLE, EAGLE3, NEXTN/MTP). The draft
worker's decode graph (multi-step drafting) and draft-extend graph (``DRAFT_EXTEND_V2``)
only replay after a verify step. A prefill server disables the decode graph backend
by default, but when the operator sets one explicitly (``--cuda-graph-backend-decode``)
upstream captures both, on every SGLang release 0.5.16 to 0.5.23, and never replays
them. When the server's target cannot verify, the hook leaves the worker exactly as
upstream's own no-capture path leaves it (both runners None, which the draft worker
treats as "run eager") without capturing. Upstream DSPARK skips these natively; other
draft workers (multi-layer EAGLE, frozen-KV MTP, DFLASH) are left alone.
"""

from __future__ import annotations

import logging

from sglang_pd_lean import record
from sglang_pd_lean.gates import Hook
from sglang_pd_lean.role import judge_owner

logger = logging.getLogger(__name__)

NAME = "draft_graph"
SUMMARY = "no draft decode / draft-extend CUDA graphs on a prefill server"
TARGET = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs"
# Upstream does this itself when TARGET's source asks one of these (compat).
NATIVE_MARKERS = ("disaggregation_mode",)


def capture_cuda_graphs(original, draft_worker, *args, **kwargs):
    # Asked about the target: the draft's graphs replay only after a target verify.
    server = judge_owner(draft_worker, is_draft_worker=False)
    if server.can_run_target_verify:
        record.stepped_aside(NAME)
        return original(draft_worker, *args, **kwargs)
    draft_worker.cuda_graph_runner = None
    draft_worker.cuda_graph_runner_for_draft_extend = None
    record.acted(NAME)
    logger.info(
        f"[sglang-pd-lean] draft_graph gate: {server.describe()} cannot run "
        f"TARGET_VERIFY; skipped the draft decode and draft-extend graph captures"
    )
    return None


def hooks() -> list[Hook]:
    return [Hook(TARGET, capture_cuda_graphs, "AROUND")]
