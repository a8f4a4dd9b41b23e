"""Graph gate: a prefill target captures no target-verify CUDA graph.

Hooks (AROUND) ``capture_decode_graph`` in
``sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py``. With
speculative decoding on, upstream captures the target's decode graph in
``TARGET_VERIFY`` shape whenever a decode graph backend is enabled (for example
``--cuda-graph-backend-decode full``), even on a prefill server that never verifies.
On a worker that cannot verify, the hook calls upstream with a read-through view of
the model runner that reports ``is_generation=False``, so upstream returns its own
no-capture result before it touches the device. Applies to SGLang 0.5.16 and 0.5.17;
0.5.18+ does this natively. Leaves alone: prefill graphs, draft workers' graphs, and
every decode / null / non-speculative worker.
"""

from __future__ import annotations

import logging

from sglang_pd_lean import record
from sglang_pd_lean.gates import Hook, ReadThrough
from sglang_pd_lean.role import judge_owner

logger = logging.getLogger(__name__)

NAME = "graph"
SUMMARY = "no target-verify CUDA graph capture on a prefill target"
TARGET = (
    "sglang.srt.model_executor.model_runner_components.cuda_graph_setup."
    "capture_decode_graph"
)
# Upstream does this itself when TARGET's source asks one of these (compat).
NATIVE_MARKERS = ("disaggregation_mode",)


def capture_decode_graph(original, *args, **kwargs):
    model_runner = kwargs.get("model_runner", args[0] if args else None)
    worker = judge_owner(model_runner)
    if worker.can_run_target_verify:
        record.stepped_aside(NAME)
        return original(*args, **kwargs)
    result = original(model_runner=ReadThrough(model_runner, is_generation=False))
    record.acted(NAME)
    logger.info(
        f"[sglang-pd-lean] graph gate: {worker.describe()} cannot run TARGET_VERIFY; "
        f"skipped the target-verify graph capture"
    )
    return result


def hooks() -> list[Hook]:
    return [Hook(TARGET, capture_decode_graph, "AROUND")]
