"""The census of the operator's own server: their launch flags, their GPU.

    result = run_launch(Launch(argv=["--model-path", folder, "--tp", "4"], gpu=gpu))
    result["resolved"]["decode"]["disable_radix_cache"]  # True: SGLang's PD hook
    result["capacity"]["prefill"].plugin.kv_tokens  # typed (census.results)

The one road of every report (``report``'s census flags are shorthand for launch
flags). Each role is the same flags with ``--disaggregation-mode`` replaced,
resolved by SGLang (``launch``); the model on one rank is built once
(``RankModel``); each role's memory per rank comes from ``memory``; its pools and
sizing run on the resolved configuration, published as it is, with the page size
and the draft-model description SGLang's own model runner would use. A launch with
``sized=False`` (no memory named) builds each pool at the flags' own counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.census.inputs import (
    DEFAULT_MODEL,
    ROLES,
    CensusError,
    read_config_dict,
    sglang_rejects,
)
from sglang_pd_lean.census.launch import (
    Gpu,
    Resolved,
    exported,
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
    stage_layers,
)
from sglang_pd_lean.census.pools import parallel, published
from sglang_pd_lean.census.results import Capacity, Sizing
from sglang_pd_lean.census.roles import (
    RolePlan,
    census_role,
    plugin_sizing,
    require_state,
)
from sglang_pd_lean.census.warmup import warmup_rows
from sglang_pd_lean.census.weights import BUILD_ENV, Build, build_weights
from sglang_pd_lean.shims import setting


@dataclasses.dataclass
class Launch:
    argv: list[str]  # launch_server flags, as the operator passes them
    gpu: Gpu
    model: str | None = None  # a bundled model, as --model-path
    config: str | None = None  # a config.json or model folder, as --model-path
    available_gib: float | None = None  # exact total_rest_memory, every role
    weights_gib: float | None = None  # target + draft weights per rank
    weights: Weights | None = None  # already known (a rerun of the same model)
    # False: no memory is named (census flags alone): the pools at the flags' own
    # counts, with no weights, sizing, capacity or advice.
    sized: bool = True


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
        data = read_config_dict(model=name)
        folder = model_folder(data)
        return [*launch.argv, "--model-path", folder], folder, name
    given = launch.config or path
    data = read_config_dict(config=given)
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


@dataclasses.dataclass(frozen=True)
class RankModel:
    """What is known of the model on one rank, built once and read by every role:
    SGLang's ``ModelConfig``, its linear-state config and cache parameters, and the
    pipeline stage that sets the peak."""

    config: Any  # SGLang's ModelConfig
    linear: Any  # SGLang's linear-state (mambaish) config
    cache_params: Any  # its mamba2_cache_params at this TP
    layers: tuple[int, int]  # [start, end) of the stage counted
    tp: int
    pp: int

    @property
    def ssm_dtype(self) -> str:
        return str(self.cache_params.dtype.temporal).replace("torch.", "")


def rank_model(base: dict, folder: str) -> RankModel:
    """The model in ``folder`` on rank 0 of the resolved configuration ``base``
    (published, with its ssm dtype and TP layout, as SGLang's model runner sees
    them)."""
    from sglang.srt.configs.model_config import ModelConfig

    data = read_config_dict(config=folder)
    with published(**base) as server_args:
        with sglang_rejects("SGLang cannot load this config"):
            mc = ModelConfig.from_server_args(server_args)
    linear = linear_of(mc, data)
    tp, pp = base["tp_size"], base["pp_size"]
    check_tp_heads(linear, tp)
    with published(**base):
        cache_params = cache_params_of(linear, mc, tp)
    if pp > mc.num_hidden_layers:
        raise CensusError(
            f"--pp {pp} is more than this model's {mc.num_hidden_layers} layers"
        )
    layers = stage_layers(mc.num_hidden_layers, pp, list(cache_params.layers))
    return RankModel(mc, linear, cache_params, layers, tp, pp)


def run_launch(
    launch: Launch, only: tuple[str, ...] = ROLES, build: Build | None = None
) -> dict:
    """The census per role for the launch: resolved values, memory, pools, sizing.
    ``only``: the roles wanted (a caller that needs one role's capacity, e.g.
    one sizing step of a search, saves the others' resolution and pools).
    ``build``: the launch's weights build, already started (``weights_build``);
    where the sizing needs one and none is given, it starts here, from the
    resolution of the role the flags name."""
    argv, folder, name = launch_argv(launch)
    role = given_role(argv)
    columns = tuple(r for r in ROLES if r in only)
    resolving = tuple(r for r in ROLES if r in columns or r == role)
    resolved = {r: resolve(role_argv(argv, r), launch.gpu) for r in resolving}
    servers = {r: done.server_args for r, done in resolved.items()}
    started = (
        contextlib.nullcontext(build)
        if build is not None
        else weights_build(launch, resolved[role])
    )
    # The environment SGLang's resolution set, as a server process keeps it.
    with started as build, exported(resolved[role].environ):
        road = _Road(launch, argv, folder, name, role, columns)
        return _census(road, servers, build)


@contextlib.contextmanager
def weights_build(
    launch: Launch, done: Resolved | None = None
) -> Iterator[Build | None]:
    """SGLang's model classes for the launch built in a forked child
    (``census.weights``), where the sizing needs the weights and nothing else gives
    them; None otherwise. ``done``: the role the flags name, already resolved (else
    it is resolved here). The child starts as soon as that role is resolved, so
    that the build runs beside the rest (the report starts it before it loads the
    plugins: no gate hooks the resolution or the model classes), and is stopped at
    the block's end if its answer was never read."""
    if not _builds(launch):
        yield None
        return
    if done is None:
        argv, _, _ = launch_argv(launch)
        done = resolve(role_argv(argv, given_role(argv)), launch.gpu)
    with exported(done.environ):
        build = Build(done.server_args)
    try:
        yield build
    finally:
        build.cancel()


def _builds(launch: Launch) -> bool:
    """The sizing needs the weights, only a build can give them, and it is on."""
    return _needs_weights(launch) and launch.weights_gib is None and build_weights()


def _needs_weights(launch: Launch) -> bool:
    """The sizing needs the weights per rank, and they are not known yet."""
    return launch.sized and launch.available_gib is None and launch.weights is None


@dataclasses.dataclass(frozen=True)
class _Road:
    """One census's launch: the flags as resolved, and the roles wanted."""

    launch: Launch
    argv: list[str]
    folder: str
    name: str
    role: str  # the role the flags name
    columns: tuple[str, ...]  # the roles reported


def _weights(road: _Road, tp: int, build) -> Weights | None:
    """Target and draft weights per rank, where the sizing needs them."""
    launch = road.launch
    if not _needs_weights(launch):
        return launch.weights
    built = build.result() if build is not None else None
    weights = weights_per_rank(
        road.folder, tp=tp, built=built, weights_gib=launch.weights_gib
    )
    if weights is None:
        why = built.error if built else f"{BUILD_ENV} is off"
        raise CensusError(
            f"cannot tell the weights per rank of {road.name}: SGLang's model class "
            f"did not build ({why}) and there is no {road.folder}/{INDEX}; "
            f"give --weights-gib (per rank) or --available-gib"
        )
    return weights


def memory_of(launch: Launch, fields: dict, weights: Weights | None) -> dict | None:
    """The memory one role's sizing receives, and where it comes from; None for a
    census that does not size (the pools at the flags' own counts)."""
    if not launch.sized:
        return None
    if launch.available_gib is not None:
        return {"available_gib": launch.available_gib, "source": "--available-gib"}
    mfs = fields["mem_fraction_static"]
    return {
        "gpu_gib": launch.gpu.memory_gib,
        "cuda_context_gib": CUDA_CONTEXT_GIB,
        "mem_fraction_static": mfs,
        "weights_bytes": weights.target_bytes,
        "draft_weights_bytes": weights.draft_bytes,
        "weights_source": weights.source,
        "available_gib": available_gib(
            gpu_gib=launch.gpu.memory_gib, mem_fraction_static=mfs, weights=weights
        ),
        "source": "(T - C) * mem_fraction_static - weights",
    }


def _role_census(model: RankModel, fields: dict, memory: dict | None) -> tuple:
    """One role's (pools, sizing or None), with SGLang's draft-model description."""
    plan = _plan(model, fields, memory)
    pools, sizing = census_role(model.config, model.layers, plan)
    if sizing is not None:
        sizing = dataclasses.replace(
            sizing,
            upstream=_named(sizing.upstream, fields),
            plugin=_named(sizing.plugin, fields),
        )
    if memory is not None:
        memory["draft_layers_in_kv_sizing"] = plan.spec_aux.eagle_draft_num_layers or 0
    return pools, sizing


def _plan(model: RankModel, fields: dict, memory: dict | None) -> RolePlan:
    """How one role's columns are built and sized, for its resolved ``fields``."""
    with published(**fields) as server_args:
        aux = spec_aux(server_args, model.config)
    return RolePlan(
        fields=fields,
        slots=fields["max_mamba_cache_size"],
        requests=fields["max_running_requests"] or 256,
        available_gib=max(memory["available_gib"], 1e-9) if memory else None,
        page_size=fields["page_size"] or 1,
        spec_aux=aux,
    )


def prefill_capacity(launch: Launch) -> Capacity:
    """What SGLang's sizing gives the prefill server of ``launch`` with the plugin,
    and the memory it received: the same road as ``run_launch`` (resolution, the
    model on one rank, memory, sizing), stopped where an advice step has its answer
    (no pools, no upstream column, no warm-up rows). ``launch`` names the memory or
    carries its weights."""
    argv, folder, _ = launch_argv(launch)
    done = resolve(role_argv(argv, "prefill"), launch.gpu)
    fields = resolved_fields(done.server_args)
    with exported(done.environ), parallel(tp=fields["tp_size"]):
        model = rank_model(fields, folder)
        memory = memory_of(launch, fields, launch.weights)
        sized = plugin_sizing(model.config, model.layers, _plan(model, fields, memory))
    return Capacity.of(sized, memory["available_gib"])


def _named(sized: Sizing, fields: dict) -> Sizing:
    """``sized`` with how its mamba slots were set, and whether SGLang gives fewer
    running requests than the flags ask."""
    asked = fields["max_running_requests"]
    return dataclasses.replace(
        sized,
        mamba_sizing=_sizing_name(fields),
        requests_capped=bool(
            sized.fits and asked and sized.max_running_requests < asked
        ),
    )


def _census(road: _Road, servers: dict, build) -> dict:
    fields = {r: resolved_fields(s) for r, s in servers.items()}
    base = fields[road.role]
    with parallel(tp=base["tp_size"]):
        model = rank_model(base, road.folder)
        weights = _weights(road, model.tp, build)
        roles, capacity, memory, warm = {}, {}, {}, {}
        for r in road.columns:
            memory[r] = memory_of(road.launch, fields[r], weights)
            roles[r], capacity[r] = _role_census(model, fields[r], memory[r])
            requests = roles[r]["plugin"].request_slots
            draft = fields[r]["speculative_num_draft_tokens"] or 1
            warm[r] = (fields[r], requests, draft)
        warmup = warmup_rows(model.config, warm)
    require_state(roles, len(list(model.cache_params.layers)))
    result = _assemble(road, model, base, roles)
    result["resolved"] = {r: summary(servers[r]) for r in road.columns}
    result["warmup"] = warmup
    if road.launch.sized:
        first = memory.get(road.role, memory[road.columns[0]])
        result["inputs"]["available_gib"] = first["available_gib"]
        result["inputs"]["mamba_sizing"] = _sizing_name(base)
        result.update(memory=memory, capacity=capacity)
    return result


def _assemble(road: _Road, model: RankModel, base: dict, roles: dict) -> dict:
    """The result's head: what was run, on what, and the pools per role."""
    import sglang

    return {
        "sglang_version": sglang.__version__,
        "model": road.name,
        "launch": {
            "argv": road.argv,
            "role": road.role,
            "gpu": dataclasses.asdict(road.launch.gpu),
            "sized": road.launch.sized,
        },
        "inputs": {
            "tp": model.tp,
            "pp": model.pp,
            "pp_stage_layers": list(model.layers),
            "max_running_requests": base["max_running_requests"],
            "max_mamba_cache_size": base["max_mamba_cache_size"],
            "speculative_num_draft_tokens": base["speculative_num_draft_tokens"] or 0,
            "mamba_ssm_dtype": model.ssm_dtype,
            "context_length": model.config.context_len,
            "page_size": base["page_size"] or 1,
            "mamba_radix_cache_strategy": base.get("mamba_radix_cache_strategy"),
        },
        "roles": roles,
    }
