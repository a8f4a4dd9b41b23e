"""The installed SGLang's own code, found the way ``HookRegistry`` finds it.

    from sglang_pd_lean.upstream import names_of, resolve, source_of
    resolve("sglang.srt.mem_cache.memory_pool.MambaPool.get_contiguous_buf_infos")
    "disaggregation_mode" in names_of(target)  # the code uses it (not a comment)

``HookRegistry`` resolves a target's owner with ``pkgutil.resolve_name`` and the
attribute with ``getattr``, so an inherited method is hooked on the subclass:
``resolve`` does the same, but an error raised while importing an existing module
(a missing dependency) comes through as that ImportError, not as an AttributeError
on the parent package.

``names_of`` and ``constants_of`` read a function's compiled code (names it uses,
string constants it holds), never its source text: a plugin registering in every
SGLang process reads no source files (``source_of`` is for ``doctor`` and tests).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import textwrap
import types
from typing import Any


def _import_owner(path: str) -> Any:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            owner = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only "this module does not exist" moves on to a shorter prefix.
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise ImportError(f"importing {module_name} failed: {exc}") from exc
        except Exception as exc:
            raise ImportError(
                f"importing {module_name} failed: {type(exc).__name__}: {exc}"
            ) from exc
        for attr in parts[cut:]:
            owner = getattr(owner, attr)
        return owner
    raise ImportError(f"no module named {parts[0]!r}")


def resolve(target: str) -> Any:
    """The object ``HookRegistry`` would wrap for ``target`` (inherited methods
    included); ImportError naming the real cause, AttributeError where it is gone."""
    owner_path, attr = target.rsplit(".", 1)
    return getattr(_import_owner(owner_path), attr)


def loaded(target: str) -> bool:
    """Whether ``target`` resolves in the modules this process has already imported,
    importing nothing (a module SGLang never imported here is one this process does
    not use)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        obj = sys.modules.get(".".join(parts[:cut]))
        if obj is None:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, _ABSENT)
            if obj is _ABSENT:
                return False
        return True
    return False


_ABSENT = object()


def missing_targets(targets: list[str]) -> list[str]:
    """``target (why)`` for each target ``HookRegistry`` could not resolve."""
    missing = []
    for target in targets:
        try:
            resolve(target)
        except (ImportError, AttributeError, ValueError) as exc:
            missing.append(f"{target} ({type(exc).__name__}: {exc})")
    return missing


def source_of(target: str) -> str:
    """The source of ``target`` (unwrapped), or "" where it cannot be read."""
    try:
        return inspect.getsource(inspect.unwrap(resolve(target)))
    except (ImportError, AttributeError, ValueError, OSError, TypeError):
        return ""


def _codes(obj: Any) -> list[types.CodeType]:
    """The code objects of a function, or of every function a class defines."""
    obj = inspect.unwrap(obj)
    if isinstance(obj, type):
        found = []
        for attr in vars(obj).values():
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            elif isinstance(attr, property):
                found += [c for f in (attr.fget, attr.fset) if f for c in _codes(f)]
                continue
            if callable(attr) and not isinstance(attr, type):
                found += _codes(attr)
        return found
    code = getattr(obj, "__code__", None)
    return [code] if isinstance(code, types.CodeType) else []


@functools.cache
def code_names(code: types.CodeType) -> frozenset[str]:
    """The names ``code`` uses (attributes read, functions called, globals and
    locals), nested functions and comprehensions included; never a comment's or a
    string's words. Cached on the code object, which changes when the code does."""
    names = {*code.co_names, *code.co_varnames, *code.co_cellvars, *code.co_freevars}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_names(const)
    return frozenset(names)


@functools.cache
def code_strings(code: types.CodeType) -> frozenset[str]:
    """The string constants in ``code`` and its nested code (the literal parts of
    an f-string, and a constant tuple's strings: ``x in ("a", "b")``, included)."""
    strings = set()
    for const in code.co_consts:
        if isinstance(const, str):
            strings.add(const)
        elif isinstance(const, (tuple, frozenset)):
            strings.update(item for item in const if isinstance(item, str))
        elif isinstance(const, types.CodeType):
            strings |= code_strings(const)
    return frozenset(strings)


def _read_codes(target: str, read) -> frozenset[str]:
    """``read`` over the code of ``target`` (a function, or every method of a
    class), joined; empty where it cannot be resolved."""
    try:
        codes = _codes(resolve(target))
    except (ImportError, AttributeError, ValueError):
        return frozenset()
    return frozenset().union(*map(read, codes))


def names_of(target: str) -> frozenset[str]:
    """The names the code of ``target`` uses (``code_names``)."""
    return _read_codes(target, code_names)


def constants_of(target: str) -> frozenset[str]:
    """The string constants in the code of ``target`` (``code_strings``)."""
    return _read_codes(target, code_strings)


def module_names(module: str) -> frozenset[str] | None:
    """The names a module's code uses anywhere (``code_names`` of its compiled
    code, every function and class body included), read without running it: no
    import of the module. None where the installed SGLang has no such module."""
    parts = module.split(".")
    try:
        # Package by package, so that no package's __init__ runs either.
        spec = importlib.util.find_spec(parts[0])
        for depth in range(2, len(parts) + 1):
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(
                ".".join(parts[:depth]), list(spec.submodule_search_locations)
            )
        code = spec.loader.get_code(module) if spec and spec.loader else None
    except (ImportError, AttributeError, ValueError, SyntaxError):
        return None
    return code_names(code) if isinstance(code, types.CodeType) else None


def names_in_source(source: str) -> frozenset[str]:
    """``names_of`` for a function's source text (compiled, not run): doctor and
    the tests read a patched file this way. Empty where it does not compile."""
    try:
        code = compile(textwrap.dedent(source), "<source>", "exec")
    except (SyntaxError, ValueError):
        return frozenset()
    return code_names(code)
