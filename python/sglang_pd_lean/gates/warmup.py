"""Warmup gate: a prefill target warms up in DECODE, one token per request.

Hooks (AROUND) ``BaseRunner._dummy_run`` in
``sglang/srt/model_executor/runner/base_runner.py``. With speculative decoding on,
upstream's warmup (FlashInfer autotune, PP DeepGEMM warmup) runs its dummy forward
in ``TARGET_VERIFY`` with ``num_draft_tokens`` per request; on a pool without
``SpeculativeState`` that trips the linear-attention backend. On a worker that
cannot verify, the hook runs upstream's ``_dummy_run`` with the model runner's
``spec_algorithm`` set to NONE for the call, so upstream picks DECODE with one token
per request and builds a plain decode batch. Applies to SGLang 0.5.16 and 0.5.17;
0.5.18+ does this natively. Leaves alone: draft workers (some algorithms verify with
the draft), decode / null / non-speculative workers.
"""

from __future__ import annotations

import logging

from sglang_pd_lean import record
from sglang_pd_lean.gates import Hook, without_speculation
from sglang_pd_lean.role import judge_owner

logger = logging.getLogger(__name__)

NAME = "warmup"
SUMMARY = "warmup dummy forward in DECODE, 1 token/request on a prefill target"
TARGET = "sglang.srt.model_executor.runner.base_runner.BaseRunner._dummy_run"
# Upstream does this itself when TARGET's source asks one of these (compat).
NATIVE_MARKERS = ("disaggregation_mode", "_is_pd_prefill_target")

_logged = False


def dummy_run(original, runner, *args, **kwargs):
    model_runner = getattr(runner, "model_runner", None)
    worker = judge_owner(model_runner)
    if worker.can_run_target_verify:
        record.stepped_aside(NAME)
        return original(runner, *args, **kwargs)
    record.acted(NAME)
    global _logged
    if not _logged:
        _logged = True
        logger.info(
            f"[sglang-pd-lean] warmup gate: {worker.describe()} cannot run "
            f"TARGET_VERIFY; warmup forward runs in DECODE with 1 token per request"
        )
    with without_speculation(model_runner):
        return original(runner, *args, **kwargs)


def hooks() -> list[Hook]:
    return [Hook(TARGET, dummy_run, "AROUND")]
