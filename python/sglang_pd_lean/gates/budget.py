"""Budget gate: a prefill target's memory budget reserves only what its pool allocates.

Hooks (AROUND) ``KVCacheConfigurator._handle_max_mamba_cache`` in
``sglang/srt/mem_cache/kv_cache_configurator.py``. Upstream subtracts the verify
snapshot budget (``per-request state x (running requests + 1) x draft tokens``) from
the KV-cache budget whenever speculative decoding is on, and its automatic mamba
sizing solves for slots *with* that snapshot budget. On a prefill target the pool
gate (or upstream 0.5.18+) never allocates it: a phantom. On a worker that cannot
verify, the hook runs upstream's sizing with the worker's ``spec_algorithm`` set to
NONE, so it charges exactly what the pool builds without verify state. Persistent
mamba state stays charged. (The draft-token count needs no hiding: upstream's sizing
reads it only with speculation on, or for ReplaySSM, which SGLang refuses on a
prefill server.) Applies to SGLang 0.5.16 to 0.5.21; 0.5.22+ does this natively;
never without the pool gate (or its native equivalent), which makes the reservation
a phantom in the first place.

What the returned share buys depends on SGLang's sizing: with the radix cache on and
no ``--max-mamba-cache-size``, SGLang splits the budget between mamba slots and KV
by a ratio, so the freed bytes buy more mamba slots and the KV cache may shrink;
with the radix cache off or a fixed slot count, the KV cache grows. The INFO line
and ``/server_info`` give both sizings (KV bytes, KV tokens, mamba slots) as this
rank computed them; where upstream's own sizing (run inside a config snapshot it
restores) gives the same budget, the gate steps aside. Leaves alone: decode, null
and draft workers (same numbers as upstream, to the byte).
"""

from __future__ import annotations

import logging
from typing import Any

from sglang_pd_lean import record, seams
from sglang_pd_lean.gates.base import (
    Acted,
    Call,
    Gate,
    SteppedAside,
    without_speculation,
)
from sglang_pd_lean.shims import setting
from sglang_pd_lean.units import GIB, human_bytes

logger = logging.getLogger(__name__)


class BudgetGate(Gate):
    name = "budget"
    summary = "no phantom verify-state reservation in a prefill target's memory budget"
    targets = seams.HOOK_TARGETS["budget"]
    native_markers = ("_pd_prefill_skips_mamba_spec_state", "disaggregation_mode")
    requires = ("pool",)

    def act(self, call: Call) -> Acted | SteppedAside:
        configurator = call.owner
        upstream = _upstream_sizing(call)
        with without_speculation(configurator):
            rest = call.upstream()
        # KV tokens as SGLang will compute them, with the worker's real
        # (draft-inclusive) per-token layout.
        plugin = _sizing(configurator, rest)
        if upstream == plugin:
            return SteppedAside(rest, "upstream reserves no verify state here")
        total_rest_memory = call.args[1] if len(call.args) > 1 else None
        total_rest_memory = call.kwargs.get("total_rest_memory", total_rest_memory)
        record.budget(total_rest_memory, upstream, plugin)
        return Acted(rest, f"no verify-state reservation: {_outcome(upstream, plugin)}")


def _sizing(configurator: Any, rest_gib: float) -> dict:
    """KV bytes, KV tokens and mamba slots of a sizing, as SGLang turns the KV budget
    into tokens (``config_from_budget``); a figure that cannot be computed is None."""
    kv_bytes = int(rest_gib * GIB)
    try:
        tokens = configurator.config_from_budget(kv_bytes).max_total_num_tokens
    except Exception as exc:  # a log figure never breaks a start-up
        logger.debug(f"[sglang-pd-lean] budget gate: KV tokens not computed: {exc!r}")
        tokens = None
    slots = setting("get_schedule", "max_mamba_cache_size", configurator.server_args)
    return {"kv_bytes": kv_bytes, "kv_tokens": tokens, "mamba_slots": slots}


def _upstream_sizing(call: Call) -> dict | None:
    """Upstream's own sizing of this very call, inside a config snapshot that is
    restored afterwards (upstream publishes its slot count as it sizes). None on
    releases without snapshots (0.5.16) or where upstream's own sizing fails."""
    try:
        from sglang.srt.runtime_context import get_context

        preserve = get_context().preserve_config
    except (ImportError, AttributeError):
        return None
    try:
        with preserve():
            return _sizing(call.owner, call.upstream())
    except Exception as exc:  # upstream would not fit: report, never raise
        logger.debug(f"[sglang-pd-lean] budget gate: upstream sizing: {exc!r}")
        return None


def _outcome(upstream: dict | None, plugin: dict) -> str:
    """What the returned reservation bought, in words an operator checks."""
    kv, slots = plugin["kv_bytes"], plugin["mamba_slots"]
    if upstream is None:
        return f"KV cache {human_bytes(kv)}, mamba slots {slots}"
    kv_before, slots_before = upstream["kv_bytes"], upstream["mamba_slots"]
    text = (
        f"KV cache {human_bytes(kv_before)} -> {human_bytes(kv)}, "
        f"mamba slots {slots_before} -> {slots}"
    )
    if slots != slots_before and kv < kv_before:
        return (
            f"{text} (SGLang's automatic split spent the freed bytes on mamba "
            f"slots; the KV cache shrank by {human_bytes(kv_before - kv)})"
        )
    if kv >= kv_before:
        return f"{text} ({human_bytes(kv - kv_before)} more KV cache)"
    return f"{text} ({human_bytes(kv_before - kv)} less KV cache)"


GATE = BudgetGate()
