"""A model config without a launch, for the tests that build a pool or size a budget
for a role SGLang did not resolve (and ``benchmark/measuring_build.py``).

    inputs = Inputs(model="qwen3-next-80b-a3b", tp=2, max_running_requests=8)
    mc, linear = prepare(inputs)  # SGLang's ModelConfig and linear-state config
    fields = helpers.server_fields(inputs, "prefill")  # placeholder ServerArgs

The report never takes this road: it resolves launch flags through SGLang
(``census.columns``) and reads the model from the resolved configuration
(``census.columns.rank_model``). Here the config is read as the report reads it
(``census.inputs.read_config_dict``) and handed to SGLang's ``ModelConfig`` in a
folder of its own (``census.model.model_folder``), with no ``ServerArgs``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from sglang_pd_lean.census.inputs import read_config_dict, sglang_rejects
from sglang_pd_lean.census.model import linear_of, model_folder


@dataclasses.dataclass
class Inputs:
    """What a gate test asks about: the census flags' values, unresolved."""

    model: str | None = None  # a bundled model name
    config: str | None = None  # a config.json or a model folder
    tp: int = 1
    pp: int = 1
    max_running_requests: int = 256
    max_mamba_cache_size: int | None = None
    speculative_num_draft_tokens: int = 4
    mamba_ssm_dtype: str | None = None  # default: the model's
    context_length: int | None = None  # default: the model's
    disable_radix_cache: bool = False
    page_size: int = 1
    mamba_radix_cache_strategy: str | None = None  # default: ServerArgs' own


def model_config(data: dict, *, context_length: int | None) -> Any:
    """SGLang's own ModelConfig for the config ``data`` (its config classes and
    loader), offline unless the environment says otherwise."""
    from sglang.srt.configs.model_config import ModelConfig

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with sglang_rejects("SGLang cannot load this config"):
        return ModelConfig(model_folder(data), context_length=context_length)


def prepare(inputs: Inputs) -> tuple[Any, Any]:
    """(SGLang's ModelConfig, its linear-state config) of the inputs' model."""
    data = read_config_dict(model=inputs.model, config=inputs.config)
    mc = model_config(data, context_length=inputs.context_length)
    return mc, linear_of(mc, data)
