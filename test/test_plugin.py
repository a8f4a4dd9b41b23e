"""The plugin as SGLang loads it: discovery, kill switch, unsupported releases,
missing hook targets, idempotence, the record's reporting hooks.

Discovery through the entry point and what a process ends up with (functions
wrapped, a prefill target's pool) run in a fresh interpreter, because hooks, once
applied, stay for the life of a process. What ``register()`` decides runs here, on
an empty ``HookRegistry`` with the plugin and the record reset (``fresh_plugin``)."""

from __future__ import annotations

import json
import logging
import os

import pytest
from helpers import run_python, sglang_minor, upstream_has

from sglang_pd_lean import audit, compat, plugin, record, seams

GATE_TARGETS = {
    "pool": "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._build_hybrid_req_pool",
    "graph": "sglang.srt.model_executor.model_runner_components.cuda_graph_setup.capture_decode_graph",
    "warmup": "sglang.srt.model_executor.runner.base_runner.BaseRunner._dummy_run",
    "budget": "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._handle_max_mamba_cache",
    "draft_graph": "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs",
    "autotune": "sglang.srt.model_executor.runner.eager_runner.EagerRunner._autotune_buffers",
    "frozen_kv_graph": "sglang.srt.speculative.frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker._capture_cuda_graphs",
    "multi_layer_graph": "sglang.srt.speculative.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker._capture_cuda_graphs",
    "dflash_graph": "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2.init_cuda_graphs",
    "adaptive": "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController.init_states",
}
# Where 0.5.14 to 0.5.15.post1 do the same (their wheels, read: docs/older-releases.md).
if sglang_minor() < 16:
    GATE_TARGETS.update(
        pool="sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin._init_pools",
        graph="sglang.srt.model_executor.model_runner.ModelRunner.init_decode_cuda_graph",
        budget="sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin.handle_max_mamba_cache",
    )


def expected_gates(version: str) -> set[str]:
    """The gates release ``version`` lacks (conftest's oracle, not the plugin's
    compat code)."""
    return {gate for gate in GATE_TARGETS if not upstream_has(gate, version)}


# test/: the subprocess imports the placeholder model config from here.
TEST = os.path.dirname(os.path.abspath(__file__))
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
import sys
sys.path.insert(0, {test!r})
from placeholder import Inputs, prepare
inputs = Inputs(model="qwen3-next-80b-a3b", tp=2, max_running_requests=4, context_length=256)
mc, _ = prepare(inputs)
with census.parallel(tp=2), census.published(disaggregation_mode="prefill", max_running_requests=4, max_mamba_cache_size=12, tp_size=2, speculative_algorithm="EAGLE", speculative_num_draft_tokens=4, speculative_num_steps=3, speculative_eagle_topk=1) as sa:
    conf = census.configurator(mc, sa, is_draft_worker=False)
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
        SCRIPT.format(prelude=prelude, after=after, targets=GATE_TARGETS, test=TEST),
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


@pytest.fixture(scope="module")
def version():
    import sglang

    return sglang.__version__


def test_load_plugins_discovers_the_plugin_and_applies_its_hooks(version):
    result = run_plugin()
    applied = {name for name, is_wrapped in result["wrapped"].items() if is_wrapped}
    # The needed gates' targets, and a reporting hook's target whatever the release.
    reporting = {hook.target for hook in record.hooks()}
    also = {name for name, target in GATE_TARGETS.items() if target in reporting}
    assert applied == expected_gates(version) | also
    assert "pd_lean -> sglang_pd_lean.plugin:register" in result["log"]
    # Upstream (0.5.18+) or the plugin: either way a prefill target has no verify state.
    assert result["prefill_verify_state"] is False


def test_register_twice_registers_each_hook_once(version, fresh_plugin):
    assert plugin.register() is True
    assert plugin.register() is False
    # Every needed gate's hook and the reporting hooks, each once.
    reporting = [hook.target for hook in (*record.hooks(), *audit.hooks())]
    needed = [GATE_TARGETS[gate] for gate in expected_gates(version)]
    assert set(fresh_plugin._hooks) == set(needed) | set(reporting)
    for target, hooks in fresh_plugin._hooks.items():
        assert len(hooks) == (needed + reporting).count(target), target


def test_expected_gates_follow_the_release_asked_about():
    assert expected_gates("0.5.17") == set(GATE_TARGETS)
    assert expected_gates("0.5.23") == {
        "draft_graph",
        "autotune",
        "frozen_kv_graph",
        "multi_layer_graph",
        "dflash_graph",
        "adaptive",
    }


def test_kill_switch_leaves_sglang_upstream(version):
    result = run_plugin(env={"SGLANG_PD_LEAN": "0"})
    assert not any(result["wrapped"].values())
    assert result["hooks"] == {}
    assert result["prefill_verify_state"] is ("pool" in expected_gates(version))


def test_plugin_left_out_of_sglang_plugins_leaves_sglang_upstream(version):
    result = run_plugin(env={"SGLANG_PLUGINS": "some_other_plugin"})
    assert not any(result["wrapped"].values())
    assert result["prefill_verify_state"] is ("pool" in expected_gates(version))


def our_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("sglang_pd_lean")
    ]


def registered_warning_list(caplog, head: str, tail: str) -> list[str]:
    """``plugin.register()``'s one WARNING that starts with ``head`` and ends with
    ``tail``: the "; "-separated entries between them."""
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        plugin.register()
    warnings = [w for w in our_warnings(caplog) if w.startswith(head)]
    assert len(warnings) == 1
    assert warnings[0].endswith(tail)
    return warnings[0][len(head) : -len(tail)].split("; ")


def test_unsupported_release_warns_once_and_registers_nothing(
    fresh_plugin, monkeypatch, caplog
):
    monkeypatch.setattr(compat, "sglang_version", lambda: "0.6.0")
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        assert plugin.register() is False
    warnings = our_warnings(caplog)
    assert len(warnings) == 1 and "SGLang 0.6.0" in warnings[0]
    assert dict(fresh_plugin._hooks) == {}


@pytest.mark.parametrize("gone", sorted(GATE_TARGETS))
def test_a_missing_hook_target_turns_off_only_its_gate_and_those_requiring_it(
    gone, version, fresh_plugin, monkeypatch, caplog
):
    import pkgutil

    from sglang_pd_lean.gates import all_gates

    needed = expected_gates(version)
    if gone not in needed:
        pytest.skip(f"SGLang {version} does not need the {gone} gate")
    attr = GATE_TARGETS[gone].rsplit(".", 1)[1]
    # Gone from the module, or the class and every base it could inherit it from
    # (until teardown): the target, and the gate's other candidates where this
    # release has them too (0.5.16 and 0.5.17 also have the model runner's
    # init_decode_cuda_graph, the graph gate's target on 0.5.15).
    for target in (GATE_TARGETS[gone], *seams.HOOK_TARGETS[gone]):
        owner, name = target.rsplit(".", 1)
        try:
            holder = pkgutil.resolve_name(owner)
        except (ImportError, AttributeError):
            continue
        for cls in holder.__mro__ if isinstance(holder, type) else (holder,):
            if name in vars(cls):
                monkeypatch.delattr(cls, name)
    off = {gone} | {g.name for g in all_gates() if gone in g.requires}
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        assert plugin.register() is bool(needed - off)
    warnings = our_warnings(caplog)
    gates_off = [w for w in warnings if "gate(s) off" in w]
    assert len(gates_off) == 1 and attr in gates_off[0] and version in gates_off[0]
    for name in off & needed:
        assert f"{name} (" in gates_off[0], name
    # A reporting hook on the same target is lost too, and said once.
    reporting = {h.target for h in record.hooks()}
    incomplete = [w for w in warnings if "record incomplete" in w]
    assert len(incomplete) == (GATE_TARGETS[gone] in reporting)
    assert len(warnings) == 1 + len(incomplete)
    # Per gate, all or nothing: each other needed gate is registered whole, and
    # every reporting hook whose target is there.
    assert set(fresh_plugin._hooks) == {GATE_TARGETS[name] for name in needed - off} | (
        reporting - {GATE_TARGETS[gone]}
    )


def test_scheduler_reports_the_record_in_its_internal_state(version, fresh_plugin):
    """Every reporting hook is registered once (the live ``/server_info`` is the
    e2e suite's), and the record travels in SGLang's own ``GetInternalStateReqOutput``
    through msgpack, as the scheduler sends it."""
    import msgspec
    from sglang.srt.managers.io_struct import GetInternalStateReqOutput

    assert plugin.register() is True
    gate_targets = {GATE_TARGETS[name] for name in expected_gates(version)}
    reporting = (*record.hooks(), *audit.hooks())
    for hook in record.hooks():
        ours = sum(h.target == hook.target for h in reporting)
        ours += hook.target in gate_targets
        assert len(fresh_plugin._hooks[hook.target]) == ours, hook.target
    out = GetInternalStateReqOutput(internal_state={"x": 1})
    record.add_to_internal_state(out)
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(out.internal_state))
    assert back["pd_lean"]["gates"] == {g.name: g.state for g in compat.plan()}
    assert back["pd_lean"]["sglang_version"] == version
    assert back["x"] == 1


def test_registration_summary_is_logged_again_once_a_scheduler_starts(
    fresh_plugin, caplog
):
    """A scheduler configures logging after load_plugins(): the summary, swallowed
    then, is logged once by the hook before ``Scheduler.__init__``."""
    assert plugin.register() is True
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        record.announce()
        record.announce()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("[sglang-pd-lean] SGLang")
    ]
    assert len(lines) == 1
    assert all(f"{gate} gate" in lines[0] for gate in GATE_TARGETS)
    assert record.SCHEDULER in {h.target.rsplit(".", 1)[0] for h in record.hooks()}


def test_register_without_sglang_says_sglang_is_not_installed(
    fresh_plugin, monkeypatch, caplog
):
    """Called outside SGLang (no distribution installed): one WARNING that says so,
    not "SGLang None is not a supported release"."""
    monkeypatch.setattr(compat, "sglang_version", lambda: None)
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        assert plugin.register() is False
    warnings = our_warnings(caplog)
    assert len(warnings) == 1 and "SGLang is not installed" in warnings[0]
    assert "None" not in warnings[0]
    assert dict(fresh_plugin._hooks) == {}


# --- what register() leaves in SGLang's registry and says ----------------------


def test_before_register_decides_doctor_shows_the_installed_sglangs_decision(
    version, fresh_plugin
):
    decision = plugin.decision()
    assert decision.version == version and decision.refusal is None


def test_after_register_doctor_shows_the_decision_it_acted_on(
    version, fresh_plugin, monkeypatch
):
    """The process refused (an unsupported release): doctor's view is that refusal,
    not what compat would decide now."""
    installed = compat.sglang_version
    monkeypatch.setattr(compat, "sglang_version", lambda: "0.6.0")
    assert plugin.register() is False
    monkeypatch.setattr(compat, "sglang_version", installed)
    assert plugin.decision().version == "0.6.0"
    assert compat.decide().version == version


def test_the_kill_switch_registers_nothing_and_says_so_at_info(
    fresh_plugin, monkeypatch, caplog
):
    monkeypatch.setenv("SGLANG_PD_LEAN", "0")
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        assert plugin.register() is False
    ours = [r for r in caplog.records if r.name.startswith("sglang_pd_lean")]
    assert [r.levelno for r in ours] == [logging.INFO]
    assert "SGLANG_PD_LEAN=0" in ours[0].getMessage()
    assert dict(fresh_plugin._hooks) == {}


def test_each_hook_is_registered_with_its_own_function_and_timing(
    version, fresh_plugin
):
    """SGLang's registry holds each needed gate's AROUND hook, then the record's
    reporting hooks: the scheduler announce before ``__init__``, the record added
    after ``get_internal_state``, the sizing read before the budget function, and
    the audit's warning about unaudited draft workers after ``__init__``."""
    from sglang.srt.plugins.hook_registry import HookType

    from sglang_pd_lean.gates import all_gates

    assert plugin.register() is True
    expected: dict[str, list] = {}
    for gate in all_gates():
        if gate.name in expected_gates(version):
            expected.setdefault(GATE_TARGETS[gate.name], []).append(
                (HookType.AROUND, gate.around)
            )
    for target, fn, timing in [
        (f"{record.SCHEDULER}.__init__", record.announce, HookType.BEFORE),
        (f"{record.SCHEDULER}.__init__", record.to_metrics, HookType.AFTER),
        (
            f"{record.SCHEDULER}.get_internal_state",
            record.add_to_internal_state,
            HookType.AFTER,
        ),
        (GATE_TARGETS["budget"], record.sizing_received, HookType.BEFORE),
        (f"{record.SCHEDULER}.__init__", audit.warn_unaudited, HookType.AFTER),
    ]:
        expected.setdefault(target, []).append((timing, fn))
    held = {
        target: [(entry[0], entry[1]) for entry in hooks]
        for target, hooks in fresh_plugin._hooks.items()
    }
    assert held == expected


def test_the_registration_summary_names_every_gate_with_its_state(
    version, fresh_plugin, caplog
):
    """Logged at INFO once by register(): each gate and its state, from the release
    oracle (replayssm: every supported SGLang refuses its flag on a prefill server)."""
    native = compat.GateState.NATIVE.value
    states = [
        f"{gate} gate "
        + ("applied by the plugin" if gate in expected_gates(version) else native)
        for gate in GATE_TARGETS
    ]
    states.append("replayssm gate not applicable")
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        assert plugin.register() is True
    lines = [
        r
        for r in caplog.records
        if r.name == "sglang_pd_lean.plugin"
        and r.getMessage().startswith("[sglang-pd-lean] SGLang")
    ]
    assert [r.levelno for r in lines] == [logging.INFO]
    assert lines[0].getMessage() == (
        f"[sglang-pd-lean] SGLang {version}: " + ", ".join(states)
    )


def test_the_gates_off_warning_lists_each_gate_with_why_and_points_to_doctor(
    version, fresh_plugin, monkeypatch, caplog
):
    """The pool gate's target gone: the pool gate, and the budget gate where this
    release still needs it, each with why, then what the operator can do."""
    from sglang_pd_lean.gates import all_gates

    gone = "sglang.srt.mem_cache.kv_cache_configurator.Gone"
    pool = {g.name: g for g in all_gates()}["pool"]
    monkeypatch.setattr(type(pool), "targets", (gone,))
    entries = registered_warning_list(
        caplog,
        f"[sglang-pd-lean] SGLang {version}: gate(s) off: ",
        ". The other gates apply; `sglang-pd-lean doctor` says more.",
    )
    assert entries[0].startswith(f"pool (no hook target resolves: {gone} (")
    budget = ["budget (needs the pool gate, which is not applied)"]
    assert entries[1:] == (budget if "budget" in expected_gates(version) else [])


def test_every_reporting_target_sglang_lacks_is_named_and_the_rest_registered(
    version, fresh_plugin, monkeypatch, caplog
):
    """``Scheduler.get_internal_state`` and the budget function gone: one WARNING
    names both, in order; the scheduler announce is registered all the same."""
    import pkgutil

    gone = [f"{record.SCHEDULER}.get_internal_state", GATE_TARGETS["budget"]]
    for target in gone:
        owner, attr = target.rsplit(".", 1)
        for cls in pkgutil.resolve_name(owner).__mro__:
            if attr in vars(cls):
                monkeypatch.delattr(cls, attr)
    named = registered_warning_list(
        caplog,
        f"[sglang-pd-lean] /server_info record incomplete: SGLang {version} lacks ",
        "; the gates apply all the same",
    )
    assert [entry.split(" ", 1)[0] for entry in named] == gone
    assert f"{record.SCHEDULER}.__init__" in fresh_plugin._hooks
