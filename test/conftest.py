"""Test harness: real SGLang objects on a CPU, with the plugin loaded the way SGLang
loads it (``sglang.srt.plugins.load_plugins()`` finds our entry point)."""

from __future__ import annotations

import contextlib
import inspect
import json
import os

import pytest

# Re-exported for modules that still import them from here (prefer ``helpers``).
from helpers import (  # noqa: F401
    NATIVE_FROM,
    PATCHED_ENV,
    run_python,
    server_fields,
    sglang_minor,
    stand_in_model_runner,
    upstream_has,
)

# Quiet, deterministic SGLang imports.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under a mutation run (``scripts/mutation.sh``), a mutant's tests fastest first.

    mutmut runs the tests linked to the mutated function with ``-x``, in the order it
    lists them (from a set): the first test that fails ends the mutant, so the cheap
    ones go first. Each file's tests stay together (its module fixtures are set up
    once), files in the order of their fastest test, by mutmut's own stats (cwd is
    ``mutants/``). ``SGLANG_PD_LEAN_MUTMUT_BUDGET_S`` keeps only the fastest tests
    whose recorded durations add up to that many seconds: a survivor then costs
    that much, and a mutant only a slower test kills counts as survived, so the
    score is a lower bound. Outside a mutant's run (CI, the stats and clean runs)
    nothing changes."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    try:
        with open("mutmut-stats.json") as stats:
            durations = json.load(stats)["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    took = {i: durations.get(i.nodeid.removeprefix("mutants/"), 1e9) for i in items}
    budget = float(os.environ.get("SGLANG_PD_LEAN_MUTMUT_BUDGET_S", "inf"))
    kept, spent = [], 0.0
    for item in sorted(items, key=took.get):
        if kept and spent + took[item] > budget:
            break
        kept.append(item)
        spent += took[item]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    first = {}
    for item in kept:
        first[item.path] = min(first.get(item.path, 1e9), took[item])
    items[:] = sorted(kept, key=lambda i: (first[i.path], str(i.path), took[i]))


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


MODEL = "qwen3-next-80b-a3b"


@pytest.fixture
def configurator():
    """``configurator(role, **inputs) -> (inputs, conf)``: SGLang's real
    ``KVCacheConfigurator`` for census inputs, with the role's configuration
    published and TP groups set up until the test ends."""
    from placeholder import Inputs, prepare

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
            inputs = Inputs(
                model=model,
                tp=tp,
                max_running_requests=requests,
                context_length=context_length,
                **fields,
            )
            mc, _ = prepare(inputs)
            stack.enter_context(census.parallel(tp=tp))
            server_args = stack.enter_context(
                census.published(**server_fields(inputs, role, sizing=sizing))
            )
            conf = census.configurator(
                mc,
                server_args,
                is_draft_worker=is_draft_worker,
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
