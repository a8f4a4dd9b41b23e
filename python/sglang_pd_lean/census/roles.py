"""The census road, role by role: each role's pool built twice (upstream and with the
plugin), sized first where the operator gave the memory, plus the warmup buffers.

    result = run(Inputs(model="qwen3-next-80b-a3b", tp=4, available_gib=80))
    result["capacity"]["decode"]["plugin"]["kv_tokens"]
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

from sglang_pd_lean.accounting import component_bytes
from sglang_pd_lean.census.inputs import (
    MAX_SLOTS,
    ROLES,
    CensusError,
    Inputs,
    sglang_rejects,
)
from sglang_pd_lean.census.model import (
    cache_params_of,
    check_tp_heads,
    prepare,
    ssm_dtype,
    stage_layers,
)
from sglang_pd_lean.census.pools import (
    build_request_pool,
    column_behaviour,
    configurator,
    parallel,
    published,
    server_fields,
    summarize,
)
from sglang_pd_lean.census.sizing import change, size_budget
from sglang_pd_lean.census.warmup import warmup


@dataclasses.dataclass(frozen=True)
class RolePlan:
    """How one role's column pair is built: the ServerArgs fields to size with
    (the slot count as the operator set it), the counts to build with where there
    is no sizing or it does not fit, and the memory SGLang's sizing receives."""

    fields: dict
    slots: int
    requests: int
    available_gib: float | None = None
    page_size: int = 1
    spec_aux: Any = None


def census_role(mc, layers: tuple[int, int], plan: RolePlan) -> tuple:
    """One role, upstream and plugin: (pool summaries, sizing rows or None).
    With ``available_gib`` the pool is built with the slot and request counts
    SGLang's sizing settled on (what the server allocates), else with the plan's."""
    pools, sizing = {}, {}
    build = functools.partial(
        configurator,
        mc,
        is_draft_worker=False,
        layers=layers,
        page_size=plan.page_size,
        spec_aux=plan.spec_aux,
    )
    for column in ("upstream", "plugin"):
        slots, requests = plan.slots, plan.requests
        with column_behaviour(column):
            if plan.available_gib:
                with published(**plan.fields) as server_args:
                    conf = build(server_args)
                    with sglang_rejects("SGLang cannot size this model's pools"):
                        sized = size_budget(conf, plan.available_gib, server_args)
                sizing[column] = sized
                if sized["fits"]:
                    slots, requests = (
                        sized["mamba_slots"],
                        sized["max_running_requests"],
                    )
                if slots > MAX_SLOTS:
                    raise CensusError(
                        f"{plan.available_gib:g} GiB available sizes {slots:,} "
                        f"mamba slots, more than the census builds ({MAX_SLOTS:,}); "
                        f"give --max-mamba-cache-size"
                    )
            fields = dict(
                plan.fields, max_mamba_cache_size=slots, max_running_requests=requests
            )
            with published(**fields) as server_args:
                conf = build(server_args)
                with sglang_rejects("SGLang cannot build this model's request pool"):
                    pool = build_request_pool(conf, requests)
        pools[column] = summarize(component_bytes(pool))
        pools[column].update(mamba_slots=slots, request_slots=requests)
    if not plan.available_gib:
        return pools, None
    sizing["change"] = change(sizing["upstream"], sizing["plugin"])
    return pools, sizing


def require_state(roles: dict, linear_layers: int) -> None:
    """A census needs state to count: ssm state, or conv state alone (short-conv
    hybrids keep only a convolution window per layer)."""
    components = next(iter(roles.values()))["upstream"]["components"]
    if components["ssm state"] == 0 and components["conv state"] == 0:
        raise CensusError(
            f"SGLang gives this config's {linear_layers} linear-attention layers "
            f"0 bytes of ssm state and of conv state: nothing to count"
        )


def legacy_plan(inputs: Inputs, role: str) -> RolePlan:
    """The plan for ``--model``/``--config`` with the census's own flags."""
    return RolePlan(
        fields=server_fields(inputs, role, sizing=bool(inputs.available_gib)),
        slots=inputs.mamba_slots,
        requests=inputs.max_running_requests,
        available_gib=inputs.available_gib,
    )


def run(inputs: Inputs) -> dict:
    """The census: roles -> upstream/plugin -> components, verify-only and total bytes."""
    inputs.validate()
    with ssm_dtype(inputs.mamba_ssm_dtype):
        return _run(inputs)


def _run(inputs: Inputs) -> dict:
    import sglang

    mc, linear = prepare(inputs)
    check_tp_heads(linear, inputs.tp)
    with parallel(tp=inputs.tp):
        # 0.5.23 reads parallel config leaves from the published configuration too.
        with published(**server_fields(inputs, "null")):
            cache_params = cache_params_of(linear, mc, inputs.tp)
        linear_layers = list(cache_params.layers)
        if inputs.pp > mc.num_hidden_layers:
            raise CensusError(
                f"--pp {inputs.pp} is more than this model's "
                f"{mc.num_hidden_layers} layers"
            )
        layers = stage_layers(mc.num_hidden_layers, inputs.pp, linear_layers)
        roles, capacity_rows = {}, {}
        for role in ROLES:
            roles[role], capacity_rows[role] = census_role(
                mc, layers, legacy_plan(inputs, role)
            )
        warmup_rows = warmup(inputs, mc)
    require_state(roles, len(linear_layers))
    result = {
        "sglang_version": sglang.__version__,
        "model": inputs.model or os.path.abspath(inputs.config),
        "inputs": {
            "tp": inputs.tp,
            "pp": inputs.pp,
            "pp_stage_layers": list(layers),
            "max_running_requests": inputs.max_running_requests,
            "max_mamba_cache_size": inputs.mamba_slots,
            "speculative_num_draft_tokens": inputs.speculative_num_draft_tokens,
            "mamba_ssm_dtype": str(cache_params.dtype.temporal).replace("torch.", ""),
            "context_length": mc.context_len,
            "page_size": inputs.page_size,
            "mamba_radix_cache_strategy": inputs.mamba_radix_cache_strategy,
        },
        "roles": roles,
        "warmup": warmup_rows,
    }
    if inputs.available_gib:
        result["inputs"]["available_gib"] = inputs.available_gib
        result["inputs"]["mamba_sizing"] = (
            "explicit (--max-mamba-cache-size)"
            if inputs.max_mamba_cache_size
            else (
                "from running requests (radix cache off)"
                if inputs.disable_radix_cache
                else "automatic (ratio of the budget)"
            )
        )
        result["capacity"] = capacity_rows
    return result
