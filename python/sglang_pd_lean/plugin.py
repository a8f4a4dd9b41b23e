"""SGLang general plugin entry point (group ``sglang.srt.plugins``, name ``pd_lean``).

    SGLANG_PLUGINS=pd_lean python -m sglang.launch_server --disaggregation-mode prefill ...
    SGLANG_PD_LEAN=0            # kill switch: SGLang stays exactly upstream

SGLang's ``load_plugins()`` calls ``register()`` in every process. It acts on
``compat.decide()``: on an unsupported release it logs one WARNING and registers
nothing; otherwise it registers every needed gate's hooks with ``HookRegistry``
(SGLang applies them) and the record's reporting hooks. All or nothing per gate: a
gate whose hook target this SGLang lacks is off, with the gates that require it, and
one WARNING names them and why; the others apply. A second call does nothing
(``reset()`` for tests).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_registered = False
_decision = None  # compat.Decision: what register() acted on


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

    from sglang_pd_lean import compat

    if compat.kill_switch_on():
        logger.info(f"[sglang-pd-lean] {compat.KILL_SWITCH}=0: no hooks registered")
        return False
    global _decision
    decision = _decision = compat.decide()
    if decision.refusal:
        logger.warning(f"[sglang-pd-lean] {decision.refusal}")
        return False

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_pd_lean import record
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
    # Each reporting hook on its own: a missing target costs only its part.
    unreachable = []
    for hook in record.hooks():
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
    # This process's logging may not be configured yet; a scheduler repeats the
    # summary once SGLang has configured it (record.announce).
    logger.info(summary)
    return True
