"""Gates that no release up to 0.5.23 has natively: draft-graph capture and autotune
buffer sizing on a prefill server; and the ReplaySSM rings, which SGLang itself
refuses on a prefill server (so the plugin has nothing to gate)."""

from __future__ import annotations

import types

import pytest
from helpers import census_of, server_fields

from sglang_pd_lean import census

DRAFT_TOKENS = 4


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
    role: str, *, speculative: bool = True, decode_backend: bool = True
):
    inputs = census.Inputs(
        model="qwen3-next-80b-a3b", speculative_num_draft_tokens=DRAFT_TOKENS
    )
    fields = server_fields(inputs, role, speculative=speculative)
    if decode_backend:
        # The operator asked for a decode graph backend explicitly.
        from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig

        fields["cuda_graph_config"] = CudaGraphConfig()
    return fields


def capture_draft_graphs(role: str, *, speculative: bool = True):
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    fields = published_prefill_or(role, speculative=speculative)
    with census.published(**fields) as server_args:
        worker = object.__new__(EagleDraftWorker)
        worker.server_args = server_args
        worker.draft_runner = types.SimpleNamespace()
        worker.target_worker = types.SimpleNamespace(device="cuda")
        worker.device, worker.gpu_id, worker.topk = "cuda", 0, 1
        worker.speculative_num_steps = 2  # multi-step drafting: a draft decode graph
        worker._capture_cuda_graphs()
    return worker


def test_prefill_server_draft_worker_captures_no_graphs(capture_sentinel):
    worker = capture_draft_graphs("prefill")
    assert worker.cuda_graph_runner is None
    assert worker.cuda_graph_runner_for_draft_extend is None


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_draft_workers_go_on_to_capture(capture_sentinel, role):
    with pytest.raises(ReachedCapture):
        capture_draft_graphs(role)


def autotune_tokens_per_request(role: str, *, is_draft_worker: bool = False) -> int:
    """Tokens per request upstream's EagerRunner._autotune_buffers sizes buffers for."""
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    fields = published_prefill_or(role, decode_backend=False)
    asked = []
    with census.published(**fields) as server_args:
        runner = object.__new__(EagerRunner)
        runner._eager_max_bs = 8
        runner.model_runner = types.SimpleNamespace(
            server_args=server_args,
            is_draft_worker=is_draft_worker,
            spec_algorithm=SpeculativeAlgorithm.from_string(
                fields["speculative_algorithm"]
            ),
            decode_num_tokens_per_req=lambda: DRAFT_TOKENS,
        )
        # Upstream's allocator call is the boundary: record the shape asked for.
        runner._alloc_dummy_decode_buffers = (
            lambda max_bs, *, num_tokens_per_req: asked.append(num_tokens_per_req)
        )
        _, batch_size = runner._autotune_buffers()
    assert batch_size == 8
    return asked[0]


def test_prefill_target_autotune_buffers_hold_one_token_per_request():
    assert autotune_tokens_per_request("prefill") == 1


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_autotune_buffers_hold_the_draft_tokens(role):
    assert autotune_tokens_per_request(role) == DRAFT_TOKENS


def test_sglang_refuses_replayssm_spec_on_a_prefill_server():
    """The reason there is no ReplaySSM gate: upstream's own validation says no."""
    inputs = census.Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    import sglang.srt.server_args as server_args_module

    flag = (
        "enable_gdn_replayssm_spec"
        if hasattr(server_args_module.ServerArgs, "enable_gdn_replayssm_spec")
        or "enable_gdn_replayssm_spec"
        in getattr(server_args_module.ServerArgs, "__dataclass_fields__", {})
        else "enable_linear_replayssm_spec"
    )
    fields[flag] = True
    with census.published(**fields) as server_args:
        try:
            from sglang.srt.arg_groups.attention_hook import handle_linear_attn_backend
        except ImportError:
            validate = server_args._handle_linear_attn_backend
        else:
            validate = lambda: handle_linear_attn_backend(server_args)  # noqa: E731
        with pytest.raises(ValueError, match="replayssm-spec is not supported"):
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
