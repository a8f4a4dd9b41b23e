"""Graph gate: a PD-prefill speculative target captures no target-verify graph.

Calls the real ``cuda_graph_setup.capture_decode_graph``. The model runner is a
namespace with the fields that function reads (a real ModelRunner needs a GPU and
weights). The first device call (``get_available_gpu_memory``) is replaced by a
sentinel: a worker that reaches it was on its way to capture.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; ``test_gates.py`` drives the gate's own hook on every release.
"""

from __future__ import annotations

import logging
import types

import pytest
from helpers import server_fields, stand_in_model_runner, upstream_has
from placeholder import Inputs

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import graph


class ReachedDevice(Exception):
    pass


@pytest.fixture
def device_sentinel(monkeypatch):
    from sglang.srt.model_executor.model_runner_components import cuda_graph_setup

    def first_device_call(*args, **kwargs):
        raise ReachedDevice

    monkeypatch.setattr(cuda_graph_setup, "get_available_gpu_memory", first_device_call)
    return cuda_graph_setup


def capture(cuda_graph_setup, role: str, *, speculative: bool, is_draft_worker: bool):
    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, role, speculative=speculative)
    with census.published(**fields) as server_args:
        runner = stand_in_model_runner(
            server_args, fields, is_draft_worker=is_draft_worker
        )
        return cuda_graph_setup.capture_decode_graph(model_runner=runner)


def test_prefill_target_captures_no_verify_graph(device_sentinel):
    result = capture(
        device_sentinel, "prefill", speculative=True, is_draft_worker=False
    )
    # The device sentinel is the check: a worker on its way to capture raises it.
    assert result.runner is None


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_targets_go_on_to_capture(device_sentinel, role):
    with pytest.raises(ReachedDevice):
        capture(device_sentinel, role, speculative=True, is_draft_worker=False)


def test_prefill_draft_worker_goes_on_to_capture(device_sentinel):
    with pytest.raises(ReachedDevice):
        capture(device_sentinel, "prefill", speculative=True, is_draft_worker=True)


def test_prefill_without_speculative_decoding_goes_on_to_capture(device_sentinel):
    with pytest.raises(ReachedDevice):
        capture(device_sentinel, "prefill", speculative=False, is_draft_worker=False)


def test_graph_hook_on_a_runner_upstream_can_use_without_server_args(unhooked, outcome):
    """Upstream returns its no-capture result for a non-generation model before it
    reads ``server_args``; the hook must give that same result, not an error."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = types.SimpleNamespace(
        is_draft_worker=False,
        spec_algorithm=SpeculativeAlgorithm.EAGLE,
        is_generation=False,
    )
    original = unhooked(graph.GATE)
    assert outcome(lambda: graph.GATE.around(original, model_runner=runner)) == (
        outcome(lambda: original(model_runner=runner))
    )


def test_a_positional_call_fails_as_upstream_fails(unhooked, outcome):
    """Upstream takes the model runner by keyword only: called positionally for a
    prefill target, the hook raises upstream's own error instead of acting."""
    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    original = unhooked(graph.GATE)
    with census.published(**fields) as server_args:
        runner = stand_in_model_runner(server_args, fields, is_draft_worker=False)
        hooked = outcome(lambda: graph.GATE.around(original, runner))
        expected = outcome(lambda: original(runner))
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
            results = [
                graph.GATE.around(original, model_runner=runner) for _ in range(2)
            ]
    assert [result.runner for result in results] == [None, None]
    assert record.snapshot()["gates"]["graph"] == "acted"
    ours = [r for r in caplog.records if r.name.startswith("sglang_pd_lean")]
    assert [(r.levelno, r.getMessage()) for r in ours] == [
        (
            logging.INFO,
            "[sglang-pd-lean] graph gate: prefill target (EAGLE) cannot run "
            "TARGET_VERIFY; skipped the target-verify graph capture",
        )
    ]
