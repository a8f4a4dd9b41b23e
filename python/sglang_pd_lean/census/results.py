"""The census's results, typed and frozen, as SGLang's ``KVCacheConfigResult`` is:
one role column's pool, SGLang's sizing of it, the plugin's change to that sizing,
the weights build's answer, and each advised choice with what SGLang's sizing gives.

    pool.verify_only_bytes, sizing.kv_tokens, choice.capacity.max_running_requests
    print(json.dumps(jsonable(result)))

They become JSON only where the report prints JSON (``jsonable``); the keys are
their field names, documented in docs/json.md. An optional field that does not
apply (a sizing that does not fit has no KV figures) is None, and left out of the
JSON.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from sglang_pd_lean.census.gpus import Gpu


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolSummary:
    """One role column's request pool as SGLang's constructors allocate it."""

    components: dict[str, int]  # bytes per component, every named one
    verify_only_bytes: int  # of which only TARGET_VERIFY uses
    total_bytes: int
    mamba_slots: int
    request_slots: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sizing:
    """SGLang's start-up sizing of one role column (``census.sizing``): where it
    fits, the KV cache, tokens, mamba slots and running requests; where SGLang
    would stop the server, its reason."""

    fits: bool
    reason: str | None = None  # why SGLang would stop the server
    kv_cache_gib: float | None = None
    kv_cache_bytes: int | None = None
    kv_tokens: int | None = None
    mamba_slots: int | None = None
    max_running_requests: int | None = None
    mamba_state_and_verify_gib: float | None = None
    mamba_sizing: str | None = None  # how the mamba slots were set
    requests_capped: bool | None = None  # fewer requests than the flags asked


@dataclasses.dataclass(frozen=True, kw_only=True)
class Change:
    """What the plugin changes in one role's sizing (plugin minus upstream)."""

    kv_cache_bytes: int
    kv_tokens: int
    mamba_slots: int
    max_running_requests: int

    @classmethod
    def between(cls, upstream: Sizing, plugin: Sizing) -> Change | None:
        """None unless both columns fit."""
        if not (upstream.fits and plugin.fits):
            return None
        return cls(
            **{
                f.name: getattr(plugin, f.name) - getattr(upstream, f.name)
                for f in dataclasses.fields(cls)
            }
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoleSizing:
    """One role's sizing, both columns, and the plugin's change."""

    upstream: Sizing
    plugin: Sizing
    change: Change | None

    def column(self, name: str) -> Sizing:
        return self.upstream if name == "upstream" else self.plugin


@dataclasses.dataclass(frozen=True, kw_only=True)
class WeightsBuild:
    """The weights build's answer (``census.weights.Build``): parameter bytes of
    rank 0, target and draft, and the classes SGLang built; or why none."""

    error: str | None = None
    target_bytes: int = 0
    draft_bytes: int = 0
    target_class: str | None = None
    draft_class: str | None = None
    tp: int = 1
    ep: int = 1
    # Rank 0's layout as SGLang built it: the attention-TP group's width and the
    # target model's [start, end) layers (its pipeline stage).
    attn_tp: int = 1
    layers: list[int] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capacity:
    """What SGLang's sizing gives the prefill target with one choice's flags."""

    fits: bool
    available_gib: float
    reason: str | None = None
    kv_cache_bytes: int | None = None
    kv_tokens: int | None = None
    mamba_slots: int | None = None
    max_running_requests: int | None = None

    @classmethod
    def of(cls, sized: Sizing, available_gib: float) -> Capacity:
        return cls(
            fits=sized.fits,
            available_gib=available_gib,
            reason=sized.reason,
            kv_cache_bytes=sized.kv_cache_bytes,
            kv_tokens=sized.kv_tokens,
            mamba_slots=sized.mamba_slots,
            max_running_requests=sized.max_running_requests,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choice:
    """One way to spend what the plugin frees on the prefill target."""

    choice: str  # key: kv, requests, automatic
    title: str
    flags: tuple[str, ...]  # added to the prefill server's flags
    capacity: Capacity


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pair:
    """One role's two columns: every gate stepping aside (SGLang as released) and
    the gates this SGLang needs, as the plugin registers them."""

    upstream: Any
    plugin: Any

    def column(self, name: str) -> Any:
        return self.upstream if name == "upstream" else self.plugin


@dataclasses.dataclass(frozen=True, kw_only=True)
class Warmup:
    """One column's transient warm-up buffers (``census.warmup``)."""

    autotune_buffers_bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Head:
    """What was resolved: the launch flags, the role they name, the GPU, and
    whether the report is sized (False: no memory named, each pool at the flags'
    own counts)."""

    argv: tuple[str, ...]
    role: str
    gpu: Gpu
    sized: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inputs:
    """The role the launch names, as resolved (and, sized, how it sizes)."""

    tp: int
    pp: int
    pp_stage_layers: tuple[int, int]
    max_running_requests: int | None
    max_mamba_cache_size: int | None
    speculative_num_draft_tokens: int
    mamba_ssm_dtype: str
    context_length: int
    page_size: int
    mamba_radix_cache_strategy: str | None
    attn_tp: int  # SGLang's DP-attention split of TP rank 0
    attn_dp: int
    pp_rank: int  # the stage reported
    use_mla_backend: bool
    kv_cache_dtype: str
    not_followed: tuple[str, ...] = ()  # what the census cannot follow exactly
    available_gib: float | None = None
    mamba_sizing: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resolution:
    """The resolved values that change bytes, per role (the report's header)."""

    disaggregation_mode: str
    page_size: int | None
    attention_backend: str | None
    linear_attn_backend: str | None
    mamba_radix_cache_strategy: str | None
    disable_radix_cache: bool
    mem_fraction_static: float | None
    max_running_requests: int | None
    max_mamba_cache_size: int | None
    context_length: int | None
    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    speculative_draft_model_path: str | None
    disaggregation_decode_extra_slots: int | None
    mamba_ssm_dtype: str | None
    tp_size: int
    pp_size: int
    chunked_prefill_size: int | None


RESOLVED_FIELDS = tuple(f.name for f in dataclasses.fields(Resolution))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GivenMemory:
    """The memory a role's sizing receives, as the operator gave it
    (``--available-gib``: SGLang's ``total_rest_memory``, exact)."""

    available_gib: float
    source: str = "--available-gib"
    draft_layers_in_kv_sizing: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelledMemory:
    """The memory a role's sizing receives, from the GPU and the weights per rank:
    ``(T - C) * mem_fraction_static - weights`` (``census.memory``)."""

    gpu_gib: float
    cuda_context_gib: float
    mem_fraction_static: float
    weights_bytes: int
    draft_weights_bytes: int
    weights_source: str
    available_gib: float
    source: str = "(T - C) * mem_fraction_static - weights"
    draft_layers_in_kv_sizing: int


Memory = GivenMemory | ModelledMemory


@dataclasses.dataclass(frozen=True, kw_only=True)
class Columns:
    """The census of a launch's columns (``census.columns.census_launch``): the
    report's first step, read by the advice, then whole in the ``Report``."""

    sglang_version: str
    model: str
    launch: Head
    inputs: Inputs
    resolved: Mapping[str, Resolution]
    roles: Mapping[str, Pair]  # Pair of PoolSummary
    warmup: Mapping[str, Pair]  # Pair of Warmup
    memory: Mapping[str, Memory] | None = None
    capacity: Mapping[str, RoleSizing] | None = None
    plugin_gates: Mapping[str, str]

    def parts(self) -> dict[str, Any]:
        """Its fields, by name (the ``Report``'s first ones)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Report(Columns):
    """The report on one launch (``census.report``): its ``Columns`` and what the
    report adds to them; built once, never changed; JSON only at the edge
    (``jsonable``, docs/json.md). Per-role maps are keyed by role (``prefill``,
    ``decode``, ``null``); ``memory``, ``capacity`` and the advice are None where
    the report is not sized."""

    advice: tuple[Choice, ...] | None = None
    nothing_to_spend: Mapping[str, str] | None = None
    prefill_pieces: Mapping[str, str] | None = None  # census.pieces
    # Roles SGLang refuses the flags for (not shown): role -> SGLang's reason.
    refused: Mapping[str, str] | None = None


def frozen_map(items: Mapping) -> Mapping:
    """A read-only copy of ``items`` (the report's per-role maps)."""
    return types.MappingProxyType(dict(items))


def jsonable(value: Any) -> Any:
    """``value`` as JSON types: a result dataclass as its fields (an optional field,
    default None, left out where it is None; any other None is null), tuples as
    lists, dicts and lists element by element."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.default is None and getattr(value, f.name) is None)
        }
    if isinstance(value, Mapping):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return value
