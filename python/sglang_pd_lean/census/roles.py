"""One role's pair of columns: its pool built twice (upstream and with the plugin),
sized first by SGLang's own budget code where the launch names the memory.

    pools, sizing = census_role(mc, RolePlan(fields=f, slots=None, requests=256))
    pools["plugin"].verify_only_bytes, sizing  # sizing: a RoleSizing, or None
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sglang_pd_lean.accounting import component_bytes
from sglang_pd_lean.census.inputs import MAX_SLOTS, CensusError, sglang_rejects
from sglang_pd_lean.census.pools import (
    build_request_pool,
    column_behaviour,
    configurator,
    published,
    summarize,
)
from sglang_pd_lean.census.results import Change, PoolSummary, RoleSizing, Sizing
from sglang_pd_lean.census.sizing import size_budget, stages_agree


@dataclasses.dataclass(frozen=True)
class RolePlan:
    """How one role's column pair is built: the ServerArgs fields to size with
    (the slot count as the operator set it), the counts to build with where there
    is no sizing or it does not fit, and the memory SGLang's sizing receives."""

    fields: dict
    slots: int | None  # None: SGLang's own mamba slots per request, x requests
    requests: int
    available_gib: float | None = None
    page_size: int = 1
    spec_aux: Any = None
    pp_rank: int = 0  # the pipeline stage reported
    pp_size: int = 1


def census_role(mc, plan: RolePlan) -> tuple[dict[str, PoolSummary], RoleSizing | None]:
    """One role, upstream and plugin: (pool summaries, the sizing or None).
    With ``available_gib`` the pool is built with the slot and request counts
    SGLang's sizing settled on (what the server allocates), else with the plan's."""
    pools, sizing = {}, {}
    build = _builder(mc, plan)
    for column in ("upstream", "plugin"):
        with column_behaviour(column):
            with published(**plan.fields) as server_args:
                conf = build(server_args)
                slots, requests = _counts(conf, plan)
            if plan.available_gib:
                sized = _sized(build, plan)
                sizing[column] = sized
                if sized.fits:
                    slots = sized.mamba_slots
                    requests = sized.max_running_requests
            if slots > MAX_SLOTS or requests > MAX_SLOTS:
                raise CensusError(
                    f"{slots:,} mamba slots and {requests:,} requests: more than the "
                    f"census builds ({MAX_SLOTS:,}); give --max-mamba-cache-size "
                    f"and --max-running-requests"
                )
            fields = dict(
                plan.fields, max_mamba_cache_size=slots, max_running_requests=requests
            )
            with published(**fields) as server_args:
                conf = build(server_args)
                with sglang_rejects("SGLang cannot build this model's request pool"):
                    pool = build_request_pool(conf, requests)
        pools[column] = summarize(component_bytes(pool), slots, requests)
    if not plan.available_gib:
        return pools, None
    upstream, plugin = sizing["upstream"], sizing["plugin"]
    return pools, RoleSizing(
        upstream=upstream, plugin=plugin, change=Change.between(upstream, plugin)
    )


def plugin_sizing(mc, plan: RolePlan) -> Sizing:
    """The plugin column's sizing alone, as ``census_role`` sizes it (the plan
    names the memory): all an advice step reads, without the pools it would build
    or the upstream column. The plugin's column is the gates as registered: no gate
    steps aside (``column_behaviour("plugin")`` changes nothing)."""
    return _sized(_builder(mc, plan), plan)


def _builder(mc, plan: RolePlan):
    """The role's configurator of a pipeline stage (default: the one reported),
    for the server args published at the call."""

    def build(server_args, pp_rank: int = plan.pp_rank):
        return configurator(
            mc,
            server_args,
            is_draft_worker=False,
            pp_rank=pp_rank,
            page_size=plan.page_size,
            spec_aux=plan.spec_aux,
        )

    return build


def _sized(build, plan: RolePlan) -> Sizing:
    """SGLang's sizing of the reported stage, each in a fresh publication of the
    role (the sizing overrides the mamba slots it settles on). With PP, SGLang's
    ranks agree on the smallest stage's KV tokens (an all-reduce): every stage is
    sized first, each on its own layers, and the reported one then with that
    answer (``sizing.stages_agree``)."""
    agreed = None
    if plan.pp_size > 1:
        asked: list[int] = []
        for stage in range(plan.pp_size):
            with published(**plan.fields) as server_args, stages_agree(None, asked):
                with sglang_rejects("SGLang cannot size this model's pools"):
                    own = size_budget(
                        build(server_args, stage), plan.available_gib, server_args
                    )
            if not own.fits:
                return own
        agreed = min(asked) if asked else None
    with published(**plan.fields) as server_args, stages_agree(agreed, []):
        with sglang_rejects("SGLang cannot size this model's pools"):
            return size_budget(build(server_args), plan.available_gib, server_args)


def _counts(conf, plan: RolePlan) -> tuple[int, int]:
    """(mamba slots, requests) where no sizing settles them: none for a model
    without linear-attention layers; the slot count as set, else SGLang's own
    slots per request (``_calculate_mamba_ratio``: 1 with
    the radix cache off, more with an extra buffer) times the requests."""
    if conf.mambaish_config is None:  # no linear-attention layers: no mamba slot
        return 0, plan.requests
    if plan.slots:
        return plan.slots, plan.requests
    return conf._calculate_mamba_ratio() * plan.requests, plan.requests


def require_state(roles: dict, linear_layers: int) -> None:
    """A census needs state to count: ssm state, or conv state alone (short-conv
    hybrids keep only a convolution window per layer)."""
    components = next(iter(roles.values())).upstream.components
    if components["ssm state"] == 0 and components["conv state"] == 0:
        raise CensusError(
            f"SGLang gives this config's {linear_layers} linear-attention layers "
            f"0 bytes of ssm state and of conv state: nothing to count"
        )
