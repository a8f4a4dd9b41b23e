"""The census of one resolved launch: per role, its pools, sizing and memory.

    done = resolve_launch(Launch(argv=("--tp", "4"), gpu=gpu))
    parts = census_launch(done, ROLES, build=None)
    parts.roles["prefill"].upstream.verify_only_bytes, parts.capacity["prefill"]

The road of every report (``census.report``). Each role is the launch's flags with
``--disaggregation-mode`` replaced, resolved by SGLang once (``ResolvedLaunch``);
the model on one rank is built once (``RankModel``); each role's memory per rank
comes from ``memory``; its pools and sizing run on the resolved configuration,
published as it is, with the page size and the draft-model description SGLang's
own model runner would use. A launch with ``sized=False`` (no memory named) builds
each pool at the flags' own counts. An advice step (``prefill_capacity``) is the
same road for the prefill server with flags added, stopped at its sizing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.census.flags import role_argv
from sglang_pd_lean.census.inputs import (
    CensusError,
    sglang_rejects,
)
from sglang_pd_lean.census.launch import (
    Launch,
    ResolvedLaunch,
    exported,
    resolve,
    resolved_fields,
    summary,
)
from sglang_pd_lean.census.memory import (
    CUDA_CONTEXT_GIB,
    INDEX,
    Weights,
    available_gib,
    weights_per_rank,
)
from sglang_pd_lean.census.model import RankModel, rank_model
from sglang_pd_lean.census.pools import configurator, published
from sglang_pd_lean.census.rank import derive, not_followed
from sglang_pd_lean.census.results import (
    Capacity,
    Columns,
    GivenMemory,
    Head,
    Inputs,
    Memory,
    ModelledMemory,
    Pair,
    Resolution,
    RoleSizing,
    Sizing,
    frozen_map,
)
from sglang_pd_lean.census.roles import (
    RolePlan,
    census_role,
    plugin_sizing,
    require_state,
)
from sglang_pd_lean.census.warmup import warmup_rows
from sglang_pd_lean.census.weights import BUILD_ENV, Build, build_weights
from sglang_pd_lean.shims import setting


def spec_aux(server_args, mc):
    """SGLang's own draft-model description for the target (draft layers counted
    in its KV sizing only where a draft model path is given)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    import sglang_pd_lean.census.older as older

    algorithm = SpeculativeAlgorithm.from_string(
        setting("get_spec", "speculative_algorithm", server_args)
    )
    with sglang_rejects("SGLang cannot read the draft model"):
        if not older.has_configurator():
            return older.spec_aux(server_args, mc, algorithm)
        from sglang.srt.model_executor.model_runner_components import (
            spec_aux_hidden_state,
        )

        return spec_aux_hidden_state.resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=mc,
            spec_algorithm=algorithm,
            is_draft_worker=False,
        )


# How the mamba slots were set for a model without linear-attention layers.
NO_MAMBA = "none (no linear-attention layers)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoleLaunch:
    """One role as SGLang resolved it: every field, to publish again as it is
    (``fields``), and the values the census reads, typed (``values``: the
    ``Resolution`` the report's header shows)."""

    fields: dict
    values: Resolution

    @classmethod
    def of(cls, server_args: Any) -> RoleLaunch:
        return cls(fields=resolved_fields(server_args), values=summary(server_args))


def _sizing_name(values: Resolution, hybrid: bool = True) -> str:
    if not hybrid:
        return NO_MAMBA
    if values.max_mamba_cache_size:
        return "explicit (--max-mamba-cache-size)"
    if values.disable_radix_cache:
        return "from running requests (radix cache off)"
    return "automatic (ratio of the budget)"


@contextlib.contextmanager
def weights_build(done: ResolvedLaunch) -> Iterator[Build | None]:
    """SGLang's model classes for the launch built in a forked child
    (``census.weights``), where the sizing needs the weights and nothing else gives
    them; None otherwise. The child starts from the role the flags name, as
    resolved, runs beside the rest of the report (the plugins' loading, the
    census: no gate hooks the resolution or the model classes), and is stopped at
    the block's end if its answer was never read."""
    if not (_needs_weights(done.launch) and done.launch.weights_gib is None):
        yield None
        return
    if not build_weights():
        yield None
        return
    with exported(done.named.environ):
        build = Build(done.named.server_args)
    try:
        yield build
    finally:
        build.cancel()


def _needs_weights(launch: Launch) -> bool:
    """The sizing needs the weights per rank: memory is not named directly."""
    return launch.sized and launch.available_gib is None


def _weights(done: ResolvedLaunch, tp: int, build: Build | None) -> Weights | None:
    """Target and draft weights per rank, where the sizing needs them."""
    launch = done.launch
    if not _needs_weights(launch):
        return None
    built = build.result() if build is not None else None
    weights = weights_per_rank(
        done.folder, tp=tp, built=built, weights_gib=launch.weights_gib
    )
    if weights is None:
        why = built.error if built else f"{BUILD_ENV} is off"
        raise CensusError(
            f"cannot tell the weights per rank of {done.name}: SGLang's model class "
            f"did not build ({why}) and there is no {done.folder}/{INDEX}; "
            f"give --weights-gib (per rank) or --available-gib"
        )
    return weights


def memory_of(
    launch: Launch, values: Resolution, weights: Weights | None, draft_layers: int
) -> Memory | None:
    """The memory one role's sizing receives, and where it comes from; None for a
    census that does not size (the pools at the flags' own counts)."""
    if not launch.sized:
        return None
    if launch.available_gib is not None:
        return GivenMemory(
            available_gib=launch.available_gib, draft_layers_in_kv_sizing=draft_layers
        )
    mfs = values.mem_fraction_static
    return ModelledMemory(
        gpu_gib=launch.gpu.memory_gib,
        cuda_context_gib=CUDA_CONTEXT_GIB,
        mem_fraction_static=mfs,
        weights_bytes=weights.target_bytes,
        draft_weights_bytes=weights.draft_bytes,
        weights_source=weights.source,
        available_gib=available_gib(
            gpu_gib=launch.gpu.memory_gib, mem_fraction_static=mfs, weights=weights
        ),
        draft_layers_in_kv_sizing=draft_layers,
    )


def weights_of(memory: Memory | None) -> Weights | None:
    """The weights a modelled memory was computed with (an advice step's)."""
    if not isinstance(memory, ModelledMemory):
        return None
    return Weights(
        memory.weights_bytes, memory.draft_weights_bytes, memory.weights_source
    )


def _planned(
    model: RankModel, launch: Launch, role: RoleLaunch, weights: Weights | None
) -> tuple[RolePlan, Memory | None]:
    """How one role's columns are built and sized, as resolved, and the memory its
    sizing receives. Without sizing, the counts of one attention-DP shard: SGLang
    divides --max-running-requests (``resolve_max_num_reqs``) and
    --max-mamba-cache-size (``_handle_max_mamba_cache``) by the shards."""
    with published(**role.fields) as server_args:
        aux = spec_aux(server_args, model.config)
    values, shards = role.values, model.widths.attn_dp_size
    memory = memory_of(launch, values, weights, aux.eagle_draft_num_layers or 0)
    plan = RolePlan(
        fields=role.fields,
        pp_rank=model.pp_rank,
        pp_size=model.pp,
        slots=values.max_mamba_cache_size and values.max_mamba_cache_size // shards,
        requests=(values.max_running_requests or 256) // shards,
        available_gib=max(memory.available_gib, 1e-9) if memory else None,
        page_size=values.page_size or 1,
        spec_aux=aux,
    )
    return plan, memory


def prefill_capacity(
    done: ResolvedLaunch, flags: tuple[str, ...], weights: Weights | None
) -> Capacity:
    """What SGLang's sizing gives the prefill server of ``done`` with ``flags``
    added, with the plugin, and the memory it received: the road of
    ``census_launch`` (resolution, the model on one rank, memory, sizing), stopped
    where an advice step has its answer. No flags: the prefill server as resolved
    already; else one resolution. ``weights``: the first run's (same model)."""
    prefill = done.resolved["prefill"]
    if flags:
        argv = [*role_argv(list(done.argv), "prefill"), *flags]
        prefill = resolve(argv, done.launch.gpu)
    role = RoleLaunch.of(prefill.server_args)
    with exported(prefill.environ):
        model = rank_model(role.fields, done.folder)
        with model.layout():
            plan, memory = _planned(model, done.launch, role, weights)
            sized = plugin_sizing(model.config, plan)
    return Capacity.of(sized, memory.available_gib)


def _named(sized: Sizing, values: Resolution, hybrid: bool, shards: int) -> Sizing:
    """``sized`` with how its mamba slots were set, and whether SGLang gives fewer
    running requests than the flags ask (per attention-DP shard: SGLang divides
    the flag by ``shards``)."""
    asked = (values.max_running_requests or 0) // shards
    return dataclasses.replace(
        sized,
        mamba_sizing=_sizing_name(values, hybrid),
        requests_capped=bool(
            sized.fits and asked and sized.max_running_requests < asked
        ),
    )


def census_launch(
    done: ResolvedLaunch, columns: tuple[str, ...], build: Build | None
) -> Columns:
    """The census per role of ``columns`` (each resolved in ``done``): memory,
    pools, sizing, warm-up buffers, and the gates this SGLang needs; the report's
    later parts (advice, pieces) not yet. ``build``: the launch's weights build,
    started (``weights_build``), where the sizing needs one."""
    import sglang

    from sglang_pd_lean import plugin

    with exported(done.named.environ):
        launched = {r: RoleLaunch.of(done.resolved[r].server_args) for r in columns}
        base = RoleLaunch.of(done.named.server_args)
        model = rank_model(base.fields, done.folder)
        with model.layout():
            weights = _weights(done, model.tp, build)
            roles, capacity, memory, warm = {}, {}, {}, {}
            for r, role in launched.items():
                plan, memory[r] = _planned(model, done.launch, role, weights)
                pools, sizing = census_role(model.config, plan)
                roles[r] = Pair(upstream=pools["upstream"], plugin=pools["plugin"])
                capacity[r] = _named_sizing(sizing, role.values, model)
                draft = role.values.speculative_num_draft_tokens or 1
                warm[r] = (role.fields, roles[r], draft)
            warmup = warmup_rows(model.config, warm)
    if model.cache_params is not None:
        require_state(roles, len(model.linear_layers))
    sized = done.launch.sized
    # The memory of the role the flags name (else the first shown), sized.
    named = memory.get(done.role) or next(iter(memory.values()))
    gates = {gate.name: str(gate.state) for gate in plugin.decision().plans}
    return Columns(
        sglang_version=sglang.__version__,
        model=done.name,
        launch=Head(argv=done.argv, role=done.role, gpu=done.launch.gpu, sized=sized),
        inputs=_inputs(model, base, named if sized else None),
        resolved=frozen_map({r: launched[r].values for r in roles}),
        roles=frozen_map(roles),
        warmup=frozen_map(warmup),
        memory=frozen_map(memory) if sized else None,
        capacity=frozen_map(capacity) if sized else None,
        plugin_gates=frozen_map(gates),
    )


def _named_sizing(
    sizing: RoleSizing | None, values: Resolution, model: RankModel
) -> RoleSizing | None:
    if sizing is None:
        return None
    hybrid, shards = model.linear is not None, model.widths.attn_dp_size
    return dataclasses.replace(
        sizing,
        upstream=_named(sizing.upstream, values, hybrid, shards),
        plugin=_named(sizing.plugin, values, hybrid, shards),
    )


def _inputs(model: RankModel, base: RoleLaunch, memory: Memory | None) -> Inputs:
    """The role the launch names, as resolved; ``memory``: its memory, sized."""
    values = base.values
    with published(**base.fields) as server_args, model.layout():
        derived = derive(model.config, server_args, model.widths, model.pp_rank)
        conf = configurator(
            model.config, server_args, is_draft_worker=False, pp_rank=model.pp_rank
        )
        said = not_followed(model.config, conf)
    if model.pp > 1 and isinstance(memory, ModelledMemory):
        said += (
            f"with PP, every stage's memory from the weights of rank 0 "
            f"({memory.weights_source}); another stage's differ: give "
            f"--available-gib for it",
        )
    return Inputs(
        tp=model.tp,
        pp=model.pp,
        pp_stage_layers=model.layers,
        pp_rank=model.pp_rank,
        attn_tp=model.widths.attn_tp_size,
        attn_dp=model.widths.attn_dp_size,
        use_mla_backend=derived.use_mla_backend,
        kv_cache_dtype=str(derived.kv_cache_dtype).replace("torch.", ""),
        not_followed=said,
        max_running_requests=values.max_running_requests,
        max_mamba_cache_size=values.max_mamba_cache_size,
        speculative_num_draft_tokens=values.speculative_num_draft_tokens or 0,
        mamba_ssm_dtype=model.ssm_dtype,
        context_length=model.config.context_len,
        page_size=values.page_size or 1,
        mamba_radix_cache_strategy=values.mamba_radix_cache_strategy,
        available_gib=memory.available_gib if memory else None,
        mamba_sizing=(
            _sizing_name(values, model.linear is not None) if memory else None
        ),
    )
