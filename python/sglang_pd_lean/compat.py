"""Which SGLang is installed, and which gates it still needs from us.

    from sglang_pd_lean import compat
    for gate in compat.plan():
        print(gate.name, gate.state, gate.detail)

Supported releases: 0.5.16 to 0.5.23. 0.5.16 and 0.5.17 need every gate; 0.5.18 and
later gate pool, graph and warmup themselves, 0.5.22 and later size the budget right.
Whether a fix is native is read from the installed code (the upstream function asks
about the disaggregation mode itself), not from the release number.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import pkgutil
import re
from dataclasses import dataclass, field

SUPPORTED = tuple(f"0.5.{minor}" for minor in range(16, 24))
KILL_SWITCH = "SGLANG_PD_LEAN"

NEEDED = "applied by the plugin"
NATIVE = "native upstream"
NOT_APPLICABLE = "not applicable"
DISABLED = "disabled by kill switch"
# Upstream changed in a way this plugin has no hook for.
UNHANDLED = "needed, not handled"


def sglang_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def release(version: str | None) -> str | None:
    """``0.5.17.post1`` -> ``0.5.17``; None for anything unparsable."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return ".".join(match.groups()) if match else None


def is_supported(version: str | None) -> bool:
    return release(version) in SUPPORTED


def kill_switch_on() -> bool:
    return os.environ.get(KILL_SWITCH, "1").strip().lower() in (
        "0",
        "false",
        "off",
        "no",
    )


def resolve(target: str):
    """The object HookRegistry would patch; AttributeError where the module or class
    no longer defines it itself (an inherited method is not the code we hook)."""
    owner_path, attr = target.rsplit(".", 1)
    owner = pkgutil.resolve_name(owner_path)
    if isinstance(owner, type) and attr not in vars(owner):
        raise AttributeError(f"{owner.__name__} no longer defines {attr}")
    return getattr(owner, attr)


def missing_targets(targets: list[str]) -> list[str]:
    missing = []
    for target in targets:
        try:
            resolve(target)
        except (ImportError, AttributeError, ValueError) as exc:
            missing.append(f"{target} ({type(exc).__name__}: {exc})")
    return missing


def source_of(target: str) -> str:
    try:
        return inspect.getsource(inspect.unwrap(resolve(target)))
    except (ImportError, AttributeError, ValueError, OSError, TypeError):
        return ""


# Each native fix shows in the code upstream runs: from 0.5.18 the pool, graph and
# warmup functions ask the disaggregation mode themselves; from 0.5.22 the mamba
# budget asks the pool's own "does a PD prefill skip the spec state?" helper. No
# release up to 0.5.23 asks it in the draft-graph capture or the autotune sizing.
# A gate is native when its upstream function carries one of these markers.
_NATIVE_MARKERS = {
    "pool": (
        "sglang.srt.mem_cache.kv_cache_configurator."
        "KVCacheConfigurator._build_hybrid_req_pool",
        ("disaggregation_mode", "_pd_prefill_skips_mamba_spec_state"),
    ),
    "graph": (
        "sglang.srt.model_executor.model_runner_components.cuda_graph_setup."
        "capture_decode_graph",
        ("disaggregation_mode",),
    ),
    "warmup": (
        "sglang.srt.model_executor.runner.base_runner.BaseRunner._dummy_run",
        ("disaggregation_mode", "_is_pd_prefill_target"),
    ),
    "budget": (
        "sglang.srt.mem_cache.kv_cache_configurator."
        "KVCacheConfigurator._handle_max_mamba_cache",
        ("_pd_prefill_skips_mamba_spec_state", "disaggregation_mode"),
    ),
    "draft_graph": (
        "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs",
        ("disaggregation_mode",),
    ),
    "autotune": (
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._autotune_buffers",
        ("disaggregation_mode", "_is_pd_prefill_target"),
    ),
}


def native_reason(gate: str) -> str | None:
    """Why upstream already does what ``gate`` does, or None if it does not."""
    if gate not in _NATIVE_MARKERS:
        return None
    target, markers = _NATIVE_MARKERS[gate]
    source = source_of(target)
    found = [marker for marker in markers if marker in source]
    if not found:
        return None
    return f"upstream {target.rsplit('.', 1)[-1]}() checks {found[0]}"


@dataclass
class GatePlan:
    name: str
    summary: str
    state: str
    detail: str = ""
    hooks: list = field(default_factory=list)


def plan() -> list[GatePlan]:
    """Every gate with its state on the installed SGLang."""
    from sglang_pd_lean.gates import all_gates

    disabled = kill_switch_on()
    plans = []
    for gate in all_gates():
        native = gate.native()
        if native:
            state, detail = NATIVE, native
        else:
            state, detail = NEEDED, ""
            applicable = getattr(gate, "applicable", None)
            reason = applicable() if applicable else None
            if reason:
                state, detail = NOT_APPLICABLE, reason
            elif not gate.hooks():
                state, detail = (
                    UNHANDLED,
                    "this SGLang needs a gate the plugin does not have",
                )
        if disabled and state == NEEDED:
            state, detail = DISABLED, f"{KILL_SWITCH}=0"
        plans.append(GatePlan(gate.NAME, gate.SUMMARY, state, detail, gate.hooks()))
    return plans
