"""Every command in README.md and docs/ runs as written (docs/testing.md, "Commands in
the docs"). A fence names its kind in its info string; a ``bash`` fence with no mark
runs here, each command from the clone's root, and must exit 0. ``bash gpu``,
``bash server`` and ``bash slow`` fences are not run, and say why.

Each checked command runs once per ``scripts/test.sh``, in the session of the release
it runs on (two at a time, all at the first test that needs them):
``scripts/sglang-pd-lean`` in the session of the venv it would pick
(``SGLANG_VERSION``, else the wrapper's default), the installed ``sglang-pd-lean`` in
the wrapper's default release's session (the release the docs' figures are from);
any other command in every session."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KINDS = {"bash", "text", "schema", "python", "tree"}
MARKS = {"gpu", "server", "slow"}
WRAPPER = "scripts/sglang-pd-lean"
# The release scripts/sglang-pd-lean runs when SGLANG_VERSION is unset.
(WRAPPER_DEFAULT,) = re.findall(
    r"\$\{SGLANG_VERSION:-([0-9.]+)\}", (ROOT / WRAPPER).read_text()
)
# The installed command, as a reader in an environment with the package types it.
INSTALLED = (["sglang-pd-lean"], ["python", "-m", "sglang_pd_lean"])
ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclasses.dataclass(frozen=True)
class Fence:
    where: str  # page:line of the opening fence
    kind: str
    marks: tuple[str, ...]
    lines: tuple[tuple[int, str], ...]  # (line number, text)


def fences(text: str, page: str) -> list[Fence]:
    """The fenced blocks of a Markdown page, with their info strings."""
    found, opened, body = [], None, []
    for number, line in enumerate(text.splitlines(), 1):
        if opened is None:
            match = re.match(r"^(`{3,})(.*)$", line)
            if match:
                opened, body = (number, match.group(1), match.group(2).split()), []
        elif line.strip() == opened[1]:
            info = opened[2] or [""]
            found.append(
                Fence(f"{page}:{opened[0]}", info[0], tuple(info[1:]), tuple(body))
            )
            opened = None
        else:
            body.append((number, line))
    return found


def commands(fence: Fence) -> list[tuple[int, str]]:
    """Each command of a ``bash`` fence: a line with its ``\\`` continuations, not
    blank and not only a comment; with the line it starts on."""
    found, pending = [], None
    for number, line in fence.lines:
        if pending is None:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pending = (number, line)
        else:
            pending = (pending[0], pending[1] + "\n" + line)
        if not line.rstrip().endswith("\\"):
            found.append(pending)
            pending = None
    assert pending is None, f"{fence.where}: a command ends in a continuation"
    return found


def page_fences() -> list[Fence]:
    return [
        fence
        for page in PAGES
        for fence in fences(page.read_text(), page.relative_to(ROOT).as_posix())
    ]


def checked() -> dict[str, str]:
    """The commands the suite runs, each once, by where it first appears."""
    found = {}
    for fence in page_fences():
        if fence.kind == "bash" and not fence.marks:
            for number, command in commands(fence):
                if command not in found.values():
                    found[f"{fence.where.split(':')[0]}:{number}"] = command
    return found


def program(command: str) -> tuple[dict[str, str], list[str]]:
    """The variables ``command`` sets before its program, and its words from there."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    env = {}
    while words and ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def runs_on(command: str) -> str | None:
    """The SGLang release whose session runs ``command``; None: every session."""
    env, words = program(command)
    if words[:1] == [WRAPPER]:
        return env.get("SGLANG_VERSION", WRAPPER_DEFAULT)
    if any(words[: len(start)] == start for start in INSTALLED):
        return WRAPPER_DEFAULT
    return None


def wrapper_venv(release: str) -> pathlib.Path:
    """The venv ``scripts/sglang-pd-lean`` runs for ``release`` (ensure_venv.sh)."""
    venvs = os.environ.get("SGLANG_PD_LEAN_VENVS", "~/.cache/sglang-pd-lean")
    return pathlib.Path(venvs).expanduser() / f"sglang-{release}"


def not_here(command: str) -> str | None:
    """Why this session does not run ``command``, or None where it does. The wrapper
    runs only from its own venv's session: there it finds the venv ready and builds
    nothing."""
    release = runs_on(command)
    installed = importlib.metadata.version("sglang")
    if release is not None and release != installed:
        return f"runs in the SGLang {release} session (this one: {installed})"
    venv = wrapper_venv(release or WRAPPER_DEFAULT)
    if (
        program(command)[1][:1] == [WRAPPER]
        and pathlib.Path(sys.prefix).resolve() != venv.resolve()
    ):
        return f"{WRAPPER} runs {venv}; this session runs {sys.prefix}"
    return None


def run(command: str) -> subprocess.CompletedProcess:
    """``command`` from the clone's root, as a reader types it there: this session's
    venv first on PATH (its ``sglang-pd-lean``, ``python``), SGLANG_VERSION unset."""
    env = dict(os.environ)
    env.pop("SGLANG_VERSION", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_every_fence_names_its_kind():
    wrong = [
        f"{fence.where}: {' '.join((fence.kind, *fence.marks)) or 'no info string'}"
        for fence in page_fences()
        if fence.kind not in KINDS
        or (fence.kind == "bash" and not set(fence.marks) <= MARKS)
        or (fence.kind != "bash" and fence.marks)
        or len(fence.marks) > 1
    ]
    assert wrong == []


def test_a_fence_is_read_with_its_marks_and_continued_commands():
    text = (
        "```bash\n# a comment\na --x \\\n    --y\n\nb\n```\n"
        "```bash slow\nscripts/test.sh\n```\n"
        "````text\n```\n````\n"
    )
    plain, slow, output = fences(text, "page.md")
    assert (plain.kind, plain.marks, plain.where) == ("bash", (), "page.md:1")
    assert commands(plain) == [(3, "a --x \\\n    --y"), (6, "b")]
    assert (slow.kind, slow.marks, commands(slow)) == (
        "bash",
        ("slow",),
        [(9, "scripts/test.sh")],
    )
    assert (output.kind, output.lines) == ("text", ((12, "```"),))


def test_a_command_runs_on_the_release_it_names():
    assert runs_on(f"{WRAPPER} report --list-models") == WRAPPER_DEFAULT
    assert runs_on(f"SGLANG_VERSION=0.5.23 {WRAPPER} report") == "0.5.23"
    assert runs_on("sglang-pd-lean doctor  # a comment") == WRAPPER_DEFAULT
    assert runs_on("python -m sglang_pd_lean report \\\n  --tp 2") == WRAPPER_DEFAULT
    assert runs_on("ls docs") is None


def test_a_failing_command_would_be_found():
    assert run("false").returncode == 1
    assert run("command -v python").stdout.startswith(os.path.dirname(sys.executable))


def test_the_readme_test_command_is_what_ci_runs():
    """``.ci/run`` runs README's test command, word for word."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    (exec_line,) = [line for line in ci if line.startswith("exec ")]
    script = exec_line.split()[-1]
    readme = [
        c
        for f in page_fences()
        if f.where.startswith("README.md:")
        for _, c in commands(f)
    ]
    assert script in readme


@pytest.fixture(scope="module")
def ran() -> dict[str, subprocess.CompletedProcess]:
    """Every command this session runs, once, two at a time (each is mostly one
    process on one core; SGLANG_PD_LEAN_DOC_JOBS changes it)."""
    from concurrent.futures import ThreadPoolExecutor

    here = {where: c for where, c in checked().items() if not_here(c) is None}
    jobs = int(os.environ.get("SGLANG_PD_LEAN_DOC_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(zip(here, pool.map(run, here.values()), strict=True))


@pytest.mark.parametrize("where", list(checked()))
def test_the_command_runs_as_written(where, request):
    command = checked()[where]
    reason = not_here(command)
    if reason:
        pytest.skip(reason)
    done = request.getfixturevalue("ran")[where]
    assert done.returncode == 0, (
        f"{where}: exit {done.returncode}\n{command}\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
