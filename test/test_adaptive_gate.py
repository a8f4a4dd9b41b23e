"""The adaptive gate (issue 45): with ``--speculative-adaptive`` a PD prefill server
builds no adaptive runtime state beyond the launch's own.

Each case runs SGLang's real ``AdaptiveController`` and ``AdaptiveSpeculativeParams``
(its default candidate steps) for a real ``EAGLEWorkerV2`` (built with
``object.__new__``: only the fields ``init_states`` reads), with the launch's own
state registered first as ``EAGLEWorkerV2.init_cuda_graphs`` does. The worker's
``build_adaptive_runtime_state`` (attention backends and CUDA graphs: a GPU) is
stood in for by a recorder that returns SGLang's own ``SpecRuntimeState``; every
other call is upstream's (``_activate``, ``apply_runtime_state``). The control: the
same call without the plugin builds a state for every other candidate step, on every
role.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging

import pytest
from helpers import server_fields
from placeholder import Inputs

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import adaptive
from sglang_pd_lean.upstream import resolve

_SPEC = "sglang.srt.speculative"
CONTROLLER = f"{_SPEC}.adaptive_runtime_state.AdaptiveController"
OWN_STEPS = 3  # the launch's --speculative-num-steps
ROLES = ["prefill", "decode", "null"]


def runtime_state(steps: int):
    """SGLang's own ``SpecRuntimeState`` for ``steps`` (no backends, no graphs)."""
    from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

    values = {f.name: None for f in dataclasses.fields(SpecRuntimeState)}
    values.update(speculative_num_steps=steps, speculative_num_draft_tokens=steps + 1)
    return SpecRuntimeState(**values)


def worker_for(server_args, built: list[int]):
    """A real ``EAGLEWorkerV2`` whose state builder records the steps asked for."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    worker = object.__new__(EAGLEWorkerV2)
    worker.server_args = server_args
    worker.speculative_num_steps = OWN_STEPS
    worker.speculative_num_draft_tokens = OWN_STEPS + 1

    def build(speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        built.append(speculative_num_steps)
        return runtime_state(speculative_num_steps)

    worker.build_adaptive_runtime_state = build
    return worker


def controller_for(worker):
    """SGLang's controller for ``worker``, as its ``__init__`` builds it on the
    installed release (a config path up to 0.5.2x, a policy object later)."""
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    cls = resolve(CONTROLLER)
    parameters = inspect.signature(cls.__init__).parameters
    if "policy" in parameters:
        params = AdaptiveSpeculativeParams(initial_steps=OWN_STEPS)
        controller = cls(worker, params)
    else:
        controller = cls(worker, config_path=None)
    controller.register(runtime_state(OWN_STEPS))  # init_cuda_graphs' first step
    return controller


def run(role: str, how: str, **extra):
    """(steps built, controller, record) of ``init_states`` on ``role``: ``how`` is
    "upstream" (unwrapped), "gate" (the gate's hook) or "installed" (as SGLang
    calls it: hooked by the plugin where the release needs the gate)."""
    original = inspect.unwrap(resolve(CONTROLLER).init_states)
    fields = server_fields(Inputs(model="qwen3-next-80b-a3b"), role)
    fields.update(
        speculative_algorithm="EAGLE",
        speculative_num_steps=OWN_STEPS,
        speculative_num_draft_tokens=OWN_STEPS + 1,
        **extra,
    )
    built: list[int] = []
    with census.published(**fields) as server_args:
        worker = worker_for(server_args, built)
        controller = controller_for(worker)
        calls = {
            "upstream": lambda: original(controller, cuda_graph_bs=None),
            "gate": lambda: adaptive.GATE.around(
                original, controller, cuda_graph_bs=None
            ),
            "installed": lambda: controller.init_states(cuda_graph_bs=None),
        }
        calls[how]()
    return built, controller, record.snapshot()


def others(controller) -> list[int]:
    return [s for s in controller.candidate_steps if s != OWN_STEPS]


@pytest.fixture(autouse=True)
def fresh_record():
    record.reset()
    yield
    record.reset()


@pytest.mark.parametrize("role", ROLES)
def test_upstream_builds_a_state_for_every_other_candidate_step(role):
    built, controller, _ = run(role, "upstream")
    assert others(controller), "SGLang's default config has one candidate step"
    assert sorted(built) == others(controller)
    assert controller.worker.speculative_num_steps == OWN_STEPS


def test_the_gate_builds_no_other_state_on_a_prefill_server():
    built, controller, snapshot = run("prefill", "gate")
    assert built == []
    assert snapshot["gates"]["adaptive"] == record.Outcome.ACTED
    # The launch's own state is active; another step is upstream's own error.
    assert controller.worker.speculative_num_steps == OWN_STEPS
    assert "build_adaptive_runtime_state" in vars(controller.worker)  # the recorder
    with pytest.raises(ValueError, match="Missing adaptive runtime state"):
        controller._activate(others(controller)[0])


def test_the_gate_leaves_the_worker_as_it_found_it():
    """The builder is put back: the worker's own attribute (here, the recorder) or
    the class's method."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    built: list[int] = []
    with census.published(
        **server_fields(Inputs(model="qwen3-next-80b-a3b"), "prefill")
    ):
        worker = worker_for(None, built)
        recorder = worker.build_adaptive_runtime_state
        with adaptive.building_only(worker, OWN_STEPS):
            assert worker.build_adaptive_runtime_state(1, 2) is None
            assert worker.build_adaptive_runtime_state(OWN_STEPS, 4) is not None
        assert worker.build_adaptive_runtime_state is recorder
        del worker.build_adaptive_runtime_state
        with adaptive.building_only(worker, OWN_STEPS):
            pass
        assert "build_adaptive_runtime_state" not in vars(worker)
        assert type(worker).build_adaptive_runtime_state is (
            EAGLEWorkerV2.build_adaptive_runtime_state
        )
    assert built == [OWN_STEPS]


@pytest.mark.parametrize("role", ["decode", "null"])
def test_the_gate_leaves_decode_and_unified_servers_to_upstream(role):
    built, controller, snapshot = run(role, "gate")
    assert sorted(built) == others(controller)
    assert snapshot["gates"]["adaptive"] == record.Outcome.STEPPED_ASIDE


def test_the_gate_leaves_a_unified_memory_prefill_server_to_upstream():
    built, controller, snapshot = run("prefill", "gate", enable_unified_memory=True)
    assert sorted(built) == others(controller)
    assert "unified memory pool" in snapshot["stepped_aside_because"]["adaptive"]


@pytest.mark.parametrize("role", ROLES)
def test_installed_sglang_builds_other_states_only_off_a_prefill_server(role):
    built, controller, _ = run(role, "installed")
    assert sorted(built) == ([] if role == "prefill" else others(controller))


def test_the_gate_says_what_it_skipped_once(caplog):
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        run("prefill", "gate")
        run("prefill", "gate")
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("sglang_pd")]
    assert len(ours) == 1
    assert ours[0].startswith(
        "[sglang-pd-lean] adaptive gate: prefill target (EAGLE) cannot run "
        "TARGET_VERIFY; built no adaptive runtime state for steps "
    )


def test_sglang_takes_adaptive_speculation_for_eagle_and_eagle3_only():
    """What the audit's "-" cells for the other workers rest on, in SGLang's code:
    its support check names EAGLE and EAGLE3, and only EAGLEWorkerV2's module
    builds a controller."""
    import ast

    from sglang.srt.speculative import adaptive_spec_params

    source = inspect.getsource(adaptive_spec_params.adaptive_unsupported_reason)
    tuples = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Tuple)
        and all(isinstance(e, ast.Constant) for e in node.elts)
    ]
    assert {tuple(e.value for e in t.elts) for t in tuples} >= {("EAGLE", "EAGLE3")}
    from sglang_pd_lean.audit_claims import AUDITED, ByGate
    from sglang_pd_lean.audit_reading import _module_tree

    for path, audited in AUDITED.items():
        tree = _module_tree(path.rpartition(".")[0])  # read, not imported
        if tree is None:
            continue  # a worker this release does not have
        calls = {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        claim = audited.pieces["adaptive_states"]
        assert ("AdaptiveController" in calls) is isinstance(claim, ByGate), path
