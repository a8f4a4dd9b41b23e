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


_meta_cache: dict[str, tuple[int, int]] = {}


def _meta_bytes(folder: str) -> tuple[int, int]:
    """(all parameter bytes, the largest decoder layer's bytes) of transformers'
    class for the config, built on the meta device (no memory, no download)."""
    if folder not in _meta_cache:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        config = AutoConfig.from_pretrained(folder)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # no notes about kernels a CPU lacks
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
        finally:
            hf_logging.set_verbosity(verbosity)
        total = sum(p.numel() * p.element_size() for p in model.parameters())
        layers = getattr(getattr(model, "model", model), "layers", [])
        largest = max(
            (
                sum(p.numel() * p.element_size() for p in layer.parameters())
                for layer in layers
            ),
            default=0,
        )
        _meta_cache[folder] = (total, largest)
    return _meta_cache[folder]


def weights_per_rank(
    folder: str,
    *,
    tp: int,
    draft_layers: int,
    weights_gib: float | None = None,
) -> Weights | None:
    """Target and draft weights per rank, with where the figure comes from: the
    operator's ``--weights-gib``, else the checkpoint's safetensors index, else
    transformers' model class on the meta device; None when none of them answers.
    Tensors are divided over the TP ranks as SGLang shards them (small replicated
    tensors such as norms are counted once). ``draft_layers``: MTP layers a
    NEXTN/EAGLE draft loads from the same checkpoint (estimated as the largest
    decoder layer each)."""
    if weights_gib is not None:
        return Weights(int(weights_gib * GIB), 0, "--weights-gib (target and draft)")
    index = os.path.join(folder, INDEX)
    if os.path.isfile(index):
        try:
            with open(index) as f:
                total = int(json.load(f)["metadata"]["total_size"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CensusError(f"cannot read {index}: {exc}") from None
        return Weights(total // tp, 0, f"{INDEX} total_size / TP {tp}")
    try:
        total, layer = _meta_bytes(folder)
    except Exception:
        return None
    draft = layer * draft_layers // tp
    source = f"transformers' model class on the meta device / TP {tp}"
    if draft:
        source += f"; draft: {draft_layers} decoder layer(s), estimated"
    return Weights(total // tp, draft, source)


def available_gib(
    *, gpu_gib: float, mem_fraction_static: float, weights: Weights
) -> float:
    """SGLang's ``total_rest_memory`` per rank: ``(T - C) * mfs - W``."""
    used = (weights.target_bytes + weights.draft_bytes) / GIB
    return (gpu_gib - CUDA_CONTEXT_GIB) * mem_fraction_static - used
