"""What the plugin costs a process at start-up, by the process SGLang starts.

Each case calls SGLang's own entry function of one process kind in a fresh
interpreter (the launcher's ``python -m sglang.launch_server``, ``Engine.__init__``,
``run_detokenizer_process``, ``run_data_parallel_controller_process``,
``run_scheduler_process``), with arguments that let it reach its own
``load_plugins()`` and fail right after (no server starts). ``load_plugins`` is
wrapped where the entry function looks it up, to see what that one call imported
and which hooks it left in ``HookRegistry``. A process that builds no model must
import nothing because of the plugin that SGLang does not import there anyway (the
same call under the kill switch) and register no hook; a scheduler rank gets every
hook ``compat.decide()`` names.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_python

from sglang_pd_lean import compat, record
from sglang_pd_lean.upstream import names_of

SCRIPT = """
import json, sys
import sglang.srt.plugins as plugins
from sglang.srt.plugins.hook_registry import HookRegistry
seen = {{}}
real = plugins.load_plugins
def wrapped_load_plugins():
    before = set(sys.modules)
    real()
    seen["imported"] = sorted(set(sys.modules) - before)
    seen["hooks"] = sorted(HookRegistry._hooks)
plugins.load_plugins = wrapped_load_plugins
{call}
print("RESULT" + json.dumps(seen))
"""

# Each process kind: the call that reaches load_plugins() in SGLang's own code.
CALLS = {
    "launcher": (
        "import runpy\n"
        "sys.argv = ['sglang.launch_server', '--help']\n"
        "try:\n"
        "    runpy.run_module('sglang.launch_server', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
    ),
    "engine": (
        "import sglang.srt.entrypoints.engine as m\n"
        "m.load_plugins = wrapped_load_plugins\n"
        "try:\n"
        "    m.Engine()\n"
        "except Exception:\n"
        "    pass\n"
    ),
    "detokenizer": (
        "import sglang.srt.managers.detokenizer_manager as m\n"
        "m.load_plugins = wrapped_load_plugins\n"
        "try:\n"
        "    m.run_detokenizer_process(None, None)\n"
        "except Exception:\n"
        "    pass\n"
    ),
    "dp_controller": (
        "import sglang.srt.managers.data_parallel_controller as m\n"
        "m.load_plugins = wrapped_load_plugins\n"
        "try:\n"
        "    m.run_data_parallel_controller_process(None, None, None)\n"
        "except Exception:\n"
        "    pass\n"
    ),
    "scheduler": (
        "import inspect\n"
        "import sglang.srt.managers.scheduler as m\n"
        "m.load_plugins = wrapped_load_plugins\n"
        "params = inspect.signature(m.run_scheduler_process).parameters\n"
        "required = [p for p in params.values() if p.default is p.empty]\n"
        "try:\n"
        "    m.run_scheduler_process(*[None] * len(required))\n"
        "except Exception:\n"
        "    pass\n"
    ),
}
ENTRY = {
    "detokenizer": "sglang.srt.managers.detokenizer_manager.run_detokenizer_process",
    "dp_controller": (
        "sglang.srt.managers.data_parallel_controller."
        "run_data_parallel_controller_process"
    ),
}


def load_plugins_in(kind: str, kill_switch: bool = False) -> dict:
    env = {"SGLANG_PD_LEAN": "0"} if kill_switch else None
    proc = run_python(SCRIPT.format(call=CALLS[kind]), env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    seen = json.loads(lines[-1][len("RESULT") :])
    assert "imported" in seen, f"{kind}: SGLang's entry never called load_plugins()"
    return seen


def reaches_load_plugins(kind: str) -> bool:
    """Whether this release's entry function of ``kind`` calls load_plugins()."""
    return kind not in ENTRY or "load_plugins" in names_of(ENTRY[kind])


def own(module: str) -> bool:
    return module == "sglang_pd_lean" or module.startswith("sglang_pd_lean.")


@pytest.mark.parametrize("kind", ["launcher", "engine", "detokenizer", "dp_controller"])
def test_a_process_that_builds_no_model_imports_and_hooks_nothing_for_the_plugin(kind):
    if not reaches_load_plugins(kind):
        pytest.skip(f"this SGLang's {kind} does not load plugins")
    with_plugin = load_plugins_in(kind)
    upstream = load_plugins_in(kind, kill_switch=True)
    extra = set(with_plugin["imported"]) - set(upstream["imported"])
    assert {module for module in extra if not own(module)} == set()
    assert with_plugin["hooks"] == upstream["hooks"] == []


def test_a_scheduler_rank_gets_every_hook_the_release_needs():
    seen = load_plugins_in("scheduler")
    decision = compat.decide()
    expected = {hook.target for hook in decision.hooks}
    expected |= {hook.target for hook in record.hooks()}
    assert expected and set(seen["hooks"]) == expected


def test_one_hook_target_per_upstream_function():
    """The record's budget hook shares the budget gate's target: HookRegistry
    groups by target, so each function is wrapped (and propagated) once."""
    decision = compat.decide()
    gate_targets = [hook.target for hook in decision.hooks]
    assert len(gate_targets) == len(set(gate_targets))
