"""Draft-graph gate: a prefill server's draft worker captures no decode or
draft-extend CUDA graph.

Hooks (AROUND) ``EagleDraftWorker._capture_cuda_graphs`` in
``sglang/srt/speculative/eagle_worker_v2.py`` (EAGLE, EAGLE3, NEXTN/MTP). The draft
worker's decode graph (multi-step drafting) and draft-extend graph (``DRAFT_EXTEND_V2``)
only replay after a verify step. A prefill server disables the decode graph backend
by default, but when the operator sets one explicitly (``--cuda-graph-backend-decode``)
upstream captures both, on every SGLang release 0.5.16 to 0.5.23, and never replays
them. When the server's target cannot verify, the hook lets upstream run on a view of
the draft worker whose ``gpu_id`` is a tripwire: upstream sets both runners to None,
takes its own early returns and skips (CPU engine, no decode graph backend, a single
draft step, an attention backend without draft-extend graphs, ...) and reads
``gpu_id`` only to measure memory right before a capture. An early return is upstream's
own no-capture result (the gate steps aside); a tripped wire leaves the worker as
that result leaves it (both runners None, which the draft worker treats as "run
eager") without capturing. Upstream DSPARK skips these natively; other draft
workers (multi-layer EAGLE, frozen-KV MTP, DFLASH) are left alone.
"""

from __future__ import annotations

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import DraftCaptureGate


class DraftGraphGate(DraftCaptureGate):
    name = "draft_graph"
    summary = "no draft decode / draft-extend CUDA graphs on a prefill server"
    targets = seams.HOOK_TARGETS["draft_graph"]
    runners = ("cuda_graph_runner", "cuda_graph_runner_for_draft_extend")
    skipped = "skipped the draft decode and draft-extend graph captures"


GATE = DraftGraphGate()
