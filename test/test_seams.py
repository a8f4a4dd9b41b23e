"""The one list of SGLang seams (``seams.SEAMS``) against the installed release.

CI runs this on every supported release: a seam that a release renamed or dropped
fails here first, named, before anything that needs it misbehaves.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from helpers import sglang_minor

import sglang_pd_lean
from sglang_pd_lean import seams, survey
from sglang_pd_lean.gates import all_gates

PACKAGE = pathlib.Path(sglang_pd_lean.__file__).parent
# Names outside SGLang and torch's private modules, which no release changes here.
FOREIGN = ("sglang_pd_lean",)


def test_every_seam_this_release_should_have_resolves():
    assert [m.line for m in survey.missing()] == []


def test_a_bounded_seam_is_absent_outside_its_releases():
    """``since``/``until`` say where the code takes another road: they are exact."""
    minor = sglang_minor()
    wrong = [
        seam.label
        for seam in seams.SEAMS
        if (seam.since or seam.until)
        and not seam.expected_on(f"0.5.{minor}")
        and survey.resolve_first(seam.candidates)[0] is not None
    ]
    assert wrong == []


def _sglang_names_in(path: pathlib.Path) -> set[str]:
    """Dotted SGLang / torch-internal names a module of ours imports or spells out."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("sglang.srt.") and " " not in node.value:
                names.add(node.value)
    return {
        n
        for n in names
        if (n.startswith("sglang.srt") or n.startswith("torch._") or "._internal" in n)
    }


def test_every_sglang_name_the_package_touches_is_in_the_list():
    """An import or a dotted path of SGLang's in our code is a seam entry, or the
    module of one (``from sglang.srt import runtime_context``)."""
    listed = {c for seam in seams.SEAMS for c in seam.candidates}
    unlisted = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "seams.py":
            continue
        for name in _sglang_names_in(path):
            if name in listed or any(c.startswith(name + ".") for c in listed):
                continue
            unlisted.setdefault(name, path.relative_to(PACKAGE).as_posix())
    assert unlisted == {}


def test_each_gate_hooks_its_listed_candidates():
    for gate in all_gates():
        assert gate.targets == seams.HOOK_TARGETS.get(gate.name, ()), gate
        if gate.targets:
            assert gate.target in gate.targets, gate


def test_a_seam_names_the_part_that_needs_it():
    for seam in seams.SEAMS:
        assert isinstance(seam.part, seams.Part) and seam.why, seam


@pytest.mark.parametrize("version", ["0.5.16", "0.5.18", "0.5.23"])
def test_release_bounds_follow_the_version(version):
    bounded = seams.Seam(("x.y",), seams.Part.REPORT, "test", since=17, until=22)
    minor = int(version.rsplit(".", 1)[1])
    assert bounded.expected_on(version) == (17 <= minor <= 22)
    assert bounded.expected_on("0.6.1")  # not a 0.5.x release: asked for


def test_a_missing_seam_is_named_with_its_part_and_cause():
    gone = seams.Seam(
        ("sglang.srt.mem_cache.memory_pool.NoSuchPool",),
        seams.Part.REPORT,
        "a test seam",
    )
    found, error = survey.resolve_first(gone.candidates)
    assert found is None and "NoSuchPool" in error
    line = survey.Missing(gone, error).line
    assert "NoSuchPool" in line and "report" in line and "a test seam" in line


def test_the_first_candidate_that_resolves_wins():
    real = "sglang.srt.mem_cache.memory_pool.MambaPool"
    assert survey.resolve_first(("sglang.srt.mem_cache.memory_pool.Gone", real)) == (
        real,
        "",
    )


def _server_only_modules() -> list[str]:
    """Top-level modules of the packages ``scripts/ensure_venv.sh`` installs only
    with ``--server`` (``server_deps``, ``transfer_deps``), as installed here."""
    import importlib.metadata
    import re

    script = (PACKAGE.parent.parent / "scripts" / "ensure_venv.sh").read_text()
    dists = set()
    for array in ("server_deps", "transfer_deps"):
        found = re.search(rf"^{array}=\(([^)]*)\)", script, re.M)
        assert found, f"scripts/ensure_venv.sh has no {array}"
        dists |= {
            re.split(r"[<>=!~ ]", word, maxsplit=1)[0].lower().replace("_", "-")
            for word in found[1].split()
        }
    modules = importlib.metadata.packages_distributions()
    return sorted(
        module
        for module, owners in modules.items()
        if any(owner.lower().replace("_", "-") in dists for owner in owners)
    )


def test_every_seam_resolves_without_the_server_only_packages():
    """A release's venv without ``--server`` (``scripts/check_release.sh`` on a clean
    machine) resolves every seam: in a fresh interpreter the packages only
    ``--server`` installs read as absent (``None`` in ``sys.modules``: an import
    fails, ``find_spec`` answers None), and no seam is missing. (uvloop, once
    server-only, is imported by ``Engine`` and the detokenizer: three seams.)"""
    import json
    import subprocess
    import sys

    hidden = _server_only_modules()
    code = (
        "import json, sys\n"
        f"for name in {hidden!r}:\n"
        "    sys.modules[name] = None\n"
        "from sglang_pd_lean import survey\n"
        "print(json.dumps([m.line for m in survey.missing()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], hidden
