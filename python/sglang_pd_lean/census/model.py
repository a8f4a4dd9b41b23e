"""The model as SGLang sees it: its linear-attention state config and cache
parameters, and the pipeline stage that sets the peak (``census.server.rank_model``
builds SGLang's ``ModelConfig`` from the resolved launch and asks these).

    linear = linear_of(mc, data)  # SGLang's own linear-state (mambaish) config
    pp_rank, layers = stage_layers(mc.num_hidden_layers, pp, list(cache_params.layers))

SGLang reads a model folder; the census writes the config.json it was given into a
temporary folder (one per distinct config, removed at exit).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from typing import Any

from sglang_pd_lean.census.inputs import CensusError, linear_hints, sglang_rejects

_model_folders: dict[str, str] = {}


def model_folder(data: dict) -> str:
    """A folder holding ``data`` as config.json, for SGLang's loaders (kept per process)."""
    key = json.dumps(data, sort_keys=True)
    if key not in _model_folders:
        folder = tempfile.mkdtemp(prefix="sglang-pd-lean-model-")
        atexit.register(shutil.rmtree, folder, True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write(key)
        _model_folders[key] = folder
    return _model_folders[key]


def linear_state_config(mc) -> Any:
    from sglang.srt.configs.hybrid_arch import mambaish_config

    return mambaish_config(mc)


def linear_of(mc, data: dict) -> Any:
    """SGLang's linear-state config of the model; None for a model without
    linear-attention layers (its census is the KV cache and the request slots); one
    CensusError line where the config describes such layers and SGLang gives the
    model none (not a hybrid for this SGLang)."""
    with sglang_rejects("SGLang cannot read this config's linear-attention layers"):
        linear = linear_state_config(mc)
    hints = linear_hints(data) if linear is None else []
    if hints:
        import sglang

        architecture = (mc.hf_config.architectures or [data["model_type"]])[0]
        raise CensusError(
            f"SGLang {sglang.__version__} gives {architecture} no mamba pool, "
            f"though its config describes linear-attention layers "
            f"({', '.join(hints[:4])}): this SGLang does not run it as a hybrid "
            f"model; nothing to count"
        )
    return linear


def cache_params_of(linear, mc, tp: int) -> Any:
    """SGLang's mamba cache parameters at ``tp`` (call with the configuration
    published); one CensusError line where SGLang returns none or no layers."""
    with sglang_rejects(f"SGLang cannot shape the mamba state at --tp {tp}"):
        params = linear.mamba2_cache_params
    if params is None:
        raise CensusError(
            f"SGLang returns no linear-attention cache parameters for this config "
            f"({type(linear).__name__}): nothing to count"
        )
    if not list(params.layers):
        raise CensusError(
            f"none of this config's {mc.num_hidden_layers} layers is a "
            f"linear-attention layer for SGLang: no mamba state to count"
        )
    return params


def check_tp_heads(linear, tp: int) -> None:
    """A TP that does not divide the linear-attention heads gets one clear line."""
    heads = {
        name: getattr(linear, name, None)
        for name in (
            "linear_num_value_heads",
            "linear_num_key_heads",
            "mamba_num_heads",
            "n_groups",
        )
    }
    kda = getattr(linear, "linear_attn_config", None)
    if isinstance(kda, dict):
        heads["linear_attn_config.num_heads"] = kda.get("num_heads")
    for name, count in heads.items():
        if isinstance(count, int) and count % tp:
            raise CensusError(f"--tp {tp} does not divide {name}={count} of this model")


def stage_layers(
    num_layers: int, pp: int, linear_layers: list[int]
) -> tuple[int, tuple[int, int]]:
    """(PP rank, [start, end)) of the pipeline stage holding the most
    linear-attention layers (it sets the peak); the first such stage on a tie."""
    from sglang.srt.distributed.utils import get_pp_indices

    stages = [get_pp_indices(num_layers, rank, pp) for rank in range(pp)]
    rank = max(
        range(pp),
        key=lambda r: sum(stages[r][0] <= i < stages[r][1] for i in linear_layers),
    )
    return rank, tuple(stages[rank])
