"""Warmup gate: a PD-prefill speculative target warms up in DECODE, 1 token/request.

Calls the real ``BaseRunner._dummy_run`` on CPU tensors. The model runner is a
namespace with the fields that function reads; the first call after upstream has
built the dummy ForwardBatch (``prepare_dummy_forward_batch``, 0.5.23's
``kv_index_translator.bind_runner_slots``, or 0.5.14/0.5.15's
``attn_backend.init_forward_metadata``) hands the batch back through a sentinel, so
the test reads the mode and token count upstream chose.

Where the installed SGLang does this gate's job itself (``conftest.NATIVE_FROM``),
the plugin registers no hook and the prefill-target cases compare upstream with
upstream; ``test_gates.py`` drives the gate's own hook on every release.
"""

from __future__ import annotations

import logging
import types

import pytest
import torch
from helpers import server_fields, stand_in_model_runner
from placeholder import Inputs

from sglang_pd_lean import census

BATCH = 4
DRAFT_TOKENS = 4


class BatchBuilt(Exception):
    def __init__(self, forward_batch):
        self.forward_batch = forward_batch


def buffers(max_bs: int, max_tokens: int):
    def zeros(*shape, dtype=torch.int64):
        return torch.zeros(shape, dtype=dtype)

    return types.SimpleNamespace(
        input_ids=zeros(max_tokens),
        positions=zeros(max_tokens),
        out_cache_loc=zeros(max_tokens),
        mrope_positions=zeros(3, max_tokens),
        num_token_non_padded=zeros(1, dtype=torch.int32),
        req_pool_indices=zeros(max_bs, dtype=torch.int32),
        seq_lens=torch.ones(max_bs, dtype=torch.int32),
        seq_lens_cpu=torch.ones(max_bs, dtype=torch.int32),
        next_token_logits_buffer=None,
        encoder_lens=None,
        custom_mask=torch.ones(max_tokens * 64, dtype=torch.bool),
        global_num_tokens_gpu=zeros(1, dtype=torch.int32),
        global_num_tokens_for_logprob_gpu=zeros(1, dtype=torch.int32),
        pp_proxy_tensors={},
        ngram_embedding_info=None,
    )


def attention_backend(batch_built):
    """SGLang's Triton attention backend, unset up (its fill value needs no
    device), whose ``init_forward_metadata`` is ``batch_built``."""
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    backend = object.__new__(TritonAttnBackend)
    backend.init_forward_metadata = batch_built
    return backend


def model_runner(server_args, fields: dict, *, is_draft_worker: bool):
    def prepare_dummy_forward_batch(forward_batch):
        raise BatchBuilt(forward_batch)

    return stand_in_model_runner(
        server_args,
        fields,
        is_draft_worker=is_draft_worker,
        device="cpu",
        dtype=torch.bfloat16,
        model_config=types.SimpleNamespace(hidden_size=8, is_encoder_decoder=False),
        prepare_dummy_forward_batch=prepare_dummy_forward_batch,
        model=types.SimpleNamespace(),
        lora_manager=None,
        # 0.5.23 binds KV slots right after building the batch: the same sentinel.
        kv_index_translator=types.SimpleNamespace(
            bind_runner_slots=prepare_dummy_forward_batch
        ),
        # 0.5.14 and 0.5.15 have no prepare_dummy_forward_batch: the batch goes
        # straight to the attention backend, the same sentinel (they read the
        # backend's seq-len fill value on every mode, 0.5.16+ on EXTEND only).
        attn_backend=attention_backend(prepare_dummy_forward_batch),
    )


def dummy_run(role: str, *, speculative: bool = True, is_draft_worker: bool = False):
    """(forward mode, tokens per request) upstream's _dummy_run picked."""
    from sglang.srt.model_executor.runner.base_runner import BaseRunner

    class Probe(BaseRunner):
        can_run_graph = load_batch = execute = None

    inputs = Inputs(
        model="qwen3-next-80b-a3b", speculative_num_draft_tokens=DRAFT_TOKENS
    )
    fields = server_fields(inputs, role, speculative=speculative)
    with census.published(**fields) as server_args:
        runner = object.__new__(Probe)
        runner.model_runner = model_runner(
            server_args, fields, is_draft_worker=is_draft_worker
        )
        with pytest.raises(BatchBuilt) as built:
            runner._dummy_run(BATCH, buffers=buffers(BATCH, BATCH * DRAFT_TOKENS))
    batch = built.value.forward_batch
    return batch.forward_mode.name, batch.input_ids.shape[0] // BATCH


def test_prefill_target_warms_up_in_decode_one_token_per_request():
    assert dummy_run("prefill") == ("DECODE", 1)


@pytest.mark.parametrize("role", ["decode", "null"])
def test_decode_and_null_targets_warm_up_in_target_verify(role):
    assert dummy_run(role) == ("TARGET_VERIFY", DRAFT_TOKENS)


def test_prefill_without_speculative_decoding_warms_up_in_decode():
    assert dummy_run("prefill", speculative=False) == ("DECODE", 1)


def test_prefill_target_spec_algorithm_is_restored_after_warmup():
    from sglang.srt.model_executor.runner.base_runner import BaseRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    class Probe(BaseRunner):
        can_run_graph = load_batch = execute = None

    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")
    with census.published(**fields) as server_args:
        runner = object.__new__(Probe)
        runner.model_runner = model_runner(server_args, fields, is_draft_worker=False)
        with pytest.raises(BatchBuilt):
            runner._dummy_run(BATCH, buffers=buffers(BATCH, BATCH * DRAFT_TOKENS))
    assert runner.model_runner.spec_algorithm == SpeculativeAlgorithm.EAGLE


def test_the_operator_reads_once_that_the_warmup_ran_in_decode(caplog):
    """A rank warms up its target more than once (FlashInfer autotune, DeepGEMM):
    each call hands back what upstream's warmup returned, and one INFO line per
    rank says what the gate changed."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean.gates import warmup

    inputs = Inputs(model="qwen3-next-80b-a3b")
    fields = server_fields(inputs, "prefill")

    def upstream(runner, *args, **kwargs):
        return ("warmed up", runner.model_runner.spec_algorithm)

    with census.published(**fields) as server_args:
        runner = types.SimpleNamespace(
            model_runner=stand_in_model_runner(
                server_args, fields, is_draft_worker=False
            )
        )
        with caplog.at_level(logging.INFO, logger="sglang_pd_lean"):
            results = [warmup.GATE.around(upstream, runner, BATCH) for _ in range(2)]
    assert results == [("warmed up", SpeculativeAlgorithm.NONE)] * 2
    assert [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name.startswith("sglang_pd_lean")
    ] == [
        (
            logging.INFO,
            "[sglang-pd-lean] warmup gate: prefill target (EAGLE) cannot run "
            "TARGET_VERIFY; warmup forward runs in DECODE with 1 token per request",
        )
    ]
