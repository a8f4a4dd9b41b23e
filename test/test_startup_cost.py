"""What the plugin costs a process at start-up, by the process SGLang starts.

Each case calls SGLang's own entry function of one process kind in a fresh
interpreter (the launcher's ``python -m sglang.launch_server``, ``Engine.__init__``,
``run_detokenizer_process``, ``run_data_parallel_controller_process``,
``run_scheduler_process``), with arguments that let it reach its own
``load_plugins()`` and fail right after (no server starts). ``load_plugins`` is
wrapped where the entry function looks it up, to see what that one call imported
and which hooks it left in ``HookRegistry``. No process may import anything because
of the plugin that SGLang does not import there anyway (the same call under the kill
switch). A process that builds no model registers no hook, or only the launch hook
where SGLang's scheduler class was already loaded there; a scheduler rank registers
only the launch hook. The launch hook itself, given a launch, registers the gates
``compat.decide()`` names but those in a speculative worker module that SGLang's own
``create_worker`` does not import for that launch, and imports no other
speculative module than that call does.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_python

from sglang_pd_lean import compat, plugin, record
from sglang_pd_lean.upstream import names_of

SCRIPT = """
import json, sys
import sglang.srt.plugins as plugins
from sglang.srt.plugins.hook_registry import HookRegistry
seen = {{}}
real = plugins.load_plugins
def wrapped_load_plugins():
    before = set(sys.modules)
    seen["scheduler_loaded"] = "sglang.srt.managers.scheduler" in sys.modules
    real()
    seen["imported"] = sorted(set(sys.modules) - before)
    seen["hooks"] = sorted(HookRegistry._hooks)
plugins.load_plugins = wrapped_load_plugins
{call}
{after}
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


# After a scheduler rank's load_plugins(): the launch of ALGORITHM, given to the
# plugin's launch hook; under the kill switch, what the rank imports anyway for it:
# SGLang's own create_worker, and the model runner every rank builds.
LAUNCH = """
import types
args = types.SimpleNamespace(speculative_algorithm={algorithm!r},
                             enable_multi_layer_eagle=False,
                             disable_overlap_schedule=True)
before = set(sys.modules)
from sglang_pd_lean import compat, plugin
if compat.kill_switch_on():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    algorithm = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    if not algorithm.is_none():
        algorithm.create_worker(args)
    import sglang.srt.model_executor.model_runner
else:
    plugin.launch(None, args)
seen["launch_imported"] = sorted(set(sys.modules) - before)
seen["launch_hooks"] = sorted(HookRegistry._hooks)
"""


def load_plugins_in(kind: str, kill_switch: bool = False, after: str = "") -> dict:
    env = {"SGLANG_PD_LEAN": "0"} if kill_switch else None
    proc = run_python(SCRIPT.format(call=CALLS[kind], after=after), env=env)
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


def foreign(with_plugin: dict, upstream: dict, key: str = "imported") -> set[str]:
    """What the plugin made the process import that SGLang did not."""
    extra = set(with_plugin[key]) - set(upstream[key])
    return {module for module in extra if not own(module)}


@pytest.mark.parametrize("kind", ["launcher", "engine", "detokenizer", "dp_controller"])
def test_a_process_that_builds_no_model_imports_nothing_and_hooks_at_most_the_launch(
    kind,
):
    if not reaches_load_plugins(kind):
        pytest.skip(f"this SGLang's {kind} does not load plugins")
    with_plugin = load_plugins_in(kind)
    upstream = load_plugins_in(kind, kill_switch=True)
    assert foreign(with_plugin, upstream) == set()
    assert upstream["hooks"] == []
    # Only where SGLang had already loaded its scheduler class here: a scheduler
    # built in this process after all still gets its gates.
    expected = [plugin.LAUNCH_TARGET] if with_plugin["scheduler_loaded"] else []
    assert with_plugin["hooks"] == expected


def _expected_launch_hooks(speculative_modules: set[str], speculative: bool):
    """Every hook target compat.decide() names for this release, but a gate whose
    code is in a speculative worker module SGLang did not import for the launch;
    none of them without speculative decoding; the record's and the launch hook."""
    expected = {plugin.LAUNCH_TARGET} | {hook.target for hook in record.hooks()}
    for gate in compat.decide().plans:
        if gate.state != compat.GateState.NEEDED or not speculative:
            continue
        for hook in gate.hooks:
            module = hook.target.rsplit(".", 2)[0]
            in_worker = hook.target.startswith("sglang.srt.speculative.")
            if not in_worker or module in speculative_modules:
                expected.add(hook.target)
    return expected


@pytest.mark.parametrize("algorithm", [None, "EAGLE"])
def test_a_scheduler_rank_registers_the_launch_hook_then_what_the_launch_uses(
    algorithm,
):
    after = LAUNCH.format(algorithm=algorithm)
    with_plugin = load_plugins_in("scheduler", after=after)
    upstream = load_plugins_in("scheduler", kill_switch=True, after=after)
    # A scheduler rank's load_plugins(): only the launch hook, nothing imported.
    assert foreign(with_plugin, upstream) == set()
    assert with_plugin["hooks"] == [plugin.LAUNCH_TARGET]

    def speculative(seen):
        return {
            module
            for module in seen["launch_imported"]
            if module.startswith("sglang.srt.speculative.")
        }

    # No speculative module a rank of this launch would not import anyway (every
    # module of a real rank: benchmark/startup.py, which starts a server for it).
    assert speculative(with_plugin) <= speculative(upstream)
    if algorithm:
        assert speculative(with_plugin)  # the worker's own modules
    assert set(with_plugin["launch_hooks"]) == _expected_launch_hooks(
        speculative(with_plugin), speculative=algorithm is not None
    )


def test_one_hook_target_per_upstream_function():
    """The record's budget hook shares the budget gate's target: HookRegistry
    groups by target, so each function is wrapped (and propagated) once."""
    decision = compat.decide()
    gate_targets = [hook.target for hook in decision.hooks]
    assert len(gate_targets) == len(set(gate_targets))


# In an Engine process after its load_plugins(): a Scheduler built here after all,
# through SGLang's own (hooked) Scheduler.__init__, with a NEXTN-like launch. The
# real __init__ then fails on the stand-in arguments; the hook ran before it.
LATE_SCHEDULER = """
import types
from sglang.srt.managers.scheduler import Scheduler
args = types.SimpleNamespace(speculative_algorithm="EAGLE",
                             enable_multi_layer_eagle=False,
                             disable_overlap_schedule=True)
try:
    Scheduler(server_args=args, port_args=None)
except Exception:
    pass
seen["patched"] = sorted(HookRegistry._patched)
seen["speculative"] = sorted(m for m in sys.modules
                             if m.startswith("sglang.srt.speculative."))
"""


def test_a_scheduler_built_later_in_a_launcher_process_gets_its_gates():
    seen = load_plugins_in("engine", after=LATE_SCHEDULER)
    if not seen["scheduler_loaded"]:
        pytest.skip("this SGLang's Engine has not loaded the scheduler there")
    expected = _expected_launch_hooks(set(seen["speculative"]), speculative=True)
    assert expected - {plugin.LAUNCH_TARGET}
    assert set(seen["patched"]) == expected
