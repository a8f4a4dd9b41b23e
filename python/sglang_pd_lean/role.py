"""The one question every gate asks: can this worker run ``TARGET_VERIFY``?

    from sglang_pd_lean.role import judge

    worker = judge(model_runner.server_args, is_draft_worker=model_runner.is_draft_worker)
    if worker.can_run_target_verify:
        ...  # step aside: upstream builds what it builds

A speculative **target** worker on a plain PD **prefill** server never verifies: the
decode server runs every verify step. Such a worker is the only one for which the
answer is "no". Decode, unified (``null``) and draft workers, servers without
speculative decoding, and prefill servers that may still verify (a role that can
change at runtime, one memory pool shared between roles, a platform with its own
pool layout such as NPU) all answer "yes": if in doubt, keep the bytes.

Inputs come from SGLang's own configuration, read when a gate asks (in a scheduler
process plugins load before the configuration is published): the published runtime
context (``get_disagg()``, ``get_spec()``, ``get_memory()``) where the release has
one, else the worker's ``server_args`` (0.5.16). Works on SGLang 0.5.16 to 0.5.23.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sglang_pd_lean.shims import is_npu, setting

logger = logging.getLogger(__name__)

# Settings under which a prefill server keeps its verify state: flag -> (config
# namespace it is published in, reason). A release without the flag reads it as off
# (PD role switch exists from 0.5.21, unified memory from 0.5.16).
_KEEP_VERIFY_FLAGS = {
    "enable_pd_role_switch": ("get_disagg", "PD role switch"),
    "enable_unified_memory": ("get_memory", "unified memory pool"),
}

_upstream_only: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sglang_pd_lean_upstream_only", default=False
)


@contextlib.contextmanager
def upstream_behaviour() -> Iterator[None]:
    """Within this block every worker answers "can verify": all gates step aside.

    The census and the tests use it to build upstream's pools in the same process.
    """
    token = _upstream_only.set(True)
    try:
        yield
    finally:
        _upstream_only.reset(token)


@dataclass(frozen=True)
class Worker:
    """What the predicate saw, for gates, logs and the census."""

    disaggregation_mode: str
    speculative_algorithm: str | None
    is_draft_worker: bool
    keeps_verify_because: str | None = None

    @property
    def is_speculative_target(self) -> bool:
        return self.speculative_algorithm is not None and not self.is_draft_worker

    @property
    def can_run_target_verify(self) -> bool:
        """False only for a speculative target on a prefill server that never verifies."""
        if _upstream_only.get():
            return True
        return not (
            self.is_speculative_target
            and self.disaggregation_mode == "prefill"
            and self.keeps_verify_because is None
        )

    def describe(self) -> str:
        kind = "draft" if self.is_draft_worker else "target"
        spec = self.speculative_algorithm or "no speculative decoding"
        text = f"{self.disaggregation_mode} {kind} ({spec})"
        if self.keeps_verify_because:
            text += f", keeps verify state: {self.keeps_verify_because}"
        return text


def judge(server_args: Any, *, is_draft_worker: bool) -> Worker:
    """Describe the worker that owns ``server_args`` and decide the one question."""
    mode = setting("get_disagg", "disaggregation_mode", server_args) or "null"
    algorithm = setting("get_spec", "speculative_algorithm", server_args)
    keep = None
    for flag, (namespace, reason) in _KEEP_VERIFY_FLAGS.items():
        if setting(namespace, flag, server_args):
            keep = reason
            break
    if keep is None and is_npu():
        keep = "NPU pool layout"
    return Worker(
        disaggregation_mode=str(mode),
        speculative_algorithm=str(algorithm) if algorithm is not None else None,
        is_draft_worker=bool(is_draft_worker),
        keeps_verify_because=keep,
    )


def judge_owner(owner: Any, *, is_draft_worker: bool | None = None) -> Worker:
    """``judge()`` for the object a hooked upstream function received (a model
    runner, a configurator, a draft worker): its ``server_args`` and, unless given,
    its ``is_draft_worker``. A caller that built ``owner`` with only what upstream
    reads (upstream's own unit tests do) may lack either: such a worker cannot be
    judged and keeps upstream's behaviour, with one DEBUG line. Never raises."""
    try:
        server_args = owner.server_args
        if is_draft_worker is None:
            is_draft_worker = owner.is_draft_worker
        return judge(server_args, is_draft_worker=is_draft_worker)
    except Exception as exc:  # if in doubt, keep the bytes
        reason = f"cannot be judged ({type(exc).__name__}: {exc})"
        logger.debug(
            f"[sglang-pd-lean] {type(owner).__name__} {reason}; upstream behaviour "
            f"(if in doubt, keep the bytes)"
        )
        return Worker(
            "unknown", None, bool(is_draft_worker), keeps_verify_because=reason
        )
