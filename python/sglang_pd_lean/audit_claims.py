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

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from sglang_pd_lean.audit_reading import (
    _block_inputs,
    _dflash_prewarm,
    _dspark_buffers_native,
    _dspark_native,
    _ngram_buffers,
    _topk1_chain,
    _uno_native,
    _uno_tree_backend,
    _verify_indices,
)

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
    Piece("block_inputs", "draft block inputs", "draft"),
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
    "verify_indices": BuiltIf(_verify_indices, "a hybrid model with GDN or KDA layers"),
}


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
_NO_BLOCK = Absent("it drafts no token block")

AUDITED: dict[str, Audited] = {
    f"{_SPEC}.eagle_worker_v2.EAGLEWorkerV2": Audited(
        _EAGLE_DRAFT,
        {
            "draft_decode_graph": ByGate("draft_graph", _EAGLE_GRAPHS, _EAGLE_DRAFT),
            "draft_extend_graph": ByGate("draft_graph", _EAGLE_GRAPHS, _EAGLE_DRAFT),
            "verify_buffers": BuiltIf(_topk1_chain(_EAGLE_DRAFT), _TOPK1),
            "adaptive_states": _ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
            "block_inputs": _NO_BLOCK,
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
            "block_inputs": _NO_BLOCK,
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
            "block_inputs": _NO_BLOCK,
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
            "block_inputs": _NO_BLOCK,
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
            "block_inputs": BuiltIf(
                _block_inputs(f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2"),
                "DFLASH runs (every role)",
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
            "block_inputs": BuiltIf(
                _block_inputs(
                    f"{_SPEC}.dspark_components.dspark_worker_v2.DSparkWorkerV2"
                ),
                "DSPARK runs (every role)",
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
            "verify_buffers": BuiltIf(
                _uno_tree_backend, "--speculative-eagle-topk > 1 (tree mode)"
            ),
            "adaptive_states": _NOT_ADAPTIVE,
            "verify_prewarm": _TARGETS_PREWARM,
            "block_inputs": _NO_BLOCK,
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
            "block_inputs": _NO_BLOCK,
        },
    ),
}
