"""The plugin as SGLang loads it: discovery, kill switch, unsupported releases,
missing hook targets, idempotence. Each case runs in a fresh interpreter, because
hooks, once applied, stay for the life of a process."""

from __future__ import annotations

import json

import pytest
from conftest import run_python, upstream_has

from sglang_pd_lean import record

GATE_TARGETS = {
    "pool": "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._build_hybrid_req_pool",
    "graph": "sglang.srt.model_executor.model_runner_components.cuda_graph_setup.capture_decode_graph",
    "warmup": "sglang.srt.model_executor.runner.base_runner.BaseRunner._dummy_run",
    "budget": "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._handle_max_mamba_cache",
    "draft_graph": "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs",
    "autotune": "sglang.srt.model_executor.runner.eager_runner.EagerRunner._autotune_buffers",
}


def expected_gates(version: str) -> set[str]:
    """The gates a release lacks (conftest's oracle, not the plugin's compat code)."""

    return {gate for gate in GATE_TARGETS if not upstream_has(gate)}


SCRIPT = """
import io, json, logging
log = io.StringIO()
logging.basicConfig(level=logging.INFO, stream=log)
{prelude}
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
{after}
import pkgutil
targets = {targets!r}
def wrapped(target):
    owner, attr = target.rsplit(".", 1)
    obj = pkgutil.resolve_name(owner)
    raw = obj.__dict__.get(attr) if isinstance(obj, type) else getattr(obj, attr)
    return hasattr(raw, "__wrapped__")

from sglang_pd_lean import census
from sglang.srt.mem_cache.memory_pool import MambaPool
inputs = census.Inputs(model="qwen3-next-80b-a3b", tp=2, max_running_requests=4, context_length=256)
mc, _ = census.prepare(inputs)
with census.parallel(tp=2), census.published(**census.server_fields(inputs, "prefill")) as sa:
    conf = census.configurator(mc, sa, is_draft_worker=False, layers=(0, mc.num_hidden_layers))
    pool = census.build_request_pool(conf, 4)
print("RESULT" + json.dumps({{
    "wrapped": {{name: wrapped(t) for name, t in targets.items()}},
    "hooks": {{t: len(h) for t, h in HookRegistry._hooks.items()}},
    "prefill_verify_state": isinstance(pool.mamba_pool.mamba_cache, MambaPool.SpeculativeState),
    "log": log.getvalue(),
}}))
"""


def run_plugin(prelude: str = "", after: str = "", env: dict | None = None) -> dict:
    proc = run_python(
        SCRIPT.format(prelude=prelude, after=after, targets=GATE_TARGETS), env=env
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


def our_lines(log: str, level: str) -> list[str]:
    return [
        line
        for line in log.splitlines()
        if line.startswith(f"{level}:sglang_pd_lean") and "[sglang-pd-lean]" in line
    ]


@pytest.fixture(scope="module")
def version():
    import sglang

    return sglang.__version__


def test_load_plugins_discovers_the_plugin_and_applies_its_hooks(version):
    result = run_plugin()
    applied = {name for name, is_wrapped in result["wrapped"].items() if is_wrapped}
    assert applied == expected_gates(version)
    assert "pd_lean -> sglang_pd_lean.plugin:register" in result["log"]
    # Upstream (0.5.18+) or the plugin: either way a prefill target has no verify state.
    assert result["prefill_verify_state"] is False


def test_register_twice_registers_each_hook_once(version):
    result = run_plugin(
        after=(
            "import sglang.srt.plugins as p; from sglang_pd_lean.plugin import register\n"
            "assert register() is False\n"
            "p._plugins_loaded = False; load_plugins()"
        )
    )
    # Every needed gate's hook and the two reporting hooks, each once.
    reporting = {hook.target for hook in record.hooks()}
    needed = {GATE_TARGETS[gate] for gate in expected_gates(version)}
    assert set(result["hooks"]) == needed | reporting
    assert all(count == 1 for count in result["hooks"].values())


def test_kill_switch_leaves_sglang_upstream(version):
    result = run_plugin(env={"SGLANG_PD_LEAN": "0"})
    assert not any(result["wrapped"].values())
    assert result["hooks"] == {}
    assert result["prefill_verify_state"] is ("pool" in expected_gates(version))


def test_plugin_left_out_of_sglang_plugins_leaves_sglang_upstream(version):
    result = run_plugin(env={"SGLANG_PLUGINS": "some_other_plugin"})
    assert not any(result["wrapped"].values())
    assert result["prefill_verify_state"] is ("pool" in expected_gates(version))


def test_unsupported_release_warns_once_and_registers_nothing(version):
    result = run_plugin(
        prelude=(
            "import importlib.metadata as md\n"
            "_real = md.version\n"
            "md.version = lambda name: '0.6.0' if name == 'sglang' else _real(name)"
        )
    )
    warnings = our_lines(result["log"], "WARNING")
    assert len(warnings) == 1 and "SGLang 0.6.0" in warnings[0]
    assert not any(result["wrapped"].values())
    assert result["prefill_verify_state"] is ("pool" in expected_gates(version))


def test_missing_hook_target_warns_once_and_registers_nothing(version):
    needed = sorted(expected_gates(version))
    if not needed:
        pytest.skip(f"SGLang {version} needs no gate of the plugin")
    owner, attr = GATE_TARGETS[needed[0]].rsplit(".", 1)
    module, cls = owner.rsplit(".", 1)
    # Gone from the class and every base it could inherit it from.
    prelude = (
        f"import {module} as m\n"
        f"for k in m.{cls}.__mro__:\n"
        f"    if {attr!r} in vars(k): delattr(k, {attr!r})"
    )
    result = run_plugin(prelude=prelude)
    warnings = our_lines(result["log"], "WARNING")
    assert len(warnings) == 1 and attr in warnings[0] and version in warnings[0]
    assert not any(result["wrapped"].values())
    assert result["prefill_verify_state"] is ("pool" in expected_gates(version))


def test_scheduler_reports_the_record_in_its_internal_state(version):
    """Both reporting hooks are registered once (the live ``/server_info`` is the
    e2e suite's), and the record travels in SGLang's own ``GetInternalStateReqOutput``
    through msgpack, as the scheduler sends it."""
    result = run_plugin(
        after=(
            "import msgspec\n"
            "from sglang.srt.managers.io_struct import GetInternalStateReqOutput\n"
            "from sglang_pd_lean import compat, record\n"
            "out = GetInternalStateReqOutput(internal_state={'x': 1})\n"
            "record.add_to_internal_state(out)\n"
            "back = msgspec.msgpack.decode(msgspec.msgpack.encode(out.internal_state))\n"
            "plan = {g.name: g.state for g in compat.plan()}\n"
            "assert back['pd_lean']['gates'] == plan, (back, plan)\n"
            "assert back['pd_lean']['sglang_version'] == " + repr(version) + "\n"
            "assert back['x'] == 1"
        )
    )
    for hook in record.hooks():
        assert result["hooks"][hook.target] == 1


def test_registration_summary_is_logged_again_once_a_scheduler_starts():
    """A scheduler configures logging after load_plugins(): the summary, swallowed
    then, is logged once by the hook before ``Scheduler.__init__``."""
    from sglang_pd_lean import record as rec

    proc = run_python(
        "import logging, sys\n"
        "from sglang.srt.plugins import load_plugins\n"
        "load_plugins()\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s', force=True)\n"
        "from sglang_pd_lean import record\n"
        "record.announce(); record.announce()\n"
        "print('STATE', record.snapshot()['gates'])\n"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("[sglang-pd-lean] SGLang")
    ]
    assert len(lines) == 1, proc.stdout
    assert all(f"{gate} gate" in lines[0] for gate in GATE_TARGETS)
    assert rec.SCHEDULER in {h.target.rsplit(".", 1)[0] for h in rec.hooks()}


def test_register_without_sglang_says_sglang_is_not_installed():
    """Called outside SGLang (no distribution installed): one WARNING that says so,
    not "SGLang None is not a supported release"."""
    proc = run_python(
        "import io, logging, importlib.metadata as md\n"
        "log = io.StringIO(); logging.basicConfig(level=logging.INFO, stream=log)\n"
        "_real = md.version\n"
        "def version(name):\n"
        "    if name == 'sglang':\n"
        "        raise md.PackageNotFoundError(name)\n"
        "    return _real(name)\n"
        "md.version = version\n"
        "from sglang_pd_lean.plugin import register\n"
        "assert register() is False\n"
        "print(log.getvalue())"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = our_lines(proc.stdout, "WARNING")
    assert len(warnings) == 1 and "SGLang is not installed" in warnings[0]
    assert "None" not in warnings[0]
