"""Every gate against every caller: a hook never fails where upstream would not, a
worker the predicate cannot judge gets upstream's behaviour, a log figure never
raises, and what a gate logs and records equals the census.

Each gate's hook function is called directly around the *unhooked* upstream
function, so these tests run where the plugin acts on every release, including
0.5.23 where the installed SGLang does the pool/graph/warmup/budget job itself.
"""

from __future__ import annotations

import inspect
import logging
import types
from unittest import mock

import pytest
from conftest import upstream_has
from test_census import gdn_expected

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import (
    autotune,
    budget,
    draft_graph,
    graph,
    pool,
    warmup,
)
from sglang_pd_lean.role import upstream_behaviour
from sglang_pd_lean.upstream import missing_targets, resolve

MODEL = "qwen3-next-80b-a3b"
DOUBT = "if in doubt, keep the bytes"


@pytest.fixture(autouse=True)
def no_pool_kernel_warmup(monkeypatch):
    """0.5.23's pool constructor warms a Triton kernel (a launch, not an
    allocation); SGLang's own switch turns it off, as the census does."""
    monkeypatch.setenv("SGLANG_DISABLE_FUSED_MAMBA_SLOT_OPS", "1")


def upstream_of(gate) -> object:
    """The installed upstream function the gate hooks, without any hook applied."""
    return inspect.unwrap(resolve(gate.GATE.target))


def outcome(call) -> tuple:
    """What a call did: its result's repr, or its exception's type and message."""
    try:
        return ("returned", repr(call()))
    except Exception as exc:  # compared, not hidden
        return ("raised", type(exc).__name__, str(exc))


def census_configurator(role: str, stack, *, requests: int = 8, **input_fields):
    inputs = census.Inputs(
        model=MODEL,
        tp=2,
        max_running_requests=requests,
        context_length=512,
        **input_fields,
    )
    mc, _ = census.prepare(inputs)
    stack.enter_context(census.parallel(tp=inputs.tp))
    server_args = stack.enter_context(
        census.published(**census.server_fields(inputs, role))
    )
    conf = census.configurator(
        mc, server_args, is_draft_worker=False, layers=(0, mc.num_hidden_layers)
    )
    return inputs, conf


# --- a caller that gives upstream only what upstream reads ---------------------


def test_pool_hook_on_a_configurator_without_is_draft_worker_builds_upstreams_pool(
    caplog,
):
    """Upstream's pool build never reads ``is_draft_worker``; a caller (upstream's own
    unit tests) may leave it out, and the hook must then not be the one to fail."""
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensorMode

    original = upstream_of(pool)
    with contextlib.ExitStack() as stack:
        inputs, conf = census_configurator("decode", stack)
        del conf.is_draft_worker
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        kwargs = dict(max_num_reqs=inputs.max_running_requests, extra_max_context_len=4)
        with caplog.at_level(logging.DEBUG, logger="sglang_pd_lean"):
            hooked = pool.GATE.around(original, conf, **kwargs)
        expected = original(conf, **kwargs)
    assert census.component_bytes(hooked) == census.component_bytes(expected)
    assert any(DOUBT in r.getMessage() for r in caplog.records)


def test_budget_hook_on_a_configurator_without_is_draft_worker_sizes_as_upstream():
    import contextlib

    original = upstream_of(budget)
    with contextlib.ExitStack() as stack:
        _, conf = census_configurator("prefill", stack)
        del conf.is_draft_worker
        with upstream_behaviour():
            expected = outcome(lambda: original(conf, 40.0))
        assert outcome(lambda: budget.GATE.around(original, conf, 40.0)) == (expected)


@pytest.mark.parametrize(
    "gate,call",
    [
        # Each owner has none of the fields the predicate reads.
        (graph, lambda fn, o: fn(o, model_runner=types.SimpleNamespace())),
        (graph, lambda fn, o: fn(o)),
        (warmup, lambda fn, o: fn(o, types.SimpleNamespace(), 4)),
        (warmup, lambda fn, o: fn(o, object())),
        (autotune, lambda fn, o: fn(o, types.SimpleNamespace())),
        (draft_graph, lambda fn, o: fn(o, types.SimpleNamespace())),
        (pool, lambda fn, o: fn(o, types.SimpleNamespace(), max_num_reqs=2)),
        (budget, lambda fn, o: fn(o, types.SimpleNamespace(), 1.0)),
    ],
)
def test_hook_fails_exactly_where_upstream_fails(gate, call):
    """Whatever upstream does with an owner it cannot use, the hook does the same."""
    original = upstream_of(gate)
    hook = gate.GATE.hooks()[0].fn
    assert outcome(lambda: call(hook, original)) == outcome(
        lambda: call(lambda o, *a, **k: o(*a, **k), original)
    )


def test_graph_hook_on_a_runner_upstream_can_use_without_server_args():
    """Upstream returns its no-capture result for a non-generation model before it
    reads ``server_args``; the hook must give that same result, not an error."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = types.SimpleNamespace(
        is_draft_worker=False,
        spec_algorithm=SpeculativeAlgorithm.EAGLE,
        is_generation=False,
    )
    original = upstream_of(graph)
    assert outcome(lambda: graph.GATE.around(original, model_runner=runner)) == outcome(
        lambda: original(model_runner=runner)
    )


# --- log figures are best effort ----------------------------------------------


def test_pool_gate_survives_a_mock_pool_constructor(caplog):
    """Upstream's tests stub the pool constructor with a Mock: the gate returns it
    and logs what it can instead of crashing on its byte figure."""
    import contextlib

    stub = mock.Mock(name="pool")
    with contextlib.ExitStack() as stack:
        _, conf = census_configurator("prefill", stack)
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            result = pool.GATE.around(
                lambda *a, **k: stub, conf, max_num_reqs=8, extra_max_context_len=4
            )
    assert result is stub
    assert any("pool gate" in r.getMessage() for r in caplog.records)


# --- what a gate logs and records equals the census ----------------------------


@pytest.mark.parametrize("requests,draft", [(8, 4), (64, 2)])
def test_pool_gate_records_and_logs_the_verify_bytes_of_the_config_formula(
    requests, draft, caplog
):
    """The gate's own figure, padding slot included, against the config formula."""
    if upstream_has("pool"):
        pytest.skip("upstream builds a prefill target's pool lean itself: no figure")
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensorMode

    original = upstream_of(pool)
    with contextlib.ExitStack() as stack:
        inputs, conf = census_configurator(
            "prefill", stack, requests=requests, speculative_num_draft_tokens=draft
        )
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            built = pool.GATE.around(
                original, conf, max_num_reqs=requests, extra_max_context_len=4
            )
    assert census.component_bytes(built).get("verify ssm snapshots", 0) == 0
    expected = gdn_expected(MODEL, tp=2, requests=requests, slots=0, draft=draft)
    recorded = record.snapshot()["not_allocated_bytes"]
    line = next(r.getMessage() for r in caplog.records if "pool gate" in r.getMessage())
    for component in ("verify ssm snapshots", "verify conv windows"):
        assert recorded[component] == expected[component], component
    from sglang_pd_lean.units import human_bytes

    assert human_bytes(expected["verify ssm snapshots"]) in line
    assert "GB " not in line


def test_budget_line_says_the_automatic_split_bought_mamba_slots(caplog):
    """Radix cache on, no fixed slot count: upstream's ratio spends the freed share
    on mamba slots and the KV cache shrinks; the line must say so, with numbers
    equal to upstream's own sizing of the same budget with and without the phantom."""
    import contextlib

    original = upstream_of(budget)
    with contextlib.ExitStack() as stack:
        inputs = census.Inputs(
            model=MODEL, tp=4, max_running_requests=256, available_gib=100
        )
        mc, _ = census.prepare(inputs)
        stack.enter_context(census.parallel(tp=4))
        fields = census.server_fields(inputs, "prefill", sizing=True)
        server_args = stack.enter_context(census.published(**fields))
        conf = census.configurator(
            mc, server_args, is_draft_worker=False, layers=(0, mc.num_hidden_layers)
        )
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            rest = budget.GATE.around(original, conf, 100.0)
    line = next(
        r.getMessage() for r in caplog.records if "budget gate" in r.getMessage()
    )
    sized = record.snapshot()["budget"]
    assert sized["available_gib"] == 100.0
    assert sized["plugin"]["kv_bytes"] == int(rest * (1 << 30))
    if sized["upstream"] is not None:  # 0.5.16 has no config snapshot to size in
        assert sized["plugin"]["mamba_slots"] > sized["upstream"]["mamba_slots"]
        assert sized["plugin"]["kv_bytes"] < sized["upstream"]["kv_bytes"]
        assert "automatic split spent the freed bytes on mamba slots" in line
        assert "returned to the budget" not in line


# --- the predicate reads SGLang's own published namespaces ----------------------


def test_unified_memory_is_read_from_the_published_memory_namespace():
    """``server_args`` says no unified memory; SGLang's published memory config says
    yes: the published value wins (it is what SGLang itself reads)."""
    from sglang_pd_lean import role
    from sglang_pd_lean.gates.base import ReadThrough

    try:
        from sglang.srt.runtime_context import get_memory  # noqa: F401
    except ImportError:
        pytest.skip("SGLang 0.5.16 publishes no config namespaces")
    inputs = census.Inputs(model=MODEL)
    fields = census.server_fields(inputs, "prefill")
    fields["enable_unified_memory"] = True
    with census.published(**fields) as server_args:
        stale = ReadThrough(server_args, enable_unified_memory=False)
        worker = role.judge(stale, is_draft_worker=False)
    assert worker.can_run_target_verify
    assert worker.keeps_verify_because == "unified memory pool"


# --- draft workers on a prefill server step aside in every target-only gate -----


@pytest.mark.parametrize("gate", [warmup, autotune])
def test_prefill_draft_worker_gets_upstreams_warmup_and_autotune(gate):
    """A draft worker is not the target: warmup and autotune leave it to upstream,
    which sees the draft's own ``spec_algorithm`` during the call."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    inputs = census.Inputs(model=MODEL)
    fields = census.server_fields(inputs, "prefill")
    seen = []
    with census.published(**fields) as server_args:
        model_runner = types.SimpleNamespace(
            server_args=server_args,
            is_draft_worker=True,
            spec_algorithm=SpeculativeAlgorithm.EAGLE,
        )
        runner = types.SimpleNamespace(model_runner=model_runner)
        gate.GATE.hooks()[0].fn(
            lambda r, *a, **k: seen.append(r.model_runner.spec_algorithm), runner
        )
    assert seen == [SpeculativeAlgorithm.EAGLE]


# --- compat names the real import error -----------------------------------------


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
    assert "a_dependency_that_is_not_installed" in missing[0]
    assert "has no attribute" not in missing[0]


def test_missing_hook_module_still_reads_as_missing(tmp_path, monkeypatch):
    package = tmp_path / "fakeupstream2"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = missing_targets(["fakeupstream2.gone.Cls.method"])
    assert len(missing) == 1 and "gone" in missing[0]


# --- each gate's own hook acts on a prefill target, on every release ------------


def prefill_target_owner(server_args, fields, gate):
    """The object each gate's hook receives, for a prefill speculative target."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    model_runner = types.SimpleNamespace(
        server_args=server_args,
        is_draft_worker=False,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            fields["speculative_algorithm"]
        ),
        is_generation=True,
    )
    if gate is graph:
        return model_runner
    if gate is draft_graph:
        return types.SimpleNamespace(server_args=server_args, cuda_graph_runner="x")
    return types.SimpleNamespace(model_runner=model_runner)


@pytest.mark.parametrize("gate", [graph, warmup, autotune, draft_graph])
def test_gate_hook_acts_on_a_prefill_target_and_records_it(gate):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    inputs = census.Inputs(model=MODEL)
    fields = census.server_fields(inputs, "prefill")
    seen = []

    def upstream(*args, **kwargs):
        owner = kwargs.get("model_runner", args[0] if args else None)
        runner = getattr(owner, "model_runner", owner)
        seen.append(getattr(runner, "spec_algorithm", None))
        if gate is graph:
            seen.append(runner.is_generation)
            if runner.is_generation:
                seen.append(runner.gpu_id)  # upstream is about to capture
        if gate is draft_graph:
            seen.append(owner.gpu_id)  # upstream is about to capture

    with census.published(**fields) as server_args:
        owner = prefill_target_owner(server_args, fields, gate)
        if gate is graph:
            gate.GATE.hooks()[0].fn(upstream, model_runner=owner)
        else:
            gate.GATE.hooks()[0].fn(upstream, owner)
    assert record.snapshot()["gates"][gate.GATE.name] == record.Outcome.ACTED
    if gate is draft_graph:  # stopped before capturing, runners left as "run eager"
        assert seen == [None] and owner.cuda_graph_runner is None
    elif gate is graph:  # upstream reached the capture, then ran its no-capture path
        assert seen == [
            SpeculativeAlgorithm.EAGLE,
            True,
            SpeculativeAlgorithm.EAGLE,
            False,
        ]
    else:  # upstream sizes/warms up as a worker without speculation
        assert seen == [SpeculativeAlgorithm.NONE]
        assert owner.model_runner.spec_algorithm == SpeculativeAlgorithm.EAGLE
