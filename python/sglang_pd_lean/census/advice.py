"""How to spend what the plugin frees on a prefill target: three choices, each the
launch flags to add and what SGLang's own sizing gives with them.

    result = run_launch(launch)
    result.update(advise(launch, result))
    result["advice"][0].flags  # ('--max-mamba-cache-size', '276'): a Choice

(a) ``kv``: all freed bytes to the KV cache (upstream's mamba slot count, given as
``--max-mamba-cache-size``); (b) ``requests``: the most running requests whose mamba
slots still fit while the KV cache stays at least upstream's (``--max-running-requests``
with the slots SGLang needs for them, else it caps the requests); (c) ``automatic``:
the flags as launched (today's split). Every figure comes from running the launch road
again (SGLang's resolution, memory per rank and sizing) with the flags appended to
the prefill server's flags; the search in (b) asks that same road at each step.
Where the plugin changes nothing (a decode or unified server, a prefill target whose
SGLang already leaves the verify state out, a launch without speculative decoding)
``nothing_to_spend`` says why.
"""

from __future__ import annotations

import dataclasses

from sglang_pd_lean.census.inputs import MAX_SLOTS, ROLES
from sglang_pd_lean.census.launch import resolve, resolved_fields, role_argv
from sglang_pd_lean.census.memory import Weights
from sglang_pd_lean.census.pools import configurator, published
from sglang_pd_lean.census.results import Capacity, Choice

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
# Every role's reason where the launch has no speculative decoding.
UNSPECULATIVE = (
    "no speculative decoding: no role verifies, so there is no verify state to free"
)


def nothing_to_spend(result: dict) -> dict[str, str]:
    """Per role, why the plugin frees nothing there (no entry: something to spend)."""
    reasons = {}
    roles, capacity = result["roles"]["prefill"], result["capacity"]["prefill"]
    upstream, plugin = capacity.upstream, capacity.plugin
    version = result["sglang_version"]
    if result["resolved"]["prefill"]["speculative_algorithm"] is None:
        return dict.fromkeys(ROLES, UNSPECULATIVE)
    if not plugin.fits:
        reasons["prefill"] = f"does not fit even with the plugin: {plugin.reason}"
    elif (
        upstream.fits
        and not any(dataclasses.astuple(capacity.change))
        and roles["upstream"].verify_only_bytes == roles["plugin"].verify_only_bytes
    ):
        reasons["prefill"] = (
            f"SGLang {version} already builds and sizes this prefill target without "
            f"the verify state (upstream and plugin columns agree): nothing freed"
        )
    return {**reasons, **VERIFYING}


def _weights_of(memory: dict) -> Weights | None:
    """The first run's weights, for its reruns (same model, same ranks)."""
    if "weights_bytes" not in memory:
        return None
    return Weights(
        memory["weights_bytes"], memory["draft_weights_bytes"], memory["weights_source"]
    )


@dataclasses.dataclass
class _Road:
    """The launch road for the prefill server, run again with flags appended."""

    launch: object  # census.server.Launch
    argv: list[str]  # the prefill server's flags, as the first run resolved them
    seen: dict = dataclasses.field(default_factory=dict)

    def capacity(self, flags: tuple[str, ...]) -> Capacity:
        from sglang_pd_lean.census.server import prefill_capacity

        if flags not in self.seen:
            again = dataclasses.replace(
                self.launch, argv=[*self.argv, *flags], model=None, config=None
            )
            self.seen[flags] = prefill_capacity(again)
        return self.seen[flags]

    def mamba_ratio(self) -> int:
        """SGLang's own mamba slots per running request for this server."""
        from sglang.srt.configs.model_config import ModelConfig

        fields = resolved_fields(resolve(self.argv, self.launch.gpu).server_args)
        with published(**fields) as server_args:
            mc = ModelConfig.from_server_args(server_args)
            conf = configurator(
                mc,
                server_args,
                is_draft_worker=False,
                layers=(0, mc.num_hidden_layers),
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


def advise(launch, result: dict) -> dict:
    """``advice`` (the prefill target's choices: flags, capacity) and
    ``nothing_to_spend`` (per role, why there is nothing) for a launch census."""
    reasons = nothing_to_spend(result)
    if "prefill" in reasons:
        return {"advice": [], "nothing_to_spend": reasons}
    road = _Road(
        dataclasses.replace(launch, weights=_weights_of(result["memory"]["prefill"])),
        role_argv(result["launch"]["argv"], "prefill"),
    )
    upstream = result["capacity"]["prefill"].upstream
    choices: list[tuple[str, tuple | None]] = []
    if upstream.fits:
        kv = ("--max-mamba-cache-size", str(upstream.mamba_slots))
        requests = most_requests(
            road, upstream.max_running_requests, upstream.kv_tokens
        )
        choices += [("kv", kv), ("requests", requests)]
    choices.append(("automatic", ()))
    advice = []
    for key, flags in choices:
        if flags is None:
            continue
        advice.append(Choice(key, CHOICES[key], tuple(flags), road.capacity(flags)))
    return {"advice": advice, "nothing_to_spend": reasons}
