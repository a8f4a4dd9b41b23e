"""What a PD prefill server builds only for a verify step, per speculative algorithm.

    from sglang_pd_lean import audit
    for row in audit.matrix():
        print(row.label, row.worker, {p: c.state for p, c in row.cells.items()})

For every speculative algorithm the installed SGLang accepts (its
``SpeculativeAlgorithm`` members, the aliases it reserves, the algorithms a plugin
registered with ``SpeculativeAlgorithm.register``) and every worker class they map
to, read from SGLang's own dispatch (``SpeculativeAlgorithm.create_worker``'s code,
not a list of ours), and for every piece such a server could build for a verify or
decode step, one state:

- ``native upstream``: SGLang skips it on a prefill server itself;
- ``removed by the plugin``: a gate skips it (``compat`` registers that gate here);
- ``still built``: built on a prefill server, under the flags the detail names
  (a gate that is off here, or a piece no gate removes);
- ``not present``: this worker builds no such piece;
- ``not audited``: a worker class the plugin has not read (a new release's, a
  plugin algorithm's): it gets upstream's behaviour.

Target pieces (verify-only pool state, target-verify graph, ``TARGET_VERIFY``
warm-up, verify budget, autotune buffers) are built by code every algorithm's target
shares, so their state is their gate's; draft pieces (draft decode graph,
draft-extend graph, the algorithm's own verify-only buffers) are read per worker
class from ``AUDITED``, and each claim there is checked against the installed code
(the method the gate hooks is the one the class runs; a "native" skip is still in
upstream's code), so a release that changes them reads as "still built" or "not
audited", never silently passed. ``doctor`` prints the matrix; docs/releases.md holds
it for every supported release (``scripts/releases_table.sh``).

At run time, ``warn_unaudited`` (AFTER ``Scheduler.__init__``, one hook in
``hooks()``) logs one WARNING per speculative worker class the plugin has not
audited on a server whose target cannot verify. This module imports nothing heavy
until asked for the matrix.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import logging
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sglang_pd_lean.hook import Hook, When

logger = logging.getLogger(__name__)

_SPEC = "sglang.srt.speculative"
SPEC_INFO = f"{_SPEC}.spec_info"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"


class State(str, Enum):
    NATIVE = "native upstream"
    PLUGIN = "removed by the plugin"
    BUILT = "still built"
    ABSENT = "not present"
    NOT_AUDITED = "not audited"

    def __str__(self) -> str:
        return self.value


# Short words for a table cell (doctor's text, docs/releases.md).
CELLS = {
    State.NATIVE: "native",
    State.PLUGIN: "plugin",
    State.BUILT: "built",
    State.ABSENT: "-",
    State.NOT_AUDITED: "not audited",
}


@dataclass(frozen=True)
class Piece:
    key: str
    title: str  # column heading
    side: str  # "target" or "draft"


PIECES = (
    Piece("pool", "verify pool state", "target"),
    Piece("verify_graph", "verify graph", "target"),
    Piece("warmup", "verify warm-up", "target"),
    Piece("budget", "verify budget", "target"),
    Piece("autotune", "autotune buffers", "target"),
    Piece("draft_decode_graph", "draft decode graph", "draft"),
    Piece("draft_extend_graph", "draft-extend graph", "draft"),
    Piece("verify_buffers", "own verify buffers", "draft"),
)
PIECE_KEYS = tuple(piece.key for piece in PIECES)


@dataclass(frozen=True)
class Cell:
    state: State
    detail: str  # why; for "still built", under which flags

    @property
    def short(self) -> str:
        return CELLS[self.state]


# --- how each audited piece is handled -----------------------------------------


@dataclass(frozen=True)
class ByGate:
    """Built by upstream's ``method`` (the gate's hook target) as ``owner`` class
    runs it, on a prefill server ``when`` the flags say; removed by ``gate``."""

    gate: str
    when: str
    owner: str | None = None  # dotted class whose method must be the hooked one


@dataclass(frozen=True)
class NativeIf:
    """Skipped by upstream on a prefill server where ``check`` (reading upstream's
    code) says so: ``check() -> (native, why)``; else built ``when``."""

    check: Callable[[], tuple[bool, str]]
    when: str
    follows: str | None = None  # a piece whose state this one also needs skipped


@dataclass(frozen=True)
class Absent:
    why: str


Handling = ByGate | NativeIf | Absent

# The target's pieces: shared code, one gate each.
TARGET = {
    "pool": ByGate("pool", "a hybrid (linear-attention) model"),
    "verify_graph": ByGate("graph", "a decode graph backend is set"),
    "warmup": ByGate("warmup", "a warm-up forward runs (FlashInfer, DeepGEMM)"),
    "budget": ByGate("budget", "a hybrid (linear-attention) model"),
    "autotune": ByGate("autotune", "more than one draft token"),
}


# --- reading upstream's code without running it ---------------------------------


def _module_tree(module: str) -> ast.Module | None:
    """The parsed source of ``module``, found without importing it (a worker
    module may need GPU kernels to import); None where it is not there."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as f:
        return ast.parse(f.read())


def _class_node(path: str) -> ast.ClassDef | None:
    module, _, name = path.rpartition(".")
    tree = _module_tree(module)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _method_node(path: str) -> ast.FunctionDef | None:
    cls, _, name = path.rpartition(".")
    node = _class_node(cls)
    for item in node.body if node else ():
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
            item.name == name
        ):
            return item
    return None


def _names(node: ast.AST | None) -> set[str]:
    """Names and attributes a piece of code uses (not comments, not strings)."""
    used = set()
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Attribute):
            used.add(sub.attr)
        elif isinstance(sub, ast.Name):
            used.add(sub.id)
    return used


def _defines(cls_path: str, method: str) -> bool:
    node = _class_node(cls_path)
    return any(
        isinstance(item, ast.FunctionDef) and item.name == method
        for item in (node.body if node else ())
    )


def _bases(cls_path: str) -> list[str]:
    node = _class_node(cls_path)
    return [ast.unparse(base) for base in node.bases] if node else []


def runs_own(cls_path: str, target: str) -> tuple[bool, str]:
    """Whether ``cls_path`` runs the hooked ``target`` method itself or by
    inheritance from the target's class, without overriding it (read from the
    source: each class on the way up names its base)."""
    target_cls, _, method = target.rpartition(".")
    target_name = target_cls.rpartition(".")[2]
    cls = cls_path
    for _ in range(8):
        if cls == target_cls:
            return True, ""
        if _defines(cls, method):
            return False, f"{cls.rpartition('.')[2]} overrides {method}"
        bases = _bases(cls)
        if target_name in bases:
            cls = target_cls
            continue
        # A base from the same module, else give up.
        local = [b for b in bases if _class_node(f"{cls.rpartition('.')[0]}.{b}")]
        if not local:
            break
        cls = f"{cls.rpartition('.')[0]}.{local[0]}"
    return False, f"{cls_path.rpartition('.')[2]} does not run {target_name}.{method}"


# --- the audited worker classes --------------------------------------------------


def _dspark_native() -> tuple[bool, str]:
    cls = f"{_SPEC}.dspark_components.dspark_worker_v2.DSparkWorkerV2"
    init = _names(_method_node(f"{cls}.__init__"))
    graphs = _names(_method_node(f"{cls}.init_cuda_graphs"))
    if "disaggregation_mode" in init and "_decode_graph_allowed" in graphs:
        return True, "DSparkWorkerV2 allows no decode graph on a prefill server"
    return False, "DSparkWorkerV2 does not ask the disaggregation mode"


def _dspark_buffers_native() -> tuple[bool, str]:
    cls = f"{_SPEC}.dspark_components.dspark_worker_v2.DSparkWorkerV2"
    init = _names(_method_node(f"{cls}.__init__"))
    native, why = _dspark_native()
    if "DsparkVerifyEpilogue" not in init:
        return native, why
    if native and "_decode_graph_allowed" in init:
        return True, "its verify epilogue is built only with a decode graph"
    return False, "its verify epilogue does not ask the disaggregation mode"


def _uno_native() -> tuple[bool, str]:
    method = f"{_SPEC}.uno_worker_v2.UnoWorkerV2.init_cuda_graphs"
    if "decode_cuda_graph_runner" in _names(_method_node(method)):
        return True, "captured only with the target's verify graph"
    return False, "UnoWorkerV2 captures its tree draft graph unconditionally"


@dataclass(frozen=True)
class Audited:
    """One speculative worker class the plugin has read, release 0.5.16 to 0.5.23."""

    draft: str | None  # the draft worker class it builds (None: none of its own)
    pieces: dict[str, Handling]
    note: str = ""


_EAGLE_DRAFT = f"{_SPEC}.eagle_worker_v2.EagleDraftWorker"
_EAGLE_GRAPHS = "a decode graph backend is set (--cuda-graph-backend-decode)"
_NO_BUFFERS = Absent("none of its own")

AUDITED: dict[str, Audited] = {
    f"{_SPEC}.eagle_worker_v2.EAGLEWorkerV2": Audited(
        _EAGLE_DRAFT,
        {
            "draft_decode_graph": ByGate("draft_graph", _EAGLE_GRAPHS, _EAGLE_DRAFT),
            "draft_extend_graph": ByGate("draft_graph", _EAGLE_GRAPHS, _EAGLE_DRAFT),
            "verify_buffers": _NO_BUFFERS,
        },
    ),
    f"{_SPEC}.standalone_worker_v2.StandaloneWorkerV2": Audited(
        f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker",
        {
            "draft_decode_graph": ByGate(
                "draft_graph",
                _EAGLE_GRAPHS,
                f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker",
            ),
            "draft_extend_graph": ByGate(
                "draft_graph",
                _EAGLE_GRAPHS,
                f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker",
            ),
            "verify_buffers": _NO_BUFFERS,
        },
    ),
    f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleWorkerV2": Audited(
        f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker",
        {
            "draft_decode_graph": Absent("it drafts inside its draft-extend graphs"),
            "draft_extend_graph": ByGate(
                "multi_layer_graph",
                _EAGLE_GRAPHS,
                f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker",
            ),
            "verify_buffers": _NO_BUFFERS,
        },
    ),
    f"{_SPEC}.frozen_kv_mtp_worker_v2.FrozenKVMTPWorkerV2": Audited(
        f"{_SPEC}.frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker",
        {
            "draft_decode_graph": ByGate(
                "frozen_kv_graph",
                "any CUDA graph phase is on (the prefill default on CUDA)",
                f"{_SPEC}.frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker",
            ),
            "draft_extend_graph": Absent("it captures no draft-extend graph"),
            "verify_buffers": _NO_BUFFERS,
        },
        note="also NEXTN / EAGLE with a Gemma 4 assistant draft",
    ),
    f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2": Audited(
        None,
        {
            "draft_decode_graph": ByGate(
                "dflash_graph",
                _EAGLE_GRAPHS,
                f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2",
            ),
            "draft_extend_graph": Absent("it captures no draft-extend graph"),
            "verify_buffers": ByGate(
                "dflash_graph",
                f"{_EAGLE_GRAPHS} (the sampling head folded into the draft graph)",
                f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2",
            ),
        },
    ),
    f"{_SPEC}.dspark_components.dspark_worker_v2.DSparkWorkerV2": Audited(
        None,
        {
            "draft_decode_graph": NativeIf(
                _dspark_native, "CUDA graphs are on (not --disable-cuda-graph)"
            ),
            "draft_extend_graph": Absent("it captures no draft-extend graph"),
            "verify_buffers": NativeIf(
                _dspark_buffers_native,
                "CUDA graphs are on (its verify epilogue and sampling-accept graph)",
            ),
        },
    ),
    f"{_SPEC}.uno_worker_v2.UnoWorkerV2": Audited(
        None,
        {
            "draft_decode_graph": NativeIf(
                _uno_native,
                "the target's verify graph is captured",
                follows="verify_graph",
            ),
            "draft_extend_graph": Absent("it captures no draft-extend graph"),
            "verify_buffers": _NO_BUFFERS,
        },
    ),
    f"{_SPEC}.ngram_worker.NGRAMWorker": Audited(
        None,
        {
            "draft_decode_graph": Absent("no draft model"),
            "draft_extend_graph": Absent("no draft model"),
            "verify_buffers": _NO_BUFFERS,
        },
    ),
}


# --- the algorithms the installed SGLang accepts, and their worker classes --------


@dataclass(frozen=True)
class Route:
    """One worker class ``create_worker`` returns, for ``algorithms`` under
    ``flags`` (server arguments its dispatch reads besides the algorithm)."""

    worker: str | None  # dotted class path; None where it could not be found
    algorithms: tuple[str, ...]
    flags: tuple[str, ...] = ()
    error: str = ""


def _branches(function: ast.FunctionDef) -> list[tuple[set, set, list]]:
    """(``is_*`` predicates, flags, imported classes) of each ``if`` branch of a
    dispatch function, in order (an ``elif`` is a branch of its own)."""
    out = []

    def visit(statements):
        for node in statements:
            if not isinstance(node, ast.If):
                continue
            chain = node
            while True:
                predicates, flags = set(), set()
                for sub in ast.walk(chain.test):
                    if isinstance(sub, ast.Call) and isinstance(
                        sub.func, ast.Attribute
                    ):
                        if sub.func.attr.startswith("is_"):
                            predicates.add(sub.func.attr)
                    elif (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id != "self"
                    ):
                        flags.add(sub.attr)
                classes = [
                    f"{imp.module}.{alias.name}"
                    for sub in chain.body
                    for imp in ast.walk(sub)
                    if isinstance(imp, ast.ImportFrom) and imp.module
                    for alias in imp.names
                ]
                if predicates and classes:
                    out.append((predicates, flags, classes))
                if len(chain.orelse) == 1 and isinstance(chain.orelse[0], ast.If):
                    chain = chain.orelse[0]
                    continue
                visit(chain.orelse)
                break

    visit(function.body)
    return out


def _predicate(member: Any, name: str) -> bool:
    try:
        return bool(getattr(member, name)())
    except Exception:
        return False


def routes() -> list[Route]:
    """Every (algorithm, flags) -> worker class route of the installed SGLang's
    ``SpeculativeAlgorithm.create_worker``, one per worker class; plugin-registered
    algorithms last (their factory asked with stand-in server arguments)."""
    spec_info = importlib.import_module(SPEC_INFO)
    algorithm = spec_info.SpeculativeAlgorithm
    source = textwrap.dedent(inspect.getsource(algorithm.create_worker))
    branches = _branches(ast.parse(source).body[0])
    found: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for member in algorithm:
        if member.name == "NONE":
            continue
        for predicates, flags, classes in branches:
            if all(_predicate(member, name) for name in predicates):
                key = (classes[-1], tuple(sorted(flags)))
                found.setdefault(key, []).append(member.name)
                if not flags:
                    break
    out = [Route(w, tuple(a), flags) for (w, flags), a in found.items()]
    for name, spec in sorted(_registered().items()):
        out.append(_registered_route(name, spec))
    return out


def _registered() -> dict[str, Any]:
    try:
        registry = importlib.import_module(f"{_SPEC}.spec_registry")
    except ImportError:
        return {}
    return dict(getattr(registry, "_REGISTRY", {}) or {})


def _registered_route(name: str, spec: Any) -> Route:
    stand_in = types.SimpleNamespace(
        enable_multi_layer_eagle=False, disable_overlap_schedule=True
    )
    try:
        worker = spec.factory(stand_in)
        return Route(f"{worker.__module__}.{worker.__qualname__}", (name,))
    except Exception as exc:
        return Route(None, (name,), error=f"{type(exc).__name__}: {exc}")


def aliases() -> dict[str, tuple[str, ...]]:
    """Reserved spellings (``NEXTN``) -> the algorithms SGLang resolves them to
    (the names its alias resolution returns)."""
    try:
        registry = importlib.import_module(f"{_SPEC}.spec_registry")
        reserved = sorted(getattr(registry, "_RESERVED_ALIASES", ()))
    except ImportError:
        return {}
    hook = _module_tree("sglang.srt.arg_groups.speculative_hook")
    returned = set()
    for node in ast.walk(hook) if hook else ():
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == "_resolve_speculative_algorithm_alias"
        ):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return) and isinstance(
                    sub.value, ast.Constant
                ):
                    returned.add(sub.value.value)
    return {alias: tuple(sorted(returned)) for alias in reserved if returned}


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


def matrix() -> list[Row]:
    """One row per worker class the installed SGLang's algorithms map to."""
    gates = _gate_states()
    target = {key: _cell(h, gates, {}) for key, h in TARGET.items()}
    named = aliases()
    rows = []
    for route in routes():
        algorithms = route.algorithms + tuple(
            alias
            for alias, resolved in named.items()
            if set(resolved) & set(route.algorithms)
        )
        audited = AUDITED.get(route.worker or "")
        cells = dict(target)
        why_not = (
            "worker class not found: " + route.error
            if route.worker is None
            else "a worker class the plugin has not read"
        )
        if audited is not None:
            changed = _draft_of(route.worker, audited.draft)
            if changed:
                audited, why_not = None, changed
        for piece in PIECES:
            if piece.side != "draft":
                continue
            if audited is None:
                cells[piece.key] = Cell(State.NOT_AUDITED, why_not)
            else:
                cells[piece.key] = _cell(audited.pieces[piece.key], gates, cells)
        rows.append(
            Row(
                algorithms,
                route.flags,
                route.worker,
                audited.draft if audited else None,
                audited is not None,
                cells,
                audited.note if audited else "",
            )
        )
    return rows


def as_json(rows: list[Row]) -> dict:
    return {
        "pieces": [
            {"key": p.key, "title": p.title, "side": p.side} for p in PIECES
        ],
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
