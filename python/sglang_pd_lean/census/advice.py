"""How to spend what the plugin frees on a prefill target: three choices, each the
launch flags to add and what SGLang's own sizing gives with them.

    report = census.report(launch)
    report.advice[0].flags  # ('--max-mamba-cache-size', '276'): a Choice

(a) ``kv``: all freed bytes to the KV cache (upstream's mamba slot count, given as
``--max-mamba-cache-size``); (b) ``requests``: the most running requests whose mamba
slots still fit while the KV cache stays at least upstream's (``--max-running-requests``
with the slots SGLang needs for them, else it caps the requests); (c) ``automatic``:
the flags as launched (today's split). Every figure comes from running the launch road
again (SGLang's resolution, memory per rank and sizing) with the flags appended to
the prefill server's flags, once per set of flags; the search in (b) asks that same
road at each step; (c) reads the prefill server as resolved already.
Where the plugin changes nothing (a decode or unified server, a prefill target whose
SGLang already leaves the verify state out, a launch without speculative decoding)
``nothing_to_spend`` says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sglang_pd_lean.census.inputs import MAX_SLOTS, ROLES
from sglang_pd_lean.census.launch import ResolvedLaunch, exported, resolved_fields
from sglang_pd_lean.census.memory import Weights
from sglang_pd_lean.census.pools import configurator, published
from sglang_pd_lean.census.results import Capacity, Choice, frozen_map

CHOICES = {
    "kv": "(a) all freed bytes to the KV cache",
    "requests": "(b) more running requests, KV cache at least upstream's",
    "automatic": "(c) as launched: SGLang's own split",
}
VERIFYING = {
    "decode": "a decode target runs TARGET_VERIFY every step: the plugin leaves "
    "it as upstream builds it",
    "null": "a unified server verifies its own drafts: the plugin leaves it as "
    "upstream builds it",
}
# The prefill target's reason for a model without linear-attention layers.
NO_LINEAR_STATE = (
    "no linear-attention layers: no verify state, so the KV cache and the request "
    "pool are upstream's; the plugin skips only what a verify step alone uses "
    "(graphs, warm-up buffers)"
)
# Every role's reason where the launch has no speculative decoding.
UNSPECULATIVE = (
    "no speculative decoding: no role verifies, so there is no verify state to free"
)


def nothing_to_spend(census) -> dict[str, str]:
    """Per role, why the plugin frees nothing there (no entry: something to
    spend). ``census``: the ``Columns`` of ``census.columns.census_launch`` for a
    sized launch with a prefill column."""
    reasons = {}
    pools, capacity = census.roles["prefill"], census.capacity["prefill"]
    upstream, plugin = capacity.upstream, capacity.plugin
    if census.resolved["prefill"].speculative_algorithm is None:
        return dict.fromkeys(ROLES, UNSPECULATIVE)
    if census.inputs.mamba_ssm_dtype is None:
        return {"prefill": NO_LINEAR_STATE, **VERIFYING}
    if not plugin.fits:
        reasons["prefill"] = f"does not fit even with the plugin: {plugin.reason}"
    elif (
        upstream.fits
        and not any(dataclasses.astuple(capacity.change))
        and pools.upstream.verify_only_bytes == pools.plugin.verify_only_bytes
    ):
        reasons["prefill"] = (
            f"SGLang {census.sglang_version} already builds and sizes this prefill "
            f"target without the verify state (upstream and plugin columns agree): "
            f"nothing freed"
        )
    return {**reasons, **VERIFYING}


@dataclasses.dataclass
class _Road:
    """The launch road for the prefill server, run again with flags appended."""

    done: ResolvedLaunch
    weights: Weights | None  # the first run's
    seen: dict = dataclasses.field(default_factory=dict)

    def capacity(self, flags: tuple[str, ...]) -> Capacity:
        from sglang_pd_lean.census.columns import prefill_capacity

        if flags not in self.seen:
            self.seen[flags] = prefill_capacity(self.done, flags, self.weights)
        return self.seen[flags]

    def mamba_ratio(self) -> int:
        """SGLang's own mamba slots per running request for this server."""
        from sglang.srt.configs.model_config import ModelConfig

        prefill = self.done.resolved["prefill"]
        fields = resolved_fields(prefill.server_args)
        with exported(prefill.environ), published(**fields) as server_args:
            mc = ModelConfig.from_server_args(server_args)
            conf = configurator(
                mc,
                server_args,
                is_draft_worker=False,
                page_size=fields["page_size"] or 1,
            )
            return int(conf._calculate_mamba_ratio())


def _requests_flags(requests: int, ratio: int) -> tuple[str, ...]:
    return (
        "--max-running-requests",
        str(requests),
        "--max-mamba-cache-size",
        str(requests * ratio),
    )


def most_requests(road: _Road, floor: int, kv_floor: int) -> tuple | None:
    """The flags for the most running requests SGLang serves uncapped with the KV
    cache at least ``kv_floor`` tokens, from ``floor`` requests up; None if not even
    ``floor`` does. Each step is SGLang's sizing run again with the flags."""
    ratio = road.mamba_ratio()

    def serves(requests: int) -> bool:
        cap = road.capacity(_requests_flags(requests, ratio))
        return (
            cap.fits
            and cap.max_running_requests >= requests
            and cap.kv_tokens >= kv_floor
        )

    low = max(floor, 1)
    if not serves(low):
        return None
    top = MAX_SLOTS // ratio
    high = low * 2
    while high <= top and serves(high):
        low, high = high, high * 2
    high = min(high, top + 1)
    while high - low > 1:
        middle = (low + high) // 2
        if serves(middle):
            low = middle
        else:
            high = middle
    return _requests_flags(low, ratio)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Advice:
    """The prefill target's choices (flags, capacity) and, per role, why there is
    nothing to spend."""

    advice: tuple[Choice, ...]
    nothing_to_spend: Mapping[str, str]


def advise(done: ResolvedLaunch, census) -> Advice:
    """The advice for the census (``census.columns.census_launch``'s ``Columns``) of
    a sized ``done``, whose prefill column it reads."""
    from sglang_pd_lean.census.columns import weights_of

    reasons = frozen_map(nothing_to_spend(census))
    if "prefill" in reasons:
        return Advice(advice=(), nothing_to_spend=reasons)
    road = _Road(done, weights_of(census.memory["prefill"]))
    upstream = census.capacity["prefill"].upstream
    choices: list[tuple[str, tuple | None]] = []
    if upstream.fits:
        kv = ("--max-mamba-cache-size", str(upstream.mamba_slots))
        requests = most_requests(
            road, upstream.max_running_requests, upstream.kv_tokens
        )
        choices += [("kv", kv), ("requests", requests)]
    choices.append(("automatic", ()))
    advice = tuple(
        Choice(
            choice=key,
            title=CHOICES[key],
            flags=tuple(flags),
            capacity=road.capacity(flags),
        )
        for key, flags in choices
        if flags is not None
    )
    return Advice(advice=advice, nothing_to_spend=reasons)
