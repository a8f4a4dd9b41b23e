"""Pool gate: a prefill target builds its hybrid request pool without verify state.

Hooks (AROUND) ``KVCacheConfigurator._build_hybrid_req_pool`` in
``sglang/srt/mem_cache/kv_cache_configurator.py`` (0.5.16+), or on 0.5.14 and 0.5.15,
which have no narrow builder, ``ModelRunnerKVCacheMixin._init_pools`` in
``sglang/srt/model_executor/model_runner_kv_cache_mixin.py``. Upstream hands the draft-token
count to ``HybridReqToTokenPool`` -> ``MambaPool``, which then allocates
``MambaPool.SpeculativeState``: per-draft-token snapshots of every ssm state
(``intermediate_ssm``) and conv window (``intermediate_conv_window``), read only by
``TARGET_VERIFY``. On a worker that cannot verify, the hook lets upstream build the
pool from a ``server_args`` view whose draft-token count is None, so ``MambaPool``
builds its plain ``State``. ``_init_pools`` builds every pool and also reads the
draft-token count for the request rows' length, so there the gate changes only the
name its code looks up for ``HybridReqToTokenPool``, for the call: a builder that
constructs SGLang's class with the draft-token count None (the rows stay upstream's).
Persistent conv/ssm state (handed to the decode server) is untouched. Applies to
SGLang 0.5.15 to 0.5.17; 0.5.18+ does this natively.

The bytes not allocated are measured, not re-derived: upstream's own build of the
pool it would have made runs once more under ``FakeTensorMode`` (no memory, SGLang's
pool log muted) and ``accounting`` counts its verify-only tensors. Where that build
holds none, the gate steps aside and upstream builds its own pool; where it cannot
be measured, the gate acts without a figure. Not registered where the installed
SGLang would hand the verify state to the decode server (``applicable``): removing
it there would change the transfer layout. Leaves alone: decode pools
(``_build_hybrid_mamba_decode_req_pool``), unified-memory pools, draft workers (they
share the target's pool) and ReplaySSM rings. Requires the adaptive gate: with
``--speculative-adaptive`` upstream would otherwise capture a verify graph of
another step count on this pool, which asserts ``SpeculativeState``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging

from sglang_pd_lean import seams
from sglang_pd_lean.gates.base import (
    Acted,
    Call,
    Gate,
    SteppedAside,
    no_draft_tokens,
    temporarily,
)
from sglang_pd_lean.units import human_bytes
from sglang_pd_lean.upstream import constants_of, resolve

logger = logging.getLogger(__name__)

# SGLang's logger of the pool constructors, muted while the phantom pool is measured.
_POOL_LOGGER = "sglang.srt.mem_cache.memory_pool"
_MAMBA_POOL = "sglang.srt.mem_cache.memory_pool.MambaPool"
# MambaPool.SpeculativeState fields the pool gate removes.
REMOVED_FIELDS = ("intermediate_ssm", "intermediate_conv_window")


def transferred_removed_fields() -> list[str] | None:
    """The removed fields the installed SGLang would hand to the decode server
    (``MambaPool.get_contiguous_buf_infos``), or None where that cannot be read.
    0.5.17+ name the fields it keeps back in ``_NON_TRANSFER_STATE_FIELDS``; 0.5.16
    skips them by name inside ``get_contiguous_buf_infos``."""
    try:
        kept_back = resolve(f"{_MAMBA_POOL}._NON_TRANSFER_STATE_FIELDS")
    except (ImportError, AttributeError):
        named = constants_of(f"{_MAMBA_POOL}.get_contiguous_buf_infos")
        if not named:
            return None
        return [f for f in REMOVED_FIELDS if f not in named]
    return [f for f in REMOVED_FIELDS if f not in kept_back]


class PoolGate(Gate):
    name = "pool"
    summary = "no MambaPool.SpeculativeState on a prefill target"
    targets = seams.HOOK_TARGETS["pool"]
    native_markers = ("disaggregation_mode", "_pd_prefill_skips_mamba_spec_state")
    # An adaptive runtime state's verify graph capture needs SpeculativeState.
    requires = ("adaptive",)

    def markers_for(self, target: str | None) -> tuple[str, ...]:
        # _init_pools asks the disaggregation mode for the decode pools and the
        # unified fast path, not for the verify state.
        older = seams.HOOK_TARGETS["pool"][1].rpartition(".")[2]
        if target is not None and target.rpartition(".")[2] == older:
            return ("_pd_prefill_skips_mamba_spec_state",)
        return self.native_markers

    def applicable(self) -> str | None:
        transferred = transferred_removed_fields()
        if transferred is None:
            return "cannot tell whether SGLang transfers MambaPool's verify state"
        if transferred:
            return (
                f"SGLang transfers {', '.join(transferred)} to the decode server; "
                f"removing it would change the transfer layout"
            )
        return None

    def act(self, call: Call) -> Acted | SteppedAside:
        if getattr(call.original, "__name__", None) == "_init_pools":
            return _act_in_init_pools(call)
        not_allocated = verify_state_bytes(call)
        if not_allocated == {}:
            return SteppedAside(
                call.upstream(), "upstream allocates no verify state for this pool"
            )
        configurator = call.owner
        view = no_draft_tokens(configurator.server_args)
        with temporarily(configurator, server_args=view):
            pool = call.upstream()
        return _acted(pool, not_allocated)


_HYBRID_POOL = "HybridReqToTokenPool"


def _act_in_init_pools(call: Call) -> Acted | SteppedAside:
    """0.5.14 and 0.5.15: upstream's ``_init_pools`` runs whole; only the hybrid
    request pool it builds gets the draft-token count None."""
    names = getattr(inspect.unwrap(call.original), "__globals__", {})
    cls = names.get(_HYBRID_POOL)
    seen: dict[str, dict[str, int] | None] = {}

    def build(*args, **kwargs):
        if args:  # not upstream's own call, which passes keywords only: as it is
            return cls(*args, **kwargs)
        not_allocated = verify_state_bytes(lambda: cls(**kwargs))
        seen["not_allocated"] = not_allocated
        if not_allocated == {}:
            return cls(**kwargs)
        return cls(**{**kwargs, "speculative_num_draft_tokens": None})

    if cls is None:
        return SteppedAside(call.upstream(), "upstream builds no hybrid request pool")
    names[_HYBRID_POOL] = build
    try:
        result = call.upstream()
    finally:
        names[_HYBRID_POOL] = cls
    if "not_allocated" not in seen:
        return SteppedAside(result, "upstream builds no hybrid request pool here")
    not_allocated = seen["not_allocated"]
    if not_allocated == {}:
        return SteppedAside(result, "upstream allocates no verify state for this pool")
    return _acted(result, not_allocated)


def _acted(pool, not_allocated: dict[str, int] | None) -> Acted:
    figures = ", ".join(
        f"{human_bytes(nbytes)} of {component}"
        for component, nbytes in (not_allocated or {}).items()
    )
    return Acted(
        pool,
        f"built MambaPool without SpeculativeState: "
        f"{figures or 'verify state'} not allocated",
        not_allocated,
    )


def verify_state_bytes(build) -> dict[str, int] | None:
    """Bytes of each verify-only component in the pool upstream would build here
    (``build``: a ``Call``, or a function building it), counted on a
    ``FakeTensorMode`` build; None where that cannot be measured."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        from sglang_pd_lean.accounting import component_bytes, verify_only

        pool_logger = logging.getLogger(_POOL_LOGGER)
        with contextlib.ExitStack() as stack:
            stack.enter_context(temporarily(pool_logger, disabled=True))
            stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
            phantom = build.upstream() if isinstance(build, Call) else build()
        return verify_only(component_bytes(phantom))
    except Exception as exc:  # a log figure never breaks a start-up
        logger.debug(f"[sglang-pd-lean] pool gate: verify state not measured: {exc!r}")
        return None


GATE = PoolGate()
