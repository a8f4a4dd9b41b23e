"""Each gate's native markers against the patched source, fast: the files
``patches/sglang-<release>-pd-prefill-lean.patch`` touches are copied from the
installed SGLang and patched in a temporary folder (no wheel, no install), and
``compat.native_reason`` reads each hooked function from there (compiled). A gate the patch
makes native must be detected native; the unpatched source only where the release
oracle says upstream has it. (``test_patches.py`` runs the whole patched release.)"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess

import pytest
from helpers import upstream_has

from sglang_pd_lean import compat
from sglang_pd_lean.gates import all_gates
from sglang_pd_lean.upstream import names_in_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Gates each patch makes upstream's own (as test_patches.py states them).
DRAFT_GATES = ("frozen_kv_graph", "multi_layer_graph", "dflash_graph")
PATCHED_GATES = {
    "0.5.17": (
        *("pool", "graph", "warmup", "budget", "draft_graph", "autotune"),
        *DRAFT_GATES,
    ),
    "0.5.23": ("draft_graph", "autotune", *DRAFT_GATES),
}


def release() -> str:
    import sglang

    return ".".join(sglang.__version__.split(".")[:3])


def module_file(module: str) -> str:
    return importlib.util.find_spec(module).origin


def function_source(path: str, qualname: str) -> str:
    """The source of ``qualname`` (``Class.method`` or ``function``) in ``path``."""
    text = open(path).read()
    scope: list = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next(
            n
            for n in scope
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part
        )
        scope = node.body
    return ast.get_source_segment(text, node)


def split_target(target: str) -> tuple[str, str]:
    """``target`` -> (module, qualified name inside it), as the import finds it."""
    parts = target.split(".")
    for cut in range(1, len(parts)):
        module = ".".join(parts[:cut])
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is None:
            return module, ".".join(parts[cut:])  # a module, not a package
    raise AssertionError(f"no module for {target}")


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory) -> str:
    """The installed files the patch touches, patched (paths as in the wheel)."""
    version = release()
    patch_file = os.path.join(
        ROOT, "patches", f"sglang-{version}-pd-prefill-lean.patch"
    )
    if not os.path.exists(patch_file) or shutil.which("patch") is None:
        pytest.skip(f"no patch for SGLang {version}, or no patch(1) here")
    dest = str(tmp_path_factory.mktemp("patched-files"))
    text = open(patch_file).read()
    for path in re.findall(r"^\+\+\+ b/python/(sglang/\S+)", text, flags=re.M):
        module = path[: -len(".py")].replace("/", ".")
        if importlib.util.find_spec(module) is not None:
            os.makedirs(os.path.join(dest, os.path.dirname(path)), exist_ok=True)
            shutil.copy(module_file(module), os.path.join(dest, path))
    done = subprocess.run(
        ["patch", "-p2", "--fuzz=0", "--forward", "--batch", "-s", "-i", patch_file],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dest


def native_in(tree: str | None, gate, monkeypatch) -> bool:
    """``compat.native_reason`` for ``gate`` reading its target from ``tree`` (the
    patched files) or, with None, from the installed SGLang's files."""
    module, qualname = split_target(gate.target)
    path = module_file(module)
    if tree is not None:
        patched = os.path.join(tree, *module.split(".")) + ".py"
        path = patched if os.path.exists(patched) else path
    source = function_source(path, qualname)
    monkeypatch.setattr(compat, "names_of", lambda target: names_in_source(source))
    return compat.native_reason(gate) is not None


HOOKED = [gate for gate in all_gates() if gate.target and gate.native_markers]


@pytest.mark.parametrize("gate", HOOKED, ids=lambda gate: gate.name)
def test_the_patch_makes_its_gates_native_by_their_markers(
    gate, patched_tree, monkeypatch
):
    expected = gate.name in PATCHED_GATES[release()] or upstream_has(gate.name)
    assert native_in(patched_tree, gate, monkeypatch) is expected


@pytest.mark.parametrize("gate", HOOKED, ids=lambda gate: gate.name)
def test_the_unpatched_release_is_native_only_where_the_oracle_says(gate, monkeypatch):
    assert native_in(None, gate, monkeypatch) is upstream_has(gate.name)
