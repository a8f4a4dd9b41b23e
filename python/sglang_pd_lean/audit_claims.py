"""The audited claims behind ``audit``: the pieces a PD prefill server could build
for a verify or decode step, and, per speculative worker class the plugin has read,
how each draft piece is handled (``AUDITED``), with the readers of SGLang's code that
check each claim on the installed release (``runs_own``, the native skips).

    from sglang_pd_lean.audit_claims import AUDITED, PIECES
    print([piece.key for piece in PIECES], sorted(AUDITED))

``audit`` discovers the algorithms and builds the matrix from these; this module
imports nothing from SGLang until a claim is checked.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

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
    Piece("verify_indices", "verify state indices", "target"),
    Piece("draft_decode_graph", "draft decode graph", "draft"),
    Piece("draft_extend_graph", "draft-extend graph", "draft"),
    Piece("verify_buffers", "own verify buffers", "draft"),
    Piece("adaptive_states", "adaptive states", "draft"),
    Piece("verify_prewarm", "verify sampling rehearsal", "draft"),
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


@dataclass(frozen=True)
class BuiltIf:
    """Built on every role, the plugin leaves it (no gate), where ``check`` (reading
    upstream's code) finds the code that builds it: ``check() -> (built, why)``;
    ``why`` says what is built, or why nothing is. Built ``when`` the flags say."""

    check: Callable[[], tuple[bool, str]]
    when: str


Handling = ByGate | NativeIf | Absent | BuiltIf

# The target's pieces: shared code, one gate each.
TARGET = {
    "pool": ByGate("pool", "a hybrid (linear-attention) model"),
    "verify_graph": ByGate("graph", "a decode graph backend is set"),
    "warmup": ByGate("warmup", "a warm-up forward runs (FlashInfer, DeepGEMM)"),
    "budget": ByGate("budget", "a hybrid (linear-attention) model"),
    "autotune": ByGate("autotune", "more than one draft token"),
    # set below, once the readers of upstream's code are defined
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


def _calls(method: str, name: str) -> bool:
    """Whether upstream's ``method`` (dotted) names ``name`` in its code."""
    return name in _names(_method_node(method))


def _ngram_buffers() -> tuple[bool, str]:
    cls = f"{_SPEC}.ngram_worker.NGRAMWorker"
    callers = [m for m in ("alloc_memory_pool", "__init__") if _defines(cls, m)]
    if not any(_calls(f"{cls}.{m}", "_init_preallocated_tensors") for m in callers):
        return False, "NGRAMWorker preallocates no verify tensors"
    if any(_calls(f"{cls}.{m}", "disaggregation_mode") for m in callers):
        return False, "NGRAMWorker asks the disaggregation mode: not read"
    return True, (
        "NGRAMWorker._init_preallocated_tensors: the verify tree's tokens, positions "
        "and retrieve indexes (5 x int64, max running requests x draft tokens) and "
        "its mask (bool, x draft tokens again), read only by a verify step; and "
        "host memory for the n-gram trie (--speculative-ngram-capacity nodes, "
        "10,000,000 by default: about 2 GiB), drafted from only on a decode step"
    )


def _dflash_prewarm() -> tuple[bool, str]:
    method = f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2.prewarm_sampling"
    if not _calls(method, "_get_or_create_chain_verify_buffers"):
        return False, "DFlashWorkerV2 rehearses no verify sampling"
    if _calls(method, "disaggregation_mode"):
        return False, "DFlashWorkerV2.prewarm_sampling asks the disaggregation mode"
    return True, (
        "DFlashWorkerV2.prewarm_sampling, from Scheduler.__init__ on every role: a "
        "verify-sampling rehearsal (batch x block x vocab fp32 logits, transient) "
        "and chain-verify buffers kept for the process's life"
    )


def _uno_tree_backend() -> tuple[bool, str]:
    method = f"{_SPEC}.uno_worker_v2.UnoWorkerV2.init_attention_backends"
    if not _calls(method, "_build_uno_draft_attn_backend"):
        return False, "UnoWorkerV2 builds no private draft attention backend"
    if _calls(method, "disaggregation_mode"):
        return False, "UnoWorkerV2 asks the disaggregation mode: not read"
    return True, (
        "UnoWorkerV2.init_attention_backends: a private tree-draft attention "
        "backend (its own workspace), used only by a decode step's tree draft"
    )


_LINEAR = "sglang.srt.layers.attention.linear"


def _verify_indices() -> tuple[bool, str]:
    backends = [
        f"{_LINEAR}.gdn_backend.GDNAttnBackend.__init__",
        f"{_LINEAR}.kda_backend.KDAAttnBackend.__init__",
    ]
    builders = [
        b for b in backends if _calls(b, "build_verify_intermediate_state_indices")
    ]
    if not builders:
        return False, "its linear-attention backends build no verify index table"
    if any(_calls(b, "disaggregation_mode") for b in builders):
        return False, "its linear-attention backends ask the disaggregation mode"
    names = " and ".join(b.split(".")[-2] for b in builders)
    return True, (
        f"{names}: build_verify_intermediate_state_indices, an int32 row per mamba "
        f"slot into the verify snapshots, read only by a verify step"
    )


TARGET["verify_indices"] = BuiltIf(
    _verify_indices, "a hybrid model with GDN or KDA layers"
)


def _topk1_chain(draft: str) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        name = draft.rpartition(".")[2]
        if not _calls(f"{draft}.__init__", "_rebuild_topk1_chain_buffers"):
            base = _bases(draft)
            inherited = base and _calls(
                f"{draft.rpartition('.')[0]}.{base[0]}.__init__",
                "_rebuild_topk1_chain_buffers",
            )
            if not inherited:
                return False, f"{name} builds no topk-1 chain buffers"
        return True, (
            f"{name}: _rebuild_topk1_chain_buffers, the draft chain's parent and "
            f"score indexes (int64, max running requests x steps), read only by "
            f"a draft decode step"
        )

    return check


@dataclass(frozen=True)
class Audited:
    """One speculative worker class the plugin has read, release 0.5.16 to 0.5.23."""

    draft: str | None  # the draft worker class it builds (None: none of its own)
    pieces: dict[str, Handling]
    note: str = ""


_EAGLE_DRAFT = f"{_SPEC}.eagle_worker_v2.EagleDraftWorker"
_EAGLE_GRAPHS = "a decode graph backend is set (--cuda-graph-backend-decode)"
_NO_BUFFERS = Absent("none of its own")
_TOPK1 = "--speculative-eagle-topk 1 (a chain)"
# SGLang takes --speculative-adaptive for EAGLE and EAGLE3 (NEXTN resolves to EAGLE)
# on EAGLEWorkerV2 only (``adaptive_unsupported_reason``).
_ADAPTIVE = ByGate("adaptive", "--speculative-adaptive is set (EAGLE, EAGLE3, NEXTN)")
_NOT_ADAPTIVE = Absent("SGLang takes --speculative-adaptive for EAGLE and EAGLE3 only")
# The sampling warm-up a worker runs at start-up, where it is not DFlash's own.
_TARGETS_PREWARM = Absent("the target's own sampling warm-up, which prefill uses")

AUDITED: dict[str, Audited] = {
    f"{_SPEC}.eagle_worker_v2.EAGLEWorkerV2": Audited(
        _EAGLE_DRAFT,
        {
            "draft_decode_graph": ByGate("draft_graph", _EAGLE_GRAPHS, _EAGLE_DRAFT),
            "draft_extend_graph": ByGate("draft_graph", _EAGLE_GRAPHS, _EAGLE_DRAFT),
            "verify_buffers": BuiltIf(_topk1_chain(_EAGLE_DRAFT), _TOPK1),
            "adaptive_states": _ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
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
            "verify_buffers": BuiltIf(
                _topk1_chain(f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker"),
                _TOPK1,
            ),
            "adaptive_states": _NOT_ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
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
            "verify_buffers": BuiltIf(
                _topk1_chain(
                    f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker"
                ),
                _TOPK1,
            ),
            "adaptive_states": Absent(
                "SGLang refuses --speculative-adaptive with multi-layer EAGLE"
            ),
            "verify_prewarm": _TARGETS_PREWARM,
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
            "adaptive_states": Absent("it asserts --speculative-adaptive is off"),
            "verify_prewarm": _TARGETS_PREWARM,
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
            "adaptive_states": _NOT_ADAPTIVE,
            "verify_prewarm": BuiltIf(
                _dflash_prewarm, "on CUDA, with its sampling verify kernels"
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
            "adaptive_states": _NOT_ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
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
            "verify_buffers": BuiltIf(
                _uno_tree_backend, "--speculative-eagle-topk > 1 (tree mode)"
            ),
            "adaptive_states": _NOT_ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
        },
    ),
    f"{_SPEC}.ngram_worker.NGRAMWorker": Audited(
        None,
        {
            "draft_decode_graph": Absent("no draft model"),
            "draft_extend_graph": Absent("no draft model"),
            "verify_buffers": BuiltIf(_ngram_buffers, "NGRAM runs (every role)"),
            "adaptive_states": _NOT_ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
        },
    ),
}


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
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Constant):
                    returned.add(sub.value.value)
    return {alias: tuple(sorted(returned)) for alias in reserved if returned}
