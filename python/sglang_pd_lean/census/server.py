"""The census of the operator's own server: their launch flags, their GPU.

    result = run_launch(Launch(argv=["--model-path", folder, "--tp", "4"], gpu=gpu))
    result["resolved"]["decode"]["disable_radix_cache"]  # True: SGLang's PD hook

Each role is the same flags with ``--disaggregation-mode`` replaced, resolved by
SGLang (``launch``); its memory per rank comes from ``memory``; its pools and sizing
run on the resolved configuration, published as it is, with the page size and the
draft-model description SGLang's own model runner would use.
"""

from __future__ import annotations

import dataclasses
import os

from sglang_pd_lean.census.inputs import (
    DEFAULT_MODEL,
    ROLES,
    CensusError,
    Inputs,
    read_config_dict,
    sglang_rejects,
)
from sglang_pd_lean.census.launch import (
    Gpu,
    given_role,
    model_path,
    resolve,
    resolved_fields,
    role_argv,
    summary,
)
from sglang_pd_lean.census.memory import (
    CUDA_CONTEXT_GIB,
    INDEX,
    Weights,
    available_gib,
    weights_per_rank,
)
from sglang_pd_lean.census.model import (
    cache_params_of,
    check_tp_heads,
    linear_of,
    model_folder,
    ssm_dtype,
    stage_layers,
)
from sglang_pd_lean.census.pools import parallel, published
from sglang_pd_lean.census.roles import RolePlan, census_role, require_state
from sglang_pd_lean.census.warmup import warmup_rows
from sglang_pd_lean.census.weights import BUILD_ENV, Build, build_weights
from sglang_pd_lean.role import setting


@dataclasses.dataclass
class Launch:
    argv: list[str]  # launch_server flags, as the operator passes them
    gpu: Gpu
    model: str | None = None  # a bundled model, as --model-path
    config: str | None = None  # a config.json or model folder, as --model-path
    available_gib: float | None = None  # exact total_rest_memory, every role
    weights_gib: float | None = None  # target + draft weights per rank
    weights: Weights | None = None  # already known (a rerun of the same model)


def launch_argv(launch: Launch) -> tuple[list[str], str, str]:
    """(flags with a --model-path, the model folder, the model's name for the
    report). Plain Python: bad paths are found before SGLang's import."""
    path = model_path(launch.argv)
    if path is not None and (launch.model or launch.config):
        raise CensusError(
            "give the model once: --model/--config, or --model-path after --"
        )
    if path is None and not launch.config:
        name = launch.model or DEFAULT_MODEL
        data = read_config_dict(Inputs(model=name))
        folder = model_folder(data)
        return [*launch.argv, "--model-path", folder], folder, name
    given = launch.config or path
    data = read_config_dict(Inputs(config=given))
    if os.path.isdir(given):
        folder = given
    elif os.path.basename(given) == "config.json":
        folder = os.path.dirname(os.path.abspath(given))
    else:
        folder = model_folder(data)
    argv = launch.argv if path is not None else [*launch.argv, "--model-path", folder]
    return list(argv), folder, os.path.abspath(given)


def check(launch: Launch) -> None:
    """Everything plain Python can check, before SGLang's import."""
    if launch.gpu.sm == 0 and launch.available_gib is None:
        raise CensusError(
            "--gpu local supplies no GPU memory: give --available-gib (the "
            "total_rest_memory the server's sizing receives)"
        )
    launch_argv(launch)


def spec_aux(server_args, mc):
    """SGLang's own draft-model description for the target (draft layers counted
    in its KV sizing only where a draft model path is given)."""
    from sglang.srt.model_executor.model_runner_components import (
        spec_aux_hidden_state,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algorithm = SpeculativeAlgorithm.from_string(
        setting("get_spec", "speculative_algorithm", server_args)
    )
    with sglang_rejects("SGLang cannot read the draft model"):
        return spec_aux_hidden_state.resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=mc,
            spec_algorithm=algorithm,
            is_draft_worker=False,
        )


def _sizing_name(fields: dict) -> str:
    if fields.get("max_mamba_cache_size"):
        return "explicit (--max-mamba-cache-size)"
    if fields.get("disable_radix_cache"):
        return "from running requests (radix cache off)"
    return "automatic (ratio of the budget)"


def run_launch(launch: Launch, only: tuple[str, ...] = ROLES) -> dict:
    """The census per role for the launch: resolved values, memory, pools, sizing.
    ``only``: the roles wanted (a caller that needs one role's capacity, e.g.
    one sizing step of a search, saves the others' resolution and pools)."""
    argv, folder, name = launch_argv(launch)
    data = read_config_dict(Inputs(config=folder))
    role = given_role(argv)
    columns = tuple(r for r in ROLES if r in only)
    resolving = tuple(r for r in ROLES if r in columns or r == role)
    servers = {r: resolve(role_argv(argv, r), launch.gpu) for r in resolving}
    # SGLang's model classes build in a forked child; the sizing waits for them.
    build = None
    known = launch.weights is not None or launch.weights_gib is not None
    if launch.available_gib is None and not known and build_weights():
        build = Build(servers[role])
    try:
        return _census(launch, argv, folder, name, data, role, columns, servers, build)
    finally:
        if build is not None:
            build.cancel()


def _census(launch, argv, folder, name, data, role, columns, servers, build) -> dict:
    import sglang
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache import kv_cache_configurator

    fields = {r: resolved_fields(s) for r, s in servers.items()}
    base = fields[role]
    with published(**base) as server_args:
        with sglang_rejects("SGLang cannot load this config"):
            mc = ModelConfig.from_server_args(server_args)
    linear = linear_of(mc, data)
    tp, pp = base["tp_size"], base["pp_size"]
    check_tp_heads(linear, tp)
    ratio = getattr(
        kv_cache_configurator, "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO", 3
    )
    weights = launch.weights
    if launch.available_gib is None and weights is None:
        built = build.result() if build is not None else None
        weights = weights_per_rank(
            folder, tp=tp, built=built, weights_gib=launch.weights_gib
        )
        if weights is None:
            why = built["error"] if built else f"{BUILD_ENV} is off"
            raise CensusError(
                f"cannot tell the weights per rank of {name}: SGLang's model class "
                f"did not build ({why}) and there is no {folder}/{INDEX}; "
                f"give --weights-gib (per rank) or --available-gib"
            )
    with ssm_dtype(base.get("mamba_ssm_dtype")), parallel(tp=tp):
        with published(**base):
            cache_params = cache_params_of(linear, mc, tp)
        linear_layers = list(cache_params.layers)
        if pp > mc.num_hidden_layers:
            raise CensusError(
                f"--pp {pp} is more than this model's {mc.num_hidden_layers} layers"
            )
        layers = stage_layers(mc.num_hidden_layers, pp, linear_layers)
        roles, capacity, memory, warm = {}, {}, {}, {}
        for r in columns:
            f = fields[r]
            mfs = f["mem_fraction_static"]
            if launch.available_gib is not None:
                available = launch.available_gib
                memory[r] = {"available_gib": available, "source": "--available-gib"}
            else:
                available = available_gib(
                    gpu_gib=launch.gpu.memory_gib,
                    mem_fraction_static=mfs,
                    weights=weights,
                )
                memory[r] = {
                    "gpu_gib": launch.gpu.memory_gib,
                    "cuda_context_gib": CUDA_CONTEXT_GIB,
                    "mem_fraction_static": mfs,
                    "weights_bytes": weights.target_bytes,
                    "draft_weights_bytes": weights.draft_bytes,
                    "weights_source": weights.source,
                    "available_gib": available,
                    "source": "(T - C) * mem_fraction_static - weights",
                }
            requests = f["max_running_requests"] or 256
            with published(**f) as server_args:
                aux = spec_aux(server_args, mc)
            plan = RolePlan(
                fields=f,
                slots=f["max_mamba_cache_size"] or ratio * requests,
                requests=requests,
                available_gib=max(available, 1e-9),
                page_size=f["page_size"] or 1,
                spec_aux=aux,
            )
            roles[r], capacity[r] = census_role(mc, layers, plan)
            for column in ("upstream", "plugin"):
                sized = capacity[r][column]
                sized["mamba_sizing"] = _sizing_name(f)
                asked = f["max_running_requests"]
                sized["requests_capped"] = bool(
                    sized["fits"] and asked and sized["max_running_requests"] < asked
                )
            memory[r]["draft_layers_in_kv_sizing"] = aux.eagle_draft_num_layers or 0
            warm[r] = (
                f,
                roles[r]["plugin"]["request_slots"],
                f["speculative_num_draft_tokens"] or 1,
            )
        warmup = warmup_rows(mc, warm)
    require_state(roles, len(linear_layers))
    return {
        "sglang_version": sglang.__version__,
        "model": name,
        "launch": {
            "argv": argv,
            "role": role,
            "gpu": dataclasses.asdict(launch.gpu),
        },
        "inputs": {
            "tp": tp,
            "pp": pp,
            "pp_stage_layers": list(layers),
            "max_running_requests": base["max_running_requests"],
            "max_mamba_cache_size": base["max_mamba_cache_size"],
            "speculative_num_draft_tokens": base["speculative_num_draft_tokens"] or 0,
            "mamba_ssm_dtype": str(cache_params.dtype.temporal).replace("torch.", ""),
            "context_length": mc.context_len,
            "page_size": base["page_size"] or 1,
            "mamba_radix_cache_strategy": base.get("mamba_radix_cache_strategy"),
            "available_gib": memory.get(role, memory[columns[0]])["available_gib"],
            "mamba_sizing": _sizing_name(base),
        },
        "resolved": {r: summary(servers[r]) for r in columns},
        "memory": memory,
        "roles": roles,
        "warmup": warmup,
        "capacity": capacity,
    }
