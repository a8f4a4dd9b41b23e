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
from typing import Any


@dataclasses.dataclass(frozen=True)
class PoolSummary:
    """One role column's request pool as SGLang's constructors allocate it."""

    components: dict[str, int]  # bytes per component, every named one
    verify_only_bytes: int  # of which only TARGET_VERIFY uses
    total_bytes: int
    mamba_slots: int
    request_slots: int


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
class RoleSizing:
    """One role's sizing, both columns, and the plugin's change."""

    upstream: Sizing
    plugin: Sizing
    change: Change | None

    def column(self, name: str) -> Sizing:
        return self.upstream if name == "upstream" else self.plugin


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
class Choice:
    """One way to spend what the plugin frees on the prefill target."""

    choice: str  # key: kv, requests, automatic
    title: str
    flags: tuple[str, ...]  # added to the prefill server's flags
    capacity: Capacity


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
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return value
