"""The package's shape: no import cycle among its modules, counting imports inside
functions; the runtime plugin (loaded in every SGLang process) never imports the
offline tool (``census``, ``cli``). Read from the source with ``ast``."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import sglang_pd_lean

PACKAGE = "sglang_pd_lean"
ROOT = pathlib.Path(sglang_pd_lean.__file__).resolve().parent
RUNTIME = (
    "plugin",
    "role",
    "compat",
    "record",
    "metrics",
    "hook",
    "upstream",
    "accounting",
    "units",
    "gates",
)
OFFLINE = ("census", "cli")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The package's modules ``name`` imports anywhere in its source (module level
    or inside functions); ``from X import y`` counts X.y where that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for imported in names:
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                found.add(imported)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    visiting, done = [], set()

    def visit(name: str) -> list[str] | None:
        if name in visiting:
            return visiting[visiting.index(name) :] + [name]
        if name in done:
            return None
        visiting.append(name)
        for target in sorted(graph[name]):
            cycle = visit(target)
            if cycle:
                return cycle
        visiting.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name)
        if cycle:
            return cycle
    return None


def test_the_import_graph_sees_function_level_imports():
    """The graph is read right: ``plugin`` imports ``compat`` only inside
    ``register()``, and that edge is there."""
    graph = import_graph()
    assert f"{PACKAGE}.compat" in graph[f"{PACKAGE}.plugin"]
    assert f"{PACKAGE}.gates.base" in graph[f"{PACKAGE}.gates"]


def test_no_import_cycle_counting_imports_inside_functions():
    assert find_cycle(import_graph()) is None


def test_a_cycle_would_be_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("runtime", RUNTIME)
def test_the_runtime_never_imports_the_offline_tool(runtime):
    graph = import_graph()
    offline = tuple(f"{PACKAGE}.{name}" for name in OFFLINE)
    prefix = f"{PACKAGE}.{runtime}"
    for name, targets in graph.items():
        if name == prefix or name.startswith(prefix + "."):
            reached = {t for t in targets if t.startswith(offline)}
            assert not reached, f"{name} imports {sorted(reached)}"


# Functions a reader can hold (issue 22): at most this many lines and parameters.
MAX_LINES, MAX_PARAMS = 60, 6


def oversized(tree: ast.AST) -> list[str]:
    """Each function of ``tree`` over MAX_LINES lines (decorators aside) or over
    MAX_PARAMS parameters (``self`` and ``cls`` aside; ``*args``, ``**kwargs``
    count)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params = [a.arg for a in named if a.arg not in ("self", "cls")]
        params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_LINES or len(params) > MAX_PARAMS:
            found.append(f"{node.name}: {lines} lines, {len(params)} parameters")
    return found


def test_no_function_is_over_60_lines_or_6_parameters():
    found = [
        f"{path.relative_to(ROOT)}: {what}"
        for path in sorted(ROOT.rglob("*.py"))
        for what in oversized(ast.parse(path.read_text()))
    ]
    assert found == []


def test_an_oversized_function_would_be_found():
    long = "def f():\n" + "    x = 1\n" * MAX_LINES
    wide = "def g(self, a, b, c, d, e, f, *rest):\n    pass\n"
    assert oversized(ast.parse(long)) == [f"f: {MAX_LINES + 1} lines, 0 parameters"]
    assert oversized(ast.parse(wide)) == ["g: 2 lines, 7 parameters"]
    assert oversized(ast.parse("def h(self, a, b, c, d, e, f):\n    pass\n")) == []


# Modules a reader can hold (issue 37): at most this many lines each.
MAX_MODULE_LINES = 400
# Over the limit until the work named is done; a module that shrinks leaves the list.
KNOWN_LONG: dict[str, str] = {}  # module -> why it is long for now


def module_lines() -> dict[str, int]:
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in sorted(ROOT.rglob("*.py"))
    }


def test_no_module_is_over_400_lines():
    found = module_lines()
    long = {p: n for p, n in found.items() if n > MAX_MODULE_LINES}
    assert {p: n for p, n in long.items() if p not in KNOWN_LONG} == {}
    # A known long module that is short now leaves the list.
    assert sorted(long) == sorted(p for p in KNOWN_LONG if p in found)


# Where a release's road is picked by what SGLang has: only in shims (and the seams
# list, which names them). A new release's difference goes there too.
RELEASE_PROBES = re.compile(
    r"hasattr\((runtime_context|dp_attention|module|algorithm), |"
    r"\"resolve_once\"|inspect\.signature\("
)


def release_probes(source: str) -> list[str]:
    return [m.group(0) for m in RELEASE_PROBES.finditer(source)]


def test_sglang_release_differences_are_asked_only_in_shims():
    found = {
        path.relative_to(ROOT).as_posix(): release_probes(path.read_text())
        for path in ROOT.rglob("*.py")
        if path.name not in ("shims.py", "seams.py")
    }
    assert {path: hits for path, hits in found.items() if hits} == {}
    assert release_probes((ROOT / "shims.py").read_text())


def test_a_release_probe_outside_shims_would_be_found():
    source = 'if hasattr(runtime_context, "get_spec"):\n    pass\n'
    assert release_probes(source) == ["hasattr(runtime_context, "]
