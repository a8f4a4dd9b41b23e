"""SGLang's platform probes answering for a named GPU, only inside ``on_gpu``.

    with on_gpu(gpu_facts("b200")):
        ...  # SGLang's is_cuda(), get_device_sm(), ... answer as on a B200

Every platform question SGLang asks while it resolves a launch (is it CUDA, NPU,
XPU, MUSA, MPS, its SM version, its memory, its name, the host CPU's AMX) is
answered from the GPU: on 0.5.19+ through SGLang's own ``override_platform`` for
every fact of its ``_PLATFORM_PROBES`` / ``_PLATFORM_VALUES`` table, and on every
release by swapping the probe functions wherever SGLang's modules hold them (0.5.23
still imports some directly, e.g. ``is_npu``), put back after. ``PROBE_PATTERN`` says
which functions of ``sglang.srt.utils.common`` are platform probes; a test fails
when the installed SGLang has one that ``probes`` does not answer.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.census.gpus import Gpu
from sglang_pd_lean.census.inputs import CensusError
from sglang_pd_lean.shims import platform_table

# The functions of ``sglang.srt.utils.common`` that ask what machine this is.
PROBE_PATTERN = re.compile(
    r"is_(cuda|cuda_alike|hip|npu|xpu|musa|mps|hpu|cpu|sail)"
    r"|is_sm\d+\w*|is_(blackwell|hopper|ampere)\w*|is_gfx\d+\w*"
    r"|is_mnnvl_fabric_device|is_flashinfer_available|is_habana_available"
    r"|is_host_cpu_\w+|cpu_has_\w+"
    r"|get_device|get_device_(sm|name|capability|core_count|memory_capacity)"
    r"|get_nvgpu_memory_capacity"
)


def probes(gpu: Gpu) -> dict[str, Any]:
    """What each of SGLang's platform probes (``sglang.srt.utils.common``) answers
    on ``gpu``: an NVIDIA GPU on a host whose CPU is Grace (arm64, on a multi-node
    NVLink fabric) for GB200 and x86 otherwise; no other accelerator; the CPU
    backend (and its AMX kernels) off."""
    major, minor = divmod(gpu.sm, 10)
    grace = "GB200" in gpu.name

    def answer(value):
        return lambda *args, **kwargs: value

    return {
        "is_cuda": answer(True),
        "is_cuda_alike": answer(True),
        "is_hip": answer(False),
        "is_npu": answer(False),
        "is_xpu": answer(False),
        "is_musa": answer(False),
        "is_mps": answer(False),
        "is_hpu": answer(False),
        "is_habana_available": answer(False),
        "is_cpu": answer(False),
        "is_sail": answer(False),
        "is_host_cpu_x86": answer(not grace),
        "is_host_cpu_arm64": answer(grace),
        "cpu_has_amx_support": answer(False),
        "is_gfx95_supported": answer(False),
        "is_gfx942_supported": answer(False),
        "is_gfx1250_supported": answer(False),
        "is_flashinfer_available": answer(True),
        "get_device": answer("cuda"),
        "get_device_memory_capacity": answer(gpu.memory_mib),
        "get_nvgpu_memory_capacity": answer(gpu.memory_mib),
        "get_device_sm": answer(gpu.sm),
        "get_device_capability": answer((major, minor)),
        "get_device_name": answer(gpu.name),
        "get_device_core_count": answer(gpu.cores),
        "is_mnnvl_fabric_device": answer(grace),
        "is_ampere_with_cuda_12_3": answer(major == 8),
        "is_sm80_supported": answer(major == 8),
        "is_sm90_supported": answer(major == 9),
        "is_hopper_with_cuda_12_3": answer(major == 9),
        "is_sm100_supported": answer(major == 10),
        "is_sm110_supported": answer(major == 11),
        "is_sm100_or_sm110_supported": answer(major in (10, 11)),
        "is_sm120_supported": answer(major == 12),
        "is_sm120": answer((major, minor) == (12, 0)),
        "is_sm121": answer((major, minor) == (12, 1)),
        "is_blackwell_supported": answer(major in (10, 11, 12)),
        "is_blackwell": answer(major in (10, 11, 12)),
    }


def platform_facts(fakes: dict[str, Any]) -> dict[str, Any] | None:
    """The facts of SGLang's own platform table (``shims.platform_table``: 0.5.19+)
    as the fakes answer them; None on a release without it. A fact whose probe we
    do not answer is an error here, not the host's answer: ``probes`` must cover
    the table."""
    table = platform_table()
    if table is None:
        return None
    unanswered = sorted(probe for probe in table.values() if probe not in fakes)
    if unanswered:
        raise CensusError(
            f"SGLang's platform table has probe(s) the report does not answer for "
            f"a named GPU: {', '.join(unanswered)}; `sglang-pd-lean doctor` says "
            f"more"
        )
    return {fact: fakes[probe]() for fact, probe in table.items()}


_holders: dict[frozenset, list[tuple[Any, str, str]]] = {}


def _probe_holders(common, names: tuple[str, ...]) -> list[tuple[Any, str, str]]:
    """(module, attribute, probe name) wherever a module of SGLang holds one of the
    probes; found again only when SGLang's modules (by name and object) or the
    probes asked changed since the last search."""
    modules = [
        (name, module)
        for name, module in list(sys.modules.items())
        if name.startswith("sglang") and module is not None
    ]
    key = frozenset([*((name, id(module)) for name, module in modules), *names])
    if key not in _holders:
        by_id = {id(getattr(common, n)): n for n in names if hasattr(common, n)}
        found = []
        for _, module in modules:
            for attr, value in list(vars(module).items()):
                if id(value) in by_id:
                    found.append((module, attr, by_id[id(value)]))
        _holders.clear()
        _holders[key] = found
    return _holders[key]


@contextlib.contextmanager
def on_gpu(gpu: Gpu) -> Iterator[None]:
    """SGLang's platform probes answer for ``gpu`` in the block: SGLang's own
    ``override_platform`` where the release has it, and the probe functions
    wherever a module of SGLang holds them (by identity), and torch's capability
    query too; for the local machine (SM 0) they answer as they do."""
    if gpu.sm == 0:
        yield
        return
    from sglang.srt import runtime_context

    fakes = probes(gpu)
    facts = platform_facts(fakes)
    override = (
        runtime_context.override_platform(**facts)
        if facts is not None
        else contextlib.nullcontext()
    )
    with override, _swapped(fakes):
        yield


@contextlib.contextmanager
def _swapped(fakes: dict[str, Any]) -> Iterator[None]:
    """The probe functions replaced by ``fakes`` wherever SGLang's modules hold them."""
    import torch
    from sglang.srt.utils import common

    originals = {n: getattr(common, n) for n in fakes if hasattr(common, n)}
    swapped = []
    for module, attr, name in _probe_holders(common, tuple(fakes)):
        value = getattr(module, attr)
        if value is originals[name]:
            swapped.append((module, attr, value))
            setattr(module, attr, fakes[name])
    capability = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = fakes["get_device_capability"]
    before = set(sys.modules)
    try:
        yield
    finally:
        torch.cuda.get_device_capability = capability
        for module, attr, value in swapped:
            setattr(module, attr, value)
        # A module imported in the block took the stand-ins: give it the probes.
        stand_ins = {id(f): n for n, f in fakes.items() if n in originals}
        for name in set(sys.modules) - before:
            module = sys.modules.get(name)
            for attr, value in list(vars(module).items()) if module else ():
                if id(value) in stand_ins:
                    setattr(module, attr, originals[stand_ins[id(value)]])
