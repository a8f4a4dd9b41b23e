"""The per-rank record behind ``/server_info``: "acted" is never turned back, a
snapshot is the caller's own copy, and ``reset()`` forgets everything. Checked on
the record itself, through the gates that write it, and through its reporting hooks
as SGLang applies them. Also ``accounting``, which counts the bytes the record and
the report give: against the tensors SGLang's own pool constructors allocate."""

from __future__ import annotations

import logging
import types

import pytest
from helpers import server_fields, sglang_minor
from placeholder import Inputs, prepare

from sglang_pd_lean import accounting, census, plugin, record
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

    inputs = Inputs(model="qwen3-next-80b-a3b")
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
    with caplog.at_level(logging.DEBUG, logger="sglang_pd_lean"):
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


def test_a_gate_changes_the_record_once_per_rank_for_the_same_news():
    """The gates log a line only when the record changes (one INFO line per gate
    and rank): acting again, or stepping aside again for the same reason, is none."""
    assert record.acted("warmup") is True
    assert record.acted("warmup") is False
    reason = "upstream captures no decode graph here"
    assert record.stepped_aside("graph", reason) is True
    assert record.stepped_aside("graph", reason) is False
    assert record.stepped_aside("graph", "another reason") is True


def test_a_configurator_that_does_not_say_it_is_a_draft_is_sized_as_the_target(
    configurator,
):
    """Upstream's own unit tests build configurators without ``is_draft_worker``:
    such a sizing is the target's, and its budget is kept."""
    _, conf = configurator("decode")
    del conf.is_draft_worker
    record.sizing_received(conf, 12.5)
    assert record.snapshot()["total_rest_memory_gib"] == 12.5


# --- the reporting hooks, as SGLang applies them --------------------------------


def applied(registry, target: str, stand_in):
    """``stand_in`` wrapped in every hook registered on ``target``, the way
    SGLang's ``HookRegistry`` wraps the real function (its own ``_wrap_fn``)."""
    from sglang.srt.plugins.hook_registry import _wrap_fn

    wrapped = stand_in
    for hook_type, hook, _source in registry._hooks[target]:
        wrapped = _wrap_fn(wrapped, hook, hook_type)
    return wrapped


def test_a_starting_scheduler_logs_the_registration_summary_once(fresh_plugin, caplog):
    assert plugin.register() is True
    init = applied(fresh_plugin, f"{record.SCHEDULER}.__init__", lambda self: None)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        init(object())
        init(object())
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("[sglang-pd-lean] SGLang")
    ]
    assert len(lines) == 1 and "pool gate" in lines[0]


def test_a_schedulers_server_info_answer_carries_the_record(fresh_plugin):
    import sglang
    from sglang.srt.managers.io_struct import GetInternalStateReqOutput

    assert plugin.register() is True
    get_internal_state = applied(
        fresh_plugin,
        f"{record.SCHEDULER}.get_internal_state",
        lambda self, req: GetInternalStateReqOutput(internal_state={"x": 1}),
    )
    answer = get_internal_state(object(), object())
    assert answer.internal_state["x"] == 1
    assert answer.internal_state["pd_lean"]["sglang_version"] == sglang.__version__


def test_the_budget_the_targets_sizing_receives_is_kept(fresh_plugin, configurator):
    """Whatever else SGLang hooks on the sizing (the budget gate on 0.5.16 to
    0.5.21), the budget SGLang passes the target's sizing is recorded."""
    from sglang_pd_lean import seams

    assert plugin.register() is True
    _, conf = configurator("decode")
    # The configurator's sizing (0.5.16+), or the model runner mixin's (0.5.14/15).
    (target,) = [t for t in seams.HOOK_TARGETS["budget"] if t in fresh_plugin._hooks]
    sizing = applied(fresh_plugin, target, lambda self, total_rest_memory: "sized")
    assert sizing(conf, 12.5) == "sized"
    assert record.snapshot()["total_rest_memory_gib"] == 12.5


# --- accounting: bytes per component of a request pool SGLang built -------------


def request_pool(role: str, **launch):
    """SGLang's request pool for a Qwen3-Next EAGLE target (TP 2, 8 requests), built
    by upstream's own constructors under FakeTensorMode, ``launch`` fields set."""
    inputs = Inputs(
        model="qwen3-next-80b-a3b", tp=2, max_running_requests=8, context_length=512
    )
    mc, _ = prepare(inputs)
    fields = {**server_fields(inputs, role), **launch}
    with census.parallel(tp=2), census.published(**fields) as server_args:
        conf = census.configurator(mc, server_args, is_draft_worker=False)
        return census.build_request_pool(conf, inputs.max_running_requests)


def nbytes(*tensors) -> int:
    return sum(t.nbytes for t in tensors)


def test_every_tensor_of_a_replayssm_pool_is_counted_once():
    """A unified server with the ReplaySSM decode ring (--enable-linear-replayssm):
    its pool holds the verify state (the conv windows seen through a view of their
    physical buffer), three ring buffers, and the ring's write cursor on the mamba
    pool outside its state. Each counts, once, as SGLang allocated it."""
    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__dataclass_fields__", {})
    if not (
        hasattr(ServerArgs, "enable_linear_replayssm")
        or "enable_linear_replayssm" in fields
    ):
        pytest.skip("SGLang 0.5.14 has no ReplaySSM (--enable-linear-replayssm)")
    pool = request_pool("null", enable_linear_replayssm=True)
    mamba = pool.mamba_pool
    cache = mamba.mamba_cache
    sizes = accounting.component_bytes(pool)
    assert sizes["req_to_token map"] == nbytes(pool.req_to_token)
    assert sizes["conv state"] == nbytes(*cache.conv)
    assert sizes["ssm state"] == nbytes(cache.temporal)
    assert sizes["verify ssm snapshots"] == nbytes(cache.intermediate_ssm)
    assert sizes["verify conv windows"] == nbytes(*mamba._intermediate_conv_window_phys)
    rings = (cache.replayssm_d, cache.replayssm_k, cache.replayssm_g)
    assert sizes["replayssm rings"] == nbytes(*rings)
    # The request pool's generation counters: 0.5.16+ (none on 0.5.14/0.5.15).
    generation = [pool.req_generation] if sglang_minor() >= 16 else []
    everything = nbytes(
        pool.req_to_token,
        *generation,
        pool.req_index_to_mamba_index_mapping,
        *cache.conv,
        cache.temporal,
        cache.intermediate_ssm,
        *mamba._intermediate_conv_window_phys,
        *rings,
        mamba.replayssm_write_pos,
    )
    assert sum(sizes.values()) == everything


def test_a_request_pool_without_mamba_state_counts_its_req_to_token_map():
    """A plain ``ReqToTokenPool`` (a model without linear attention): no state."""
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        pool = ReqToTokenPool(
            size=8, max_context_len=64, device="cuda", enable_memory_saver=False
        )
    sizes = accounting.component_bytes(pool)
    assert sizes["req_to_token map"] == nbytes(pool.req_to_token)
    named = set(accounting.COMPONENT_ORDER) - {"req_to_token map"}
    assert named & set(sizes) == set()
