"""Graph gate: a PD-prefill speculative target captures no target-verify graph.

Calls the real decode graph capture: ``cuda_graph_setup.capture_decode_graph``
(0.5.16+, the model runner by keyword), or ``ModelRunner.init_decode_cuda_graph``
(0.5.14 and 0.5.15, the model runner as ``self``), each as upstream's own caller
calls it. The model runner is a namespace with the fields that function reads (a
real ModelRunner needs a GPU and weights). The first device call
(``get_available_gpu_memory``) is replaced by a sentinel: a worker that reaches it
was on its way to capture.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; ``test_gates.py`` drives the gate's own hook on every release.
"""

from __future__ import annotations

import logging
import types

import pytest
from helpers import (
    call_capture,
    capture_by_method,
    capture_module,
    server_fields,
    stand_in_model_runner,
    upstream_has,
)
from placeholder import Inputs

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import graph


class ReachedDevice(Exception):
    pass


def captured(fn, runner):
    """The graph runner ``fn`` (upstream's capture, or the hook around it) left for
    ``runner``: ``None`` where it captured none."""
    if capture_by_method():
        fn(runner)
        return runner.decode_cuda_graph_runner
    return fn(model_runner=runner).runner


def upstream_capture(runner):
    """Upstream's capture on ``runner``, through the plugin's hook where it
    registered one (as SGLang calls it)."""
    module = capture_module()
    if capture_by_method():
        return captured(module.ModelRunner.init_decode_cuda_graph, runner)
    return captured(module.capture_decode_graph, runner)


@pytest.fixture
def device_sentinel(monkeypatch):
    module = capture_module()

    def first_device_call(*args, **kwargs):
        raise ReachedDevice

    monkeypatch.setattr(module, "get_available_gpu_memory", first_device_call)
    return module


def capture(role: str, *, speculative: bool, is_draft_worker: bool):
    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, role, speculative=speculative)
    with census.published(**fields) as server_args:
        runner = stand_in_model_runner(
            server_args, fields, is_draft_worker=is_draft_worker
        )
        return upstream_capture(runner)


def test_prefill_target_captures_no_verify_graph(device_sentinel):
    # The device sentinel is the check: a worker on its way to capture raises it.
    assert capture("prefill", speculative=True, is_draft_worker=False) is None


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_targets_go_on_to_capture(device_sentinel, role):
    with pytest.raises(ReachedDevice):
        capture(role, speculative=True, is_draft_worker=False)


def test_prefill_draft_worker_goes_on_to_capture(device_sentinel):
    with pytest.raises(ReachedDevice):
        capture("prefill", speculative=True, is_draft_worker=True)


def test_prefill_without_speculative_decoding_goes_on_to_capture(device_sentinel):
    with pytest.raises(ReachedDevice):
        capture("prefill", speculative=False, is_draft_worker=False)


def test_graph_hook_on_a_runner_upstream_can_use_without_server_args(unhooked, outcome):
    """Upstream returns its no-capture result for a non-generation model before it
    reads ``server_args``; the hook must give that same result, not an error, and
    leave the runner as upstream leaves it (0.5.14 and 0.5.15 set its graph runner
    fields before they return)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    def runner():
        return types.SimpleNamespace(
            is_draft_worker=False,
            spec_algorithm=SpeculativeAlgorithm.EAGLE,
            is_generation=False,
        )

    original = unhooked(graph.GATE)
    hooked_runner, upstream_runner = runner(), runner()
    hooked = outcome(lambda: call_capture(around(original), hooked_runner))
    assert hooked == outcome(lambda: call_capture(original, upstream_runner))
    assert vars(hooked_runner) == vars(upstream_runner)


def around(original):
    """The graph gate's hook around upstream's ``original``."""
    return lambda *args, **kwargs: graph.GATE.around(original, *args, **kwargs)


def test_a_positional_call_fails_as_upstream_fails(unhooked, outcome):
    """A call upstream's signature refuses (0.5.16+: the model runner positionally,
    as upstream takes it by keyword only; 0.5.14 and 0.5.15: by keyword, as
    upstream's method takes it as ``self``): for a prefill target, the hook raises
    upstream's own error instead of acting."""
    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    original = unhooked(graph.GATE)

    def refused(fn, runner):
        return fn(model_runner=runner) if capture_by_method() else fn(runner)

    with census.published(**fields) as server_args:
        runner = stand_in_model_runner(server_args, fields, is_draft_worker=False)
        hooked = outcome(lambda: refused(around(original), runner))
        expected = outcome(lambda: refused(original, runner))
    assert expected[:2] == ("raised", "TypeError")
    assert hooked == expected


def test_the_operator_reads_once_that_the_verify_graph_was_not_captured(
    unhooked, caplog
):
    """A prefill target with a decode graph backend: upstream would capture the
    target-verify graph. The gate hands back upstream's no-capture result each time
    it is asked, and logs one INFO line per rank that says what it skipped."""
    if upstream_has("graph"):
        pytest.skip("this SGLang captures no verify graph on a prefill target")
    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    original = unhooked(graph.GATE)
    with census.published(**fields) as server_args:
        runner = stand_in_model_runner(server_args, fields, is_draft_worker=False)
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            results = [captured(around(original), runner) for _ in range(2)]
    assert results == [None, None]
    assert record.snapshot()["gates"]["graph"] == "acted"
    ours = [r for r in caplog.records if r.name.startswith("sglang_pd_lean")]
    assert [(r.levelno, r.getMessage()) for r in ours] == [
        (
            logging.INFO,
            "[sglang-pd-lean] graph gate: prefill target (EAGLE) cannot run "
            "TARGET_VERIFY; skipped the target-verify graph capture",
        )
    ]
