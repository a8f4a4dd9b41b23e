"""Memory per rank: the weights a rank holds and what SGLang's sizing then receives.

    weights = weights_per_rank(folder, tp=4)  # Weights(bytes, source)
    available_gib(gpu_gib=140.4, mem_fraction_static=0.897, weights_bytes=...)

SGLang sizes the KV cache and the mamba state from
``A = F_after - F_pre * (1 - mem_fraction_static)`` (``kv_cache_configurator``):
``F_pre`` is the memory free before the weights load (the GPU's total less the CUDA
context and communicators, ``CUDA_CONTEXT_GIB`` here), ``F_after`` what is free once
target and draft weights are loaded. So ``A = (T - C) * mfs - W_target - W_draft``.
``--available-gib`` replaces the whole estimate with the exact figure.
"""

from __future__ import annotations

import dataclasses
import json
import os

from sglang_pd_lean.census.inputs import CensusError
from sglang_pd_lean.census.results import WeightsBuild
from sglang_pd_lean.census.weights import SOURCE
from sglang_pd_lean.units import GIB

# Per rank, before the weights load: CUDA context, cuBLAS workspace and the NCCL
# communicators; about 1 GiB on Hopper and Blackwell at TP 2-8.
CUDA_CONTEXT_GIB = 1.0
INDEX = "model.safetensors.index.json"


@dataclasses.dataclass(frozen=True)
class Weights:
    target_bytes: int  # per rank
    draft_bytes: int  # per rank
    source: str


def weights_per_rank(
    folder: str,
    *,
    tp: int,
    built: WeightsBuild | None = None,
    weights_gib: float | None = None,
) -> Weights | None:
    """Target and draft weights per rank, with where the figure comes from: the
    operator's ``--weights-gib``; else SGLang's own model classes built for rank 0
    of the launch (``built``: ``census.weights.Build.result()``); else the
    checkpoint's safetensors index over TP (the target only); None when none of
    them answers."""
    if weights_gib is not None:
        return Weights(int(weights_gib * GIB), 0, "--weights-gib (target and draft)")
    if built is not None and built.error is None:
        source = SOURCE.format(tp=built.tp, ep=built.ep) + f": {built.target_class}"
        if built.draft_class:
            source += f" + draft {built.draft_class}"
        return Weights(built.target_bytes, built.draft_bytes, source)
    index = os.path.join(folder, INDEX)
    if os.path.isfile(index):
        try:
            with open(index) as f:
                total = int(json.load(f)["metadata"]["total_size"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CensusError(f"cannot read {index}: {exc}") from None
        source = f"{INDEX} total_size / TP {tp}"
        if built is not None:
            source += f" (SGLang's model class did not build: {built.error})"
        return Weights(total // tp, 0, source)
    return None


def available_gib(
    *, gpu_gib: float, mem_fraction_static: float, weights: Weights
) -> float:
    """SGLang's ``total_rest_memory`` per rank: ``(T - C) * mfs - W``."""
    used = (weights.target_bytes + weights.draft_bytes) / GIB
    return (gpu_gib - CUDA_CONTEXT_GIB) * mem_fraction_static - used
