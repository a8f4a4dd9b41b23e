"""SGLang general plugin entry point (group ``sglang.srt.plugins``, name ``pd_lean``).

SGLang's ``load_plugins()`` calls ``register()`` in every process. It checks the
installed release and the kill switch, asks ``compat`` which gates this SGLang
still needs, and registers their hooks with ``HookRegistry`` (SGLang applies them).
All or nothing: on an unsupported release or a missing hook target it logs one
WARNING and registers nothing. Idempotent: a second call does nothing.

    SGLANG_PD_LEAN=0            # kill switch: SGLang stays exactly upstream
    SGLANG_PLUGINS=pd_lean      # SGLang's own allow-list of plugins
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_registered = False


def register() -> bool:
    """Register the needed gates' hooks; True if hooks were registered."""
    global _registered
    if _registered:
        return False
    _registered = True

    from sglang_pd_lean import compat

    version = compat.sglang_version()
    if compat.kill_switch_on():
        logger.info(f"[sglang-pd-lean] {compat.KILL_SWITCH}=0: no hooks registered")
        return False
    if version is None:
        logger.warning(
            "[sglang-pd-lean] SGLang is not installed in this environment: no hooks "
            "registered. Install a supported SGLang (0.5.16 to 0.5.23)."
        )
        return False
    if not compat.is_supported(version):
        logger.warning(
            f"[sglang-pd-lean] SGLang {version} is not a supported release "
            f"({compat.SUPPORTED[0]} to {compat.SUPPORTED[-1]}): no hooks registered, "
            f"SGLang runs as upstream. Install a supported SGLang or uninstall "
            f"sglang-pd-lean."
        )
        return False

    plans = compat.plan()
    hooks = [
        hook for gate in plans if gate.state == compat.NEEDED for hook in gate.hooks
    ]
    missing = compat.missing_targets([hook.target for hook in hooks])
    if missing:
        logger.warning(
            f"[sglang-pd-lean] SGLang {version} lacks hook target(s) "
            f"{'; '.join(missing)}: no hooks registered, SGLang runs as upstream. "
            f"This SGLang build changed what the plugin hooks; report it with "
            f"`sglang-pd-lean doctor`."
        )
        return False

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_pd_lean import record

    for hook in hooks:
        HookRegistry.register(hook.target, hook.fn, HookType[hook.hook_type])
    summary = f"[sglang-pd-lean] SGLang {version}: " + ", ".join(
        f"{gate.name} gate {gate.state}" for gate in plans
    )
    record.registered(version, {gate.name: gate.state for gate in plans}, summary)
    reporting = record.hooks()
    unreachable = compat.missing_targets([hook.target for hook in reporting])
    if unreachable:
        logger.warning(
            f"[sglang-pd-lean] no /server_info record: SGLang {version} lacks "
            f"{'; '.join(unreachable)}; the gates apply all the same"
        )
    else:
        for hook in reporting:
            HookRegistry.register(hook.target, hook.fn, HookType[hook.hook_type])
    # This process's logging may not be configured yet; a scheduler repeats the
    # summary once SGLang has configured it (record.announce).
    logger.info(summary)
    return True
