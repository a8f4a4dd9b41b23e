"""Multi-layer EAGLE graph gate: a prefill server's multi-layer EAGLE draft worker
captures no draft-extend CUDA graphs.

Hooks (AROUND) ``MultiLayerEagleDraftWorker._capture_cuda_graphs`` in
``sglang/srt/speculative/multi_layer_eagle_worker_v2.py`` (EAGLE, EAGLE3 or NEXTN
with ``--enable-multi-layer-eagle``), SGLang 0.5.14 to 0.5.23. This worker drafts
inside its multi-step draft-extend graphs (``MultiLayerEagle...DraftExtend...
GraphRunner``), which replay only in the draft extend that follows a target verify
(its draft extend after a prefill runs eager); it has no separate draft decode graph
(``cuda_graph_runner`` stays None). Upstream captures them whenever the decode graph
backend is set (``--cuda-graph-backend-decode ...``), exactly as EAGLE's worker does,
also on a prefill server, and never replays them there.

When the server's target cannot verify, the hook lets upstream run on a view of the
draft worker on which two attributes are tripwires: ``gpu_id``, read (0.5.17+) only
to measure memory right before the capture, and on 0.5.14 and 0.5.15 by the
multi-step runner's constructor before it captures, and ``draft_runner_list``, the
first thing 0.5.16 reads once past its early returns. Upstream first sets both runners to
None (on the worker: the view writes through), then takes its own early returns (CPU
engine, no decode graph backend, ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH``): the
gate steps aside with upstream's result. A tripped wire leaves the worker as those
returns leave it (both runners None: "run the draft extend eagerly"). Nothing here
assumes a hybrid model or a mamba pool.

Deliberately left alone: the draft's prefill graph and every other draft worker.
"""

from __future__ import annotations

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import DraftCaptureGate


class MultiLayerGraphGate(DraftCaptureGate):
    name = "multi_layer_graph"
    summary = "no multi-layer EAGLE draft-extend CUDA graphs on a prefill server"
    targets = seams.HOOK_TARGETS["multi_layer_graph"]
    wires = ("gpu_id", "draft_runner_list")
    runners = ("cuda_graph_runner", "cuda_graph_runner_for_draft_extend")
    skipped = "skipped the multi-layer EAGLE draft-extend graph captures"


GATE = MultiLayerGraphGate()
