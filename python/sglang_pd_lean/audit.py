"""What a PD prefill server builds only for a verify step, per speculative algorithm.

    from sglang_pd_lean import audit
    for row in audit.matrix():
        print(row.label, row.worker, {p: c.state for p, c in row.cells.items()})

For every speculative algorithm the installed SGLang accepts (its
``SpeculativeAlgorithm`` members, the aliases it reserves, the algorithms a plugin
registered with ``SpeculativeAlgorithm.register``) and every worker class they map
to, read from SGLang's own dispatch (``SpeculativeAlgorithm.create_worker``'s code,
not a list of ours, and the classes an out-of-tree platform supplies instead:
``get_platform_worker_cls``), and for every piece such a server could build for a verify or
decode step, one state:

- ``native upstream``: SGLang skips it on a prefill server itself;
- ``removed by the plugin``: a gate skips it (``compat`` registers that gate here);
- ``still built``: built on a prefill server, under the flags the detail names
  (a gate that is off, or a piece no gate removes: NGRAM's verify tensors and
  trie, DFlash's verify-sampling rehearsal, UNO's tree-draft backend);
- ``not present``: this worker builds no such piece;
- ``not audited``: a worker class the plugin has not read (a new release's, a
  plugin algorithm's): it gets upstream's behaviour.

Target pieces (verify-only pool state, target-verify graph, ``TARGET_VERIFY``
warm-up, verify budget, autotune buffers) are built by code every algorithm's target
shares, so their state is their gate's; draft pieces are read per worker class from
``audit_claims.AUDITED``, each claim checked against the installed code, so a
release that changes them reads as "still built" or "not audited", never silently
passed. ``doctor`` prints the matrix; docs/releases.md holds it per release.

At run time ``warn_unaudited`` (``hooks()``: AFTER ``Scheduler.__init__``) logs one
WARNING per unaudited worker class on a server whose target cannot verify.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from sglang_pd_lean.audit_claims import (  # noqa: F401 (AUDITED, TARGET, ...: the API)
    _SPEC,
    AUDITED,
    PIECE_KEYS,
    PIECES,
    SCHEDULER,
    SPEC_INFO,
    TARGET,
    Absent,
    BuiltIf,
    ByGate,
    Cell,
    Handling,
    State,
)
from sglang_pd_lean.audit_reading import (  # noqa: F401 (runs_own, ...: the API)
    _class_node,
    _method_node,
    _module_tree,
    _names,
    aliases,
    runs_own,
)
from sglang_pd_lean.audit_routes import Route, routes  # noqa: F401 (the API)
from sglang_pd_lean.hook import Hook, When

logger = logging.getLogger(__name__)

# --- the matrix ------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    algorithms: tuple[str, ...]
    flags: tuple[str, ...]
    worker: str | None
    draft: str | None
    audited: bool
    cells: dict[str, Cell] = field(default_factory=dict)
    note: str = ""

    @property
    def label(self) -> str:
        text = ", ".join(self.algorithms)
        if self.flags:
            text += " + " + " ".join(f"--{f.replace('_', '-')}" for f in self.flags)
        return text

    @property
    def worker_name(self) -> str:
        return (self.worker or "?").rpartition(".")[2]


def _gate_states() -> dict[str, tuple[str, str]]:
    from sglang_pd_lean import compat

    return {plan.name: (plan.state, plan.detail) for plan in compat.plan()}


def _by_gate(handling: ByGate, gates: dict) -> Cell:
    from sglang_pd_lean.compat import GateState
    from sglang_pd_lean.gates import all_gates

    state, detail = gates.get(handling.gate, (None, "no such gate"))
    if handling.owner is not None:
        (gate,) = [g for g in all_gates() if g.name == handling.gate]
        runs, why = runs_own(handling.owner, gate.target or "")
        if not runs:
            return Cell(
                State.BUILT,
                f"when {handling.when}: {why}, which the plugin has not read",
            )
    if state == GateState.NATIVE:
        return Cell(State.NATIVE, detail)
    if state == GateState.NEEDED:
        return Cell(State.PLUGIN, f"{handling.gate} gate")
    if state == GateState.NOT_APPLICABLE:
        return Cell(State.ABSENT, detail)
    return Cell(State.BUILT, f"when {handling.when}: {handling.gate} gate {state}")


def _cell(handling: Handling, gates: dict, cells: dict) -> Cell:
    if isinstance(handling, Absent):
        return Cell(State.ABSENT, handling.why)
    if isinstance(handling, ByGate):
        return _by_gate(handling, gates)
    if isinstance(handling, BuiltIf):
        try:
            built, why = handling.check()
        except Exception as exc:  # unreadable code: not a claim we can make
            return Cell(State.NOT_AUDITED, f"{type(exc).__name__}: {exc}")
        return (
            Cell(State.BUILT, f"when {handling.when}: {why}")
            if built
            else Cell(State.ABSENT, why)
        )
    try:
        native, why = handling.check()
    except Exception as exc:  # unreadable code: not a claim we can make
        native, why = False, f"{type(exc).__name__}: {exc}"
    if native and handling.follows:
        before = cells.get(handling.follows)
        if before is not None and before.state == State.BUILT:
            return Cell(State.BUILT, f"when {handling.when}")
    if native:
        return Cell(State.NATIVE, why)
    return Cell(State.BUILT, f"when {handling.when}: {why}")


def _draft_of(worker: str, expected: str | None) -> str | None:
    """Why ``worker`` may build another draft worker than ``expected``, or None."""
    if expected is None:
        return None
    init = _names(_method_node(f"{worker}.__init__"))
    name = expected.rpartition(".")[2]
    return None if name in init else f"its __init__ no longer builds {name}"


def _targets() -> tuple[dict, dict]:
    """(the gates' states on this SGLang, the target pieces' cells)."""
    gates = _gate_states()
    return gates, {key: _cell(h, gates, {}) for key, h in TARGET.items()}


def _row(route: Route, gates: dict, target: dict) -> Row:
    """``route``'s worker class: the target's cells, and its own draft pieces
    where the plugin has read it."""
    audited = AUDITED.get(route.worker or "")
    why_not = (
        "worker class not found: " + route.error
        if route.worker is None
        else "a worker class the plugin has not read"
    )
    if audited is not None:
        changed = _draft_of(route.worker, audited.draft)
        if changed:
            audited, why_not = None, changed
    cells = dict(target)
    for piece in PIECES:
        if piece.side != "draft":
            continue
        if audited is None:
            cells[piece.key] = Cell(State.NOT_AUDITED, why_not)
        else:
            cells[piece.key] = _cell(audited.pieces[piece.key], gates, cells)
    draft, note = (audited.draft, audited.note) if audited else (None, "")
    return Row(
        route.algorithms, route.flags, route.worker, draft, bool(audited), cells, note
    )


def matrix() -> list[Row]:
    """One row per worker class the installed SGLang's algorithms map to."""
    gates, target = _targets()
    named = aliases()
    rows = []
    for route in routes():
        algorithms = route.algorithms + tuple(
            alias
            for alias, resolved in named.items()
            if set(resolved) & set(route.algorithms)
        )
        route = dataclasses.replace(route, algorithms=algorithms)
        rows.append(_row(route, gates, target))
    return rows


def row_for(worker: type) -> Row:
    """The row of one worker class (what ``create_worker`` returned for a launch),
    without reading SGLang's dispatch: what ``report`` names per role."""
    route = Route(_dotted(worker), (), ())
    return _row(route, *_targets())


def as_json(rows: list[Row]) -> dict:
    return {
        "pieces": [{"key": p.key, "title": p.title, "side": p.side} for p in PIECES],
        "rows": [
            {
                "algorithms": list(row.algorithms),
                "flags": list(row.flags),
                "worker": row.worker,
                "draft_worker": row.draft,
                "audited": row.audited,
                "note": row.note,
                "cells": {
                    key: {"state": cell.state.value, "detail": cell.detail}
                    for key, cell in row.cells.items()
                },
            }
            for row in rows
        ],
    }


# --- at run time: a worker class nobody audited ------------------------------------


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def unaudited(spec_worker: Any) -> list[str]:
    """The classes of a scheduler's speculative worker (and of the draft worker it
    built) that the plugin has not audited: dotted names; [] where none."""
    if spec_worker is None:
        return []
    path = _dotted(type(spec_worker))
    audited = AUDITED.get(path)
    if audited is None:
        return [path]
    draft = vars(spec_worker).get("_draft_worker")
    if audited.draft is None or draft is None:
        return []
    draft_path = _dotted(type(draft))
    return [] if draft_path == audited.draft else [draft_path]


_warned: set[str] = set()


def warn_unaudited(result: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``Scheduler.__init__``: one WARNING per speculative worker class the
    plugin has not audited, where the server's target cannot verify (elsewhere
    upstream's behaviour is the plugin's anyway). Never raises."""
    try:
        from sglang_pd_lean.role import judge

        scheduler = args[0] if args else kwargs["self"]
        worker = judge(scheduler.server_args, is_draft_worker=False)
        if worker.can_run_target_verify:
            return
        for name in unaudited(getattr(scheduler, "draft_worker", None)):
            if name in _warned:
                continue
            _warned.add(name)
            logger.warning(
                f"[sglang-pd-lean] {name}: a speculative worker class the plugin has "
                f"not audited; it runs as upstream on this {worker.describe()} and "
                f"may build pieces only a verify step uses (`sglang-pd-lean doctor` "
                f"lists the audited ones)"
            )
    except Exception as exc:  # a warning never breaks a start-up
        logger.debug(f"[sglang-pd-lean] unaudited workers not checked: {exc!r}")


def reset() -> None:
    """Forget which classes were warned about (tests)."""
    _warned.clear()


def hooks() -> list[Hook]:
    return [Hook(f"{SCHEDULER}.__init__", warn_unaudited, When.AFTER)]
