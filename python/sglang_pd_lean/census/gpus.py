"""The GPUs a report can name: a catalogue of parts and their facts (memory, SM,
cores), or one given by its memory and SM, or this machine as SGLang probes it.

    gpu = gpu_facts("h200")  # Gpu("NVIDIA H200", 143771, 90, 132)
    gpu_facts(None, memory_gib=96.0, sm=103).memory_gib  # 96.0

``census.gpu_probes`` makes SGLang's platform probes answer for one of these while a
launch resolves (``census.launch.resolve``).
"""

from __future__ import annotations

import dataclasses

from sglang_pd_lean.census.inputs import CensusError


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str  # as torch.cuda.get_device_name reports it
    memory_mib: float  # total memory, as nvidia-smi's memory.total reports it
    sm: int  # compute capability, major * 10 + minor
    cores: int = 132  # streaming multiprocessors

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


# Total memory as nvidia-smi reports it on each part (MiB), and its SM version.
GPUS = {
    "a100-80gb": Gpu("NVIDIA A100-SXM4-80GB", 81920, 80, 108),
    "h100": Gpu("NVIDIA H100 80GB HBM3", 81559, 90, 132),
    "h20": Gpu("NVIDIA H20", 97871, 90, 78),
    "h200": Gpu("NVIDIA H200", 143771, 90, 132),
    "b200": Gpu("NVIDIA B200", 183359, 100, 148),
    "gb200": Gpu("NVIDIA GB200", 189471, 100, 152),
}
DEFAULT_GPU = "h200"
# No facts supplied: SGLang probes the machine the report runs on (a CPU-only host
# resolves as a CPU server would, a GPU host as its GPU); needs --available-gib.
LOCAL = "local"


def gpu_facts(
    name: str | None, memory_gib: float | None = None, sm: int | None = None
) -> Gpu:
    """The GPU the launch runs on: a name from ``GPUS``, or memory and SM given."""
    if memory_gib is not None or sm is not None:
        if name is not None:
            raise CensusError("give --gpu NAME, or --gpu-memory-gib and --gpu-sm")
        if memory_gib is None or sm is None:
            raise CensusError("--gpu-memory-gib and --gpu-sm go together")
        if not (0 < memory_gib < 1 << 20) or not (10 <= sm < 1000):
            raise CensusError(
                f"--gpu-memory-gib {memory_gib:g} --gpu-sm {sm}: not a GPU "
                f"(SM is major*10+minor, e.g. 90 for Hopper)"
            )
        return Gpu(f"GPU with {memory_gib:g} GiB, SM {sm}", memory_gib * 1024, sm)
    key = (name or DEFAULT_GPU).lower()
    if key == LOCAL:
        return Gpu("this machine, as SGLang probes it", 0, 0, 0)
    if key not in GPUS:
        raise CensusError(f"unknown --gpu {name!r}; known: {', '.join(GPUS)}, {LOCAL}")
    return GPUS[key]
