"""Graph gate: a prefill target captures no target-verify CUDA graph.

Hooks (AROUND) ``capture_decode_graph`` in
``sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py``. With
speculative decoding on, upstream captures the target's decode graph in
``TARGET_VERIFY`` shape whenever a decode graph backend is enabled (for example
``--cuda-graph-backend-decode full``), even on a prefill server that never verifies.
On a worker that cannot verify, the hook first lets upstream run on a view of the
model runner whose ``gpu_id`` is a tripwire: upstream reads it only after every
early return, just before it captures. If upstream returns first (no decode graph
backend, a CPU without torch.compile, ...), that is its own no-capture result and
the gate steps aside; if the tripwire fires, the gate calls upstream with a view
that reports ``is_generation=False``, so upstream returns its no-capture result
before it touches the device. Applies to SGLang 0.5.16 and 0.5.17; 0.5.18+ does
this natively. Leaves alone: prefill graphs, draft workers' graphs, and every
decode / null / non-speculative worker.
"""

from __future__ import annotations

from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import (
    Acted,
    Call,
    Gate,
    ReadThrough,
    SteppedAside,
    Tripwire,
    until_tripped,
)


class GraphGate(Gate):
    name = "graph"
    summary = "no target-verify CUDA graph capture on a prefill target"
    targets = seams.HOOK_TARGETS["graph"]
    native_markers = ("disaggregation_mode",)

    def owner_of(self, args: tuple, kwargs: dict) -> Any:
        # Upstream takes the model runner by keyword only (0.5.16 to 0.5.23): a
        # positional call has no owner, and upstream's own call refuses it.
        return kwargs.get("model_runner")

    def act(self, call: Call) -> Acted | SteppedAside:
        probe = ReadThrough(call.owner, gpu_id=Tripwire())
        tripped, result = until_tripped(call.original, model_runner=probe)
        if not tripped:
            return SteppedAside(result, "upstream captures no decode graph here")
        view = ReadThrough(call.owner, is_generation=False)
        return Acted(
            call.original(model_runner=view), "skipped the target-verify graph capture"
        )


GATE = GraphGate()
