"""compat: release parsing, and native-fix detection from the installed code checked
against the release oracle in conftest (taken from upstream's sources)."""

from __future__ import annotations

import pytest
from conftest import NATIVE_FROM, upstream_has

from sglang_pd_lean import compat
from sglang_pd_lean.gates import all_gates


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
    for gate in compat.plan():
        if gate.name in NATIVE_FROM:
            expected = (
                compat.GateState.NATIVE
                if upstream_has(gate.name)
                else compat.GateState.NEEDED
            )
            assert gate.state == expected, gate.name


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
