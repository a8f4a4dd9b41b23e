"""Reading upstream's code without running it, for ``audit_claims``: the parsed
source of a module, class or method (found without importing it: a worker module
may need GPU kernels to import), the names a piece of code uses, whether a class
runs a hooked method, and the checks behind each claim that a piece is native,
still built or absent on the installed release.

    from sglang_pd_lean.audit_reading import runs_own
    runs_own("sglang.srt.speculative.standalone_worker_v2.StandaloneDraftWorker", target)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable

_SPEC = "sglang.srt.speculative"


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


def _built_unasked(methods: list[str], builder: str, built: str) -> tuple[bool, str]:
    """(True, ``built``) where one of upstream's ``methods`` (dotted) calls
    ``builder`` and none of those asks the disaggregation mode; else (False, why)."""
    callers = [method for method in methods if _calls(method, builder)]
    if not callers:
        return False, f"no {builder} here"
    if any(_calls(method, "disaggregation_mode") for method in callers):
        owner = callers[0].split(".")[-2]
        return False, f"{owner} asks the disaggregation mode: not read"
    return True, built


def _ngram_buffers() -> tuple[bool, str]:
    cls = f"{_SPEC}.ngram_worker.NGRAMWorker"
    return _built_unasked(
        [f"{cls}.alloc_memory_pool", f"{cls}.__init__"],
        "_init_preallocated_tensors",
        "NGRAMWorker._init_preallocated_tensors: the verify tree's tokens, positions "
        "and retrieve indexes (5 x int64, max running requests x draft tokens) and "
        "its mask (bool, x draft tokens again), read only by a verify step; and "
        "host memory for the n-gram trie (--speculative-ngram-capacity nodes, "
        "10,000,000 by default: about 2 GiB), drafted from only on a decode step",
    )


def _dflash_prewarm() -> tuple[bool, str]:
    return _built_unasked(
        [f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2.prewarm_sampling"],
        "_get_or_create_chain_verify_buffers",
        "DFlashWorkerV2.prewarm_sampling, from Scheduler.__init__ on every role: a "
        "verify-sampling rehearsal (batch x block x vocab fp32 logits, transient) "
        "and chain-verify buffers kept for the process's life",
    )


def _uno_tree_backend() -> tuple[bool, str]:
    return _built_unasked(
        [f"{_SPEC}.uno_worker_v2.UnoWorkerV2.init_attention_backends"],
        "_build_uno_draft_attn_backend",
        "UnoWorkerV2.init_attention_backends: a private tree-draft attention "
        "backend (its own workspace), used only by a decode step's tree draft",
    )


def _called_unasked(method: str, builder: str) -> bool | None:
    """Whether upstream's ``method`` calls ``builder`` outside every ``if`` that asks
    the disaggregation mode (None: it does not call it). Finer than
    ``_built_unasked``, for a method that asks the mode about something else. Like
    it, a reading: an early ``return`` on the mode, or a flag derived from it and
    tested later, is not followed; the start-up ledger of a real prefill server is
    the proof (test_e2e_audit_ledger.py, 0.5.17 and 0.5.23)."""
    node = _method_node(method)
    if node is None:
        return None

    def visit(sub: ast.AST, asked: bool) -> list[bool]:
        if isinstance(sub, ast.Call) and builder in _names(sub.func):
            return [asked]
        found = []
        for child in ast.iter_child_nodes(sub):
            guarded = isinstance(sub, ast.If | ast.IfExp) and child is not sub.test
            found += visit(
                child, asked or (guarded and "disaggregation_mode" in _names(sub.test))
            )
        return found

    calls = visit(node, False)
    return (not all(calls)) if calls else None


def _block_inputs(worker: str) -> Callable[[], tuple[bool, str]]:
    """DFlash's and DSpark's draft-block constants, built in ``worker.__init__``."""

    def check() -> tuple[bool, str]:
        name = worker.rpartition(".")[2]
        builders = "build_block_pos_offsets and make_draft_block_spec_info"
        built = _called_unasked(f"{worker}.__init__", "build_block_pos_offsets")
        if built is None:  # 0.5.14-0.5.15: inline, beside an empty DFlashVerifyInput
            builders = "torch.arange and DFlashVerifyInput"
            built = _called_unasked(f"{worker}.__init__", "DFlashVerifyInput")
        if built is None:
            return False, f"{name} builds no draft block offsets"
        if not built:
            return False, f"{name} builds them only where the mode asks: not read"
        proposer = f"{_SPEC}.dspark_components.dspark_draft.DraftBlockProposer"
        noise = "dspark" in worker and _calls(f"{proposer}.__init__", "DraftNoise")
        return True, (
            f"{name}.__init__: {builders}, the draft block's position offsets "
            "(int64, one per block token) and an empty verify spec info"
            + (", and its block proposer's noise offset (one int64)" if noise else "")
            + ", read only by a decode step's draft block"
        )

    return check


_LINEAR = "sglang.srt.layers.attention.linear"


def _verify_indices() -> tuple[bool, str]:
    return _built_unasked(
        [
            f"{_LINEAR}.gdn_backend.GDNAttnBackend.__init__",
            f"{_LINEAR}.kda_backend.KDAAttnBackend.__init__",
        ],
        "build_verify_intermediate_state_indices",
        "GDN and KDA backends: build_verify_intermediate_state_indices, an int32 "
        "row per mamba slot into the verify snapshots, read only by a verify step",
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
