"""SGLang general plugin entry point (group ``sglang.srt.plugins``, name ``pd_lean``).

    SGLANG_PLUGINS=pd_lean python -m sglang.launch_server --disaggregation-mode prefill ...
    SGLANG_PD_LEAN=0            # kill switch: SGLang stays exactly upstream

SGLang's ``load_plugins()`` calls ``register()`` in every process. A process that
builds no model (the launcher: ``launch_server``, ``sglang serve``, ``Engine``; the
detokenizer and the data-parallel controller on releases that load plugins there)
gets nothing: ``register()`` returns before importing anything, so the plugin costs
those processes no module, no hook and no time. Every other process (each scheduler
rank, and any caller it does not know) acts on ``compat.decide()``: on an unsupported release it logs one WARNING and registers
nothing; otherwise it registers every needed gate's hooks with ``HookRegistry``
(SGLang applies them) and the record's reporting hooks. All or nothing per gate: a
gate whose hook target this SGLang lacks is off, with the gates that require it, and
one WARNING names them and why; the others apply. A second call does nothing
(``reset()`` for tests).
"""

from __future__ import annotations

import logging
import sys

from sglang_pd_lean.seams import LOAD_PLUGINS_CALLERS

logger = logging.getLogger(__name__)

_registered = False
_decision = None  # compat.Decision: what register() acted on

# How far up the stack a caller is looked for (load_plugins() is a few frames up).
_MAX_FRAMES = 32


def _is(code, function: str) -> bool:
    """Whether ``code`` is ``function`` (``Class.method``, a name, ``<module>``)."""
    qualname = getattr(code, "co_qualname", None)  # Python 3.11+
    if qualname is None:
        return code.co_name == function.rpartition(".")[2]
    return qualname == function


def _frame_module(frame) -> str:
    spec = frame.f_globals.get("__spec__")
    return getattr(spec, "name", None) or frame.f_globals.get("__name__", "")


def model_free_process() -> str | None:
    """What this process is where SGLang builds no model in it (the launcher, the
    detokenizer, the DP controller), read from who called ``load_plugins()``
    (``seams.LOAD_PLUGINS_CALLERS``; SGLang starts each of those processes with the
    spawn method, so each calls ``load_plugins()`` afresh and a scheduler never
    inherits a launcher's empty registration); None for a scheduler rank or a
    caller the table does not know (if in doubt, gate)."""
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        module = _frame_module(frame)
        for known_module, function, kind in LOAD_PLUGINS_CALLERS:
            if module == known_module and _is(frame.f_code, function):
                return kind
        frame = frame.f_back
    return None


def reset() -> None:
    """Let the next ``register()`` run again (tests; hooks already given to
    ``HookRegistry`` stay there: reset it too)."""
    global _registered, _decision
    _registered = False
    _decision = None


def decision():
    """The ``compat.Decision`` this process's ``register()`` acted on; where it
    decided nothing (kill switch, or not called), the installed SGLang's now."""
    from sglang_pd_lean import compat

    return _decision or compat.decide()


def register() -> bool:
    """Register the needed gates' hooks; True if hooks were registered."""
    global _registered
    if _registered:
        return False
    _registered = True

    try:
        process = model_free_process()
    except Exception:  # if in doubt, gate
        process = None
    if process is not None:
        logger.debug(f"[sglang-pd-lean] {process} builds no model: no hooks here")
        return False

    from sglang_pd_lean import compat

    if compat.kill_switch_on():
        logger.info(f"[sglang-pd-lean] {compat.KILL_SWITCH}=0: no hooks registered")
        return False
    global _decision
    decision = _decision = compat.decide()
    if decision.refusal:
        logger.warning(f"[sglang-pd-lean] {decision.refusal}")
        return False

    summary = _register_hooks(decision)
    # This process's logging may not be configured yet; a scheduler repeats the
    # summary once SGLang has configured it (record.announce).
    logger.info(summary)
    return True


def _register_hooks(decision) -> str:
    """Give ``HookRegistry`` the needed gates' hooks and the record's reporting
    hooks, warn about what is off; the registration summary."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_pd_lean import audit, record
    from sglang_pd_lean.upstream import missing_targets

    for hook in decision.hooks:
        HookRegistry.register(hook.target, hook.fn, HookType[hook.when.value])
    if decision.off:
        logger.warning(
            f"[sglang-pd-lean] SGLang {decision.version}: gate(s) off: "
            + "; ".join(f"{gate.name} ({gate.detail})" for gate in decision.off)
            + ". The other gates apply; `sglang-pd-lean doctor` says more."
        )
    summary = f"[sglang-pd-lean] SGLang {decision.version}: " + ", ".join(
        f"{gate.name} gate {gate.state}" for gate in decision.plans
    )
    record.registered(
        decision.version, {gate.name: gate.state for gate in decision.plans}, summary
    )
    # Each reporting hook (the record's, the audit's start-up warning) on its own:
    # a missing target costs only its part.
    unreachable = []
    for hook in (*record.hooks(), *audit.hooks()):
        missing = missing_targets([hook.target])
        unreachable += missing
        if not missing:
            HookRegistry.register(hook.target, hook.fn, HookType[hook.when.value])
    if unreachable:
        logger.warning(
            f"[sglang-pd-lean] /server_info record incomplete: SGLang "
            f"{decision.version} lacks {'; '.join(unreachable)}; the gates apply "
            f"all the same"
        )
    return summary
