"""The report's figures against sources outside its code: each named GPU's published
facts, the units of ``--gpu-memory-gib`` / ``--gpu-sm``, the role SGLang's own parser
reads from the flags, the launch flags the census flags alone stand for as SGLang
resolves them, the terms of SGLang's available-memory formula (target and draft
weights), SGLang's own start-up sizing, and the advice's choices on the memory road.

Published GPU facts (``PUBLISHED``): total memory as ``nvidia-smi`` reports it
(``memory.total``, MiB; e.g. modal-labs/modal-client pull request 2797 lists H100
81559 MiB and A100 80GB 81920 MiB; the H200's 143771 MiB, H20's 97871 MiB, B200's
183359 MiB and GB200's 189471 MiB are what ``nvidia-smi`` prints on those parts), the
compute capability of each architecture (Ampere 8.0, Hopper 9.0, Blackwell 10.0) and
its streaming multiprocessors (NVIDIA's A100 and H100 architecture whitepapers: 108
and 132 SMs; H200 is the same GH100 configuration; H20 78; B200 148 and GB200 152 as
CUDA's ``multiProcessorCount`` reports them)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os

import pytest
from formulas import GIB, gdn_dims, load_config
from helpers import NEXTN, sglang_minor, sizing_pad

from sglang_pd_lean import cli
from sglang_pd_lean.census import flags, launch, memory, model
from sglang_pd_lean.census.inputs import MAX_SLOTS, MODELS_DIR, CensusError
from sglang_pd_lean.census.results import WeightsBuild

# name (torch.cuda.get_device_name), nvidia-smi memory.total MiB, SM, SMs (cores).
PUBLISHED = {
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 81920, 80, 108),
    "h100": ("NVIDIA H100 80GB HBM3", 81559, 90, 132),
    "h20": ("NVIDIA H20", 97871, 90, 78),
    "h200": ("NVIDIA H200", 143771, 90, 132),
    "b200": ("NVIDIA B200", 183359, 100, 148),
    "gb200": ("NVIDIA GB200", 189471, 100, 152),
}
# The GPU docs/report.md names as the report's default.
README_DEFAULT_GPU = "h200"
# Per rank, before the weights load: 1 GiB of CUDA context and communicators, as
# docs/report.md states the formula (A = (T - C) x mem_fraction_static - weights).
CONTEXT_GIB = 1.0


def cli_run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *args: str) -> str:
    """The one line ``sglang-pd-lean`` ends with when it refuses ``args`` (exit 2)."""
    code, out, err = cli_run(capsys, *args)
    assert code == 2 and out == ""
    return err.strip().splitlines()[-1]


def report_json(capsys, *args: str) -> dict:
    code, out, err = cli_run(capsys, "report", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang's own launch_server parser."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


# --- the GPU facts ---------------------------------------------------------------


@pytest.mark.parametrize("gpu", sorted(PUBLISHED))
def test_a_named_gpu_is_the_part_as_published(gpu):
    name, memory_mib, sm, cores = PUBLISHED[gpu]
    facts = launch.gpu_facts(gpu)
    assert (facts.name, facts.memory_mib, facts.sm, facts.cores) == PUBLISHED[gpu]
    assert facts.memory_gib == memory_mib / 1024
    from sglang.srt.utils import common

    with launch.on_gpu(facts):
        assert common.get_device_memory_capacity() == memory_mib
        assert common.get_device_core_count() == cores
        assert common.get_device_sm() == sm


@pytest.mark.parametrize("spelling", ["H100", "H100".capitalize(), "h100"])
def test_a_gpu_name_is_read_in_any_case(spelling):
    facts = launch.gpu_facts(spelling)
    assert (facts.name, facts.memory_mib, facts.sm, facts.cores) == PUBLISHED["h100"]


def test_without_a_gpu_the_report_sizes_for_the_readmes_default():
    facts = launch.gpu_facts(None)
    default = PUBLISHED[README_DEFAULT_GPU]
    assert (facts.name, facts.memory_mib, facts.sm, facts.cores) == default


def test_an_unknown_gpu_is_refused_naming_the_known_ones():
    with pytest.raises(CensusError) as raised:
        launch.gpu_facts("h300")
    assert str(raised.value) == (
        "unknown --gpu 'h300'; known: a100-80gb, h100, h20, h200, b200, gb200, local"
    )


def test_local_supplies_no_facts_and_needs_the_available_memory(capsys):
    """docs/json.md: ``launch.gpu.sm`` 0 is this machine, as SGLang probes it; no
    fact is supplied (memory, SM and SM count all 0), so the memory must be given."""
    facts = launch.gpu_facts("LOCAL")
    assert (facts.name, facts.memory_mib, facts.sm, facts.cores) == (
        "this machine, as SGLang probes it",
        0,
        0,
        0,
    )
    line = refused(capsys, "report", "--gpu", "local", "--", "--tp", "2")
    assert line == (
        "sglang-pd-lean: error: --gpu local supplies no GPU memory: give "
        "--available-gib (the total_rest_memory the server's sizing receives)"
    )


@pytest.mark.parametrize("gib,sm,capability", [(96.0, 103, (10, 3)), (0.5, 10, (1, 0))])
def test_gpu_memory_gib_is_gib_and_gpu_sm_is_major_minor(gib, sm, capability):
    """``--gpu-memory-gib 96`` is 98,304 MiB to SGLang's memory probe; ``--gpu-sm
    103`` is capability (10, 3); the smallest SM, 1.0, is 10."""
    from sglang.srt.utils import common

    facts = launch.gpu_facts(None, gib, sm)
    assert facts.memory_mib == gib * 1024 and facts.sm == sm
    assert facts.name == f"GPU with {gib:g} GiB, SM {sm}"
    with launch.on_gpu(facts):
        assert common.get_device_memory_capacity() == gib * 1024
        assert common.get_device_capability() == capability


def test_the_largest_gpu_memory_and_sm_accepted():
    facts = launch.gpu_facts(None, float((1 << 20) - 1), 999)
    assert facts.memory_mib == ((1 << 20) - 1) * 1024 and facts.sm == 999


@pytest.mark.parametrize(
    "gib,sm", [(0.0, 90), (-8.0, 90), (float(1 << 20), 90), (80.0, 9), (80.0, 1000)]
)
def test_gpu_memory_and_sm_that_are_not_a_gpu_are_refused(gib, sm):
    """No memory, a PiB of it, an SM below 1.0 (10) or past major 99."""
    with pytest.raises(CensusError) as raised:
        launch.gpu_facts(None, gib, sm)
    assert str(raised.value) == (
        f"--gpu-memory-gib {gib:g} --gpu-sm {sm}: not a GPU (SM is major*10+minor, "
        f"e.g. 90 for Hopper)"
    )


def test_a_gpu_sm_that_is_not_a_gpu_is_one_line_and_exit_2(capsys):
    flags = ("--gpu-memory-gib", "80", "--gpu-sm", "9")
    line = refused(capsys, "report", *flags, "--", "--tp", "2")
    assert line == (
        "sglang-pd-lean: error: --gpu-memory-gib 80 --gpu-sm 9: not a GPU (SM is "
        "major*10+minor, e.g. 90 for Hopper)"
    )


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--gpu-memory-gib", "80"), "--gpu-memory-gib and --gpu-sm go together"),
        (("--gpu-sm", "90"), "--gpu-memory-gib and --gpu-sm go together"),
        (
            ("--gpu", "h100", "--gpu-memory-gib", "80", "--gpu-sm", "90"),
            "give --gpu NAME, or --gpu-memory-gib and --gpu-sm",
        ),
    ],
)
def test_gpu_memory_and_sm_come_together_and_instead_of_a_name(flags, message, capsys):
    line = refused(capsys, "report", *flags, "--", "--tp", "2")
    assert line == f"sglang-pd-lean: error: {message}"


# --- the role the flags name -----------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--tp", "4"],
        ["--disaggregation-mode", "prefill", "--tp", "4"],
        ["--tp", "4", "--disaggregation-mode=decode"],
        ["--disaggregation-mode=prefill", "--disaggregation-mode", "decode"],
        ["--disaggregation-mode", "decode", "--disaggregation-mode=prefill"],
        ["--disaggregation-mode=null"],
    ],
)
def test_the_role_the_flags_name_is_the_one_sglangs_parser_reads(argv):
    """Without the flag, SGLang's own default; with it, in either spelling, the
    last one given (argparse keeps the last)."""
    parsed = sglang_parser().parse_args(["--model-path", "m", *argv])
    assert flags.given_role(argv) == parsed.disaggregation_mode


def test_a_disaggregation_flag_without_a_value_names_no_role():
    """SGLang's parser refuses it (the report then says so); no role is read."""
    assert flags.given_role(["--tp", "4", "--disaggregation-mode"]) == "null"


# --- the census flags alone ------------------------------------------------------


@pytest.mark.parametrize("draft", [2, 3, 5])
def test_census_flags_alone_are_a_chain_sglang_keeps_as_asked(draft):
    """SGLang's speculative hook sets the draft tokens to steps + 1 for a top-k 1
    chain: the shorthand's steps are what keeps the draft tokens asked for."""
    argv = flags.shorthand_argv(
        {"speculative_num_draft_tokens": draft, "max_running_requests": 24}, alone=True
    )
    with open(os.path.join(MODELS_DIR, "qwen3-next-80b-a3b.json")) as f:
        path = model.model_folder(json.load(f))
    resolved = launch.resolve([*argv, "--model-path", path], launch.GPUS["h200"])
    server_args = resolved.server_args
    values = {
        name: launch.resolved_value(server_args, name)
        for name in (
            "speculative_num_draft_tokens",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "max_running_requests",
        )
    }
    assert values == {
        "speculative_num_draft_tokens": draft,
        "speculative_num_steps": draft - 1,
        "speculative_eagle_topk": 1,
        "max_running_requests": 24,
    }
    assert str(launch.resolved_value(server_args, "speculative_algorithm")) in (
        "EAGLE",
        "SpeculativeAlgorithm.EAGLE",
    )


# --- the available memory --------------------------------------------------------


def sglang_total_rest_memory(
    total_gib: float, mfs: float, target: int, draft: int
) -> float:
    """``KVCacheConfigurator._profile_available_bytes``, term by term: the memory
    free before the weights load (``pre_model_load_memory``: the GPU less its CUDA
    context), the memory free once target and draft weights are loaded, less the
    non-static slack ``pre_model_load_memory * (1 - mem_fraction_static)``."""
    pre_model_load_memory = total_gib - CONTEXT_GIB
    available_gpu_memory = pre_model_load_memory - target / GIB - draft / GIB
    return available_gpu_memory - pre_model_load_memory * (1 - mfs)


@pytest.mark.parametrize(
    "gpu,mfs,target,draft",
    [
        ("h200", 0.83, 40 * GIB, 3 * GIB // 2),
        ("h100", 0.9, 7 * GIB + 12345, 0),
        ("b200", 0.75, 0, 2 * GIB),
    ],
)
def test_available_memory_is_sglangs_total_rest_memory(gpu, mfs, target, draft):
    total = PUBLISHED[gpu][1] / 1024
    weights = memory.Weights(target, draft, "given")
    got = memory.available_gib(gpu_gib=total, mem_fraction_static=mfs, weights=weights)
    assert got == pytest.approx(
        sglang_total_rest_memory(total, mfs, target, draft), rel=1e-12, abs=1e-12
    )


def test_weights_gib_is_gib_per_rank_target_and_draft_together(tmp_path):
    weights = memory.weights_per_rank(str(tmp_path), tp=4, weights_gib=12.5)
    assert weights == memory.Weights(
        25 * GIB // 2, 0, "--weights-gib (target and draft)"
    )


def test_the_built_classes_answer_target_and_draft_with_their_source(tmp_path):
    built = WeightsBuild(
        target_bytes=41 * GIB,
        draft_bytes=GIB + 7,
        target_class="Qwen3NextForCausalLM",
        draft_class="Qwen3NextForCausalLMMTP",
        tp=4,
        ep=2,
    )
    weights = memory.weights_per_rank(str(tmp_path), tp=4, built=built)
    assert weights == memory.Weights(
        41 * GIB,
        GIB + 7,
        "SGLang's model class built under FakeTensorMode for rank 0 of TP 4, EP 2: "
        "Qwen3NextForCausalLM + draft Qwen3NextForCausalLMMTP",
    )
    alone = WeightsBuild(target_bytes=5, target_class="Qwen3NextForCausalLM", tp=2)
    assert memory.weights_per_rank(str(tmp_path), tp=2, built=alone) == (
        memory.Weights(
            5,
            0,
            "SGLang's model class built under FakeTensorMode for rank 0 of TP 2, "
            "EP 1: Qwen3NextForCausalLM",
        )
    )


def write_index(folder, index) -> None:
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def test_the_index_is_the_checkpoint_over_tp_and_says_why_the_build_did_not(
    tmp_path,
):
    """A rank holds the checkpoint's total over TP, whole bytes; a failed build is
    named beside the index."""
    write_index(tmp_path, {"metadata": {"total_size": 10 * GIB + 3}})
    plain = memory.weights_per_rank(str(tmp_path), tp=4)
    assert plain == memory.Weights(
        (10 * GIB + 3) // 4, 0, "model.safetensors.index.json total_size / TP 4"
    )
    failed = WeightsBuild(error="no CUDA kernel for this op", target_bytes=99)
    weights = memory.weights_per_rank(str(tmp_path), tp=4, built=failed)
    assert weights == memory.Weights(
        (10 * GIB + 3) // 4,
        0,
        "model.safetensors.index.json total_size / TP 4 (SGLang's model class did "
        "not build: no CUDA kernel for this op)",
    )


@pytest.mark.parametrize(
    "index", [{"weight_map": {}}, {"metadata": {"total_size": "many"}}, "not json"]
)
def test_an_index_the_report_cannot_read_is_one_line_naming_it(tmp_path, index):
    path = tmp_path / "model.safetensors.index.json"
    if isinstance(index, str):
        path.write_text(index)
    else:
        write_index(tmp_path, index)
    with pytest.raises(CensusError) as raised:
        memory.weights_per_rank(str(tmp_path), tp=2)
    assert str(raised.value).startswith(f"cannot read {path}: ")


def test_no_weights_source_answers_none(tmp_path):
    assert memory.weights_per_rank(str(tmp_path), tp=2) is None
    failed = WeightsBuild(error="no seam")
    assert memory.weights_per_rank(str(tmp_path), tp=2, built=failed) is None


# --- SGLang's start-up sizing ----------------------------------------------------

SIZING_MODEL, SIZING_TP, SIZING_SLOTS, SIZING_REQUESTS = "qwen3-next-80b-a3b", 2, 64, 16


def state_gib() -> float:
    """The mamba state SGLang charges a prefill target that cannot verify (the
    plugin's budget gate, native from 0.5.22): its slots plus the padding slot, per
    slot every linear layer's ssm and conv state, from config.json."""
    d = gdn_dims(load_config(SIZING_MODEL), tp=SIZING_TP)
    per_slot = d["layers"] * (d["ssm"] + d["conv"])
    return (SIZING_SLOTS + sizing_pad()) * per_slot / GIB


def token_cell() -> int:
    """KV bytes per token: K and V of every full-attention layer, bf16, and of the
    one full-attention layer of Qwen3-Next's MTP draft (NEXTN), which the target's
    KV cache holds too."""
    text = load_config(SIZING_MODEL)
    full = text["num_hidden_layers"] // text["full_attention_interval"] + 1
    heads = max(text["num_key_value_heads"] // SIZING_TP, 1)
    return full * 2 * heads * text["head_dim"] * 2


def size_prefill(configurator, available: float):
    from sglang_pd_lean.census.sizing import size_budget

    _, conf = configurator(
        "prefill",
        model=SIZING_MODEL,
        tp=SIZING_TP,
        requests=SIZING_REQUESTS,
        context_length=4096,
        sizing=True,
        max_mamba_cache_size=SIZING_SLOTS,
        speculative_num_draft_tokens=4,
        mamba_radix_cache_strategy="no_buffer",
    )
    return size_budget(conf, available, conf.server_args)


def test_half_a_gib_of_kv_cache_fits(configurator):
    """What the mamba state leaves is the KV cache, however little: half a GiB is
    tokens of the model's KV cell, the requests asked for, the state beside it."""
    state = state_gib()
    sized = size_prefill(configurator, state + 0.5)
    assert sized.fits is True and sized.reason is None
    assert sized.kv_cache_gib == pytest.approx(0.5, abs=1e-9)
    assert sized.kv_cache_bytes == pytest.approx(GIB // 2, abs=2)
    assert sized.kv_tokens == pytest.approx(GIB // 2 // token_cell(), abs=1)
    assert sized.mamba_slots == SIZING_SLOTS
    assert sized.max_running_requests == SIZING_REQUESTS
    assert sized.mamba_state_and_verify_gib == pytest.approx(state, abs=1e-9)


def test_a_state_past_the_budget_stops_as_sglang_stops(configurator):
    """SGLang's ``_profile_available_bytes`` raises 'Loaded weights leave no GPU
    memory for the KV cache' where the mamba sizing leaves nothing."""
    sized = size_prefill(configurator, state_gib() - 0.25)
    assert sized.fits is False
    assert sized.reason == (
        "the mamba budget leaves -0.25 GiB for the KV cache; SGLang stops: 'Loaded "
        "weights leave no GPU memory for the KV cache'"
    )
    assert sized.kv_tokens is None and sized.mamba_state_and_verify_gib is None


def test_a_kv_cache_smaller_than_one_token_stops_with_sglangs_reason(configurator):
    """A KV budget under one token's cell: SGLang's ``MemoryPoolConfig`` refuses
    zero tokens (RuntimeError 'Not enough memory'); the reason is SGLang's own."""
    sized = size_prefill(configurator, state_gib() + token_cell() / 4 / GIB)
    assert sized.fits is False
    assert sized.reason.startswith(
        "SGLang stops: RuntimeError: Not enough memory. Please try to increase "
        "--mem-fraction-static."
    )


# --- the advice ------------------------------------------------------------------


class SteppedRoad:
    """A launch road whose sizing is known: up to ``most`` running requests (each
    with ``ratio`` mamba slots) keep the KV cache at ``floor_kv`` tokens, one more
    drops it a token below; SGLang caps the requests at ``cap`` and stops the server
    past ``fits_up_to``. Records every count the search asks about."""

    def __init__(self, ratio, most, *, cap=None, fits_up_to=None, floor_kv=1000):
        self.ratio, self.most, self.cap = ratio, most, cap
        self.fits_up_to, self.floor_kv, self.asked = fits_up_to, floor_kv, []

    def mamba_ratio(self) -> int:
        return self.ratio

    def capacity(self, flags):
        from sglang_pd_lean.census.results import Capacity

        requests = int(flags[1])
        assert flags == (
            "--max-running-requests",
            str(requests),
            "--max-mamba-cache-size",
            str(requests * self.ratio),
        )
        self.asked.append(requests)
        # Doubling, then halving: at most two passes over MAX_SLOTS's bits, so
        # the advice ends in a few dozen sizing runs whatever the counts.
        assert len(self.asked) <= 2 * MAX_SLOTS.bit_length() + 2, "search never ends"
        if self.fits_up_to is not None and requests > self.fits_up_to:
            return Capacity(fits=False, available_gib=1.0, reason="SGLang stops")
        return Capacity(
            fits=True,
            available_gib=1.0,
            kv_tokens=self.floor_kv - (requests > self.most),
            mamba_slots=requests * self.ratio,
            max_running_requests=min(requests, self.cap or requests),
        )


def most_requests(road, floor, kv_floor=1000):
    from sglang_pd_lean.census.advice import most_requests as search

    flags = search(road, floor, kv_floor)
    return None if flags is None else (int(flags[1]), int(flags[3]))


@pytest.mark.parametrize("floor,most", [(55, 100), (55, 55), (1, 1), (0, 1), (3, 7)])
def test_more_requests_is_the_most_that_keep_upstreams_kv_cache(floor, most):
    """From upstream's request count up, the last count whose KV cache is still at
    least upstream's (equal counts), with its requests' mamba slots."""
    road = SteppedRoad(5, most)
    assert most_requests(road, floor) == (most, most * 5)
    assert most + 1 in road.asked


def test_more_requests_stops_where_sglang_caps_or_stops():
    assert most_requests(SteppedRoad(3, 10**6, cap=80), 40) == (80, 240)
    assert most_requests(SteppedRoad(3, 10**6, fits_up_to=70), 40) == (70, 210)


def test_no_more_requests_where_not_even_upstreams_count_keeps_its_kv_cache():
    road = SteppedRoad(5, 10)
    assert most_requests(road, 55) is None
    assert road.asked == [55]


@pytest.mark.parametrize("ratio", [1, 3, 5])
def test_more_requests_never_asks_past_the_slots_the_census_builds(ratio):
    """Where memory is no limit, the answer is the most requests whose slots the
    census builds: 2^20 slots (``--max-mamba-cache-size`` past it is refused)."""
    from sglang_pd_lean.census.inputs import MAX_SLOTS

    assert MAX_SLOTS == 1 << 20
    road = SteppedRoad(ratio, 10**9)
    most = (1 << 20) // ratio
    assert most_requests(road, 1) == (most, most * ratio)
    assert max(road.asked) == most


def typed_report(*flags: str):
    from helpers import typed_census

    with contextlib.redirect_stderr(io.StringIO()):
        return typed_census(*flags)


ADVICE_FLAGS = ("--tp", "4", "--disaggregation-mode", "prefill", *NEXTN)


def test_without_speculative_decoding_the_report_says_there_is_nothing_to_free():
    result = typed_report(
        "--model", "qwen3-next-80b-a3b", "--available-gib", "24", "--", "--tp", "4"
    )
    assert result.advice == ()
    assert result.nothing_to_spend["prefill"] == (
        "no speculative decoding: no role verifies, so there is no verify state "
        "to free"
    )
    # docs/json.md: 0 draft tokens without speculative decoding.
    assert result.inputs.speculative_num_draft_tokens == 0


def test_a_prefill_target_that_does_not_fit_even_with_the_plugin_gets_no_advice():
    """2000 mamba slots of Qwen3-Next at TP 4 outgrow half a GiB."""
    result = typed_report(
        *("--model", "qwen3-next-80b-a3b", "--available-gib", "0.5", "--"),
        *(*ADVICE_FLAGS, "--max-mamba-cache-size", "2000"),
    )
    plugin = result.capacity["prefill"].plugin
    assert plugin.fits is False
    assert plugin.reason.startswith("the mamba budget leaves -")
    assert result.advice == ()
    assert result.nothing_to_spend["prefill"] == (
        f"does not fit even with the plugin: {plugin.reason}"
    )


@pytest.mark.skipif(
    sglang_minor() >= 22, reason="SGLang 0.5.22+ sizes a prefill target natively"
)
def test_each_choice_is_sized_with_the_weights_the_launch_charges():
    """On the memory road (named GPU, weights from SGLang's model classes, target
    and draft), each choice's launch receives SGLang's total_rest_memory with the
    same weights: (T - C) * mfs - target - draft of an H200, as published."""
    result = typed_report("--model", "qwen3-next-80b-a3b", "--", *ADVICE_FLAGS)
    memory_ = result.memory["prefill"]
    assert memory_.draft_weights_bytes > 0 and memory_.weights_bytes > 0
    mfs = result.resolved["prefill"].mem_fraction_static
    expected = sglang_total_rest_memory(
        PUBLISHED["h200"][1] / 1024,
        mfs,
        memory_.weights_bytes,
        memory_.draft_weights_bytes,
    )
    upstream = result.capacity["prefill"].upstream
    choices = {choice.choice: choice for choice in result.advice}
    assert list(choices) == ["kv", "requests", "automatic"]
    assert choices["kv"].flags == ("--max-mamba-cache-size", str(upstream.mamba_slots))
    for choice in choices.values():
        assert choice.capacity.available_gib == pytest.approx(expected, rel=1e-12)
        assert choice.capacity.fits
    automatic = choices["automatic"].capacity
    plugin = result.capacity["prefill"].plugin
    assert (automatic.kv_tokens, automatic.mamba_slots) == (
        plugin.kv_tokens,
        plugin.mamba_slots,
    )


@pytest.mark.skipif(sglang_minor() < 22, reason="the budget gate acts before 0.5.22")
def test_a_native_prefill_target_names_the_release_that_leaves_nothing_to_free():
    import sglang

    result = typed_report(
        "--model", "qwen3-next-80b-a3b", "--available-gib", "24", "--", *ADVICE_FLAGS
    )
    assert result.advice == ()
    assert result.nothing_to_spend["prefill"] == (
        f"SGLang {sglang.__version__} already builds and sizes this prefill target "
        f"without the verify state (upstream and plugin columns agree): nothing freed"
    )
