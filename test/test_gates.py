"""Every gate: the contract a gate module keeps (checked over ``all_gates()``), a
hook never fails where upstream would not, a draft worker gets upstream's warmup
and autotune, and each gate's own hook acts on a prefill target on every release.

Each gate's hook is called directly around the *unhooked* upstream function, so
these tests run where the plugin acts on every release, including 0.5.23 where the
installed SGLang does the pool/graph/warmup/budget job itself.
"""

from __future__ import annotations

import types

import pytest
from helpers import call_capture, server_fields
from placeholder import Inputs

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import (
    all_gates,
    autotune,
    budget,
    draft_graph,
    graph,
    pool,
    warmup,
)
from sglang_pd_lean.gates.base import Gate
from sglang_pd_lean.hook import Hook, When
from sglang_pd_lean.upstream import resolve

MODEL = "qwen3-next-80b-a3b"


# --- the contract -------------------------------------------------------------


def test_every_gate_is_a_gate_with_its_contract_filled_in():
    gates = all_gates()
    assert len({gate.name for gate in gates}) == len(gates)
    for gate in gates:
        assert isinstance(gate, Gate), gate
        assert isinstance(gate.name, str) and gate.name, gate
        assert isinstance(gate.summary, str) and gate.summary, gate
        assert isinstance(gate.targets, tuple), gate
        assert all(isinstance(t, str) for t in gate.targets), gate
        assert (gate.target is None) is (not gate.targets), gate
        assert isinstance(gate.native_markers, tuple), gate
        assert all(name in {g.name for g in gates} for name in gate.requires), gate


def test_every_hook_is_a_when_member_on_the_gates_own_target():
    for gate in all_gates():
        hooks = gate.hooks()
        assert all(isinstance(hook, Hook) for hook in hooks), gate
        assert all(type(hook.when) is When for hook in hooks), gate
        assert [hook.target for hook in hooks] == ([gate.target] if gate.target else [])
        assert all(callable(hook.fn) for hook in hooks), gate


def test_every_hooked_target_resolves_on_this_sglang():
    for gate in all_gates():
        if gate.target is not None and gate.applicable() is None:
            assert callable(resolve(gate.target)), gate


@pytest.mark.parametrize("missing", ["name", "summary", "targets"])
def test_a_gate_without_part_of_its_contract_is_refused_when_defined(missing):
    attrs = {"name": "x", "summary": "y", "targets": ()}
    del attrs[missing]
    with pytest.raises(TypeError, match=missing):
        type("IncompleteGate", (Gate,), attrs)


def test_a_gate_with_a_target_and_no_act_is_refused_when_defined():
    attrs = {"name": "x", "summary": "y", "targets": ("some.module.function",)}
    with pytest.raises(TypeError, match="act"):
        type("GateWithoutAct", (Gate,), attrs)


def test_a_gate_naming_one_target_as_a_string_is_refused_when_defined():
    attrs = {"name": "x", "summary": "y", "targets": "some.module.function"}
    with pytest.raises(TypeError, match="tuple"):
        type("GateWithStringTargets", (Gate,), attrs)


def test_a_gate_with_nothing_to_hook_registers_no_hook():
    nothing = type(
        "NothingToHook", (Gate,), {"name": "x", "summary": "y", "targets": ()}
    )
    assert nothing().hooks() == []


# --- a caller that gives upstream only what upstream reads ---------------------


@pytest.mark.parametrize(
    "gate,call",
    [
        # Each owner has none of the fields the predicate reads.
        (graph, lambda fn, o: fn(o, model_runner=types.SimpleNamespace())),
        (graph, lambda fn, o: fn(o)),
        (graph, lambda fn, o: fn(o, types.SimpleNamespace())),
        (warmup, lambda fn, o: fn(o, types.SimpleNamespace(), 4)),
        (warmup, lambda fn, o: fn(o, object())),
        (autotune, lambda fn, o: fn(o, types.SimpleNamespace())),
        (draft_graph, lambda fn, o: fn(o, types.SimpleNamespace())),
        (pool, lambda fn, o: fn(o, types.SimpleNamespace(), max_num_reqs=2)),
        (budget, lambda fn, o: fn(o, types.SimpleNamespace(), 1.0)),
    ],
)
def test_hook_fails_exactly_where_upstream_fails(gate, call, unhooked, outcome):
    """Whatever upstream does with an owner it cannot use, the hook does the same."""
    original = unhooked(gate.GATE)
    hook = gate.GATE.hooks()[0].fn
    assert outcome(lambda: call(hook, original)) == outcome(
        lambda: call(lambda o, *a, **k: o(*a, **k), original)
    )


# --- draft workers on a prefill server step aside in every target-only gate -----


@pytest.mark.parametrize("gate", [warmup, autotune])
def test_prefill_draft_worker_gets_upstreams_warmup_and_autotune(gate):
    """A draft worker is not the target: warmup and autotune leave it to upstream,
    which sees the draft's own ``spec_algorithm`` during the call."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    inputs = Inputs(model=MODEL)
    fields = server_fields(inputs, "prefill")
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
    assert record.snapshot()["gates"][gate.GATE.name] == record.Outcome.STEPPED_ASIDE
    assert "draft" in record.snapshot()["stepped_aside_because"][gate.GATE.name]


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

    inputs = Inputs(model=MODEL)
    fields = server_fields(inputs, "prefill")
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
            hook = gate.GATE.hooks()[0].fn
            call_capture(lambda *a, **k: hook(upstream, *a, **k), owner)
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


def test_a_gate_missing_several_parts_is_told_each_of_them():
    with pytest.raises(TypeError, match="lacks name, summary: "):
        type("BareGate", (Gate,), {"targets": ()})


# --- a gate with nothing to remove steps aside, and says why once ---------------


def test_a_gate_with_nothing_to_remove_steps_aside_records_why_and_logs_it_once(
    unhooked, outcome, caplog
):
    """An embedding model on a prefill target: upstream returns before any capture,
    so the graph gate steps aside with upstream's own result; the record and one
    INFO line (not one per call) say why."""
    import logging

    from helpers import stand_in_model_runner

    inputs = Inputs(model=MODEL)
    fields = server_fields(inputs, "prefill")
    original = unhooked(graph.GATE)

    def hooked(*args, **kwargs):
        return graph.GATE.around(original, *args, **kwargs)

    with census.published(**fields) as server_args:
        upstream_runner, runner = (
            stand_in_model_runner(
                server_args, fields, is_draft_worker=False, is_generation=False
            )
            for _ in range(2)
        )
        expected = outcome(lambda: call_capture(original, upstream_runner))
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            results = [outcome(lambda: call_capture(hooked, runner)) for _ in range(2)]
    # Left as upstream leaves it (0.5.14, 0.5.15: its graph runner fields set).
    assert fields_of(runner) == fields_of(upstream_runner)
    assert results == [expected, expected]
    snapshot = record.snapshot()
    assert snapshot["gates"]["graph"] == record.Outcome.STEPPED_ASIDE
    assert snapshot["stepped_aside_because"]["graph"] == (
        "upstream captures no decode graph here"
    )
    lines = [r for r in caplog.records if "graph gate" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.INFO]
    assert (
        lines[0]
        .getMessage()
        .endswith(
            "cannot run TARGET_VERIFY; stepped aside: upstream captures no decode "
            "graph here"
        )
    )


def fields_of(model_runner) -> dict:
    """A stand-in model runner's fields, less its methods (one lambda per runner)."""
    return {k: v for k, v in vars(model_runner).items() if not callable(v)}


def test_a_gate_whose_candidates_are_all_gone_names_each_and_the_last_error():
    """doctor's line for a gate none of whose candidate targets this SGLang has:
    every candidate, as tried, and why the last one did not resolve."""
    gate = type(
        "GoneGate",
        (Gate,),
        {
            "name": "gone",
            "summary": "nothing",
            "targets": ("no_such_pkg_one.Runner.capture", "no_such_pkg_two.capture"),
            "act": lambda self, call: None,
        },
    )()
    assert gate.missing_target() == (
        "no_such_pkg_one.Runner.capture | no_such_pkg_two.capture "
        "(ImportError: no module named 'no_such_pkg_two')"
    )
