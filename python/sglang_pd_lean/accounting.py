"""Bytes per component of a request pool SGLang built (real or under ``FakeTensorMode``).

    from sglang_pd_lean.accounting import component_bytes, VERIFY_ONLY
    sizes = component_bytes(configurator.req_to_token_pool)
    verify = sum(sizes.get(name, 0) for name in VERIFY_ONLY)

Each physical storage is counted once (views share it) and filed under the name of
the upstream state it belongs to (``MambaPool.State`` / ``SpeculativeState`` fields).
Used by the pool gate's log figure and by the census; imports nothing but torch,
and that only when called. Works on SGLang 0.5.16 to 0.5.23.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# Tensors of the request pool, by the attribute upstream stores them under.
COMPONENTS = {
    "conv": "conv state",
    "temporal": "ssm state",
    "intermediate_ssm": "verify ssm snapshots",
    "intermediate_conv_window": "verify conv windows",
    "replayssm_d": "replayssm rings",
    "replayssm_k": "replayssm rings",
    "replayssm_g": "replayssm rings",
    "replayssm_rawv": "replayssm rings",
    "replayssm_rawk": "replayssm rings",
    "replayssm_beta": "replayssm rings",
    "req_to_token": "req_to_token map",
}
# Read only by TARGET_VERIFY (and the commit that follows it).
VERIFY_ONLY = ("verify ssm snapshots", "verify conv windows", "replayssm rings")
# Every named component, in the order reports show them (present, 0 where empty).
COMPONENT_ORDER = (
    "conv state",
    "ssm state",
    "verify ssm snapshots",
    "verify conv windows",
    "replayssm rings",
    "req_to_token map",
)


def pool_tensors(pool: Any) -> dict[str, Any]:
    """Every tensor of the request pool and its mamba state, by upstream's names."""
    import torch

    found: dict[str, Any] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    found[f"{name}[{i}]"] = item

    for name, value in vars(pool).items():
        add(name, value)
    mamba_pool = getattr(pool, "mamba_pool", None)
    if mamba_pool is not None:
        for name, value in vars(mamba_pool).items():  # mamba_cache: not a tensor
            add(f"mamba_pool.{name}", value)
        cache = mamba_pool.mamba_cache
        for f in dataclasses.fields(cache):
            add(f.name, getattr(cache, f.name))
    return found


def component_bytes(pool: Any) -> dict[str, int]:
    """Bytes per component, each physical storage counted once (views share it)."""
    seen: dict[int, str] = {}
    sizes: dict[int, int] = {}
    # Named state first, so a storage is filed under its upstream state name.
    tensors = sorted(
        pool_tensors(pool).items(),
        key=lambda kv: kv[0].split("[")[0] not in COMPONENTS,
    )
    for name, tensor in tensors:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in seen:
            continue
        base = name.split("[")[0]
        seen[key] = COMPONENTS.get(base, base.replace("mamba_pool.", "other: "))
        sizes[key] = storage.nbytes()
    totals: dict[str, int] = {}
    for key, component in seen.items():
        totals[component] = totals.get(component, 0) + sizes[key]
    return totals


def verify_only(components: dict[str, int]) -> dict[str, int]:
    """The verify-only components of ``components`` that hold bytes."""
    return {name: components[name] for name in VERIFY_ONLY if components.get(name)}
