"""Test-only start-up allocation ledger: every tensor storage a scheduler's start-up
allocates, with the SGLang function that asked for it.

Enabled by ``SGLANG_PD_LEAN_E2E_LEDGER=<file>`` (``harness.Server`` turns ``1``
into a file beside the server's log); ``sitecustomize`` then wraps
``Scheduler.__init__`` (``sglang/srt/managers/scheduler.py``: the model runner, its
weights, the KV and mamba pools, the draft worker, on CPU and GPU alike) in a
``TorchDispatchMode`` that runs every op unchanged and, for each output whose
storage is new (not the storage of any input: views, in-place and ``out=`` ops
allocate nothing), writes one entry:

    {"bytes": storage nbytes, "dtype": "torch.float32", "device": "cpu",
     "shape": [...], "op": "aten.empty.memory_format",
     "function": "sglang.srt.mem_cache.memory_pool:MambaPool.__init__", "line": 527,
     "via": the innermost frame outside torch (the plugin, a stand-in) if not that,
     "stack": every SGLang or plugin frame (module:qualname), innermost first,
     "import": the module whose import allocated it (a module-level object), or null,
     "live": whether the storage still exists when Scheduler.__init__ returns}

``function`` is the innermost frame on the Python stack whose module is SGLang's
(``sglang.*``) or the plugin's (``sglang_pd_lean.*``), skipping torch's frames and
this module's. ``aten.lift_fresh`` (``torch.tensor(...)``, whose data is written
before the dispatcher sees it) counts its input as the new storage. Not counted:
meta tensors and fake tensors (``FakeTensorMode``: the plugin measuring a pool it
does not build allocates nothing); storages made outside the dispatcher
(``torch.from_numpy``) or on another thread (a dispatch mode is per thread).

The entries are written as JSON lines when ``Scheduler.__init__`` returns or
raises, after one line ``{"start": true, "modules": [...]}`` (the SGLang modules
already imported when it began) and before one line ``{"end": true, "entries": n,
"errors": e, "pid": p, "tp_rank": t, "pp_rank": p, "attn_dp_rank": d}`` (the
ranks SGLang's ``get_parallel()`` gives the scheduler), in one write to the file opened for appending, so each rank of
a multi-rank server adds its own block. A failure inside the ledger is counted in
``errors`` and never reaches the server.
"""

from __future__ import annotations

import functools
import json
import os
import sys

ENV = "SGLANG_PD_LEAN_E2E_LEDGER"
SCHEDULER = "sglang.srt.managers.scheduler"
_OWN_PREFIXES = ("sglang.", "sglang_pd_lean.", "sglang_pd_lean")
_SKIPPED_PREFIXES = ("torch", "functools", "contextlib", __name__)
_STACK_DEPTH = 40  # SGLang frames kept per entry (Scheduler.__init__ is ~10 deep)


def _storage_key(tensor) -> int:
    return tensor.untyped_storage()._cdata


def _plain(tensor) -> bool:
    """A real tensor: not a subclass (FakeTensor, ...), not on ``meta``."""
    import torch

    return type(tensor) in (torch.Tensor, torch.nn.Parameter) and (
        tensor.device.type != "meta"
    )


def _caller() -> tuple[str, int, str | None, str | None, list[str]]:
    """(module:qualname, line) of the innermost SGLang or plugin frame; the
    innermost frame outside torch and this module where that is another one; the
    module whose import is running, if the allocation is part of one (a
    module-level object: allocated once per process, whenever it is imported);
    every SGLang or plugin frame on the stack, innermost first (``stack``)."""
    frame = sys._getframe(2)
    found, via, importing, stack = None, None, None, []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(_OWN_PREFIXES) and len(stack) < _STACK_DEPTH:
            stack.append(f"{module}:{frame.f_code.co_qualname}")
        if (
            frame.f_code.co_name == "<module>"
            and importing is None
            and (module not in ("__main__", "__mp_main__"))
        ):
            importing = module
        if found is None and not module.startswith(_SKIPPED_PREFIXES):
            name = f"{module}:{frame.f_code.co_qualname}"
            if module.startswith(_OWN_PREFIXES):
                found = (name, frame.f_lineno)
            else:
                via = via or name
        frame = frame.f_back
    return (*(found or ("?", 0)), via, importing, stack)


def _new_storages(func, args, kwargs, out) -> list:
    """The output tensors whose storage no input holds, one per storage."""
    import torch
    from torch.utils._pytree import tree_leaves

    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if func is torch.ops.aten.lift_fresh.default:
        candidates, held = inputs, set()
    else:
        candidates = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        held = {_storage_key(t) for t in inputs if _plain(t)}
    found, seen = [], set(held)
    for tensor in candidates:
        if not _plain(tensor):
            continue
        key = _storage_key(tensor)
        if key not in seen:
            seen.add(key)
            found.append(tensor)
    return found


def _ranks() -> dict:
    """This process's ranks, as SGLang's runtime context publishes them."""
    try:
        from sglang.srt.runtime_context import get_parallel

        ps = get_parallel()
        return {f"{n}_rank": getattr(ps, f"{n}_rank") for n in ("tp", "pp", "attn_dp")}
    except Exception as exc:  # a label, never a failure
        return {"ranks_unknown": repr(exc)}


def _ledger_mode():
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ledger(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.entries: list[tuple[dict, object]] = []
            self.errors = 0
            # SGLang's modules imported before the start-up began.
            self.modules = sorted(m for m in sys.modules if m.startswith("sglang"))

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            try:
                self._record(func, args, kwargs or {}, out)
            except Exception:  # the ledger never changes what it measures
                self.errors += 1
            return out

        def _record(self, func, args, kwargs, out) -> None:
            for tensor in _new_storages(func, args, kwargs, out):
                storage = tensor.untyped_storage()
                function, line, via, importing, stack = _caller()
                entry = {
                    "bytes": storage.nbytes(),
                    "dtype": str(tensor.dtype),
                    "device": str(tensor.device),
                    "shape": list(tensor.shape),
                    "op": str(func),
                    "function": function,
                    "line": line,
                    "via": via,
                    "import": importing,
                    "stack": stack,
                }
                self.entries.append((entry, StorageWeakRef(storage)))

        def write(self, path: str) -> None:
            """One block of lines, in one ``write`` to a file opened for appending:
            the ranks of a multi-rank server share the file, block by block."""
            lines = [json.dumps({"start": True, "modules": self.modules})]
            for entry, ref in self.entries:
                entry["live"] = not ref.expired()
                lines.append(json.dumps(entry))
            end = {"end": True, "entries": len(self.entries), "errors": self.errors}
            end["pid"] = os.getpid()
            end.update(_ranks())
            lines.append(json.dumps(end))
            data = ("\n".join(lines) + "\n").encode()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    return Ledger()


def _recorded(original):
    @functools.wraps(original)
    def init(self, *args, **kwargs):
        path = os.environ.get(ENV)
        try:
            mode = _ledger_mode() if path else None
        except Exception as exc:
            print(f"[e2e-ledger] not recording: {exc!r}", file=sys.stderr, flush=True)
            mode = None
        if mode is None:
            return original(self, *args, **kwargs)
        try:
            with mode:
                return original(self, *args, **kwargs)
        finally:
            try:
                mode.write(path)
            except Exception as exc:
                print(f"[e2e-ledger] not written: {exc!r}", file=sys.stderr, flush=True)

    return init


PATCHES = {SCHEDULER: [("Scheduler", "__init__", _recorded)]}
