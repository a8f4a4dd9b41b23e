"""One road: ``report``'s census flags are shorthand for the launch flags they name,
resolved by the installed SGLang like any launch command (issue 22)."""

from __future__ import annotations

import argparse
import json

import pytest
from formulas import FP32, GIB
from helpers import census_of

from sglang_pd_lean import cli
from sglang_pd_lean.census.flags import SHORTHAND, shorthand_argv

QWEN35_TP8 = ("--model", "qwen3.5-397b-a17b", "--tp", "8")
SEED = (*QWEN35_TP8, "--max-running-requests", "256")
SEED += ("--speculative-num-draft-tokens", "4")

# A value for each census flag (a switch: True), and the field SGLang sets from it.
VALUES = {
    "tp": (4, "tp_size"),
    "pp": (2, "pp_size"),
    "max_running_requests": (96, "max_running_requests"),
    "max_mamba_cache_size": (300, "max_mamba_cache_size"),
    "speculative_num_draft_tokens": (3, "speculative_num_draft_tokens"),
    "mamba_ssm_dtype": ("bfloat16", "mamba_ssm_dtype"),
    "context_length": (4096, "context_length"),
    "page_size": (64, "page_size"),
    "disable_radix_cache": (True, "disable_radix_cache"),
    "mamba_radix_cache_strategy": ("extra_buffer", "mamba_radix_cache_strategy"),
}


def sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def test_every_census_flag_names_the_sglang_field_of_its_launch_flag():
    """SGLang's own launch_server parser reads each shorthand into the field the
    census flag describes, with the value given."""
    assert set(VALUES) == set(SHORTHAND)
    parser = sglang_parser()
    for dest, (value, field) in VALUES.items():
        argv = shorthand_argv({dest: value}, alone=False)
        parsed = parser.parse_args(["--model-path", "m", *argv])
        assert getattr(parsed, field) == value, dest
        assert getattr(parser.parse_args(["--model-path", "m"]), field) != value


def test_census_flags_alone_describe_a_speculative_server():
    """No flags after --: 256 requests, 4 draft tokens, an EAGLE chain of
    draft tokens - 1 steps, top-k 1 (as SGLang's parser reads them)."""
    argv = shorthand_argv({"speculative_num_draft_tokens": 3}, alone=True)
    parsed = sglang_parser().parse_args(["--model-path", "m", *argv])
    assert parsed.max_running_requests == 256
    assert parsed.speculative_num_draft_tokens == 3
    assert parsed.speculative_algorithm == "EAGLE"
    assert (parsed.speculative_num_steps, parsed.speculative_eagle_topk) == (2, 1)
    assert shorthand_argv({"tp": None, "disable_radix_cache": False}, alone=False) == []


def test_the_seed_figure_holds_on_the_one_road(capsys):
    """Qwen3.5-397B-A17B, TP 8, 256 requests, 4 draft tokens: 22.79 GiB of
    verify-only state per prefill rank upstream (45 GDN layers: ssm snapshots per
    request and draft token, 64/8 value heads of 128 x 128 fp32, plus the conv
    windows), 0 B with the plugin; and the resolved block of a launch."""
    assert cli.main(["report", *SEED, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    prefill = result["roles"]["prefill"]
    snapshots = 45 * 257 * 4 * (64 // 8) * 128 * 128 * FP32
    null = result["roles"]["null"]["upstream"]
    assert null["components"]["verify ssm snapshots"] == snapshots
    assert round(null["verify_only_bytes"] / GIB, 2) == 22.79
    assert prefill["plugin"]["verify_only_bytes"] == 0
    assert set(result["resolved"]) == {"prefill", "decode", "null"}
    for role, resolved in result["resolved"].items():
        assert resolved["disaggregation_mode"] == role
        assert resolved["tp_size"] == 8 and resolved["max_running_requests"] == 256
        assert resolved["speculative_num_draft_tokens"] == 4
    argv = result["launch"]["argv"]
    assert argv[argv.index("--tp-size") + 1] == "8"
    assert result["launch"]["sized"] is False
    assert not {"memory", "capacity", "advice"} & set(result)


def test_unsized_pools_take_sglangs_own_slots_per_request():
    """No memory named: a decode target (radix cache off under PD) keeps one
    mamba slot per request; a prefill target with the extra buffer under the
    overlap schedule keeps 3 per request plus 2 ping-pong slots."""
    result = census_of(*SEED)
    assert result["roles"]["decode"]["upstream"]["mamba_slots"] == 256
    if result["resolved"]["prefill"]["mamba_radix_cache_strategy"] != "extra_buffer":
        pytest.skip("this SGLang does not resolve the extra buffer on a prefill")
    for role in ("prefill", "null"):
        for column in ("upstream", "plugin"):
            assert result["roles"][role][column]["mamba_slots"] == 5 * 256


def test_census_flags_equal_the_launch_flags_they_name():
    """The census flags and the same flags after -- give the same report."""
    census = census_of(
        *("--model", "qwen3-next-80b-a3b", "--tp", "4", "--page-size", "64"),
        *("--max-running-requests", "128", "--speculative-num-draft-tokens", "3"),
        *("--available-gib", "50", "--max-mamba-cache-size", "600"),
    )
    launch = census_of(
        *("--model", "qwen3-next-80b-a3b", "--available-gib", "50", "--"),
        *("--tp-size", "4", "--page-size", "64", "--max-running-requests", "128"),
        *("--speculative-num-draft-tokens", "3", "--max-mamba-cache-size", "600"),
        *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2"),
        *("--speculative-eagle-topk", "1"),
    )
    for key in ("inputs", "resolved", "roles", "capacity", "advice"):
        assert census[key] == launch[key], key


def test_a_census_flag_that_agrees_with_the_launch_flags_is_accepted():
    both = census_of(
        *("--model", "qwen3-next-80b-a3b", "--tp", "2", "--available-gib", "40"),
        *("--", "--tp-size", "2", "--max-running-requests", "64"),
    )
    assert both["inputs"]["tp"] == 2
    assert both["launch"]["argv"].count("--tp-size") == 2


def test_naming_the_memory_sizes_the_census_flags(capsys):
    """--gpu (or --available-gib) with census flags alone: sized as the server
    would be, with capacity and advice; without: the table says it is not."""
    assert cli.main(["report", *QWEN35_TP8]) == 0
    assert "Not sized: no memory named" in capsys.readouterr().out
    result = census_of(*QWEN35_TP8, "--gpu", "b200", "--weights-gib", "100")
    assert result["launch"]["sized"] is True
    assert result["launch"]["gpu"]["name"] == "NVIDIA B200"
    assert result["memory"]["prefill"]["weights_bytes"] == int(100 * GIB)
    assert {"capacity", "advice"} <= set(result)


def test_what_sglang_exports_while_it_resolves_is_kept_and_applied_again():
    """ServerArgs exports --mamba-ssm-dtype as SGLANG_MAMBA_SSM_DTYPE: kept beside
    the resolution, out of this process's environment, and applied around the
    census (the ssm state halves in bfloat16)."""
    import os

    from sglang_pd_lean.census import launch

    before = dict(os.environ)
    bf16 = census_of(*QWEN35_TP8, "--mamba-ssm-dtype", "bfloat16")
    assert dict(os.environ) == before
    assert bf16["inputs"]["mamba_ssm_dtype"] == "bfloat16"
    fp32 = census_of(*QWEN35_TP8)
    ssm = [
        r["roles"]["null"]["upstream"]["components"]["ssm state"] for r in (bf16, fp32)
    ]
    assert 2 * ssm[0] == ssm[1]
    folder = bf16["launch"]["argv"][bf16["launch"]["argv"].index("--model-path") + 1]
    argv = ["--model-path", folder, "--mamba-ssm-dtype", "bfloat16"]
    resolved = launch.resolve(argv, launch.gpu_facts("h200"))
    assert resolved.environ["SGLANG_MAMBA_SSM_DTYPE"] == "bfloat16"
    assert os.environ.get("SGLANG_MAMBA_SSM_DTYPE") == before.get(
        "SGLANG_MAMBA_SSM_DTYPE"
    )
    with launch.exported(resolved.environ):
        assert os.environ["SGLANG_MAMBA_SSM_DTYPE"] == "bfloat16"
    assert dict(os.environ) == before
