"""Test harness: real SGLang objects on a CPU, with the plugin loaded the way SGLang
loads it (``sglang.srt.plugins.load_plugins()`` finds our entry point)."""

from __future__ import annotations

import contextlib
import inspect
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


@pytest.fixture(autouse=True)
def fresh_record():
    """Each test starts with an empty per-process record (as a new rank does)."""
    from sglang_pd_lean import record

    record.reset()
    yield
    record.reset()


@pytest.fixture(scope="session")
def gate_states():
    from sglang_pd_lean import compat

    return {gate.name: gate.state for gate in compat.plan()}


# The release that first does each gate's job itself (from upstream's sources), an
# oracle independent of the plugin's own detection in ``compat``.
# None: no supported release (up to 0.5.23) does it.
NATIVE_FROM = {
    "pool": 18,
    "graph": 18,
    "warmup": 18,
    "budget": 22,
    "draft_graph": None,
    "autotune": None,
}


def sglang_minor() -> int:
    import sglang

    return int(sglang.__version__.split(".")[2][:2])


# Set by test_patches.py when the SGLang under test carries one of patches/: the
# gates that patch makes upstream's own (comma-separated).
PATCHED_ENV = "SGLANG_PD_LEAN_TEST_PATCHED_GATES"


def upstream_has(gate: str, version: str | None = None) -> bool:
    """Whether SGLang ``version`` (default: the installed one, patched or not) does
    ``gate``'s job itself, by the oracle above."""
    if version is None:
        if gate in os.environ.get(PATCHED_ENV, "").split(","):
            return True
        minor = sglang_minor()
    else:
        minor = int(version.split(".")[2][:2])
    since = NATIVE_FROM[gate]
    return since is not None and minor >= since


def stand_in_model_runner(server_args, fields: dict, *, is_draft_worker: bool, **extra):
    """The fields of a ModelRunner that graph setup and warmup read (a real one needs a
    GPU and weights), for the worker the published ``fields`` describe."""
    import types

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    draft_tokens = fields.get("speculative_num_draft_tokens") or 1
    values = dict(
        server_args=server_args,
        is_draft_worker=is_draft_worker,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            fields.get("speculative_algorithm")
        ),
        is_generation=True,
        device="cuda",
        gpu_id=0,
        decode_num_tokens_per_req=lambda: draft_tokens,
    )
    values.update(extra)
    return types.SimpleNamespace(**values)


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


MODEL = "qwen3-next-80b-a3b"


@pytest.fixture
def configurator():
    """``configurator(role, **inputs) -> (inputs, conf)``: SGLang's real
    ``KVCacheConfigurator`` for census inputs, with the role's configuration
    published and TP groups set up until the test ends."""
    from sglang_pd_lean import census

    with contextlib.ExitStack() as stack:

        def build(
            role: str,
            *,
            model: str | None = MODEL,
            tp: int = 2,
            requests: int = 8,
            context_length: int | None = 512,
            sizing: bool = False,
            is_draft_worker: bool = False,
            **fields,
        ):
            inputs = census.Inputs(
                model=model,
                tp=tp,
                max_running_requests=requests,
                context_length=context_length,
                **fields,
            )
            mc, _ = census.prepare(inputs)
            stack.enter_context(census.parallel(tp=tp))
            server_args = stack.enter_context(
                census.published(**census.server_fields(inputs, role, sizing=sizing))
            )
            conf = census.configurator(
                mc,
                server_args,
                is_draft_worker=is_draft_worker,
                layers=(0, mc.num_hidden_layers),
            )
            return inputs, conf

        yield build


@pytest.fixture
def unhooked():
    """``unhooked(gate)``: the installed upstream function ``gate`` hooks, without any
    hook applied (to drive the gate's own hook on every release)."""
    from sglang_pd_lean.upstream import resolve

    return lambda gate: inspect.unwrap(resolve(gate.target))


@pytest.fixture
def no_pool_kernel_warmup(monkeypatch):
    """0.5.23's pool constructor warms a Triton kernel (a launch, not an
    allocation); SGLang's own switch turns it off, as the census does."""
    monkeypatch.setenv("SGLANG_DISABLE_FUSED_MAMBA_SLOT_OPS", "1")


@pytest.fixture
def fresh_plugin():
    """``plugin.register()`` runs again on an empty ``HookRegistry`` (registration
    only: hooks SGLang already applied in this process stay applied); the session's
    registrations come back afterwards."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_pd_lean import plugin

    saved = {target: list(hooks) for target, hooks in HookRegistry._hooks.items()}
    patched = set(HookRegistry._patched)
    was_registered = plugin._registered
    HookRegistry.reset()
    plugin.reset()
    yield HookRegistry
    HookRegistry.reset()
    HookRegistry._hooks.update(saved)
    HookRegistry._patched.update(patched)
    plugin._registered = was_registered


@pytest.fixture
def outcome():
    """``outcome(call)``: what a call did, its result's repr or its exception's type
    and message (compared between a hook and upstream, never hidden)."""

    def run(call) -> tuple:
        try:
            return ("returned", repr(call()))
        except Exception as exc:
            return ("raised", type(exc).__name__, str(exc))

    return run
