"""``report ... -- <launch_server flags>``: what the report says SGLang resolved equals
SGLang's own resolution of the same flags, role by role; memory per rank from the
stated sources; SGLang's refusals and the operator's mistakes as one line, exit 2;
the GPU probes put back after the resolution."""

from __future__ import annotations

import json
import logging
import os
import sys
import types

import pytest
from helpers import NEXTN, sglang_minor

from sglang_pd_lean import cli
from sglang_pd_lean.census import flags, launch, model
from sglang_pd_lean.census.inputs import MODELS_DIR, ROLES
from sglang_pd_lean.units import GIB


@pytest.fixture(scope="module")
def qwen3_next() -> str:
    """The bundled Qwen3-Next as a model folder."""
    with open(os.path.join(MODELS_DIR, "qwen3-next-80b-a3b.json")) as f:
        return model.model_folder(json.load(f))


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def report_json(capsys, *args: str) -> dict:
    code, out, err = run(capsys, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def sglang_resolution(argv: list[str], gpu: launch.Gpu) -> dict:
    """SGLang's own ``prepare_server_args`` on ``gpu`` (the facts the report is given),
    read through SGLang's own accessors: ``resolved_dict()`` where it exists
    (0.5.22+), else the fields ``__post_init__`` wrote."""
    from sglang.srt.server_args import prepare_server_args

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    env = dict(os.environ)
    try:
        with launch.on_gpu(gpu):
            server_args = prepare_server_args(argv)
            if hasattr(server_args, "resolve_once"):
                server_args.resolve_once()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        os.environ.clear()
        os.environ.update(env)
    if hasattr(server_args, "resolved_dict"):
        return server_args.resolved_dict()
    return {name: getattr(server_args, name) for name in launch.RESOLVED_FIELDS}


def as_json(value):
    return (
        value if isinstance(value, (int, float, str, bool, type(None))) else str(value)
    )


LAUNCHES = {
    "nextn-prefill-h200": ("h200", [*NEXTN, "--disaggregation-mode", "prefill"]),
    "nextn-decode-b200": ("b200", [*NEXTN, "--disaggregation-mode", "decode"]),
    "nextn-unified-h200-256": ("h200", [*NEXTN, "--max-running-requests", "256"]),
    "explicit-strategy-h200": (
        "h200",
        [*NEXTN, "--mamba-radix-cache-strategy", "no_buffer"]
        + ["--disable-overlap-schedule"],
    ),
    "no-speculation-h100": ("h100", ["--max-running-requests", "64"]),
}


@pytest.mark.parametrize("case", sorted(LAUNCHES))
def test_resolved_values_equal_sglangs_own_resolution(case, qwen3_next, capsys):
    gpu_name, extra = LAUNCHES[case]
    argv = ["--model-path", qwen3_next, "--tp", "4", *extra]
    result = report_json(capsys, "--gpu", gpu_name, "--weights-gib", "40", "--", *argv)
    gpu = launch.GPUS[gpu_name]
    assert result["launch"]["role"] == flags.given_role(argv)
    for role in ROLES:
        own = sglang_resolution(flags.role_argv(argv, role), gpu)
        for name in launch.RESOLVED_FIELDS:
            assert result["resolved"][role][name] == as_json(own[name]), (role, name)
        assert (
            result["memory"][role]["mem_fraction_static"] == own["mem_fraction_static"]
        )


def test_decode_mamba_slots_are_running_requests_plus_pre_alloc(qwen3_next, capsys):
    """A decode server runs without the radix cache (SGLang's PD hook): one mamba
    slot per running request plus the pre-allocated transfer slots."""
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    result = report_json(capsys, "--gpu", "h200", "--weights-gib", "40", "--", *argv)
    decode = result["resolved"]["decode"]
    assert decode["disable_radix_cache"] is True
    expected = decode["max_running_requests"] + (
        decode["disaggregation_decode_extra_slots"] or 0
    )
    for column in ("upstream", "plugin"):
        assert result["capacity"]["decode"][column]["mamba_slots"] == expected
        assert result["roles"]["decode"][column]["mamba_slots"] == expected


def test_auto_strategy_resolves_to_extra_buffer_on_a_cuda_gpu(qwen3_next, capsys):
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    result = report_json(capsys, "--gpu", "h200", "--weights-gib", "40", "--", *argv)
    assert result["resolved"]["null"]["mamba_radix_cache_strategy"] == "extra_buffer"
    assert result["inputs"]["mamba_radix_cache_strategy"] == "extra_buffer"


@pytest.mark.skipif(sglang_minor() < 22, reason="page 64 on Blackwell from 0.5.22")
def test_blackwell_with_speculation_resolves_page_64(qwen3_next, capsys):
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    result = report_json(capsys, "--gpu", "b200", "--weights-gib", "40", "--", *argv)
    assert {result["resolved"][r]["page_size"] for r in ROLES} == {64}
    assert result["inputs"]["page_size"] == 64


def test_available_memory_follows_the_stated_formula(qwen3_next, capsys):
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    result = report_json(capsys, "--gpu", "h200", "--weights-gib", "40", "--", *argv)
    total = launch.GPUS["h200"].memory_mib / 1024
    for role in ROLES:
        memory = result["memory"][role]
        mfs = result["resolved"][role]["mem_fraction_static"]
        assert memory["weights_bytes"] == 40 * GIB
        assert memory["available_gib"] == pytest.approx((total - 1.0) * mfs - 40)


def test_available_gib_is_used_exactly_for_every_role(qwen3_next, capsys):
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    result = report_json(capsys, "--available-gib", "80", "--", *argv)
    for role in ROLES:
        assert result["memory"][role] == {
            "available_gib": 80.0,
            "source": "--available-gib",
            "draft_layers_in_kv_sizing": 0,
        }


def test_the_model_shorthand_is_the_bundled_folder(capsys):
    result = report_json(
        capsys,
        "--model",
        "qwen3-next-80b-a3b",
        "--weights-gib",
        "40",
        "--",
        "--tp",
        "4",
    )
    assert result["model"] == "qwen3-next-80b-a3b"
    assert result["inputs"]["tp"] == 4


def test_a_draft_model_path_counts_the_draft_layers_in_kv_sizing(qwen3_next, capsys):
    """SGLang counts the draft's layers in the target's KV sizing only where the
    launch names a draft model path."""
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    without = report_json(capsys, "--gpu", "h200", "--weights-gib", "40", "--", *argv)
    drafted = report_json(
        capsys,
        "--gpu",
        "h200",
        "--weights-gib",
        "40",
        "--",
        *argv,
        "--speculative-draft-model-path",
        qwen3_next,
    )
    assert without["memory"]["null"]["draft_layers_in_kv_sizing"] == 0
    assert drafted["memory"]["null"]["draft_layers_in_kv_sizing"] >= 1


def test_the_gpu_probes_are_put_back_after_the_report(qwen3_next, capsys):
    import torch
    from sglang.srt.utils import common

    capability = torch.cuda.get_device_capability
    env = dict(os.environ)
    argv = ["--model-path", qwen3_next, "--tp", "4", *NEXTN]
    report_json(capsys, "--gpu", "b200", "--weights-gib", "40", "--", *argv)
    assert torch.cuda.get_device_capability is capability
    assert common.is_cuda() is False and common.get_device_sm() == 0
    assert dict(os.environ) == env
    stand_ins = [
        (module.__name__, attr)
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("sglang")
        for attr, value in list(vars(module).items())
        if isinstance(value, types.FunctionType)
        and value.__qualname__.startswith("probes.")
    ]
    assert stand_ins == []


@pytest.mark.parametrize(
    "args,message",
    [
        (["--gpu", "h900", "--", "--tp", "4"], "unknown --gpu 'h900'"),
        (["--gpu", "local", "--", "--tp", "4"], "--gpu local supplies no GPU memory"),
        (
            ["--gpu", "b200", "--weights-gib", "40", "--", *NEXTN]
            + ["--mamba-radix-cache-strategy", "no_buffer"],
            "no_buffer only supports page_size=1",
        ),
        (["--gpu-sm", "90", "--", "--tp", "4"], "go together"),
        (["--tp", "4", "--", "--tp", "2"], "census flags say 4, the flags after"),
        (["--page-size", "64", "--", "--page-size=16"], "--page-size: the census"),
        (["--"], "nothing after --"),
        (
            ["--model", "qwen3-next-80b-a3b", "--", "--model-path", "/x"],
            "give the model once",
        ),
        (["--", "--model-path", "/no/such/folder"], "cannot read config"),
        (["--", "--tp", "4", "--no-such-flag"], "unrecognized arguments"),
        (
            ["--weights-gib", "40", "--", *NEXTN]
            + ["--mamba-radix-cache-strategy", "no_buffer"],
            "SGLang rejects these launch flags: AssertionError: no_buffer",
        ),
    ],
)
def test_bad_launch_input_is_one_line_and_exit_2(args, message, capsys):
    code, out, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and message in lines[0], lines


def test_a_bare_assert_of_sglang_names_its_statement_and_place(capsys):
    """TP 2 over 4 attention-DP ranks: SGLang refuses it with an ``assert`` that has
    no message (0.5.17: ``server_args.py``, 0.5.23: ``arg_groups/parallel_hook.py``).
    The line names the statement and its place in SGLang's code (file as from
    site-packages, line), the innermost SGLang frame; still one line, exit 2."""
    import re

    import sglang

    flags = ("--tp", "2", "--dp", "4", "--enable-dp-attention")
    code, out, err = run(capsys, "--gpu", "h200", "--", *flags)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, lines
    said = re.fullmatch(
        r"sglang-pd-lean: error: SGLang rejects these launch flags: "
        r"AssertionError at (sglang/\S+\.py):(\d+): (assert .+)",
        lines[0],
    )
    assert said, lines[0]
    path, line, statement = said.groups()
    site = os.path.dirname(os.path.dirname(sglang.__file__))
    with open(os.path.join(site, path)) as f:
        source = f.read().splitlines()
    assert statement.startswith(source[int(line) - 1].strip())
    assert "tp_size" in statement


def test_no_cache_parameters_from_sglang_is_one_line(qwen3_next, capsys, monkeypatch):
    """A config for which SGLang returns no linear cache parameters: one line."""
    from sglang.srt.configs import qwen3_next as config_module

    monkeypatch.setattr(
        config_module.Qwen3NextConfig, "mamba2_cache_params", property(lambda s: None)
    )
    code, out, err = run(
        capsys, "--weights-gib", "40", "--", "--model-path", qwen3_next, "--tp", "4"
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert "no linear-attention cache parameters" in lines[0]


def test_running_requests_sglang_caps_are_flagged_and_built(capsys):
    """Under extra_buffer SGLang caps the running requests by the mamba slots it
    sized: the report flags the cap and builds the pool with the capped count."""
    result = report_json(
        capsys,
        "--model",
        "qwen3.5-397b-a17b",
        "--gpu",
        "h200",
        "--weights-gib",
        "92.4",
        "--",
        "--tp",
        "8",
        *NEXTN,
        "--max-running-requests",
        "256",
    )
    capped = [
        (role, column)
        for role in ROLES
        for column in ("upstream", "plugin")
        if result["capacity"][role][column]["requests_capped"]
    ]
    assert ("null", "upstream") in capped
    for role, column in capped:
        sized = result["capacity"][role][column]["max_running_requests"]
        assert sized < 256
        assert result["roles"][role][column]["request_slots"] == sized


def test_one_role_alone_sizes_as_in_the_whole_report(qwen3_next, capsys):
    """``census.report(roles=...)``: one role's columns, the same figures as in
    the report of every role."""
    from sglang_pd_lean import census

    argv = ("--model-path", qwen3_next, "--tp", "4", *NEXTN)
    whole = report_json(capsys, "--gpu", "h200", "--weights-gib", "40", "--", *argv)
    alone = census.report(
        census.Launch(argv=argv, gpu=launch.GPUS["h200"], weights_gib=40.0),
        roles=("prefill",),
    )
    alone = census.jsonable(alone)
    assert set(alone["roles"]) == set(alone["capacity"]) == {"prefill"}
    assert alone["capacity"]["prefill"] == whole["capacity"]["prefill"]
    assert alone["roles"]["prefill"] == whole["roles"]["prefill"]


# --- every platform question answered for the named GPU ------------------------


def test_every_platform_probe_of_the_installed_sglang_is_answered():
    """A probe the installed SGLang has and the report does not answer would be
    answered by this host during the resolution: a new release's probe fails here."""
    from sglang.srt import runtime_context
    from sglang.srt.utils import common

    answered = set(launch.probes(launch.GPUS["h200"]))
    probes = {
        name
        for name in dir(common)
        if launch.PROBE_PATTERN.fullmatch(name) and callable(getattr(common, name))
    }
    assert {"is_cuda", "is_npu", "cpu_has_amx_support"} <= probes  # the pattern finds
    table = {
        **getattr(runtime_context, "_PLATFORM_PROBES", {}),
        **getattr(runtime_context, "_PLATFORM_VALUES", {}),
    }
    assert sorted((probes | set(table.values())) - answered) == []


@pytest.fixture
def host_with_everything(monkeypatch):
    """This host's probes answer as a host with every other accelerator and AMX
    would (restored afterwards), so a probe left to the host shows."""
    from sglang.srt.utils import common

    for name in ("is_npu", "is_xpu", "is_musa", "is_mps", "is_hip", "is_cpu"):
        monkeypatch.setattr(common, name, lambda *a, **k: True, raising=False)
    monkeypatch.setattr(common, "cpu_has_amx_support", lambda *a, **k: True)
    return common


# SGLang's platform facts on a B200 host (x86, no other accelerator, no CPU backend).
B200_FACTS = {
    "is_cuda": True,
    "is_hip": False,
    "is_npu": False,
    "is_xpu": False,
    "is_musa": False,
    "is_mps": False,
    "is_sm90": False,
    "is_sm100": True,
    "is_sm120": False,
    "is_blackwell": True,
    "has_amx": False,
    "device_sm": 100,
    "device_capability": (10, 0),
}


def test_the_named_gpu_answers_every_platform_question(host_with_everything):
    """B200: NVIDIA, SM 100, Blackwell, on an x86 host; no NPU, XPU, MUSA, MPS,
    ROCm or CPU backend, no AMX kernels (published facts, not the code's table)."""
    common = host_with_everything
    with launch.on_gpu(launch.GPUS["b200"]):
        assert common.is_cuda() is True
        for name in ("is_npu", "is_xpu", "is_musa", "is_mps", "is_hip", "is_cpu"):
            assert getattr(common, name)() is False, name
        assert common.cpu_has_amx_support() is False
        assert common.get_device_sm() == 100
        assert common.get_device_capability() == (10, 0)
        assert common.get_device_name() == "NVIDIA B200"
        assert common.is_sm100_supported() and not common.is_sm90_supported()
        if sglang_minor() >= 19:  # SGLang's own platform facts, its seam
            from sglang.srt import runtime_context

            platform = runtime_context.get_platform()
            facts = {
                **runtime_context._PLATFORM_PROBES,
                **runtime_context._PLATFORM_VALUES,
            }
            for fact, value in B200_FACTS.items():
                if fact in facts:  # the release's table (0.5.19 to 0.5.23 differ)
                    got = getattr(platform, fact)
                    assert (
                        tuple(got) if isinstance(got, tuple) else got
                    ) == value, fact
    # The host's answers are back.
    assert common.is_npu() is True and common.cpu_has_amx_support() is True


def test_grace_hosts_answer_arm64():
    from sglang.srt.utils import common

    for gpu, arm in (("gb200", True), ("h200", False)):
        with launch.on_gpu(launch.GPUS[gpu]):
            assert common.is_host_cpu_arm64() is arm, gpu
            assert common.is_host_cpu_x86() is (not arm), gpu


def test_a_platform_fact_the_report_cannot_answer_is_one_line(monkeypatch):
    if sglang_minor() < 19:
        pytest.skip("no platform table before 0.5.19")
    from sglang.srt import runtime_context

    monkeypatch.setitem(runtime_context._PLATFORM_PROBES, "is_tpu", "is_tpu")
    with pytest.raises(launch.CensusError, match="is_tpu"):
        with launch.on_gpu(launch.GPUS["h200"]):
            pass


# --- a seam the installed SGLang lacks -----------------------------------------


@pytest.mark.parametrize("road", ["launch flags", "census flags"])
def test_a_report_seam_sglang_lacks_is_one_line_naming_it_and_doctor(
    road, qwen3_next, capsys, monkeypatch
):
    from sglang.srt.model_executor import pool_configurator

    monkeypatch.delattr(pool_configurator, "create_memory_pool_configurator")
    args = (
        ["--weights-gib", "40", "--", "--model-path", qwen3_next, *NEXTN]
        if road == "launch flags"
        else ["--model", "qwen3-next-80b-a3b", "--tp", "4"]
    )
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "pool_configurator.create_memory_pool_configurator" in err
    assert "sglang-pd-lean doctor" in err


def test_doctor_says_the_report_cannot_run_and_what_is_missing(capsys, monkeypatch):
    from sglang.srt.model_executor import pool_configurator

    code = cli.main(["doctor", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["report_can_run"]
    monkeypatch.delattr(pool_configurator, "create_memory_pool_configurator")
    code = cli.main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["report_can_run"] is False
    assert [m["seam"] for m in report["missing_seams"]] == [
        "sglang.srt.model_executor.pool_configurator.create_memory_pool_configurator"
    ]
    assert report["healthy"]  # the plugin itself is fine
    code = cli.main(["doctor"])
    out = capsys.readouterr().out
    assert code == 1 and "report: cannot run on this SGLang" in out
    assert "create_memory_pool_configurator" in out


def test_a_help_flag_among_the_launch_flags_is_not_sglangs_help(capsys):
    """The fields the flags set are read with SGLang's parser, without its help:
    ``-h`` among them is not a request to print SGLang's help here."""
    from sglang_pd_lean.census.flags import given

    assert given(["--tp-size", "2", "-h", "--page-size", "16"]) == {
        "tp_size": 2,
        "page_size": 16,
    }
    assert capsys.readouterr() == ("", "")


# Compute capability, host CPU and NVLink fabric of each GPU as NVIDIA publishes
# them (the CUDA GPUs' compute capability table; GB200 is a Grace, arm64, host on a
# multi-node NVLink fabric). A GPU given by memory and SM is taken as an x86 host.
PUBLISHED = {
    "a100-80gb": ((8, 0), "x86", False),
    "h100": ((9, 0), "x86", False),
    "h20": ((9, 0), "x86", False),
    "b200": ((10, 0), "x86", False),
    "gb200": ((10, 0), "arm64", True),
    "96 GiB, SM 103": ((10, 3), "x86", False),
    "96 GiB, SM 110": ((11, 0), "x86", False),
    "96 GiB, SM 120": ((12, 0), "x86", False),
    "96 GiB, SM 121": ((12, 1), "x86", False),
}


@pytest.mark.parametrize("given", PUBLISHED)
def test_each_probe_answers_as_the_named_gpu_would(given):
    """Every answer the report gives SGLang's platform probes, for one GPU: CUDA and
    nothing else (no ROCm, NPU, XPU, MUSA, MPS, HPU, Habana, SAIL, gfx9 or CPU
    backend, no AMX), FlashInfer there, the SM family flags of its compute
    capability, its memory, name and SM count, and the host's CPU."""
    (major, minor), host, fabric = PUBLISHED[given]
    if given in launch.GPUS:
        gpu = launch.gpu_facts(given)
    else:
        gpu = launch.gpu_facts(None, 96, 10 * major + minor)
    answers = {probe: answer() for probe, answer in launch.probes(gpu).items()}
    nothing_else = (
        "is_hip is_npu is_xpu is_musa is_mps is_hpu is_habana_available is_cpu "
        "is_sail cpu_has_amx_support is_gfx95_supported is_gfx942_supported "
        "is_gfx1250_supported"
    ).split()
    expected = {
        **{probe: False for probe in nothing_else},
        "is_cuda": True,
        "is_cuda_alike": True,
        "is_flashinfer_available": True,
        "get_device": "cuda",
        "is_host_cpu_x86": host == "x86",
        "is_host_cpu_arm64": host == "arm64",
        "is_mnnvl_fabric_device": fabric,
        "get_device_memory_capacity": gpu.memory_mib,
        "get_nvgpu_memory_capacity": gpu.memory_mib,
        "get_device_sm": 10 * major + minor,
        "get_device_capability": (major, minor),
        "get_device_name": gpu.name,
        "get_device_core_count": gpu.cores,
        "is_ampere_with_cuda_12_3": major == 8,
        "is_sm80_supported": major == 8,
        "is_sm90_supported": major == 9,
        "is_hopper_with_cuda_12_3": major == 9,
        "is_sm100_supported": major == 10,
        "is_sm110_supported": major == 11,
        "is_sm100_or_sm110_supported": major in (10, 11),
        "is_sm120_supported": major == 12,
        "is_sm120": (major, minor) == (12, 0),
        "is_sm121": (major, minor) == (12, 1),
        "is_blackwell_supported": major >= 10,
        "is_blackwell": major >= 10,
    }
    assert answers == expected
    assert all(type(answers[p]) is type(v) for p, v in expected.items())


@pytest.mark.parametrize(
    "model, tp, field",
    [
        ("qwen3-next-80b-a3b", 3, "linear_num_value_heads"),
        ("qwen3-next-80b-a3b", 32, "linear_num_key_heads"),
        ("nemotron-h-8b", 3, "mamba_num_heads"),
        ("nemotron-h-8b", 16, "n_groups"),
        ("kimi-linear-48b-a3b", 3, "linear_attn_config.num_heads"),
    ],
)
def test_a_tp_that_does_not_divide_the_linear_heads_names_the_field(
    model, tp, field, capsys
):
    """SGLang splits each linear-attention head count across the TP ranks: a TP
    that does not divide one is refused in one line naming the config's field
    and count (read here from the bundled config.json)."""
    from formulas import load_config

    config = load_config(model)
    count = config.get("text_config", config)
    for part in field.split("."):
        count = count[part]
    assert count % tp
    assert cli.main(["report", "--model", model, "--tp", str(tp)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].endswith(f"--tp {tp} does not divide {field}={count} of this model")
