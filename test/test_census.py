"""Census numbers against independent formulas from the model configs, and the
``report`` command's output and errors."""

from __future__ import annotations

import json
import os

import pytest
from conftest import upstream_has

from sglang_pd_lean import census, cli

BF16, FP32 = 2, 4


def gdn_expected(name: str, *, tp: int, requests: int, slots: int, draft: int) -> dict:
    """Bytes per component of a GDN model's mamba state, from its config.json fields."""
    with open(os.path.join(census.MODELS_DIR, f"{name}.json")) as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    layers = sum(
        1
        for i in range(text["num_hidden_layers"])
        if (i + 1) % text["full_attention_interval"] != 0
    )
    hv, hk = text["linear_num_value_heads"], text["linear_num_key_heads"]
    v, k, kernel = (
        text["linear_value_head_dim"],
        text["linear_key_head_dim"],
        text["linear_conv_kernel_dim"],
    )
    ssm = hv // tp * v * k * FP32  # per layer and slot
    conv_dim = (2 * hk * k + hv * v) // tp
    return {
        "ssm state": layers * (slots + 1) * ssm,
        "conv state": layers * (slots + 1) * conv_dim * (kernel - 1) * BF16,
        "verify ssm snapshots": layers * (requests + 1) * draft * ssm,
        # CUDA + linear draft chain: one shared [dim, D + K - 2] window per slot.
        "verify conv windows": layers
        * (requests + 1)
        * conv_dim
        * (draft + kernel - 2)
        * BF16,
    }


@pytest.mark.parametrize(
    "model,tp,requests,draft",
    [
        ("qwen3-next-80b-a3b", 4, 256, 4),
        ("qwen3.5-397b-a17b", 8, 256, 4),
        ("qwen3.5-397b-a17b", 2, 64, 2),
    ],
)
def test_census_matches_config_formula(model, tp, requests, draft):
    result = census.run(
        census.Inputs(
            model=model,
            tp=tp,
            max_running_requests=requests,
            speculative_num_draft_tokens=draft,
        )
    )
    slots = result["inputs"]["max_mamba_cache_size"]
    expected = gdn_expected(model, tp=tp, requests=requests, slots=slots, draft=draft)
    for role in ("prefill", "decode", "null"):
        upstream = result["roles"][role]["upstream"]["components"]
        lean_upstream = role == "prefill" and upstream_has("pool")
        for component, nbytes in expected.items():
            if lean_upstream and component.startswith("verify"):
                nbytes = 0  # 0.5.18+ build a prefill target's pool lean themselves
            assert upstream.get(component, 0) == nbytes, (role, component)
    lean = result["roles"]["prefill"]["plugin"]
    assert lean["verify_only_bytes"] == 0
    assert lean["components"]["ssm state"] == expected["ssm state"]
    for role in ("decode", "null"):
        assert result["roles"][role]["plugin"] == result["roles"][role]["upstream"]


def test_qwen35_tp8_prefill_rank_gives_back_the_verify_snapshots():
    """The issue's figure: ~22.6 GiB (24.3 GB) of ssm snapshots per prefill rank."""
    result = census.run(census.Inputs(model="qwen3.5-397b-a17b", tp=8))
    upstream = result["roles"]["null"]["upstream"]["components"]
    assert (
        upstream["verify ssm snapshots"] == 45 * 257 * 4 * (64 // 8) * 128 * 128 * FP32
    )
    if not upstream_has("pool"):
        prefill = result["roles"]["prefill"]["upstream"]["components"]
        assert prefill["verify ssm snapshots"] == upstream["verify ssm snapshots"]
    plugin = result["roles"]["prefill"]["plugin"]
    given_back = (
        result["roles"]["prefill"]["upstream"]["total_bytes"] - plugin["total_bytes"]
    )
    assert given_back == result["roles"]["prefill"]["upstream"]["verify_only_bytes"]


@pytest.mark.parametrize("model", ["kimi-linear-48b-a3b", "nemotron-h-8b"])
def test_census_ssm_snapshots_match_head_formula(model):
    """KDA and Mamba2: snapshots = layers x (requests + 1) x D x heads/tp x dims x 4 B."""
    with open(os.path.join(census.MODELS_DIR, f"{model}.json")) as f:
        cfg = json.load(f)
    tp, requests, draft = 2, 32, 3
    if model.startswith("kimi"):
        kda = cfg["linear_attn_config"]
        layers = len(kda["kda_layers"])
        per_slot = kda["num_heads"] // tp * kda["head_dim"] * kda["head_dim"] * FP32
    else:
        layers = cfg["hybrid_override_pattern"].count("M")
        per_slot = (
            cfg["mamba_num_heads"]
            // tp
            * cfg["mamba_head_dim"]
            * cfg["ssm_state_size"]
            * FP32
        )
    result = census.run(
        census.Inputs(
            model=model,
            tp=tp,
            max_running_requests=requests,
            speculative_num_draft_tokens=draft,
        )
    )
    upstream = result["roles"]["null"]["upstream"]["components"]
    assert (
        upstream["verify ssm snapshots"] == layers * (requests + 1) * draft * per_slot
    )
    assert result["roles"]["prefill"]["plugin"]["verify_only_bytes"] == 0


def test_pipeline_parallel_counts_one_stage():
    whole = census.run(census.Inputs(model="qwen3-next-80b-a3b", tp=4))
    half = census.run(census.Inputs(model="qwen3-next-80b-a3b", tp=4, pp=2))

    def ssm(result):
        return result["roles"]["decode"]["upstream"]["components"]["ssm state"]

    assert ssm(half) * 2 == ssm(whole)


def test_report_json_has_the_documented_shape(capsys):
    assert (
        cli.main(["report", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert {"sglang_version", "model", "inputs", "roles"} <= set(result)
    for role in ("prefill", "decode", "null"):
        for column in ("upstream", "plugin"):
            entry = result["roles"][role][column]
            assert set(entry) == {"components", "verify_only_bytes", "total_bytes"}
            assert entry["total_bytes"] == sum(entry["components"].values())


def test_report_table_and_png(tmp_path, capsys):
    png = tmp_path / "census.png"
    assert (
        cli.main(
            ["report", "--model", "kimi-linear-48b-a3b", "--tp", "2", "--png", str(png)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "verify ssm snapshots" in out and "given back by plugin" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_list_models_lists_the_bundled_configs(capsys):
    assert cli.main(["report", "--list-models"]) == 0
    listed = capsys.readouterr().out.split()
    assert {
        "qwen3-next-80b-a3b",
        "qwen3.5-397b-a17b",
        "kimi-linear-48b-a3b",
        "nemotron-h-8b",
    } <= set(listed)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "no-such-model"], "unknown model"),
        (["--config", "/no/such/config.json"], "cannot read config"),
        (["--model", "qwen3-next-80b-a3b", "--tp", "3"], "does not divide"),
        (["--model", "qwen3-next-80b-a3b", "--tp", "0"], "must be positive"),
        (
            ["--model", "qwen3-next-80b-a3b", "--max-running-requests", "-4"],
            "must be positive",
        ),
        (
            ["--model", "qwen3-next-80b-a3b", "--speculative-num-draft-tokens", "0"],
            "must be positive",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(cli.main(["report", *args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_model_without_linear_attention_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 256,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 512,
                "vocab_size": 1000,
            }
        )
    )
    assert cli.main(["report", "--config", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no linear-attention" in err[0]


def test_unreadable_config_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    assert cli.main(["report", "--config", str(tmp_path)]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_mamba_ssm_dtype_bfloat16_halves_the_ssm_state_and_snapshots():
    base = census.Inputs(model="qwen3-next-80b-a3b", tp=4)
    fp32 = census.run(base)
    bf16 = census.run(
        census.Inputs(model="qwen3-next-80b-a3b", tp=4, mamba_ssm_dtype="bfloat16")
    )
    assert bf16["inputs"]["mamba_ssm_dtype"] == "bfloat16"
    for component in ("ssm state", "verify ssm snapshots"):
        full = fp32["roles"]["null"]["upstream"]["components"][component]
        half = bf16["roles"]["null"]["upstream"]["components"][component]
        assert half * 2 == full
