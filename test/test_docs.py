"""The README and docs/ stay true to the tree they describe: the README's layout names
every module and docs page, and nothing that is not there; every docs page is linked
from the README; every relative link resolves; the README stays a short read whose
first screen answers release, cost and set-up; LICENSE, CHANGELOG and the ``sglang``
extra say what pyproject.toml and ``compat`` say."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "sglang_pd_lean"
README = ROOT / "README.md"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
# A name in the layout: a path (it has a dot, a slash or a dash) or an all-caps file.
NAME = re.compile(r"^(?=.*[./-]|[A-Z]+$)[\w.-]+(/[\w.-]+)*/?$")


def tree_block(text: str) -> str:
    """The README's one ``tree`` fence."""
    (block,) = re.findall(r"^```tree\n(.*?)^```", text, re.M | re.S)
    return block


def tree_paths(block: str) -> set[str]:
    """Every path the layout names, relative to the repository root. A line is its
    leading names, then any words; a name ending in ``/`` is a folder, and the names
    after it on its line and on the more indented lines below are inside it."""
    folders: list[tuple[int, str]] = []  # (indent, path with a trailing slash)
    named = set()
    for line in block.splitlines():
        words = line.split()
        names = []
        for word in words:
            if not NAME.match(word):
                break
            names.append(word)
        if not names:
            continue
        indent = len(line) - len(line.lstrip())
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        if names[0].endswith("/"):
            folder = parent + names[0]
            named.add(folder.rstrip("/"))
            folders.append((indent, folder))
            parent, names = folder, names[1:]
        named |= {parent + name.rstrip("/") for name in names}
    return named


def test_the_layout_is_read_as_a_tree():
    block = (
        "a.md b/\n"
        "pkg/      one.py two.py   words: not.named\n"
        "          three.py\n"
        "  sub/    four.py\n"
        "  five.py                 words\n"
        "top.py\n"
    )
    assert tree_paths(block) == {
        "a.md",
        "b",
        "pkg",
        "pkg/one.py",
        "pkg/two.py",
        "pkg/three.py",
        "pkg/sub",
        "pkg/sub/four.py",
        "pkg/five.py",
        "top.py",
    }


def test_the_readme_layout_names_every_module_and_docs_page():
    named = tree_paths(tree_block(README.read_text()))
    modules = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }
    pages = {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")}
    assert sorted(modules - named) == [], "modules missing from README's layout"
    assert sorted(pages - named) == [], "docs pages missing from README's layout"


def test_everything_the_readme_layout_names_exists():
    named = tree_paths(tree_block(README.read_text()))
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


def links(page: pathlib.Path) -> list[tuple[str, str]]:
    """Each relative Markdown link of ``page``: (file, anchor), the file resolved
    against the page's folder (the page itself where the link is only an anchor)."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        found.append((str(resolved), anchor))
    return found


def anchors(page: pathlib.Path) -> set[str]:
    """GitHub's anchor for each heading of ``page``."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    headings = re.findall(r"^#+ (.*)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_docs_page_is_linked_from_the_readme():
    linked = {file for file, _ in links(README)}
    pages = {str(path.resolve()) for path in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - linked) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for file, anchor in links(page):
        path = pathlib.Path(file)
        if not path.exists():
            broken.append(file)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{file}#{anchor}")
    assert broken == []


def test_the_readme_is_a_short_read():
    assert len(README.read_text().splitlines()) <= 150


def test_the_readme_first_screen_answers_release_cost_and_set_up():
    """Before the installation section: each release line with what the plugin
    frees there, the cost (start-up, and the flag that keeps freed bytes as KV), and
    the two set-up commands."""
    first = README.read_text().split("\n## Install", 1)[0]
    for release_line in ("0.5.15-0.5.17", "0.5.18-0.5.21", "0.5.22-0.5.23"):
        assert f"| {release_line} |" in first
    assert "docs/performance.md" in first and "--max-mamba-cache-size" in first
    assert "\nscripts/sglang-pd-lean report --model " in first
    assert "\nscripts/test.sh\n" in first


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def sglang_extra() -> str:
    (requirement,) = pyproject()["project"]["optional-dependencies"]["sglang"]
    return requirement


def test_the_sglang_extra_is_the_supported_range_not_a_pin():
    """``pip install ".[sglang]"`` keeps any supported SGLang that is installed (a
    0.5.23 environment stays 0.5.23) and never installs an unsupported one."""
    from packaging.requirements import Requirement

    from sglang_pd_lean import compat

    requirement = Requirement(sglang_extra())
    assert requirement.name == "sglang"
    assert all(requirement.specifier.contains(v) for v in compat.SUPPORTED)
    first, last = (
        int(v.rsplit(".", 1)[1]) for v in (compat.SUPPORTED[0], compat.SUPPORTED[-1])
    )
    outside = (f"0.5.{first - 1}", f"0.5.{last + 1}", "0.6.0")
    assert not any(requirement.specifier.contains(v) for v in outside)
    assert f"`{sglang_extra()}`" in README.read_text()


def test_the_license_is_the_apache_2_0_text_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert pyproject()["project"]["license"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_the_version_policy_and_this_version():
    import sglang_pd_lean

    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## Version policy" in text
    assert f"\n## {sglang_pd_lean.__version__} " in text
    assert pyproject()["project"]["version"] == sglang_pd_lean.__version__
    assert f"`{sglang_extra()}`" in text
