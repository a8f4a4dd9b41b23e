"""The speculative algorithms the installed SGLang accepts, and the worker class
each maps to, read from SGLang's own dispatch: ``SpeculativeAlgorithm.create_worker``'s
code (not a list of ours), the classes an out-of-tree platform supplies instead
(``get_platform_worker_cls``), and the algorithms a plugin registered.

    from sglang_pd_lean.audit_routes import routes
    for route in routes():
        print(route.algorithms, route.flags, route.worker)
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from sglang_pd_lean.audit_claims import _SPEC, SPEC_INFO


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
    out += _platform_routes(algorithm)
    for name, spec in sorted(_registered().items()):
        out.append(_registered_route(name, spec))
    return out


def _platform_routes(algorithm: Any) -> list[Route]:
    """The worker classes an out-of-tree platform supplies in place of SGLang's
    (``get_platform_worker_cls``, asked per algorithm; 0.5.20 and later), each a row
    of its own: a class the plugin has not read is "not audited"."""
    found: dict[str, list[str]] = {}
    for member in algorithm:
        ask = getattr(member, "get_platform_worker_cls", None)
        if member.name == "NONE" or ask is None:
            continue
        try:
            worker = ask()
        except Exception as exc:
            return [Route(None, (member.name,), error=f"{type(exc).__name__}: {exc}")]
        if worker is not None:
            path = f"{worker.__module__}.{worker.__qualname__}"
            found.setdefault(path, []).append(member.name)
    return [Route(path, tuple(names)) for path, names in found.items()]


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
