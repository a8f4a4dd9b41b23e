"""Autotune gate: a prefill target's warmup autotune buffers hold one token per request.

Hooks (AROUND) ``EagerRunner._autotune_buffers`` in
``sglang/srt/model_executor/runner/eager_runner.py``. Upstream sizes the FlashInfer
autotune dummy-decode buffers ``max batch x decode_num_tokens_per_req()`` (0.5.14
and 0.5.15: the spec algorithm's ``get_num_tokens_per_bs_for_target_verify``) on
any speculative target, on every release 0.5.14 to 0.5.23, although a prefill
target's warmup forward runs in DECODE with one token per request (upstream 0.5.18+,
or the warmup gate). On a worker that cannot verify, the hook runs upstream's sizing
with the model runner's ``spec_algorithm`` set to NONE for the call, so upstream
allocates ``max batch x 1``; where upstream's own ``decode_num_tokens_per_req()``
is already 1 there is nothing to remove and the gate steps aside (0.5.14 and 0.5.15
have no such method: the gate acts). Leaves alone: the
eager input registry (sized for prefill anyway), the decode CUDA graph runner's
buffers, and every worker that can verify.
"""

from __future__ import annotations

from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import (
    Acted,
    Call,
    Gate,
    SteppedAside,
    without_speculation,
)


class AutotuneGate(Gate):
    name = "autotune"
    summary = "warmup autotune buffers sized 1 token/request on a prefill target"
    targets = seams.HOOK_TARGETS["autotune"]
    native_markers = ("disaggregation_mode", "_is_pd_prefill_target")

    def owner_of(self, args: tuple, kwargs: dict) -> Any:
        # No runner, or one without a model runner: ``around`` finds no owner and
        # keeps upstream's call.
        return args[0].model_runner

    def act(self, call: Call) -> Acted | SteppedAside:
        try:
            tokens_per_request = call.owner.decode_num_tokens_per_req()
        except Exception:  # cannot ask: upstream sizes as it sizes
            tokens_per_request = None
        if tokens_per_request == 1:
            return SteppedAside(
                call.upstream(), "upstream sizes 1 token per request here"
            )
        with without_speculation(call.owner):
            result = call.upstream()
        return Acted(result, "autotune buffers sized for 1 token per request")


GATE = AutotuneGate()
