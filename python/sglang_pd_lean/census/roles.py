"""One role's pair of columns: its pool built twice (upstream and with the plugin),
sized first by SGLang's own budget code where the launch names the memory.

    pools, sizing = census_role(mc, (0, 48), RolePlan(fields=f, slots=None, requests=256))
    pools["plugin"].verify_only_bytes, sizing  # sizing: a RoleSizing, or None
"""

from __future__ import annotations

import dataclasses
import functools
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
from sglang_pd_lean.census.sizing import size_budget


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


def census_role(
    mc, layers: tuple[int, int], plan: RolePlan
) -> tuple[dict[str, PoolSummary], RoleSizing | None]:
    """One role, upstream and plugin: (pool summaries, the sizing or None).
    With ``available_gib`` the pool is built with the slot and request counts
    SGLang's sizing settled on (what the server allocates), else with the plan's."""
    pools, sizing = {}, {}
    build = _builder(mc, layers, plan)
    for column in ("upstream", "plugin"):
        with column_behaviour(column):
            with published(**plan.fields) as server_args:
                conf = build(server_args)
                slots, requests = _counts(conf, plan)
                if plan.available_gib:
                    sized = _sized(conf, plan, server_args)
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
    return pools, RoleSizing(upstream, plugin, Change.between(upstream, plugin))


def plugin_sizing(mc, layers: tuple[int, int], plan: RolePlan) -> Sizing:
    """The plugin column's sizing alone, as ``census_role`` sizes it (the plan
    names the memory): all an advice step reads, without the pools it would build
    or the upstream column. The plugin's column is the gates as registered: no gate
    steps aside (``column_behaviour("plugin")`` changes nothing)."""
    with published(**plan.fields) as server_args:
        return _sized(_builder(mc, layers, plan)(server_args), plan, server_args)


def _builder(mc, layers: tuple[int, int], plan: RolePlan):
    """The role's configurator, for the server args published at the call."""
    return functools.partial(
        configurator,
        mc,
        is_draft_worker=False,
        layers=layers,
        page_size=plan.page_size,
        spec_aux=plan.spec_aux,
    )


def _sized(conf, plan: RolePlan, server_args) -> Sizing:
    with sglang_rejects("SGLang cannot size this model's pools"):
        return size_budget(conf, plan.available_gib, server_args)


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
