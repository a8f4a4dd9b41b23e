"""The gate contract and the opening every gate shares.

    class GraphGate(Gate):
        name = "graph"
        summary = "no target-verify CUDA graph capture on a prefill target"
        targets = seams.HOOK_TARGETS["graph"]  # candidates: first that resolves
        native_markers = ("disaggregation_mode",)

        def act(self, call: Call) -> Acted | SteppedAside:
            ...  # only what this gate changes

``Gate.around`` is the AROUND hook ``HookRegistry`` runs: it judges the worker
(``role.judge_owner``), calls upstream unchanged and records "stepped aside" where
the worker can verify, else hands over to the gate's ``act``, records what it
returned, and logs the first time the gate acts on the rank. A subclass that misses
part of the contract is refused with a ``TypeError`` when it is defined.
Hooks never copy upstream code: they change the inputs or the context of the
upstream call (an argument, a temporary attribute) and let upstream work.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from sglang_pd_lean import record, seams
from sglang_pd_lean.hook import Hook, When
from sglang_pd_lean.role import judge_owner
from sglang_pd_lean.survey import resolve_first

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    """One call of the hooked upstream function, as a gate sees it."""

    original: Callable
    args: tuple
    kwargs: dict
    owner: Any  # the object judged: model runner, configurator, draft worker

    def upstream(self) -> Any:
        """Upstream's own call, unchanged."""
        return self.original(*self.args, **self.kwargs)


class Acted(NamedTuple):
    result: Any
    detail: str  # what was removed, for the log line
    not_allocated: dict[str, int] | None = None  # component -> bytes, where measured


class SteppedAside(NamedTuple):
    result: Any  # what upstream's unchanged call returned
    reason: str  # why the gate had nothing to remove here


class Gate:
    """One verify-only piece a worker that cannot run ``TARGET_VERIFY`` skips."""

    name: ClassVar[str]
    summary: ClassVar[str]
    # Candidate dotted paths of the upstream function hooked (AROUND), from
    # ``seams.HOOK_TARGETS``: today's name first, a new release's after; the first
    # the installed SGLang resolves is hooked. (): nothing to hook.
    targets: ClassVar[tuple[str, ...]]
    # Names whose use (an attribute read, a call, a name: not a comment or a string)
    # in ``target``'s code means upstream does it itself.
    native_markers: ClassVar[tuple[str, ...]] = ()
    # Gates whose absence makes this one unsafe (``compat``).
    requires: ClassVar[tuple[str, ...]] = ()
    # Judge the server's target, not the worker that owns the call (draft graphs).
    judge_as_target: ClassVar[bool] = False
    _contract: ClassVar[tuple[str, ...]] = ("name", "summary", "targets")

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:  # a shared opening for gates of one kind, not a gate
            return
        missing = [attr for attr in cls._contract if not hasattr(cls, attr)]
        if missing:
            raise TypeError(
                f"gate {cls.__name__} lacks {', '.join(missing)}: set them as class "
                f"attributes (targets = () for a gate with nothing to hook)"
            )
        if isinstance(cls.targets, str):
            raise TypeError(
                f"gate {cls.__name__}: targets is a tuple of candidate paths, "
                f"not a string; write targets = ({cls.targets!r},)"
            )
        if cls.targets and cls.act is Gate.act:
            raise TypeError(
                f"gate {cls.__name__} hooks {cls.targets[0]} but defines no act(); "
                f"set targets = () for a gate with nothing to hook"
            )

    def __repr__(self) -> str:
        return f"<{self.name} gate>"

    @property
    def target(self) -> str | None:
        """The hook target: the first candidate the installed SGLang resolves (the
        first candidate where none does, so messages name it); None: nothing to hook."""
        if not self.targets:
            return None
        found, _ = resolve_first(self.targets)
        return found or self.targets[0]

    @property
    def in_speculative_worker(self) -> bool:
        """Whether every hook target lives in SGLang's speculative-worker package:
        such a gate is needed only by a launch whose worker imports its module."""
        return bool(self.targets) and all(
            target.startswith(seams.SPECULATIVE_PACKAGE) for target in self.targets
        )

    def missing_target(self) -> str | None:
        """Why no candidate hook target resolves on the installed SGLang, or None."""
        if not self.targets:
            return None
        found, error = resolve_first(self.targets)
        return None if found else f"{' | '.join(self.targets)} ({error})"

    def hooks(self) -> list[Hook]:
        """The ``HookRegistry`` registrations this gate needs."""
        target = self.target
        return [Hook(target, self.around, When.AROUND)] if target else []

    def applicable(self) -> str | None:
        """Why this gate does not apply to the installed SGLang, or None."""
        return None

    def markers_for(self, target: str | None) -> tuple[str, ...]:
        """The native markers to look for in ``target``'s code (a gate whose older
        target uses a marker for something else narrows them there)."""
        return self.native_markers

    def owner_of(self, args: tuple, kwargs: dict) -> Any:
        """The object the hooked call belongs to (``self`` of a method)."""
        return args[0] if args else None

    def act(self, call: Call) -> Acted | SteppedAside:
        """Run upstream without the verify-only piece, or step aside with a reason."""
        raise NotImplementedError

    def around(self, original: Callable, *args: Any, **kwargs: Any) -> Any:
        """The AROUND hook: the opening every gate shares."""
        try:
            owner = self.owner_of(args, kwargs)
        except Exception:  # if in doubt, keep the bytes (judge_owner says so)
            owner = None
        worker = judge_owner(
            owner, is_draft_worker=False if self.judge_as_target else None
        )
        call = Call(original, args, kwargs, owner)
        if worker.can_run_target_verify:
            record.stepped_aside(
                self.name, f"{worker.describe()} can run TARGET_VERIFY"
            )
            return call.upstream()
        outcome = self.act(call)
        if isinstance(outcome, SteppedAside):
            if record.stepped_aside(self.name, outcome.reason):
                logger.info(
                    f"[sglang-pd-lean] {self.name} gate: {worker.describe()} cannot "
                    f"run TARGET_VERIFY; stepped aside: {outcome.reason}"
                )
            return outcome.result
        if record.acted(self.name, **(outcome.not_allocated or {})):
            logger.info(
                f"[sglang-pd-lean] {self.name} gate: {worker.describe()} cannot run "
                f"TARGET_VERIFY; {outcome.detail}"
            )
        return outcome.result


class DraftCaptureGate(Gate, abstract=True):
    """A draft worker's CUDA graph capture whose graphs replay only after a target
    verify: where the server's target cannot verify, upstream runs on a view of the
    draft worker whose ``wires`` are tripwires (attributes upstream reads only once
    it is about to capture). An early return is upstream's own no-capture result
    (step aside); a tripped wire leaves the worker as an early return would (the
    ``runners`` None: "run eagerly") and captures nothing."""

    native_markers = ("disaggregation_mode",)
    # The draft's graphs replay only after a target verify: ask about the target.
    judge_as_target = True
    wires: ClassVar[tuple[str, ...]] = ("gpu_id",)
    runners: ClassVar[tuple[str, ...]] = ()  # set to None where a wire trips
    skipped: ClassVar[str]  # what the log line says was skipped
    _contract = (*Gate._contract, "skipped")

    def run_upstream(self, call: Call, probe: Any) -> tuple[bool, Any]:
        """(whether a wire tripped, upstream's result where none did)."""
        _, *rest = call.args
        return until_tripped(call.original, probe, *rest, **call.kwargs)

    def act(self, call: Call) -> Acted | SteppedAside:
        draft_worker = call.args[0]
        wires = {wire: Tripwire() for wire in self.wires}
        tripped, result = self.run_upstream(call, ReadThrough(draft_worker, **wires))
        if not tripped:
            return SteppedAside(result, "upstream captures no draft graphs here")
        for runner in self.runners:
            setattr(draft_worker, runner, None)
        return Acted(None, self.skipped)


class ReadThrough:
    """A view of ``base`` that answers ``overrides`` and reads everything else through."""

    __slots__ = ("_base", "_overrides")

    def __init__(self, base: Any, **overrides: Any) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            value = overrides[name]
            if isinstance(value, Tripwire):
                raise value
            return value
        return getattr(object.__getattribute__(self, "_base"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_base"), name, value)


class Tripwire(Exception):
    """Raised by a ``ReadThrough`` attribute that upstream reads only once it has
    passed every early return, i.e. once it is about to do the work a gate removes."""


def until_tripped(fn: Callable, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Call upstream's ``fn`` on a view holding a ``Tripwire``: (True, None) where
    upstream reached the work, else (False, upstream's own result)."""
    try:
        return False, fn(*args, **kwargs)
    except Tripwire:
        return True, None


@contextlib.contextmanager
def temporarily(owner: Any, **values: Any) -> Iterator[None]:
    """Set attributes of ``owner`` for the duration of the block, then restore them:
    an attribute ``owner`` held itself gets its value back, one it read from its
    class (a method) is deleted again, so the class answers as before."""
    own = getattr(owner, "__dict__", None)
    saved = {name: getattr(owner, name) for name in values}
    borrowed = {name for name in values if own is not None and name not in own}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if name in borrowed:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def no_draft_tokens(server_args: Any) -> ReadThrough:
    """``server_args`` as a pool builder sees it on a worker with no verify step."""
    return ReadThrough(
        server_args,
        speculative_num_draft_tokens=None,
        max_speculative_num_draft_tokens=None,
    )


def without_speculation(owner: Any):
    """``owner.spec_algorithm`` is NONE for the block."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return temporarily(owner, spec_algorithm=SpeculativeAlgorithm.NONE)
