"""compat: release parsing, and native-fix detection from the installed code checked
against the release oracle in conftest (taken from upstream's sources)."""

from __future__ import annotations

import pkgutil
import sys

import pytest
from helpers import NATIVE_FROM, upstream_has

from sglang_pd_lean import compat
from sglang_pd_lean.gates import all_gates
from sglang_pd_lean.hook import When
from sglang_pd_lean.upstream import missing_targets, resolve, source_of


@pytest.mark.parametrize(
    "version,supported",
    [
        ("0.5.15.post1", True),
        ("0.5.16", True),
        ("0.5.17.post1", True),
        ("0.5.23rc1", True),
        ("0.5.14", False),
        ("0.5.24", False),
        ("0.6.0", False),
        ("1.0", False),
        (None, False),
    ],
)
def test_supported_releases_are_0_5_15_to_0_5_23(version, supported):
    assert compat.is_supported(version) is supported


@pytest.mark.parametrize("gate", sorted(NATIVE_FROM))
def test_native_detection_matches_the_release(gate):
    by_name = {g.name: g for g in all_gates()}
    assert (compat.native_reason(by_name[gate]) is not None) is upstream_has(gate)


def test_plan_registers_hooks_only_for_needed_gates():
    decision = compat.decide()
    registered = set(decision.hooks)
    for gate in decision.plans:
        if gate.name not in NATIVE_FROM:
            continue
        native = upstream_has(gate.name)
        expected = compat.GateState.NATIVE if native else compat.GateState.NEEDED
        assert gate.state == expected, gate.name
        assert [hook.when for hook in gate.hooks] == [When.AROUND], gate.name
        assert (set(gate.hooks) <= registered) is not native, gate.name
        assert bool(set(gate.hooks) & registered) is not native, gate.name
    needed = [g for g in decision.plans if g.state == compat.GateState.NEEDED]
    assert list(decision.hooks) == [hook for gate in needed for hook in gate.hooks]


def test_kill_switch_values(monkeypatch):
    for value, on in [
        ("0", True),
        ("false", True),
        ("off", True),
        ("no", True),
        ("NO ", True),
        ("1", False),
        ("", False),
    ]:
        monkeypatch.setenv("SGLANG_PD_LEAN", value)
        assert compat.kill_switch_on() is on


# --- hook targets, resolved as HookRegistry resolves them -----------------------


def importable_from(tmp_path, monkeypatch, *modules: str) -> None:
    """``tmp_path`` first on ``sys.path``, ``modules`` imported afresh from it: an
    earlier pytest session in this interpreter (mutmut runs several) may hold a copy
    whose folder pytest has since removed."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in modules:
        monkeypatch.delitem(sys.modules, name, raising=False)


def hook_registry_resolves(target: str):
    """What ``HookRegistry._apply_target`` wraps: ``pkgutil.resolve_name`` of the
    owner, then ``getattr`` (so inherited attributes included)."""
    owner, attr = target.rsplit(".", 1)
    return getattr(pkgutil.resolve_name(owner), attr)


@pytest.fixture
def inherited_method(tmp_path, monkeypatch):
    """A module whose subclass inherits the method a hook names on the subclass."""
    (tmp_path / "fake_inheriting_upstream.py").write_text(
        "class Base:\n"
        "    def build(self):\n"
        "        return 'disaggregation_mode is read here'\n"
        "class Configurator(Base):\n"
        "    pass\n"
    )
    importable_from(tmp_path, monkeypatch, "fake_inheriting_upstream")
    return "fake_inheriting_upstream.Configurator.build"


def test_resolve_finds_an_inherited_method_as_hook_registry_does(inherited_method):
    assert resolve(inherited_method) is hook_registry_resolves(inherited_method)
    assert missing_targets([inherited_method]) == []
    assert "disaggregation_mode" in source_of(inherited_method)


def test_hook_registry_hooks_the_inherited_method_resolve_found(
    inherited_method, fresh_plugin
):
    """SGLang's own registry, applied: the subclass's inherited method is wrapped."""
    from sglang.srt.plugins.hook_registry import HookType

    fresh_plugin.register(
        inherited_method, lambda original, *a, **k: "hooked", HookType.AROUND
    )
    fresh_plugin.apply_hooks()
    import fake_inheriting_upstream as upstream

    assert upstream.Configurator().build() == "hooked"
    assert upstream.Base().build() != "hooked"


def test_every_gate_target_resolves_to_what_hook_registry_wraps():
    for gate in all_gates():
        if gate.target is not None:
            assert resolve(gate.target) is hook_registry_resolves(gate.target), gate


def test_unimportable_hook_module_is_reported_with_its_import_error(
    tmp_path, monkeypatch
):
    package = tmp_path / "fakeupstream"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "configurator.py").write_text(
        "import a_dependency_that_is_not_installed\n"
        "class KVCacheConfigurator:\n    def build(self):\n        pass\n"
    )
    importable_from(tmp_path, monkeypatch, "fakeupstream", "fakeupstream.configurator")
    missing = missing_targets(["fakeupstream.configurator.KVCacheConfigurator.build"])
    assert len(missing) == 1
    assert "No module named 'a_dependency_that_is_not_installed'" in missing[0]
    # What a lookup on the parent package would have said instead.
    assert "has no attribute 'configurator'" not in missing[0]


def test_missing_hook_module_still_reads_as_missing(tmp_path, monkeypatch):
    package = tmp_path / "fakeupstream2"
    package.mkdir()
    (package / "__init__.py").write_text("")
    importable_from(tmp_path, monkeypatch, "fakeupstream2")
    missing = missing_targets(["fakeupstream2.gone.Cls.method"])
    assert len(missing) == 1 and "gone" in missing[0]


def test_a_module_that_fails_to_import_is_named_with_its_error(tmp_path, monkeypatch):
    """A hook module whose import raises (a kernel library that needs CUDA, say):
    doctor's missing entry names the module, the error's type and its text."""
    package = tmp_path / "fakeupstream3"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text("raise RuntimeError('no CUDA device')\n")
    importable_from(tmp_path, monkeypatch, "fakeupstream3", "fakeupstream3.kernels")
    assert missing_targets(["fakeupstream3.kernels.capture"]) == [
        "fakeupstream3.kernels.capture (ImportError: importing "
        "fakeupstream3.kernels failed: RuntimeError: no CUDA device)"
    ]


def test_a_target_in_no_installed_package_names_the_package():
    assert missing_targets(["no_such_package_anywhere.mod.Cls.method"]) == [
        "no_such_package_anywhere.mod.Cls.method "
        "(ImportError: no module named 'no_such_package_anywhere')"
    ]


# --- native upstream is read from the code, not from its text ------------------

UPSTREAM_LIKE = '''
def capture_decode_graph(model_runner):
    # A PD prefill server could return early on disaggregation_mode here.
    """Captures the decode graph (disaggregation_mode is not asked)."""
    note = "see server_args.disaggregation_mode"
    return model_runner.capture(note)


def capture_decode_graph_native(model_runner):
    if model_runner.server_args.disaggregation_mode == "prefill":
        return None
    return model_runner.capture()
'''


@pytest.fixture
def graph_gate_on(tmp_path, monkeypatch):
    """``graph_gate_on(function)``: the graph gate hooking ``function`` of a module
    holding UPSTREAM_LIKE."""
    package = tmp_path / "upstream_like"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cuda_graph_setup.py").write_text(UPSTREAM_LIKE)
    importable_from(
        tmp_path, monkeypatch, "upstream_like", "upstream_like.cuda_graph_setup"
    )
    by_name = {g.name: g for g in all_gates()}
    gate_class = type(by_name["graph"])

    def gate(function: str):
        target = f"upstream_like.cuda_graph_setup.{function}"
        monkeypatch.setattr(gate_class, "targets", (target,))
        return by_name["graph"]

    return gate


def test_a_marker_named_only_in_comments_and_strings_still_gets_the_gate(
    graph_gate_on,
):
    gate = graph_gate_on("capture_decode_graph")
    assert "disaggregation_mode" in source_of(gate.target)  # the text names it
    assert compat.native_reason(gate) is None
    assert compat._state(gate)[0] == compat.GateState.NEEDED


def test_a_marker_the_code_reads_is_native(graph_gate_on):
    """doctor says which upstream function checks which marker."""
    gate = graph_gate_on("capture_decode_graph_native")
    assert compat._state(gate) == (
        compat.GateState.NATIVE,
        "upstream capture_decode_graph_native() checks disaggregation_mode",
    )


@pytest.mark.parametrize("gate_name", ["pool", "graph", "warmup", "budget"])
def test_upstreams_own_function_with_the_marker_in_a_comment_is_not_native(
    gate_name, tmp_path, monkeypatch
):
    """The installed upstream function, unchanged but for a comment and a string
    naming every marker: native exactly where the unchanged function is."""
    import ast
    import inspect
    import textwrap

    gate = {g.name: g for g in all_gates()}[gate_name]
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(resolve(gate.target))))
    function = ast.parse(source).body[0]
    lines = source.splitlines()
    first = function.body[0]  # the first statement, after the whole signature
    indent = " " * first.col_offset
    mention = " ".join(gate.markers_for(gate.target))
    body = (
        lines[function.lineno - 1 : first.lineno - 1]  # no decorators
        + [f"{indent}# upstream could check {mention} here"]
        + [f"{indent}_unused = {mention!r}"]
        + lines[first.lineno - 1 :]
    )
    module = f"commented_{gate_name}_upstream"  # one module name per test
    (tmp_path / f"{module}.py").write_text(
        "from __future__ import annotations\n\n" + "\n".join(body) + "\n"
    )
    importable_from(tmp_path, monkeypatch, module)
    name = function.name
    monkeypatch.setattr(type(gate), "targets", (f"{module}.{name}",))
    assert (compat.native_reason(gate) is not None) is upstream_has(gate_name)


# --- a renamed function disables only what needs it ----------------------------


def test_the_first_candidate_target_that_resolves_is_hooked(monkeypatch):
    gate = {g.name: g for g in all_gates()}["autotune"]
    today = gate.targets[0]
    renamed = today.rsplit(".", 1)[0] + "._autotune_buffers_renamed"
    monkeypatch.setattr(type(gate), "targets", (renamed, today))
    assert gate.target == today
    assert [hook.target for hook in gate.hooks()] == [today]


def test_a_gate_whose_target_resolves_nowhere_is_missing_and_names_it(monkeypatch):
    gate = {g.name: g for g in all_gates()}["autotune"]
    gone = ("sglang.srt.model_executor.runner.eager_runner.EagerRunner._gone",)
    monkeypatch.setattr(type(gate), "targets", gone)
    state, detail = compat._state(gate)
    assert state == compat.GateState.MISSING
    assert "EagerRunner._gone" in detail and "AttributeError" in detail


def test_a_missing_target_turns_off_its_gate_and_those_requiring_it(monkeypatch):
    by_name = {g.name: g for g in all_gates()}
    before = {p.name: p.state for p in compat.plan()}
    pool = by_name["pool"]
    monkeypatch.setattr(
        type(pool), "targets", ("sglang.srt.mem_cache.kv_cache_configurator.Gone",)
    )
    decision = compat.decide()
    after = {p.name: p.state for p in decision.plans}
    requiring = {g.name for g in all_gates() if "pool" in g.requires}
    assert requiring  # the budget gate requires the pool gate
    assert after["pool"] == compat.GateState.MISSING
    for name, state in before.items():
        if name == "pool":
            continue
        if name in requiring and state == compat.GateState.NEEDED:
            assert after[name] == compat.GateState.UNSAFE, name
        else:
            assert after[name] == state, name
    assert decision.refusal is None and not decision.healthy
    assert [line.split(":", 1)[0] for line in decision.missing] == ["pool"]
    registered = {hook.target for hook in decision.hooks}
    for plan in decision.plans:
        hooked = {hook.target for hook in by_name[plan.name].hooks()}
        if plan.state == compat.GateState.NEEDED:
            assert hooked <= registered, plan.name
        else:
            assert not hooked & registered, plan.name


# --- what the decision says where it registers nothing -------------------------

SUPPORTED_RANGE = "(0.5.15 to 0.5.23)"  # doctor; README: "outside 0.5.16-0.5.23"


@pytest.mark.parametrize("kill_switch", [None, "0"])
def test_without_sglang_the_decision_says_so_names_the_range_and_holds_nothing(
    kill_switch, monkeypatch
):
    monkeypatch.setattr(compat, "sglang_version", lambda: None)
    if kill_switch is None:
        monkeypatch.delenv("SGLANG_PD_LEAN", raising=False)
    else:
        monkeypatch.setenv("SGLANG_PD_LEAN", kill_switch)
    decision = compat.decide()
    assert decision.refusal.startswith("SGLang is not installed in this environment")
    assert f"Install a supported SGLang {SUPPORTED_RANGE}." in decision.refusal
    assert (decision.plans, decision.hooks, decision.missing) == ((), (), ())
    assert decision.off == [] and not decision.healthy
    assert decision.disabled is (kill_switch is not None)


@pytest.mark.parametrize("kill_switch", [None, "0"])
def test_an_unsupported_release_names_itself_and_the_range_and_registers_nothing(
    kill_switch, monkeypatch
):
    monkeypatch.setattr(compat, "sglang_version", lambda: "0.6.0")
    if kill_switch is None:
        monkeypatch.delenv("SGLANG_PD_LEAN", raising=False)
    else:
        monkeypatch.setenv("SGLANG_PD_LEAN", kill_switch)
    decision = compat.decide()
    assert decision.refusal.startswith(
        f"SGLang 0.6.0 is not a supported release {SUPPORTED_RANGE}:"
    )
    assert [gate.name for gate in decision.plans] == [g.name for g in all_gates()]
    assert (decision.hooks, decision.missing) == ((), ())
    assert not decision.healthy
    assert decision.disabled is (kill_switch is not None)


def test_a_gate_state_prints_as_the_text_doctor_and_the_logs_show():
    assert f"{compat.GateState.NEEDED}" == "applied by the plugin"
    assert f"{compat.GateState.NATIVE:>20}" == "     native upstream"
    assert f"{compat.GateState.MISSING:<40}|" == (
        "not registered: hook target missing     |"
    )


def test_each_planned_gate_carries_its_gates_own_summary():
    """doctor and ``/server_info`` show each gate's one-line summary."""
    assert [(p.name, p.summary) for p in compat.plan()] == [
        (g.name, g.summary) for g in all_gates()
    ]


def test_a_gate_requiring_several_gates_names_every_one_not_applied(monkeypatch):
    """The autotune gate (needed on every supported release) made to require the
    pool gate (its target gone) and the replayssm gate (not applicable): unsafe,
    naming both."""
    if upstream_has("autotune"):
        pytest.skip("upstream shrinks the autotune buffers itself: no gate to judge")
    by_name = {g.name: g for g in all_gates()}
    monkeypatch.setattr(
        type(by_name["pool"]),
        "targets",
        ("sglang.srt.mem_cache.kv_cache_configurator.Gone",),
    )
    monkeypatch.setattr(type(by_name["autotune"]), "requires", ("pool", "replayssm"))
    plans = {p.name: p for p in compat.plan()}
    assert plans["autotune"].state == compat.GateState.UNSAFE
    assert plans["autotune"].detail == (
        "needs the pool, replayssm gate, which is not applied"
    )


def test_a_gate_the_plugin_applies_has_nothing_to_explain():
    """doctor's detail column is empty beside every gate the plugin applies."""
    needed = [p for p in compat.plan() if p.state == compat.GateState.NEEDED]
    if not needed and all(upstream_has(gate) for gate in NATIVE_FROM):
        pytest.skip("every gate is native upstream here: the plugin applies none")
    assert needed and {p.detail for p in needed} == {""}


def test_a_gate_sglang_needs_without_a_hook_says_so_as_documented(monkeypatch):
    """The replayssm gate has no hook; were the installed SGLang to stop refusing its
    flag on a prefill server, doctor names the failure as docs/doctor.md does."""
    gate = {g.name: g for g in all_gates()}["replayssm"]
    monkeypatch.setattr(type(gate), "applicable", lambda self: None)
    assert compat._state(gate) == (
        compat.GateState.UNHANDLED,
        "this SGLang needs a gate the plugin does not have",
    )
