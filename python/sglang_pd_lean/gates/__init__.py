"""The gates: each removes one verify-only piece from a worker that cannot verify.

A gate is a module with ``NAME``, ``SUMMARY``, ``hooks()`` (the ``HookRegistry``
registrations it needs) and, optionally, ``TARGET`` with ``NATIVE_MARKERS`` (strings
whose presence in the hooked upstream function means upstream does the job itself)
and ``applicable()`` (why it does not apply to this SGLang, or None). ``compat``
picks the gates an installed SGLang needs; ``plugin`` registers their hooks; each
gate files what it did on a rank with ``record``. Hooks never copy upstream code: they change the inputs or the context
of the upstream call (an argument, a temporary attribute) and let upstream work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

GB = 1 << 30


class Hook(NamedTuple):
    target: str  # dotted path HookRegistry resolves
    fn: Callable
    hook_type: str  # a HookType member name: "AROUND", "BEFORE", ...


class ReadThrough:
    """A view of ``base`` that answers ``overrides`` and reads everything else through."""

    __slots__ = ("_base", "_overrides")

    def __init__(self, base: Any, **overrides: Any) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_base"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_base"), name, value)


@contextlib.contextmanager
def temporarily(owner: Any, **values: Any) -> Iterator[None]:
    """Set attributes of ``owner`` for the duration of the block, then restore them."""
    saved = {name: getattr(owner, name) for name in values}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(owner, name, value)


def no_draft_tokens(server_args: Any) -> ReadThrough:
    """``server_args`` as a pool builder sees it on a worker with no verify step."""
    return ReadThrough(
        server_args,
        speculative_num_draft_tokens=None,
        max_speculative_num_draft_tokens=None,
    )


def without_speculation(owner: Any, **values: Any):
    """``owner.spec_algorithm`` is NONE for the block (plus any other ``values``)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return temporarily(owner, spec_algorithm=SpeculativeAlgorithm.NONE, **values)


def all_gates() -> list:
    """Every gate module, in the order the plugin registers them."""
    from sglang_pd_lean.gates import (
        autotune,
        budget,
        draft_graph,
        graph,
        pool,
        replayssm,
        warmup,
    )

    return [pool, graph, warmup, budget, draft_graph, autotune, replayssm]
