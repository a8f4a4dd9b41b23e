"""Test-only start-up code for the e2e servers' processes (never part of the package).

``test/e2e/harness.py`` puts this folder first on a server's PYTHONPATH, so Python
imports this module when each SGLang process starts. It wraps a few upstream methods
right after their module is imported (before SGLang's HookRegistry applies the
plugin's hooks, which then wrap these wrappers):

- ``e2e_probe``: always; logs a figure upstream computes and never prints.
- ``e2e_standins``: only on a CPU (``SGLANG_PD_LEAN_E2E_STANDINS=1``, set by the
  harness for ``--device cpu``); each replaces one GPU-only start-up call.
- ``e2e_ledger``: only with ``SGLANG_PD_LEAN_E2E_LEDGER=<file>``; records every
  tensor ``Scheduler.__init__`` allocates, and which SGLang function asked.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

import e2e_probe

_PATCHES: dict[str, list] = {}
for _module, _patches in e2e_probe.PATCHES.items():
    _PATCHES.setdefault(_module, []).extend(_patches)
if os.environ.get("SGLANG_PD_LEAN_E2E_STANDINS") == "1":
    import e2e_standins

    for _module, _patches in e2e_standins.PATCHES.items():
        _PATCHES.setdefault(_module, []).extend(_patches)
    sys.meta_path.insert(0, e2e_standins.MissingModuleFinder())
if os.environ.get("SGLANG_PD_LEAN_E2E_LEDGER"):
    import e2e_ledger

    for _module, _patches in e2e_ledger.PATCHES.items():
        _PATCHES.setdefault(_module, []).extend(_patches)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then wraps the listed methods (or functions) of the
    new module."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        for cls_name, method, wrap in _PATCHES[module.__name__]:
            owner = module if cls_name is None else getattr(module, cls_name, None)
            if not hasattr(owner, method):  # an older release never makes the call
                continue
            setattr(owner, method, wrap(getattr(owner, method)))


class _PatchingFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _PatchingFinder())
