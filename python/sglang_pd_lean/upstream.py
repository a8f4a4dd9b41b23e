"""The installed SGLang's own code, found the way ``HookRegistry`` finds it.

    from sglang_pd_lean.upstream import resolve, source_of
    resolve("sglang.srt.mem_cache.memory_pool.MambaPool.get_contiguous_buf_infos")
    "disaggregation_mode" in source_of(target)

``HookRegistry`` resolves a target's owner with ``pkgutil.resolve_name`` and the
attribute with ``getattr``, so an inherited method is hooked on the subclass:
``resolve`` does the same, but an error raised while importing an existing module
(a missing dependency) comes through as that ImportError, not as an AttributeError
on the parent package.
"""

from __future__ import annotations

import importlib
import inspect
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
