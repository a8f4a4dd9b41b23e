"""The per-rank record behind ``/server_info``: "acted" is never turned back, a
snapshot is the caller's own copy, and ``reset()`` forgets everything. Checked on
the record itself and through the gates that write it."""

from __future__ import annotations

import types

from helpers import server_fields

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import warmup
from sglang_pd_lean.record import Outcome


def test_a_gate_that_acted_stays_acted_when_another_worker_steps_aside():
    record.acted("pool", **{"verify ssm snapshots": 1024})
    assert record.stepped_aside("pool", "draft worker can run TARGET_VERIFY") is False
    snap = record.snapshot()
    assert snap["gates"]["pool"] == "acted"
    assert "pool" not in snap["stepped_aside_because"]
    assert snap["not_allocated_bytes"] == {"verify ssm snapshots": 1024}


def test_a_gate_that_stepped_aside_then_acts_reads_acted_without_a_reason():
    assert record.stepped_aside("graph", "upstream captures no graph here") is True
    assert record.acted("graph") is True
    snap = record.snapshot()
    assert snap["gates"]["graph"] == "acted" and snap["stepped_aside_because"] == {}


def test_a_component_that_was_not_measured_is_not_filed():
    record.acted("pool", **{"verify ssm snapshots": None})
    assert record.snapshot()["not_allocated_bytes"] == {}


def test_warmup_gate_stays_acted_when_the_draft_worker_warms_up_after_the_target():
    """One prefill rank warms up its target (the gate acts), then its draft worker
    (upstream's warmup): ``/server_info`` must still say the gate acted."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    inputs = census.Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    with census.published(**fields) as server_args:
        for is_draft_worker in (False, True):
            runner = types.SimpleNamespace(
                model_runner=types.SimpleNamespace(
                    server_args=server_args,
                    is_draft_worker=is_draft_worker,
                    spec_algorithm=SpeculativeAlgorithm.EAGLE,
                )
            )
            warmup.GATE.around(lambda *a, **k: None, runner)
            if not is_draft_worker:
                assert record.snapshot()["gates"]["warmup"] == Outcome.ACTED
    snap = record.snapshot()
    assert snap["gates"]["warmup"] == "acted"
    assert "warmup" not in snap["stepped_aside_because"]


def test_a_snapshot_is_the_callers_own_copy():
    record.registered("0.5.17", {"pool": "applied by the plugin"}, "summary")
    record.acted("pool", **{"verify ssm snapshots": 1024})
    record.budget(100.0, None, {"kv_bytes": 1, "kv_tokens": 2, "mamba_slots": 3})
    edited = record.snapshot()
    edited["gates"]["pool"] = "edited"
    edited["not_allocated_bytes"]["verify ssm snapshots"] = 0
    edited["budget"]["plugin"]["kv_bytes"] = 0
    edited["stepped_aside_because"]["pool"] = "edited"
    assert record.snapshot() == {
        "sglang_version": "0.5.17",
        "gates": {"pool": "acted"},
        "stepped_aside_because": {},
        "not_allocated_bytes": {"verify ssm snapshots": 1024},
        "total_rest_memory_gib": None,
        "budget": {
            "available_gib": 100.0,
            "upstream": None,
            "plugin": {"kv_bytes": 1, "kv_tokens": 2, "mamba_slots": 3},
        },
    }


def test_server_info_answers_do_not_share_state_with_the_record():
    """A scheduler's ``/server_info`` answer, edited by its caller, leaves the next
    answer as the record has it."""
    record.acted("pool", **{"verify ssm snapshots": 1024})
    first = types.SimpleNamespace(internal_state={})
    record.add_to_internal_state(first)
    first.internal_state["pd_lean"]["gates"]["pool"] = "stepped aside"
    first.internal_state["pd_lean"]["not_allocated_bytes"].clear()
    second = types.SimpleNamespace(internal_state={})
    record.add_to_internal_state(second)
    assert second.internal_state["pd_lean"]["gates"] == {"pool": "acted"}
    assert second.internal_state["pd_lean"]["not_allocated_bytes"] == {
        "verify ssm snapshots": 1024
    }


def test_reset_forgets_everything_the_rank_recorded(caplog):
    record.registered("0.5.17", {"pool": "applied by the plugin"}, "the summary")
    record.acted("pool", **{"verify ssm snapshots": 1024})
    record.announce()
    record.reset()
    assert record.snapshot() == {
        "sglang_version": None,
        "gates": {},
        "stepped_aside_because": {},
        "not_allocated_bytes": {},
        "total_rest_memory_gib": None,
        "budget": {},
    }
    caplog.clear()
    record.announce()  # nothing registered since the reset: nothing to announce
    assert caplog.records == []


def test_the_targets_sizing_budget_is_kept_and_a_drafts_is_not():
    """What SGLang passes ``_handle_max_mamba_cache`` as ``total_rest_memory``
    (positional or by name), for the target; a draft worker's sizing leaves it."""
    target = types.SimpleNamespace(is_draft_worker=False)
    draft = types.SimpleNamespace(is_draft_worker=True)
    record.sizing_received(target, 12.5)
    record.sizing_received(draft, 3.0)
    assert record.snapshot()["total_rest_memory_gib"] == 12.5
    record.sizing_received(target, total_rest_memory=7.25)
    assert record.snapshot()["total_rest_memory_gib"] == 7.25
    record.sizing_received(object())  # no budget given: nothing, never raises
    assert record.snapshot()["total_rest_memory_gib"] == 7.25
