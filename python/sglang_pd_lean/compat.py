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

import importlib
import importlib.metadata
import inspect
import os
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


def _import_owner(path: str):
    """The module or class at ``path``. Unlike ``pkgutil.resolve_name``, an error
    raised while importing an existing module (a missing dependency, a broken
    import) comes through as that ImportError instead of an AttributeError on the
    parent package."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            owner = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only "this module does not exist" moves on to a shorter prefix.
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise ImportError(f"importing {module_name} failed: {exc}") from exc
        except Exception as exc:
            raise ImportError(
                f"importing {module_name} failed: {type(exc).__name__}: {exc}"
            ) from exc
        for attr in parts[cut:]:
            owner = getattr(owner, attr)
        return owner
    raise ImportError(f"no module named {parts[0]!r}")


def resolve(target: str):
    """The object HookRegistry would patch; AttributeError where the module or class
    no longer defines it itself (an inherited method is not the code we hook),
    ImportError naming the real cause where its module cannot be imported."""
    owner_path, attr = target.rsplit(".", 1)
    owner = _import_owner(owner_path)
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


def native_reason(gate) -> str | None:
    """Why upstream already does what ``gate`` (a gate module or its name) does, or
    None. A gate is native when the upstream function it hooks carries one of the
    gate's ``NATIVE_MARKERS`` (from 0.5.18 pool, graph and warmup ask the
    disaggregation mode themselves, from 0.5.22 the budget asks the pool's own
    helper; a patched SGLang from ``patches/`` carries them too)."""
    if isinstance(gate, str):
        from sglang_pd_lean.gates import all_gates

        gate = next((g for g in all_gates() if g.NAME == gate), None)
    markers = getattr(gate, "NATIVE_MARKERS", ())
    if not markers:
        return None
    source = source_of(gate.TARGET)
    found = [marker for marker in markers if marker in source]
    if not found:
        return None
    return f"upstream {gate.TARGET.rsplit('.', 1)[-1]}() checks {found[0]}"


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
        native = native_reason(gate)
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
