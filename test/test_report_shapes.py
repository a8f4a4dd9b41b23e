"""The report on the shapes PD fleets run: MLA models, fp8 KV, pipeline stages,
attention DP, and a unified launch PD refuses. Expected figures come from the
model's config.json fields (``formulas``), never from the code under test; the
inputs the census hands SGLang's configurator are each named with their source
(``census.rank.FIELD_SOURCES``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from formulas import BF16, gdn_dims, load_config
from helpers import NEXTN, census_of, sglang_refuses_lazy_under_pd

from sglang_pd_lean.census import rank

# DeepSeek-V3's published architecture (61 layers and one MTP layer, MLA with
# kv_lora_rank 512 and qk_rope_head_dim 64), without its fp8 checkpoint's
# quantization block: the KV cache of such a launch is the model's bf16.
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "n_group": 8,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
}
EAGLE = [
    *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"),
    *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
]


def capacity(result: dict, role: str = "prefill", column: str = "upstream") -> dict:
    return result["capacity"][role][column]


def test_every_configurator_field_the_census_sets_has_a_named_source():
    """Each field of the installed release's KVCacheConfigurator is either named
    with where the census takes its value, or left at the configurator's own
    default: a field SGLang adds fails here until someone says where it comes from."""
    from sglang_pd_lean.census import older

    if not older.has_configurator():
        pytest.skip("0.5.14-0.5.15.post1 size on the model runner (the test below)")
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    fields = {f.name for f in dataclasses.fields(KVCacheConfigurator) if f.init}
    unknown = fields - set(rank.FIELD_SOURCES) - rank.DEFAULTED
    assert not unknown, f"configurator fields with no named source: {sorted(unknown)}"
    required = {
        f.name
        for f in dataclasses.fields(KVCacheConfigurator)
        if f.init
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    }
    assert not (required & rank.DEFAULTED)


def test_every_runner_attribute_the_older_sizing_reads_is_set():
    """0.5.14 to 0.5.15.post1 size on the model runner: each attribute their sizing
    methods read of it (``self.`` in the mixin's, ``mr.`` in the default pool
    configurator's, read from their code) is one the census's runner sets, with its
    source named, or one of SGLang's ``ModelRunner`` itself (a method, a property)."""
    import ast
    import inspect
    import textwrap

    from sglang_pd_lean.census import older

    if older.has_configurator():
        pytest.skip("0.5.16+ size with a KVCacheConfigurator (the test above)")
    from sglang.srt.model_executor import model_runner_kv_cache_mixin, pool_configurator
    from sglang.srt.model_executor.model_runner import ModelRunner

    mixin = model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin
    default = pool_configurator.DefaultPoolConfigurator
    functions = {
        "self": (
            mixin.handle_max_mamba_cache,
            mixin._calculate_mamba_ratio,
            mixin._resolve_max_num_reqs,
            mixin._apply_token_constraints,
        ),
        "mr": (default.__init__, default._compute_cell_size),
    }
    read = set()
    for name, group in functions.items():
        for function in group:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
            read |= {
                node.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == name
            }
    unset = {a for a in read if a not in older.RUNNER_ATTRIBUTES}
    assert read and {a for a in unset if not hasattr(ModelRunner, a)} == set()


def test_kimi_linears_kv_bytes_per_token_are_sglangs_mla_cell(tmp_path):
    """SGLang runs Kimi-Linear's full-attention layers with its MLA backend: a KV
    cell of (kv_lora_rank + qk_rope_head_dim) x full-attention layers x 2 bytes."""
    cfg = load_config("kimi-linear-48b-a3b")
    cell = (
        (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
        * len(cfg["linear_attn_config"]["full_attn_layers"])
        * BF16
    )
    result = census_of(
        *("--model", "kimi-linear-48b-a3b", "--available-gib", "100", "--"),
        *("--tp", "2", "--disaggregation-mode", "prefill"),
        *("--max-running-requests", "64"),
    )
    sized = capacity(result)
    assert result["inputs"]["use_mla_backend"] is True
    assert sized["kv_tokens"] == sized["kv_cache_bytes"] // cell


def test_a_deepseek_v3_shaped_launch_sizes_kv_with_the_mla_cell_and_its_mtp_layer(
    tmp_path,
):
    """DeepSeek-V3's architecture at TP 8 with EAGLE: every rank holds the whole
    MLA latent (no head split), 61 layers, scaled for the one MTP draft layer
    that shares the budget."""
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    layers = DEEPSEEK_V3["num_hidden_layers"]
    latent = DEEPSEEK_V3["kv_lora_rank"] + DEEPSEEK_V3["qk_rope_head_dim"]
    cell = int(latent * layers * BF16 * (1 + 1 / layers))
    result = census_of(
        *("--config", str(tmp_path), "--available-gib", "40", "--"),
        *("--tp", "8", "--disaggregation-mode", "prefill", *EAGLE),
    )
    for role in ("prefill", "decode", "null"):
        sized = capacity(result, role)
        assert sized["kv_tokens"] == sized["kv_cache_bytes"] // cell, role


def test_an_fp8_kv_cache_holds_twice_the_tokens_of_bf16():
    flags = ("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--")
    launch = ("--tp", "4", "--disaggregation-mode", "prefill")
    bf16 = census_of(*flags, *launch)
    fp8 = census_of(*flags, *launch, "--kv-cache-dtype", "fp8_e4m3")
    assert fp8["inputs"]["kv_cache_dtype"] == "float8_e4m3fn"
    for result, nbytes in ((bf16, BF16), (fp8, 1)):
        sized = capacity(result)
        cfg = load_config("qwen3-next-80b-a3b")
        layers = cfg["num_hidden_layers"] // cfg["full_attention_interval"]
        cell = gated_kv_cell("qwen3-next-80b-a3b", 4, layers, dtype_bytes=nbytes)
        assert sized["kv_tokens"] == sized["kv_cache_bytes"] // cell


def test_attention_dp_shards_the_linear_heads_by_attention_tp():
    """``--tp 4 --dp 2 --enable-dp-attention`` has attention TP 2: the ssm and conv
    state per mamba slot are TP 2's, from the config; the requests per shard are
    SGLang's division of --max-running-requests."""
    dims = gdn_dims(load_config("qwen3-next-80b-a3b"), tp=2)
    base = ("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--")
    dp = census_of(
        *base,
        *("--tp", "4", "--dp", "2", "--enable-dp-attention"),
        *("--disaggregation-mode", "prefill", "--max-running-requests", "64"),
    )
    assert (dp["inputs"]["attn_tp"], dp["inputs"]["attn_dp"]) == (2, 2)
    pool = dp["roles"]["prefill"]["upstream"]
    slots = pool["mamba_slots"] + 1  # SGLang's padding slot
    assert pool["components"]["ssm state"] == dims["ssm"] * dims["layers"] * slots
    assert pool["components"]["conv state"] == dims["conv"] * dims["layers"] * slots
    assert capacity(dp)["max_running_requests"] == 64 // 2


def gated_kv_cell(name: str, tp: int, layers: int, dtype_bytes=BF16) -> int:
    """A GQA hybrid's KV bytes per token per rank over ``layers`` full-attention
    layers: K and V of its kv heads at ``tp`` (one at least), from its config."""
    cfg = load_config(name)
    text = cfg.get("text_config", cfg)
    heads = max(text["num_key_value_heads"] // tp, 1)
    return heads * 2 * text["head_dim"] * layers * dtype_bytes


@pytest.mark.parametrize("pp", [4])
def test_a_pipeline_parallel_launch_sizes_every_column_on_the_smallest_stage(pp):
    """Qwen3.5 at ``--tp 8 --pp-size PP`` with NEXTN: every column fits (SGLang's
    sizing runs on every stage), and the KV tokens are the smallest stage's own
    capacity from its full-attention layers, as SGLang's stages agree (its 15
    full-attention layers split 3/4/4/4 at PP 4: the stage shown, the one with the
    most linear-attention layers, is not the one that binds)."""
    from sglang.srt.distributed.utils import get_pp_indices

    name = "qwen3.5-397b-a17b"
    text = load_config(name).get("text_config", load_config(name))
    result = census_of(
        *("--model", name, "--available-gib", "30", "--"),
        *("--tp", "8", "--pp-size", str(pp), "--disaggregation-mode", "prefill"),
        *NEXTN,
    )
    interval = text["full_attention_interval"]
    # SGLang counts a draft's layers in the KV cell only with a draft model path.
    draft = result["memory"]["prefill"]["draft_layers_in_kv_sizing"]
    own = []
    for stage in range(pp):
        start, end = get_pp_indices(text["num_hidden_layers"], stage, pp)
        layers = sum((i + 1) % interval == 0 for i in range(start, end))
        own.append(int(gated_kv_cell(name, 8, layers) * (1 + draft / layers)))
    assert result["inputs"]["pp"] == pp
    for role in ("prefill", "decode", "null"):
        for column in ("upstream", "plugin"):
            sized = capacity(result, role, column)
            assert sized["fits"], (role, column, sized.get("reason"))
            assert sized["kv_tokens"] == min(
                sized["kv_cache_bytes"] // cell for cell in own
            ), (role, column)


def test_a_pipeline_launch_of_a_model_sglang_cannot_split_is_refused():
    """SGLang's model runner stops a PP launch whose model class passes no
    activations between stages (Qwen3-Next's forward takes no pp_proxy_tensors):
    one line with SGLang's own words, no figures."""
    from sglang_pd_lean import census

    with pytest.raises(census.CensusError) as refused:
        census_of(
            *("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--"),
            *("--tp", "4", "--pp-size", "2"),
        )
    assert "Pipeline Parallel is not compatible with this model." in str(refused.value)
    assert "Qwen3NextForCausalLM" in str(refused.value)


def test_a_unified_launch_with_a_flag_pd_refuses_is_answered_for_its_own_role():
    if not sglang_refuses_lazy_under_pd():
        pytest.skip("this SGLang accepts extra_buffer_lazy on a PD prefill server")
    result = census_of(
        *("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--"),
        *("--tp", "2", "--mamba-radix-cache-strategy", "extra_buffer_lazy"),
    )
    assert "null" in result["roles"]
    assert capacity(result, "null")["fits"]
    assert "prefill" not in result["roles"]
    assert "SGLang rejects these launch flags" in result["refused"]["prefill"]
    assert "extra_buffer_lazy" in result["refused"]["prefill"]


def test_every_test_the_proof_matrix_names_exists():
    """docs/report.md's matrix of what the report is proven on names tests: each
    name is a test module in test/ or a test function defined there."""
    import os
    import re

    from helpers import doc_text

    section = doc_text("report.md").split("### What the report is proven on", 1)[1]
    table = [line for line in section.split("\n\n", 3)[2].splitlines() if "|" in line]
    named = set(re.findall(r"`(test_\w+)`", "\n".join(table)))
    known = set()
    for folder, _, files in os.walk(os.path.dirname(__file__)):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                known.add(name[:-3])
                with open(os.path.join(folder, name)) as f:
                    known |= set(re.findall(r"def (test_\w+)", f.read()))
    assert named and named <= known, sorted(named - known)


def test_a_gpu_only_import_is_said_as_the_reports_environment(tmp_path):
    """DSPARK's worker imports sgl-kernel's compiled ops while SGLang resolves the
    launch (with a draft SGLang reads past its checks); on a host without them the
    report says its own environment failed, never that SGLang rejects the flags.
    With them installed, the report is made or SGLang's own verdict is said."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean import census

    if "DSPARK" not in SpeculativeAlgorithm.__members__:
        pytest.skip("this SGLang has no DSPARK")
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    try:
        census_of(
            *("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--"),
            *("--tp", "4", "--disaggregation-mode", "prefill"),
            *("--speculative-algorithm", "DSPARK"),
            *("--speculative-draft-model-path", str(tmp_path)),
        )
    except census.CensusError as exc:
        said = str(exc)
        if "sgl_kernel" in said or "ImportError" in said:
            assert said.startswith("the report's environment cannot run SGLang's")
            assert "not a verdict on the flags" in said
        assert not said.startswith("SGLang rejects these launch flags: ImportError")
        assert "ModuleNotFoundError" not in said or "environment" in said


def test_an_unsized_attention_dp_launch_builds_one_shards_pool():
    """With no memory named (``Launch(sized=False)``), each pool is built at the
    flags' own counts, of one attention-DP shard: SGLang divides
    --max-running-requests and --max-mamba-cache-size by the shards."""
    from sglang_pd_lean import census

    launch = census.Launch(
        argv=(
            *("--tp", "4", "--dp", "2", "--enable-dp-attention"),
            *("--max-running-requests", "64", "--max-mamba-cache-size", "300"),
            *("--disaggregation-mode", "prefill"),
        ),
        gpu=census.gpu_facts("h200"),
        model="qwen3-next-80b-a3b",
        sized=False,
    )
    pool = census.report(launch).roles["prefill"].upstream
    assert (pool.request_slots, pool.mamba_slots) == (64 // 2, 300 // 2)
