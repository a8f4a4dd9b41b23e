"""Warmup gate: a prefill target warms up in DECODE, one token per request.

Hooks (AROUND) ``BaseRunner._dummy_run`` in
``sglang/srt/model_executor/runner/base_runner.py``. With speculative decoding on,
upstream's warmup (FlashInfer autotune, PP DeepGEMM warmup) runs its dummy forward
in ``TARGET_VERIFY`` with ``num_draft_tokens`` per request; on a pool without
``SpeculativeState`` that trips the linear-attention backend. On a worker that
cannot verify, the hook runs upstream's ``_dummy_run`` with the model runner's
``spec_algorithm`` set to NONE for the call, so upstream picks DECODE with one token
per request and builds a plain decode batch. Every call on such a worker is one
upstream would have run in ``TARGET_VERIFY``, so the gate always acts when asked.
Applies to SGLang 0.5.14 to 0.5.17; 0.5.18+ does this natively. Leaves alone:
draft workers (some algorithms verify with the draft), decode / null /
non-speculative workers.
"""

from __future__ import annotations

from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import Acted, Call, Gate, without_speculation


class WarmupGate(Gate):
    name = "warmup"
    summary = "warmup dummy forward in DECODE, 1 token/request on a prefill target"
    targets = seams.HOOK_TARGETS["warmup"]
    native_markers = ("disaggregation_mode", "_is_pd_prefill_target")

    def owner_of(self, args: tuple, kwargs: dict) -> Any:
        # No runner, or one without a model runner: ``around`` finds no owner and
        # keeps upstream's call.
        return args[0].model_runner

    def act(self, call: Call) -> Acted:
        with without_speculation(call.owner):
            result = call.upstream()
        return Acted(result, "warmup forward runs in DECODE with 1 token per request")


GATE = WarmupGate()
