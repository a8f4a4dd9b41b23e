"""Test harness: real SGLang objects on a CPU, with the plugin loaded the way SGLang
loads it (``sglang.srt.plugins.load_plugins()`` finds our entry point)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Quiet, deterministic SGLang imports.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def plugin_loaded():
    """SGLang's own plugin loader, once per test session (as in every SGLang process)."""
    from sglang.srt.plugins import load_plugins

    load_plugins()


@pytest.fixture(scope="session")
def gate_states():
    from sglang_pd_lean import compat

    return {gate.name: gate.state for gate in compat.plan()}


def gate_is_native(name: str) -> bool:
    from sglang_pd_lean import compat

    return compat.native_reason(name) is not None


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter of this venv; stdout and stderr captured."""
    full_env = dict(os.environ)
    full_env.pop("SGLANG_PLUGINS", None)
    full_env.pop("SGLANG_PD_LEAN", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )
