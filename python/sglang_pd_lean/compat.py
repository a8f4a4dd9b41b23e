"""Which SGLang is installed, and which gates it still needs from us.

    from sglang_pd_lean import compat
    decision = compat.decide()
    for gate in decision.plans:
        print(gate.name, gate.state, gate.detail)

Supported releases: 0.5.15 to 0.5.23. 0.5.15 to 0.5.17 need every gate; 0.5.18 and
later gate pool, graph and warmup themselves, 0.5.22 and later size the budget right.
Whether a fix is native is read from the installed code (the upstream function asks
about the disaggregation mode itself), not from the release number. ``decide()`` is
the one answer ``plugin.register()`` acts on and ``doctor`` shows.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from sglang_pd_lean.gates import Gate, all_gates
from sglang_pd_lean.hook import Hook
from sglang_pd_lean.upstream import names_of

SUPPORTED = tuple(f"0.5.{minor}" for minor in range(15, 24))
KILL_SWITCH = "SGLANG_PD_LEAN"


class GateState(str, Enum):
    """A gate on the installed SGLang (the value is what logs, doctor and
    ``/server_info`` show)."""

    NEEDED = "applied by the plugin"  # its hooks are registered
    NATIVE = "native upstream"  # the installed SGLang does it itself
    NOT_APPLICABLE = "not applicable"  # nothing to gate on this SGLang
    UNSAFE = "not registered: unsafe here"  # applying it would break something
    MISSING = "not registered: hook target missing"  # no candidate target resolves
    DISABLED = "disabled by kill switch"  # SGLANG_PD_LEAN=0
    UNHANDLED = "needed, not handled"  # upstream changed; no hook for it
    UNUSED = "not used by this launch"  # its code never runs in this launch

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


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


def native_reason(gate: Gate) -> str | None:
    """Why upstream already does what ``gate`` does, or None: the code of the
    upstream function it hooks uses one of its ``native_markers`` (from 0.5.18 pool,
    graph and warmup ask the disaggregation mode themselves, from 0.5.22 the budget
    asks the pool's own helper; a patched SGLang from ``patches/`` uses them too).
    Read from the function's compiled code (``upstream.names_of``), so a marker
    named only in a comment or a string does not count, and no source file is read
    while SGLang starts."""
    target = gate.target
    markers = gate.markers_for(target)
    if not markers or target is None:
        return None
    used = names_of(target)
    found = [marker for marker in markers if marker in used]
    if not found:
        return None
    return f"upstream {target.rpartition('.')[2]}() checks {found[0]}"


@dataclass(frozen=True)
class GatePlan:
    name: str
    summary: str
    state: GateState
    detail: str
    hooks: tuple[Hook, ...]


def _state(gate: Gate) -> tuple[GateState, str]:
    missing = gate.missing_target()
    if missing:
        return GateState.MISSING, f"no hook target resolves: {missing}"
    native = native_reason(gate)
    if native:
        return GateState.NATIVE, native
    reason = gate.applicable()
    if reason and gate.targets:
        return GateState.UNSAFE, reason
    if reason:
        return GateState.NOT_APPLICABLE, reason
    if not gate.hooks():
        return GateState.UNHANDLED, "this SGLang needs a gate the plugin does not have"
    return GateState.NEEDED, ""


def plan(unused: Callable[[Gate], str | None] | None = None) -> list[GatePlan]:
    """Every gate with its state on the installed SGLang; ``unused`` (one launch's
    view) says why a gate's code never runs in that launch (None: it may run),
    and such a gate is not looked up at all."""
    states = {}
    for gate in all_gates():
        reason = unused(gate) if unused is not None else None
        states[gate.name] = (GateState.UNUSED, reason) if reason else _state(gate)
    fine = (GateState.NEEDED, GateState.NATIVE, GateState.UNUSED)
    for gate in all_gates():
        state, _ = states[gate.name]
        lacking = [name for name in gate.requires if states[name][0] not in fine]
        if state == GateState.NEEDED and lacking:
            states[gate.name] = (
                GateState.UNSAFE,
                f"needs the {', '.join(lacking)} gate, which is not applied",
            )
    disabled = kill_switch_on()
    plans = []
    for gate in all_gates():
        state, detail = states[gate.name]
        if disabled and state == GateState.NEEDED:
            state, detail = GateState.DISABLED, f"{KILL_SWITCH}=0"
        # An unused gate's target is not looked up (that could import its module).
        hooks = () if state == GateState.UNUSED else tuple(gate.hooks())
        plans.append(GatePlan(gate.name, gate.summary, state, detail, hooks))
    return plans


@dataclass(frozen=True)
class Decision:
    """What the plugin registers on the installed SGLang, or why nothing."""

    version: str | None
    plans: tuple[GatePlan, ...]
    hooks: tuple[Hook, ...]  # every needed gate's hooks
    missing: tuple[str, ...]  # hook targets SGLang lacks: "gate: targets (why)"
    refusal: str | None  # why nothing is registered, for a WARNING
    disabled: bool  # the kill switch is on (an INFO, not a warning)

    def gates_in(self, *states: GateState) -> list[str]:
        return [gate.name for gate in self.plans if gate.state in states]

    @property
    def off(self) -> list[GatePlan]:
        """Gates this SGLang needs that are not registered, each with why."""
        trouble = (GateState.MISSING, GateState.UNSAFE, GateState.UNHANDLED)
        return [gate for gate in self.plans if gate.state in trouble]

    @property
    def healthy(self) -> bool:
        """The plugin can do its whole job on this SGLang (kill switch aside)."""
        return self.refusal is None and not self.off


def refusal(version: str | None) -> str | None:
    """Why the plugin registers nothing on SGLang ``version``, or None (reads the
    release number only: no SGLang module)."""
    if version is None:
        return (
            "SGLang is not installed in this environment: no hooks registered. "
            f"Install a supported SGLang ({SUPPORTED[0]} to {SUPPORTED[-1]})."
        )
    if not is_supported(version):
        return (
            f"SGLang {version} is not a supported release ({SUPPORTED[0]} to "
            f"{SUPPORTED[-1]}): no hooks registered, SGLang runs as upstream. "
            f"Install a supported SGLang or uninstall sglang-pd-lean."
        )
    return None


def decide(unused: Callable[[Gate], str | None] | None = None) -> Decision:
    """The installed SGLang's release, every gate's state, the hooks to register,
    and why none are registered where that is the answer. ``unused``: see
    ``plan`` (None: every gate, as ``doctor`` shows them)."""
    version = sglang_version()
    refused = refusal(version)
    if version is None:
        return Decision(None, (), (), (), refused, kill_switch_on())
    plans = tuple(plan(unused))
    if refused:
        return Decision(version, plans, (), (), refused, kill_switch_on())
    # Per gate, all or nothing: a needed gate's hook targets all resolved (else
    # it is MISSING, and the gates that require it UNSAFE).
    hooks = tuple(
        hook for gate in plans if gate.state == GateState.NEEDED for hook in gate.hooks
    )
    missing = tuple(
        f"{gate.name}: {gate.detail}"
        for gate in plans
        if gate.state == GateState.MISSING
    )
    return Decision(version, plans, hooks, missing, None, kill_switch_on())
