"""Gates that no release up to 0.5.23 has natively: draft-graph capture and autotune
buffer sizing on a prefill server; and the ReplaySSM rings, which SGLang itself
refuses on a prefill server (so the plugin has nothing to gate)."""

from __future__ import annotations

import json
import logging
import pathlib
import types

import pytest
from helpers import census_of, server_fields, upstream_has
from placeholder import Inputs

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import autotune, draft_graph

DRAFT_TOKENS = 4
SERVER_INFO = pathlib.Path(__file__).parent / "data" / "server_info"


class ReachedCapture(Exception):
    pass


@pytest.fixture
def capture_sentinel(monkeypatch):
    """Upstream's memory reading right before a capture raises instead (batch sizes
    answered without a real draft runner)."""
    from sglang.srt.speculative import eagle_worker_v2

    def before_capture(*args, **kwargs):
        raise ReachedCapture

    monkeypatch.setattr(eagle_worker_v2, "get_available_gpu_memory", before_capture)
    monkeypatch.setattr(
        eagle_worker_v2, "get_batch_sizes_to_capture", lambda *a, **k: ([1], None)
    )


def published_prefill_or(
    role: str,
    *,
    speculative: bool = True,
    decode_backend: bool = True,
    draft_tokens: int = DRAFT_TOKENS,
):
    inputs = Inputs(
        model="qwen3-next-80b-a3b", speculative_num_draft_tokens=draft_tokens
    )
    fields = server_fields(inputs, role, speculative=speculative)
    from sglang.srt.model_executor.cuda_graph_config import (
        Backend,
        CudaGraphConfig,
        PhaseConfig,
    )

    if decode_backend:
        # The operator asked for a decode graph backend explicitly.
        fields["cuda_graph_config"] = CudaGraphConfig()
    else:
        # A prefill server's default: no decode graph backend.
        fields["cuda_graph_config"] = CudaGraphConfig(
            decode=PhaseConfig(backend=Backend.DISABLED)
        )
    return fields


def draft_worker(server_args):
    """SGLang's EagleDraftWorker with the fields its graph capture reads."""
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    worker = object.__new__(EagleDraftWorker)
    worker.server_args = server_args
    worker.draft_runner = types.SimpleNamespace()
    worker.target_worker = types.SimpleNamespace(device="cuda")
    worker.device, worker.gpu_id, worker.topk = "cuda", 0, 1
    worker.speculative_num_steps = 2  # multi-step drafting: a draft decode graph
    return worker


def capture_draft_graphs(
    role: str, *, speculative: bool = True, decode_backend: bool = True
):
    fields = published_prefill_or(
        role, speculative=speculative, decode_backend=decode_backend
    )
    with census.published(**fields) as server_args:
        worker = draft_worker(server_args)
        worker._capture_cuda_graphs()
    return worker


def our_log(caplog) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name.startswith("sglang_pd_lean")
    ]


def live_prefill_reasons(gate: str) -> set[str]:
    """Why ``gate`` stepped aside, as live prefill servers answered
    ``/server_info`` (the documents the e2e suite recorded in test/data)."""
    reasons = set()
    for path in SERVER_INFO.glob("*/prefill.json"):
        for state in json.loads(path.read_text())["internal_states"]:
            because = state["pd_lean"]["stepped_aside_because"]
            if gate in because:
                reasons.add(because[gate])
    return reasons


def test_prefill_server_draft_worker_captures_no_graphs(capture_sentinel):
    worker = capture_draft_graphs("prefill")
    assert worker.cuda_graph_runner is None
    assert worker.cuda_graph_runner_for_draft_extend is None


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_draft_workers_go_on_to_capture(capture_sentinel, role):
    with pytest.raises(ReachedCapture):
        capture_draft_graphs(role)


def eager_runner(server_args, fields: dict, *, is_draft_worker: bool = False):
    """SGLang's EagerRunner for 8 requests, with a model runner answering the
    draft tokens per request as SGLang's does for ``fields``. Upstream's allocator
    call is the boundary: it returns what it was asked for."""
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = object.__new__(EagerRunner)
    runner._eager_max_bs = 8
    runner.model_runner = types.SimpleNamespace(
        server_args=server_args,
        is_draft_worker=is_draft_worker,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            fields["speculative_algorithm"]
        ),
    )
    if model_runner_answers_tokens_per_request():  # 0.5.16+
        runner.model_runner.decode_num_tokens_per_req = lambda: fields[
            "speculative_num_draft_tokens"
        ]

    def alloc(max_bs, **tokens):
        # One keyword: num_tokens_per_req (0.5.16+), num_tokens_per_bs (0.5.14/15).
        (per_request,) = tokens.values()
        return ("buffers", max_bs, per_request)

    runner._alloc_dummy_decode_buffers = alloc
    return runner


def model_runner_answers_tokens_per_request() -> bool:
    """SGLang's ModelRunner has ``decode_num_tokens_per_req`` (0.5.16+); 0.5.14 and
    0.5.15 ask the spec algorithm inline in ``_autotune_buffers``."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    return hasattr(ModelRunner, "decode_num_tokens_per_req")


def autotune_tokens_per_request(role: str, *, is_draft_worker: bool = False) -> int:
    """Tokens per request upstream's EagerRunner._autotune_buffers sizes buffers for."""
    fields = published_prefill_or(role, decode_backend=False)
    with census.published(**fields) as server_args:
        runner = eager_runner(server_args, fields, is_draft_worker=is_draft_worker)
        (_, max_bs, tokens_per_request), batch_size = runner._autotune_buffers()
    assert batch_size == max_bs == 8
    return tokens_per_request


def test_prefill_target_autotune_buffers_hold_one_token_per_request():
    assert autotune_tokens_per_request("prefill") == 1


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_autotune_buffers_hold_the_draft_tokens(role):
    assert autotune_tokens_per_request(role) == DRAFT_TOKENS


def test_sglang_refuses_replayssm_spec_on_a_prefill_server():
    """The reason there is no ReplaySSM gate: upstream's own validation says no."""
    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    import sglang.srt.server_args as server_args_module

    cls = server_args_module.ServerArgs
    # 0.5.16: --enable-gdn-replayssm-spec; 0.5.17+: --enable-linear-replayssm-spec;
    # 0.5.15: --enable-linear-replayssm (refused under any PD mode).
    flags = [
        name
        for name in (
            "enable_gdn_replayssm_spec",
            "enable_linear_replayssm_spec",
            "enable_linear_replayssm",
        )
        if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {})
    ]
    if not flags:
        pytest.skip("SGLang 0.5.14 has no ReplaySSM flag to refuse")
    fields[flags[0]] = True
    with census.published(**fields) as server_args:
        try:
            from sglang.srt.arg_groups.attention_hook import handle_linear_attn_backend
        except ImportError:
            validate = server_args._handle_linear_attn_backend
        else:
            validate = lambda: handle_linear_attn_backend(server_args)  # noqa: E731
        with pytest.raises(ValueError, match="replayssm(-spec)? is not supported"):
            validate()


def test_doctor_reports_replayssm_not_applicable(capsys):
    from sglang_pd_lean import cli

    cli.main(["doctor"])
    line = [
        row
        for row in capsys.readouterr().out.splitlines()
        if row.startswith("replayssm")
    ]
    assert line and "not applicable" in line[0]


def test_report_counts_the_autotune_buffers_the_gate_shrinks():
    """Logits rows dominate: max_bs x tokens/request x vocab x fp32."""
    draft = 4
    result = census_of(
        *("--model", "qwen3-next-80b-a3b", "--tp", "4", "--max-running-requests"),
        *("64", "--speculative-num-draft-tokens", str(draft)),
    )
    warm = result["warmup"]
    vocab = 151936
    saved = (
        warm["prefill"]["upstream"]["autotune_buffers_bytes"]
        - warm["prefill"]["plugin"]["autotune_buffers_bytes"]
    )
    assert saved >= 64 * (draft - 1) * vocab * 4
    for role in ("decode", "null"):
        assert warm[role]["plugin"] == warm[role]["upstream"]


# --- what each gate tells the operator ------------------------------------------


@pytest.mark.skipif(
    upstream_has("draft_graph"), reason="upstream skips them itself: no gate, no line"
)
def test_the_operator_reads_which_draft_graphs_were_not_captured(
    capture_sentinel, caplog
):
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        capture_draft_graphs("prefill")
    assert our_log(caplog) == [
        (
            logging.INFO,
            "[sglang-pd-lean] draft_graph gate: prefill target (EAGLE) cannot run "
            "TARGET_VERIFY; skipped the draft decode and draft-extend graph captures",
        )
    ]


@pytest.mark.skipif(
    upstream_has("draft_graph"), reason="upstream skips them itself: no gate, no line"
)
def test_a_prefill_draft_worker_upstream_captures_nothing_for_says_why(
    capture_sentinel, caplog
):
    """Without a decode graph backend upstream captures no draft graph: the gate
    steps aside, leaving upstream's "run eager" runners, and the record and its INFO
    line give the reason live prefill servers gave in ``/server_info``."""
    (reason,) = live_prefill_reasons("draft_graph")
    with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
        worker = capture_draft_graphs("prefill", decode_backend=False)
    assert worker.cuda_graph_runner is None
    assert worker.cuda_graph_runner_for_draft_extend is None
    snapshot = record.snapshot()
    assert snapshot["gates"]["draft_graph"] == "stepped aside"
    assert snapshot["stepped_aside_because"]["draft_graph"] == reason
    [(level, line)] = our_log(caplog)
    assert level == logging.INFO and line.endswith(f"; stepped aside: {reason}")


@pytest.mark.parametrize(
    "args,kwargs", [((None,), {}), ((), {"stream": None})], ids=["positional", "kw"]
)
def test_a_draft_graph_call_upstream_refuses_fails_as_upstream_fails(
    args, kwargs, capture_sentinel, unhooked, outcome
):
    """Upstream's capture takes no argument but the worker: a call with one more
    fails with upstream's own error, never runs upstream without it."""
    original = unhooked(draft_graph.GATE)
    fields = published_prefill_or("prefill")
    with census.published(**fields) as server_args:
        worker = draft_worker(server_args)
        expected = outcome(lambda: original(worker, *args, **kwargs))
        hooked = outcome(
            lambda: draft_graph.GATE.around(original, worker, *args, **kwargs)
        )
    assert expected[:2] == ("raised", "TypeError")
    assert hooked == expected


def test_the_operator_reads_that_the_autotune_buffers_hold_one_token_per_request(
    unhooked, caplog
):
    original = unhooked(autotune.GATE)
    fields = published_prefill_or("prefill", decode_backend=False)
    with census.published(**fields) as server_args:
        runner = eager_runner(server_args, fields)
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            result = autotune.GATE.around(original, runner)
    assert result == (("buffers", 8, 1), 8)
    assert our_log(caplog) == [
        (
            logging.INFO,
            "[sglang-pd-lean] autotune gate: prefill target (EAGLE) cannot run "
            "TARGET_VERIFY; autotune buffers sized for 1 token per request",
        )
    ]


def test_a_prefill_target_with_one_draft_token_keeps_upstreams_autotune_buffers(
    unhooked, caplog
):
    """One draft token per request: upstream already sizes the autotune buffers
    for 1 token per request. Nothing to remove: the gate hands back upstream's own
    buffers and batch size, and the record and its INFO line say why."""
    original = unhooked(autotune.GATE)
    fields = published_prefill_or("prefill", decode_backend=False, draft_tokens=1)
    with census.published(**fields) as server_args:
        runner = eager_runner(server_args, fields)
        expected = original(runner)
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            result = autotune.GATE.around(original, runner)
    assert expected == (("buffers", 8, 1), 8)
    assert result == expected
    if not model_runner_answers_tokens_per_request():
        pytest.skip(
            "SGLang 0.5.14/0.5.15's model runner cannot be asked its tokens per "
            "request: the gate sizes 1 itself, as upstream does (checked above)"
        )
    reason = "upstream sizes 1 token per request here"
    snapshot = record.snapshot()
    assert snapshot["gates"]["autotune"] == "stepped aside"
    assert snapshot["stepped_aside_because"]["autotune"] == reason
    [(level, line)] = our_log(caplog)
    assert level == logging.INFO and line.endswith(f"; stepped aside: {reason}")
