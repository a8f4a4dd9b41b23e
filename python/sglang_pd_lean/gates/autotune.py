"""Autotune gate: a prefill target's warmup autotune buffers hold one token per request.

Hooks (AROUND) ``EagerRunner._autotune_buffers`` in
``sglang/srt/model_executor/runner/eager_runner.py``. Upstream sizes the FlashInfer
autotune dummy-decode buffers ``max batch x draft tokens`` on any speculative target,
on every release 0.5.16 to 0.5.23, although a prefill target's warmup forward runs in
DECODE with one token per request (upstream 0.5.18+, or the warmup gate). On a worker
that cannot verify, the hook runs upstream's sizing with the model runner's
``spec_algorithm`` set to NONE for the call, so upstream allocates ``max batch x 1``.
Leaves alone: the eager input registry (sized for prefill anyway), the decode CUDA
graph runner's buffers, and every worker that can verify.
"""

from __future__ import annotations

import logging

from sglang_pd_lean import record
from sglang_pd_lean.gates import Hook, without_speculation
from sglang_pd_lean.role import judge_owner

logger = logging.getLogger(__name__)

NAME = "autotune"
SUMMARY = "warmup autotune buffers sized 1 token/request on a prefill target"
TARGET = "sglang.srt.model_executor.runner.eager_runner.EagerRunner._autotune_buffers"
# Upstream does this itself when TARGET's source asks one of these (compat).
NATIVE_MARKERS = ("disaggregation_mode", "_is_pd_prefill_target")


def autotune_buffers(original, runner, *args, **kwargs):
    model_runner = getattr(runner, "model_runner", None)
    worker = judge_owner(model_runner)
    if worker.can_run_target_verify:
        record.stepped_aside(NAME)
        return original(runner, *args, **kwargs)
    record.acted(NAME)
    logger.info(
        f"[sglang-pd-lean] autotune gate: {worker.describe()} cannot run "
        f"TARGET_VERIFY; autotune buffers sized for 1 token per request"
    )
    with without_speculation(model_runner):
        return original(runner, *args, **kwargs)


def hooks() -> list[Hook]:
    return [Hook(TARGET, autotune_buffers, "AROUND")]
