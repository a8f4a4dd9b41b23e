"""The model on one rank as SGLang sees it: its ``ModelConfig``, linear-attention
state config and cache parameters, the rank's parallel layout and the pipeline
stage that sets the peak, built once per report (``rank_model``).

    model = rank_model(fields, folder)  # a RankModel
    with model.layout():  # the rank's layout published for SGLang's code
        model.cache_params, model.layers

SGLang reads a model folder; the census writes the config.json it was given into a
temporary folder (one per distinct config, removed at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any

from sglang_pd_lean.census.inputs import (
    CensusError,
    linear_hints,
    read_config_dict,
    sglang_rejects,
)
from sglang_pd_lean.census.pools import published
from sglang_pd_lean.census.rank import Widths, parallel_layout, rank_widths
from sglang_pd_lean.shims import accepts

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
    """SGLang's ``mambaish_config`` of the model (0.5.14 to 0.5.15.post1: the
    target ModelRunner's property of the same name)."""
    try:
        from sglang.srt.configs.hybrid_arch import mambaish_config
    except ImportError:
        import sglang_pd_lean.census.older as older

        return older.target_linear_config(mc)
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


def check_pipeline_support(mc, pp: int) -> None:
    """SGLang's model runner stops a PP launch whose model class cannot pass
    activations between stages (``ModelRunner.support_pp``: its ``forward`` takes
    no ``pp_proxy_tensors``; Qwen3-Next's, for one): one CensusError line, no
    figures for a server that would not start."""
    if pp <= 1:
        return
    from sglang.srt.model_loader.utils import get_model_architecture

    with sglang_rejects("SGLang cannot pick this model's class"):
        model_class, _ = get_model_architecture(mc)
    if not accepts(model_class.forward, "pp_proxy_tensors"):
        raise CensusError(
            f"SGLang stops this launch at --pp-size {pp}: 'Pipeline Parallel is not "
            f"compatible with this model.' ({model_class.__name__}.forward takes no "
            f"pp_proxy_tensors)"
        )


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


@dataclasses.dataclass(frozen=True)
class RankModel:
    """What is known of the model on one rank, built once and read by every role:
    SGLang's ``ModelConfig``, its linear-state config and cache parameters (None
    for a model without linear-attention layers), the rank's parallel layout as
    SGLang derives it, and the pipeline stage reported (the one that sets the
    peak)."""

    config: Any  # SGLang's ModelConfig
    linear: Any  # SGLang's linear-state (mambaish) config, or None
    cache_params: Any  # its mamba2_cache_params at this layout, or None
    widths: Widths
    pp_rank: int  # the stage reported
    layers: tuple[int, int]  # [start, end) of that stage

    @property
    def tp(self) -> int:
        return self.widths.tp_size

    @property
    def pp(self) -> int:
        return self.widths.pp_size

    @property
    def ssm_dtype(self) -> str | None:
        if self.cache_params is None:
            return None
        return str(self.cache_params.dtype.temporal).replace("torch.", "")

    @property
    def linear_layers(self) -> list[int]:
        return [] if self.cache_params is None else list(self.cache_params.layers)

    def layout(self) -> contextlib.AbstractContextManager:
        """The rank's layout published, for SGLang's cache, sizing and pool code."""
        return parallel_layout(self.widths, self.pp_rank)


def rank_model(base: dict, folder: str) -> RankModel:
    """The model in ``folder`` on TP rank 0 of the resolved configuration ``base``
    (published, with its ssm dtype and the parallel layout SGLang derives for it,
    as SGLang's model runner sees them)."""
    from sglang.srt.configs.model_config import ModelConfig

    data = read_config_dict(config=folder)
    with published(**base) as server_args:
        with sglang_rejects("SGLang cannot load this config"):
            mc = ModelConfig.from_server_args(server_args)
        with sglang_rejects("SGLang cannot split this launch's ranks"):
            widths = rank_widths(server_args)
    linear = linear_of(mc, data)
    cache_params = None
    if linear is not None:
        check_tp_heads(linear, widths.attn_tp_size)
        with published(**base), parallel_layout(widths):
            cache_params = cache_params_of(linear, mc, widths.attn_tp_size)
    if widths.pp_size > mc.num_hidden_layers:
        raise CensusError(
            f"--pp {widths.pp_size} is more than this model's "
            f"{mc.num_hidden_layers} layers"
        )
    check_pipeline_support(mc, widths.pp_size)
    # The stage with the most linear-attention layers (without them: the most
    # layers) sets the peak.
    counted = list(cache_params.layers) if cache_params else range(mc.num_hidden_layers)
    pp_rank, layers = stage_layers(mc.num_hidden_layers, widths.pp_size, list(counted))
    return RankModel(mc, linear, cache_params, widths, pp_rank, layers)
