"""Test-only stand-ins for the GPU-only calls a CPU ``launch_server`` makes at start-up.

Applied by ``sitecustomize`` in the e2e servers' processes when they run with
``--device cpu``; never with ``--device cuda``, never in the package. On a machine
without a GPU, SGLang (with the CUDA build of torch it pins) still reaches a few calls
that need one. None of them does work the start-up depends on:

1. ``from vllm._custom_ops import rotary_embedding`` in ``RotaryEmbedding.__init__``
   (``sglang/srt/layers/rotary_embedding/base.py``): the fallback kernel picked when
   the platform is neither CUDA nor SGLang's CPU engine. Only imported while the
   layer is built; it would run in a forward pass, which these servers never reach.
   Stand-in: a ``vllm._custom_ops`` whose ``rotary_embedding`` raises if called.
2. ``copy_all_layer_kv_cache_func(...)`` at the end of
   ``MHATokenToKVPool._init_kv_copy_and_warmup``
   (``sglang/srt/mem_cache/memory_pool.py``): a Triton launch that warms the KV-copy
   kernel by copying slot 0 onto slot 0 (both location tensors are zeros): no byte
   changes. Stand-in: that one call does nothing during the method; the rest (the
   tiling config the pool keeps) runs as upstream wrote it.
3. ``torch.cuda.synchronize()`` in ``Qwen3NextForCausalLM.set_embed_and_head``
   (``sglang/srt/models/qwen3_next.py``) and ``DeepseekV2ForCausalLM.set_embed_and_head``
   (``sglang/srt/models/deepseek_v2.py``), the MTP draft taking the target's
   embedding and head: waits for GPU work, of which a CPU process has none.
   Stand-in: a no-op during that method.
4. ``device=torch.get_device_module().current_device()`` in
   ``Qwen3GatedDeltaNet.__init__`` (``sglang/srt/models/qwen3_next.py``, the gated
   RMSNorm of each GDN layer): torch's CUDA build names CUDA as the accelerator even
   with no GPU, and ``current_device()`` then fails. Stand-in: during that method,
   ``torch.get_device_module()`` answers ``torch.cpu``, as a CPU-only torch build
   does; the norm's tiny weight is created on the CPU like every other weight.
5. ``torch.zeros(..., device="cuda")`` in ``MambaPool.__init__`` (and in
   ``MambaPool._allocate_deduplicated_conv_window``, which it calls)
   (``sglang/srt/mem_cache/memory_pool.py``, 0.5.16/0.5.17 around line 706): the
   verify ssm snapshots and conv windows are allocated on ``"cuda"`` written in the
   source instead of the pool's ``device``. Stand-in: during that method, a
   ``torch.zeros`` asked for ``device="cuda"`` allocates the same shape and dtype on
   the CPU, where the pool's other tensors are; every other allocation (and any
   made under ``FakeTensorMode``, which allocates nothing) is untouched. The bytes are the same, so the server logs upstream's sizes; nothing
   at start-up reads the buffers (they serve ``TARGET_VERIFY``, which these servers
   never run). Each redirected allocation prints one ``[e2e-standin]`` line with its
   shape, so a test still sees that *upstream's code* allocated verify state on CUDA
   (``test_e2e_upstream.py``: a CPU prefill server without the plugin, which on
   0.5.17 dies there without this stand-in, logs the line and upstream's sizes; the
   same server with the plugin never reaches the allocation and logs no line).
6. ``from sgl_kernel.speculative import reconstruct_indices_from_tree_mask``, where
   an NGRAM server imports its worker (``sglang/srt/speculative/ngram_worker.py``
   line 6 on 0.5.17; ``sglang/kernels/ops/speculative/reconstruct_tree.py`` line 50
   on 0.5.23, the branch for a platform neither CUDA, ROCm nor XPU): sgl-kernel's
   compiled ops, which the CPU venvs do not install. The function builds the draft
   tree of a verify step, which these servers never run. Stand-in (only where
   ``sgl_kernel`` is not installed): an empty ``sgl_kernel`` package and a
   ``sgl_kernel.speculative`` whose ``reconstruct_indices_from_tree_mask`` raises if
   called; every other ``from sgl_kernel import ...`` still fails as without it.
7. ``torch.cuda.Stream()`` behind ``get_stream("alt")`` in
   ``KimiLinearModel.__init__`` (``sglang/srt/models/kimi_linear.py``): the side
   stream the model overlaps work on in a forward pass, which these servers never
   run; torch's CUDA build fails to create one without a driver. Stand-in: during
   that method, ``torch.cuda.Stream`` is ``torch.cpu.Stream`` (as the report's
   weights build does on a host without CUDA); a stream holds no memory.
8. ``NCCLLibrary(library_path)`` in ``PyNcclCommunicator.__init__``
   (``sglang/srt/distributed/device_communicators/pynccl.py``), which every process
   group of more than one rank builds (``GroupCoordinator.__init__``): SGLang
   catches a failure there as "missing NCCL library, e.g. in a non-GPU
   environment" and runs the group on its gloo CPU group alone. The venvs' CUDA
   torch build ships ``libnccl``, so the library loads, and the communicator then
   fails on the CPU device (``ValueError: Expected a cuda device, but got: cpu``).
   Stand-in: during that method, loading the library raises ``OSError``, as on a
   host with no NCCL; multi-rank CPU servers (TP 2, PP 2, attention DP) then start
   as SGLang's non-GPU branch intends.
9. The device check of ``_handle_dflash`` and ``_handle_dspark``
   (``sglang/srt/arg_groups/speculative_hook.py``), which refuses DFLASH and DSPARK
   on ``--device cpu`` while SGLang resolves its arguments: a check, not a kernel
   (with it lifted, both servers load their drafts and start on the CPU). Stand-in:
   while each handler runs, what it reads ``device`` from (``server_args`` up to
   0.5.17, SGLang's live view of the resolution, ``resolving_view``, where the
   module has one) answers ``"cuda"``; every other read and every write goes to
   the real object, and the launch's device stays ``cpu`` for every process and
   every figure the server logs or answers (0.5.23 refuses a resolution that
   writes ``device``, so the stand-in never writes it). The runs name their
   draft attention backend (``triton``), which the handler would otherwise pick
   for the device it saw. Each lifted check prints one ``[e2e-standin]`` line.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

MEMORY_POOL = "sglang.srt.mem_cache.memory_pool"


def _never_called(name: str):
    def stand_in(*args, **kwargs):
        raise RuntimeError(
            f"test/e2e stand-in for {name}: a CPU test server runs no forward pass"
        )

    return stand_in


# package -> {module it serves: {name: stand-in}}, served only where the package
# is not installed; a module listed with no names is served empty.
MISSING_MODULES = {
    "vllm": {
        "vllm": {},
        "vllm._custom_ops": {
            "rotary_embedding": _never_called("vllm._custom_ops.rotary_embedding"),
        },
    },
    "sgl_kernel": {
        "sgl_kernel": {},
        "sgl_kernel.speculative": {
            "reconstruct_indices_from_tree_mask": _never_called(
                "sgl_kernel.speculative.reconstruct_indices_from_tree_mask"
            ),
        },
    },
}


def _while_replaced(original, owner, name: str, stand_in):
    """``original`` (a method) with ``owner.name`` replaced by ``stand_in`` only while
    it runs; ``stand_in`` receives the replaced value. ``owner``: an object, or a
    callable returning it (for what is imported later)."""

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        target = owner() if callable(owner) else owner
        replaced = getattr(target, name)
        setattr(target, name, stand_in(replaced))
        try:
            return original(self, *args, **kwargs)
        finally:
            setattr(target, name, replaced)

    return method


class _NoLaunch:
    """A Triton kernel that launches nothing: ``kernel[grid](...)`` returns None."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def _no_kv_copy_warmup_launch(original):
    module = sys.modules.get(MEMORY_POOL)
    if module is not None and hasattr(module, "copy_all_layer_kv_cache_tiled"):
        # 0.5.15: the warm-up launches the tiled Triton kernel itself.
        return _while_replaced(
            original, module, "copy_all_layer_kv_cache_tiled", lambda k: _NoLaunch()
        )
    return _while_replaced(
        original,
        lambda: sys.modules[MEMORY_POOL],
        "copy_all_layer_kv_cache_func",
        lambda kernel: lambda *args, **kwargs: None,
    )


def _no_cuda_synchronize(original):
    import torch

    return _while_replaced(
        original, torch.cuda, "synchronize", lambda sync: lambda *a, **k: None
    )


def _cpu_device_module(original):
    import torch

    return _while_replaced(
        original,
        torch,
        "get_device_module",
        lambda get: lambda device=None: torch.cpu if device is None else get(device),
    )


def _cpu_streams(original):
    import torch

    return _while_replaced(
        original, torch.cuda, "Stream", lambda stream: torch.cpu.Stream
    )


STANDIN_PREFIX = "[e2e-standin]"


def _faking() -> bool:
    import torch

    key = torch._C._TorchDispatchModeKey.FAKE
    return torch._C._get_dispatch_mode(key) is not None


def _cuda_zeros_on_cpu(original):
    import torch

    def stand_in(zeros):
        def cpu_zeros(*args, device=None, **kwargs):
            # Under FakeTensorMode (the plugin measuring a pool it does not
            # build) nothing is allocated: upstream's call, unchanged.
            if device == "cuda" and not _faking():
                print(
                    f"{STANDIN_PREFIX} MambaPool: torch.zeros(device='cuda') "
                    f"allocated on cpu: size={kwargs.get('size', args)} "
                    f"dtype={kwargs.get('dtype')}",
                    file=sys.stderr,
                    flush=True,
                )
                device = "cpu"
            return zeros(*args, device=device, **kwargs)

        return cpu_zeros

    return _while_replaced(original, torch, "zeros", stand_in)


def _no_nccl_library(original):
    def stand_in(library):
        def no_library(*args, **kwargs):
            raise OSError("test/e2e stand-in: no NCCL library on a CPU test server")

        return no_library

    return _while_replaced(
        original, lambda: sys.modules[PYNCCL], "NCCLLibrary", stand_in
    )


class _SeenOnCuda:
    """An object as a handler reads it: ``device`` is ``"cuda"``; every other read
    and every write goes to the real object (so SGLang's own rules on what a
    resolution may write still apply)."""

    def __init__(self, real) -> None:
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        if name == "device":
            return "cuda"
        return getattr(self._real, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._real, name, value)


def _device_seen_as_cuda(original):
    @functools.wraps(original)
    def handler(server_args, *args, **kwargs):
        print(
            f"{STANDIN_PREFIX} {original.__name__}: device check lifted (it reads "
            f"device 'cuda'; the launch keeps {server_args.device!r})",
            file=sys.stderr,
            flush=True,
        )
        module = sys.modules[original.__module__]
        view = getattr(module, "resolving_view", None)
        if view is None:  # the handler reads server_args.device itself
            return original(_SeenOnCuda(server_args), *args, **kwargs)
        # It reads the device through SGLang's live view of the resolution.
        module.resolving_view = lambda server_args: _SeenOnCuda(view(server_args))
        try:
            return original(server_args, *args, **kwargs)
        finally:
            module.resolving_view = view

    return handler


PYNCCL = "sglang.srt.distributed.device_communicators.pynccl"
# module -> [(class or None for a module function, method, wrapper)], applied right
# after the module is imported.
PATCHES = {
    "sglang.srt.arg_groups.speculative_hook": [
        (None, "_handle_dflash", _device_seen_as_cuda),
        (None, "_handle_dspark", _device_seen_as_cuda),
    ],
    PYNCCL: [("PyNcclCommunicator", "__init__", _no_nccl_library)],
    MEMORY_POOL: [
        ("MHATokenToKVPool", "_init_kv_copy_and_warmup", _no_kv_copy_warmup_launch),
        ("MambaPool", "__init__", _cuda_zeros_on_cpu),
    ],
    "sglang.srt.models.deepseek_v2": [
        ("DeepseekV2ForCausalLM", "set_embed_and_head", _no_cuda_synchronize),
    ],
    "sglang.srt.models.kimi_linear": [
        ("KimiLinearModel", "__init__", _cpu_streams),
    ],
    "sglang.srt.models.qwen3_next": [
        ("Qwen3NextForCausalLM", "set_embed_and_head", _no_cuda_synchronize),
        ("Qwen3GatedDeltaNet", "__init__", _cpu_device_module),
    ],
}


class MissingModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the modules of ``MISSING_MODULES`` for each package not installed;
    every other import of such a package still fails as upstream expects."""

    def __init__(self) -> None:
        self._serve = {
            module: names
            for package, modules in MISSING_MODULES.items()
            if importlib.util.find_spec(package) is None
            for module, names in modules.items()
        }

    def find_spec(self, name, path=None, target=None):
        if name in self._serve:
            is_package = "." not in name
            return importlib.machinery.ModuleSpec(name, self, is_package=is_package)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        for attribute, stand_in in self._serve[module.__name__].items():
            setattr(module, attribute, stand_in)
