"""DFlash graph gate: a prefill server's DFLASH draft model captures no decode CUDA
graph, and builds no sampling head folded into it.

Hooks (AROUND) ``DFlashWorkerV2.init_cuda_graphs`` in
``sglang/srt/speculative/dflash_worker_v2.py`` (DFLASH), SGLang 0.5.14 to 0.5.23.
Upstream decides there whether the draft model runner captures its decode graph
(the block draft, which runs only in the decode / verify step) and hands the answer
to the draft worker's own ``init_cuda_graphs(capture_decode_cuda_graph=...)``; when
it is yes, it first builds the draft sampling head folded into that graph
(``_maybe_build_draft_sampler``, buffers sized for the decode batch sizes). The
answer is yes whenever the decode graph backend is set (``--cuda-graph-backend-decode
...``) and none of upstream's own vetoes applies (no graph capture on the platform,
DP attention, under 1 GB of free GPU memory), also on a prefill server, which never
runs the block draft.

The same call also captures what a prefill server does use (the draft model's
prefill graph, its eager runner), so upstream runs to its end, on a view of the
worker: ``_maybe_build_draft_sampler``, which upstream calls only once it has
decided to capture, notes that decision and builds nothing (as upstream's no-capture
path, ``_draft_sampler`` stays None), and the draft worker's ``init_cuda_graphs`` is
then asked with ``capture_decode_cuda_graph=False``: upstream's own no-capture call.
(0.5.14 builds no folded sampler: there upstream's asking the draft worker for the
decode graph is its decision, answered the same way.) 0.5.14 and 0.5.15 decide on
the legacy ``disable_cuda_graph``, which SGLang sets on every PD prefill server: there
upstream captures no decode graph and the gate steps aside.
Where upstream decides not to capture, nothing is changed and the gate steps aside
with upstream's result. Nothing here assumes a hybrid model or a mamba pool.

Deliberately left alone: the draft's prefill graph and eager runner, upstream's
memory check and warnings, every other speculative worker.
"""

from __future__ import annotations

from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import Acted, Call, Gate, ReadThrough, SteppedAside


class _DraftWorkerView:
    """``owner._draft_worker`` read when upstream reads it, whose
    ``init_cuda_graphs`` captures no decode graph once ``decided`` is set, or once
    upstream asks it for one (0.5.14 builds no folded sampler to note first)."""

    def __init__(self, owner: Any, decided: list) -> None:
        self._owner = owner
        self._decided = decided

    def __getattr__(self, name: str) -> Any:
        draft_worker = self._owner._draft_worker
        value = getattr(draft_worker, name)
        if name != "init_cuda_graphs":
            return value

        def without_decode_graph(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("capture_decode_cuda_graph", args[0] if args else False):
                self._decided.append(True)
            if not self._decided:  # upstream's own no-capture call, as it is
                return value(*args, **kwargs)
            kwargs.pop("capture_decode_cuda_graph", None)
            return value(*args[1:], capture_decode_cuda_graph=False, **kwargs)

        return without_decode_graph


class DFlashGraphGate(Gate):
    name = "dflash_graph"
    summary = "no DFLASH draft decode CUDA graph on a prefill server"
    targets = seams.HOOK_TARGETS["dflash_graph"]
    native_markers = ("disaggregation_mode",)
    # The draft's decode graph replays only in a verify step: ask about the target.
    judge_as_target = True

    def act(self, call: Call) -> Acted | SteppedAside:
        worker, *rest = call.args
        decided: list = []

        def no_folded_sampler(*args: Any, **kwargs: Any) -> None:
            decided.append(True)  # upstream asks only once it decided to capture

        probe = ReadThrough(
            worker,
            _maybe_build_draft_sampler=no_folded_sampler,
            _draft_worker=_DraftWorkerView(worker, decided),
        )
        result = call.original(probe, *rest, **call.kwargs)
        if not decided:
            return SteppedAside(result, "upstream captures no draft graph here")
        return Acted(
            result,
            "skipped the DFLASH draft decode graph capture and its folded sampler",
        )


GATE = DFlashGraphGate()
