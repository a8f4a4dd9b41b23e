"""compat: release parsing, and native-fix detection from the installed code checked
against the release oracle in conftest (taken from upstream's sources)."""

from __future__ import annotations

import pkgutil

import pytest
from helpers import NATIVE_FROM, upstream_has

from sglang_pd_lean import compat
from sglang_pd_lean.gates import all_gates
from sglang_pd_lean.hook import When
from sglang_pd_lean.upstream import missing_targets, resolve, source_of


@pytest.mark.parametrize(
    "version,supported",
    [
        ("0.5.16", True),
        ("0.5.17.post1", True),
        ("0.5.23rc1", True),
        ("0.5.15", False),
        ("0.5.24", False),
        ("0.6.0", False),
        ("1.0", False),
        (None, False),
    ],
)
def test_supported_releases_are_0_5_16_to_0_5_23(version, supported):
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
    monkeypatch.syspath_prepend(str(tmp_path))
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
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = missing_targets(["fakeupstream.configurator.KVCacheConfigurator.build"])
    assert len(missing) == 1
    assert "No module named 'a_dependency_that_is_not_installed'" in missing[0]
    # What a lookup on the parent package would have said instead.
    assert "has no attribute 'configurator'" not in missing[0]


def test_missing_hook_module_still_reads_as_missing(tmp_path, monkeypatch):
    package = tmp_path / "fakeupstream2"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = missing_targets(["fakeupstream2.gone.Cls.method"])
    assert len(missing) == 1 and "gone" in missing[0]
