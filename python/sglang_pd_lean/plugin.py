"""SGLang general plugin entry point (group ``sglang.srt.plugins``, name ``pd_lean``).

    SGLANG_PLUGINS=pd_lean python -m sglang.launch_server --disaggregation-mode prefill ...
    SGLANG_PD_LEAN=0            # kill switch: SGLang stays exactly upstream

SGLang's ``load_plugins()`` calls ``register()`` in every process; what it registers
depends on who called (``LOAD_PLUGINS_CALLERS``):

- a scheduler rank (``run_scheduler_process``): only the launch hook, BEFORE
  ``Scheduler.__init__``, which gets the launch's ``server_args`` (with the
  reporting hooks AFTER it: the record's ``/metrics`` gauges and the audit's
  warning, given now because ``HookRegistry`` wraps a target once). There ``launch()``
  registers the gates this launch uses and has ``HookRegistry`` apply them, before
  any worker is built: none without speculative decoding, and no gate whose code
  lives in a speculative worker module the launch's worker does not import (SGLang's
  ``create_worker`` says which). So a rank imports no SGLang module for the plugin
  that it would not import anyway, and ``load_plugins()`` walks SGLang's modules for
  one target instead of every gate's;
- a process that builds no model (the launcher: ``launch_server``, ``sglang serve``,
  ``Engine``; the detokenizer and the DP controller on releases that load plugins
  there): nothing, and no SGLang module imported, unless SGLang's scheduler class is already
  loaded there (``Engine``, the DP controller): then the same launch hook, so that a
  scheduler built in that process after all (in-process, or a forked child, which
  never calls ``load_plugins()`` again) still gets its gates;
- any caller the table does not know: every gate at once (if in doubt, gate).

The gates act on ``compat.decide()``: on an unsupported release one WARNING and
nothing registered. All or nothing per gate: a gate whose hook target this SGLang
lacks is off, with the gates that require it, and one WARNING names them and why;
the others apply. A second call does nothing (``reset()`` for tests). SGLang
0.5.15 to 0.5.23.
"""

from __future__ import annotations

import logging
import sys

from sglang_pd_lean.seams import SCHEDULER
from sglang_pd_lean.upstream import loaded

logger = logging.getLogger(__name__)

_registered = False
_decision = None  # compat.Decision: what register() acted on

# Who calls load_plugins(), by module and function ("<module>": the module's own
# code), and the process that is, where it builds no model (None: a scheduler
# rank). ``caller`` reads it: the innermost known caller decides.
LOAD_PLUGINS_CALLERS: tuple[tuple[str, str, str | None], ...] = (
    ("sglang.srt.managers.scheduler", "run_scheduler_process", None),
    ("sglang.launch_server", "<module>", "the launcher"),  # its __main__ block
    ("sglang.cli.serve", "serve", "the launcher"),
    ("sglang.srt.entrypoints.engine", "Engine.__init__", "the launcher"),
    ("sglang.srt.entrypoints.engine", "Engine._launch_subprocesses", "the launcher"),
    (
        "sglang.srt.managers.detokenizer_manager",
        "run_detokenizer_process",
        "the detokenizer",
    ),
    (
        "sglang.srt.managers.data_parallel_controller",
        "run_data_parallel_controller_process",
        "the data-parallel controller",
    ),
)

# The launch hook's target: the scheduler knows its launch before it builds a worker.
LAUNCH_TARGET = f"{SCHEDULER}.__init__"

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


def caller() -> tuple[str, str, str | None] | None:
    """The innermost ``LOAD_PLUGINS_CALLERS`` entry on the stack: who called
    ``load_plugins()`` (its third field: the process, where it builds no model; None
    for a scheduler rank). None for a caller the table does not know (if in doubt,
    gate). SGLang starts each of those processes with the spawn method, so each
    calls ``load_plugins()`` afresh."""
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        module = _frame_module(frame)
        for entry in LOAD_PLUGINS_CALLERS:
            known_module, function, _ = entry
            if module == known_module and _is(frame.f_code, function):
                return entry
        frame = frame.f_back
    return None


def reset() -> None:
    """Let the next ``register()`` and launch hook run again (tests; hooks already
    given to ``HookRegistry`` stay there: reset it too)."""
    global _registered, _decision, _launched
    _registered = False
    _decision = None
    _launched = False


def decision():
    """The ``compat.Decision`` this process's ``register()`` acted on; where it
    decided nothing (kill switch, or not called), the installed SGLang's now."""
    from sglang_pd_lean import compat

    return _decision or compat.decide()


def register() -> bool:
    """Register what this process needs; True if hooks were registered."""
    global _registered
    if _registered:
        return False
    _registered = True

    try:
        known = caller()
    except Exception:  # if in doubt, gate
        known = None
    process = known[2] if known else None  # a process that builds no model
    # Where SGLang's scheduler class is already loaded here (``Engine``, the DP
    # controller), a scheduler may still be built in this process (in-process, or a
    # forked child, which never calls load_plugins() again): it needs the launch hook.
    if process is not None and not loaded(SCHEDULER):
        # No SGLang module imported, no hook.
        logger.debug(f"[sglang-pd-lean] {process} builds no model: no hooks here")
        return False
    from sglang_pd_lean import compat

    if compat.kill_switch_on():
        logger.info(f"[sglang-pd-lean] {compat.KILL_SWITCH}=0: no hooks registered")
        return False
    if process is not None:
        _register_launch_hooks()
        logger.debug(
            f"[sglang-pd-lean] {process} builds no model: only the launch hook, "
            f"for a scheduler built here after all"
        )
        return True
    global _decision
    version = compat.sglang_version()
    refused = compat.refusal(version)
    if refused:  # the release alone decides: no gate looked up
        _decision = compat.Decision(version, (), (), (), refused, False)
        logger.warning(f"[sglang-pd-lean] {refused}")
        return False
    if known is not None:  # a scheduler rank: its Scheduler.__init__ knows the launch
        _register_launch_hooks()
        logger.debug(
            "[sglang-pd-lean] the gates are chosen when the scheduler starts, "
            "for its launch"
        )
        return True
    decision = _decision = compat.decide()
    summary = _register_hooks(decision)
    # This process's logging may not be configured yet; a scheduler repeats the
    # summary once SGLang has configured it (record.announce).
    logger.info(summary)
    return True


def _register_launch_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_pd_lean import audit, record

    HookRegistry.register(LAUNCH_TARGET, launch, HookType.BEFORE)
    # Every hook on the launch target is given now: HookRegistry wraps a target once.
    for hook in (record.metrics_hook(), *audit.hooks()):
        HookRegistry.register(hook.target, hook.fn, HookType[hook.when.value])


_launched = False


def launch(*args, **kwargs) -> None:
    """BEFORE ``Scheduler.__init__``: register the gates this launch uses, and
    have SGLang apply them before the scheduler builds any worker. A launch
    without speculative decoding uses none; a speculative one uses every gate
    but those whose code lives in a speculative worker module SGLang's
    ``create_worker`` did not import for it (DFlash's on an EAGLE launch). Where
    the launch cannot be read, every gate (if in doubt, gate). Never raises."""
    global _launched, _decision
    if _launched:
        return
    _launched = True
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry

        from sglang_pd_lean import compat

        try:
            server_args = kwargs["server_args"] if "server_args" in kwargs else args[1]
            unused = launch_scope(server_args)
        except Exception as exc:
            logger.warning(
                f"[sglang-pd-lean] cannot tell which gates this launch uses "
                f"({exc!r}): registering every gate"
            )
            unused = None
        decision = _decision = compat.decide(unused)
        if decision.refusal:
            logger.warning(f"[sglang-pd-lean] {decision.refusal}")
            return
        summary = _register_hooks(decision, launched=True)
        HookRegistry.apply_hooks()
        logger.info(summary)
    except Exception as exc:  # a start-up never breaks because of the plugin
        logger.warning(
            f"[sglang-pd-lean] no gate registered for this launch: {exc!r}; SGLang "
            f"runs as upstream"
        )


def launch_scope(server_args):
    """Why each gate's code never runs in the launch of ``server_args`` (a function
    of the gate; None where it may). Asks SGLang: ``SpeculativeAlgorithm`` for the
    algorithm, and its ``create_worker`` for the worker class the scheduler will
    create, which imports that worker's modules as the scheduler's own call would."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean.upstream import loaded

    algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
    if algorithm.is_none():
        return lambda gate: "no speculative decoding"
    if not isinstance(algorithm, SpeculativeAlgorithm):
        return None  # a registered custom algorithm: its factory is not ours to run
    worker = algorithm.create_worker(server_args)
    name = getattr(worker, "__name__", repr(worker))

    def unused(gate) -> str | None:
        if not gate.in_speculative_worker:
            return None
        if any(loaded(target) for target in gate.targets):
            return None
        return f"its code is not {name}'s"

    return unused


def _register_hooks(decision, launched: bool = False) -> str:
    """Give ``HookRegistry`` the needed gates' hooks and the record's reporting
    hooks, warn about what is off; the registration summary. ``launched``: from
    the launch hook, whose ``Scheduler.__init__`` hooks are already in place."""
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
    reporting = (*record.hooks(), *audit.hooks())
    if launched:
        reporting = [hook for hook in reporting if hook.target != LAUNCH_TARGET]
    for hook in reporting:
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
