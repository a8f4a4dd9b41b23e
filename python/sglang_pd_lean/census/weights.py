"""Weights per rank from SGLang's own model classes, built without memory, in a child.

    build = Build(server_args)  # forks; the report reads SGLang's model config
    build.result()  # WeightsBuild: target_bytes, draft_bytes, classes; or error

The build (``census.model_build``: SGLang's groups for rank 0 over torch's ``fake``
process group, the target and draft models under ``FakeTensorMode``) changes
process-wide state (torch.distributed, SGLang's groups and published configuration,
a stand-in for a kernel module), hence the child: a fork, so it inherits what the
report already imported and resolved. It sets SGLang's own knobs for a host without
GPU peers (``SGLANG_NCCL_SO_PATH`` to no library,
``SGLANG_USE_MESSAGE_QUEUE_BROADCASTER=false``, custom all-reduce off): the
communicators then disable themselves, as SGLang does on a host without GPUs. Its
answer, or its one-line error, comes back as JSON through a pipe; the parent waits
at most ``TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
from typing import Any

from sglang_pd_lean.census.inputs import CensusError, failure
from sglang_pd_lean.census.model_build import build
from sglang_pd_lean.census.results import WeightsBuild

# The child process's limit: a model that takes longer to build is not built.
TIMEOUT_S = 600
# SGLang knobs for a process with no GPU peers: the communicators disable themselves.
CHILD_ENV = {
    "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
    "SGLANG_USE_MESSAGE_QUEUE_BROADCASTER": "false",
}
SOURCE = (
    "SGLang's model class built under FakeTensorMode for rank 0 of TP {tp}, EP {ep}"
)
# Off: no model is built (the checkpoint's safetensors index or --weights-gib answer).
BUILD_ENV = "SGLANG_PD_LEAN_BUILD_WEIGHTS"


def build_weights() -> bool:
    """Whether the report builds SGLang's model classes (``SGLANG_PD_LEAN_BUILD_WEIGHTS``,
    default on), read as SGLang reads its boolean variables (``environ.EnvBool``:
    true/1/yes/y or false/0/no/n, any case); anything else is a one-line error."""
    value = os.environ.get(BUILD_ENV)
    if value is None:
        return True
    from sglang.srt.environ import EnvBool

    try:
        return EnvBool(True).parse(value.strip())
    except ValueError as exc:
        raise CensusError(f"{BUILD_ENV}={value}: {exc}") from None


class Build:
    """A forked child that builds the launch's models; ``result()`` waits for it.

    Forked once the report has resolved the launch (SGLang already imported, the
    resolved ``ServerArgs`` inherited), so the child pays only for the build, while
    the parent reads the model config it needs anyway. The child's stdout and stderr
    are /dev/null; its answer, or its one-line error, comes back through a pipe."""

    def __init__(self, server_args: Any):
        self._error = None
        try:
            self._process, self._read = _started(server_args)
        except (OSError, AssertionError) as exc:
            # No fork here (none at all, or none from a daemonic multiprocessing
            # process, which multiprocessing asserts): the other sources answer.
            self._process, self._error = None, f"cannot fork: {exc}"

    def result(self) -> WeightsBuild:
        """The bytes and classes SGLang built, or the one-line ``error`` where
        SGLang cannot build the model here."""
        if self._process is None:
            return WeightsBuild(error=self._error or "cancelled")
        ready, _, _ = select.select([self._read], [], [], TIMEOUT_S)
        data = b""
        if ready:
            with os.fdopen(self._read, "rb") as pipe:
                data = pipe.read()
        else:
            os.close(self._read)
            self._process.kill()
        self._ended()
        if not ready:
            return WeightsBuild(error=f"building the model took over {TIMEOUT_S} s")
        try:
            return WeightsBuild(**json.loads(data))
        except (ValueError, TypeError):
            return WeightsBuild(error="the build process ended without an answer")

    def cancel(self) -> None:
        """Stop the child if its answer was never read (an error in the parent)."""
        if self._process is not None:
            self._process.kill()
            with contextlib.suppress(OSError):
                os.close(self._read)
            self._ended()

    def _ended(self) -> None:
        """The child reaped, and multiprocessing's own descriptors for it closed."""
        self._process.join()
        self._process.close()
        self._process = None


def _started(server_args: Any) -> tuple[Any, int]:
    """The build's child, forked, and the end of the pipe its answer comes on.
    Forked by ``multiprocessing`` (its fork context): the child runs ``_child`` and
    leaves with ``os._exit`` whatever happens in it, never running on as the
    parent, its exit handlers or the rest of the caller."""
    import multiprocessing

    read, write = os.pipe()
    process = multiprocessing.get_context("fork").Process(
        target=_child, args=(server_args, read, write), daemon=True
    )
    try:
        process.start()
    except Exception:
        os.close(read)
        raise
    finally:
        os.close(write)
    return process, read


def _child(server_args: Any, read: int, write: int) -> None:
    """In the child: build, and write the JSON answer (stdout and stderr to
    /dev/null, so that what the parent left in its buffers goes nowhere)."""
    os.close(read)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.write(write, answer(server_args))


def answer(server_args: Any) -> bytes:
    """What the child writes back: the build of ``server_args`` in this process
    (with the child's environment), or its one-line error, as JSON."""
    os.environ.update(CHILD_ENV)
    try:
        built = _lacking() or build(server_args)
    except BaseException as exc:  # noqa: BLE001 - every failure is an answer
        built = WeightsBuild(error=failure(exc))
    return json.dumps(dataclasses.asdict(built)).encode()


def _lacking() -> WeightsBuild | None:
    """No build where SGLang lacks a seam it needs (the other sources answer, and
    say why). Asked here, not in the parent: resolving the seams imports SGLang's
    loader, which only the child needs."""
    from sglang_pd_lean import seams, survey

    lacking = survey.missing(seams.Part.WEIGHTS)
    if not lacking:
        return None
    return WeightsBuild(
        error=f"SGLang lacks {lacking[0].seam.label} ({lacking[0].seam.why}); "
        f"`sglang-pd-lean doctor` lists what is missing"
    )
