"""Graph gate: a prefill target captures no target-verify CUDA graph.

Hooks (AROUND) ``capture_decode_graph`` in
``sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py`` (0.5.16+;
the model runner by keyword), or ``ModelRunner.init_decode_cuda_graph`` in
``sglang/srt/model_executor/model_runner.py`` (0.5.14 and 0.5.15; a method). With
speculative decoding on, upstream captures the target's decode graph in
``TARGET_VERIFY`` shape whenever a decode graph backend is enabled (for example
``--cuda-graph-backend-decode full``), even on a prefill server that never verifies.
On a worker that cannot verify, the hook first lets upstream run on a view of the
model runner whose ``gpu_id`` is a tripwire: upstream reads it only after every
early return, just before it captures. If upstream returns first (no decode graph
backend, a CPU without torch.compile, ...), that is its own no-capture result and
the gate steps aside; if the tripwire fires, the gate calls upstream with a view
that reports ``is_generation=False``, so upstream returns its no-capture result
before it touches the device. Applies to SGLang 0.5.14 to 0.5.17; 0.5.18+ does
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
        # 0.5.16 to 0.5.23 take the model runner by keyword only: a positional call
        # has no owner, and upstream's own call refuses it. 0.5.14 and 0.5.15: the
        # method's self.
        if _is_method(self.target):
            return args[0] if args else None
        return kwargs.get("model_runner")

    def act(self, call: Call) -> Acted | SteppedAside:
        method = _is_method(self.target)

        def run(runner):
            if method:
                return call.original(runner, *call.args[1:], **call.kwargs)
            return call.original(model_runner=runner)

        tripped, result = until_tripped(run, ReadThrough(call.owner, gpu_id=Tripwire()))
        if not tripped:
            return SteppedAside(result, "upstream captures no decode graph here")
        view = ReadThrough(call.owner, is_generation=False)
        return Acted(run(view), "skipped the target-verify graph capture")


def _is_method(target: str | None) -> bool:
    return target == seams.HOOK_TARGETS["graph"][1]


GATE = GraphGate()
