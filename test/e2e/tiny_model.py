"""A tiny Qwen3-Next model folder for real ``launch_server`` runs on a CPU.

4 layers (3 GDN linear-attention + 1 full attention), hidden 128, 4 experts,
vocab 512, one MTP layer for NEXTN drafting. Weights come from
``--load-format dummy``; the tokenizer is a local word-level one built with the
``tokenizers`` package, so nothing is downloaded. The same folder feeds
``sglang-pd-lean report --config`` so the census and the live server read one file.

``write_draft`` writes a separate tiny draft checkpoint the same way (config, the
same tokenizer, dummy weights): a one-layer Llama for STANDALONE, and a one-layer
EAGLE3 head (``LlamaForCausalLMEagle3``, the target's hidden size, since it reads the
target's hidden states) for EAGLE3; DFlash and DSpark block drafts (the same width);
a Gemma 4 assistant for FROZEN_KV_MTP, whose target is the tiny Gemma 4 text model of
``MODEL_CONFIGS`` (the assistant owns no KV: it reads its target's last sliding and
last full-attention layer, which only a Gemma 4 target names in ``layer_types``).
"""

from __future__ import annotations

import json
import os

VOCAB_SIZE = 512

CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "full_attention_interval": 4,  # layers 0-2 GDN, layer 3 full attention
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 4096,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "norm_topk_prob": True,
    "num_nextn_predict_layers": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "use_cache": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]

_TINY = {
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "use_cache": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _gemma4_text(hidden: int, layer_types: list[str]) -> dict:
    """A Gemma 4 text config: the target's, or the assistant's ``text_config``;
    its last two layers share the KV of earlier ones, as Gemma 4 E2B's do."""
    return {
        "model_type": "gemma4_text",
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": len(layer_types),
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "global_head_dim": 32,
        "layer_types": layer_types,
        "sliding_window": 64,
        "max_position_embeddings": 4096,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        "num_kv_shared_layers": 2,
        "enable_moe_block": False,
        # Unused without the MoE block; SGLang's CPU padding of intermediate sizes
        # (0.5.17) reads it, and transformers 5.12 leaves it None.
        "moe_intermediate_size": 2 * hidden,
        "use_double_wide_mlp": False,
        "attention_k_eq_v": False,
        "final_logit_softcapping": None,
        "tie_word_embeddings": True,
        "pad_token_id": 3,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


_GEMMA4_LAYERS = ["sliding_attention", "full_attention"]
# Other families, the same size (``write_model(folder, kind)``).
MODEL_CONFIGS = {
    "qwen3-next": CONFIG,
    # DeepSeek V3's MLA (a latent KV of kv_lora_rank + qk_rope_head_dim per layer
    # and token) with one MTP layer: 2 layers, the first dense.
    "deepseek-v3": {
        **_TINY,
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 2,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "kv_lora_rank": 64,
        "q_lora_rank": 96,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "attention_bias": False,
        # SGLang's CPU rotary embedding for MLA needs DeepSeek's YaRN scaling.
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    },
    # Kimi Linear: KDA linear attention with MLA full-attention layers (layers
    # 1-3 KDA, layer 4 MLA, 1-based as its config counts them).
    "kimi-linear": {
        **_TINY,
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "num_hidden_layers": 4,
        "num_nextn_predict_layers": 0,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "kv_lora_rank": 64,
        "q_lora_rank": None,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "mla_use_nope": True,
        "linear_attn_config": {
            "full_attn_layers": [4],
            "kda_layers": [1, 2, 3],
            "head_dim": 32,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
        },
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid",
        "num_expert_group": 1,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "topk_group": 1,
        "use_grouped_topk": True,
        "routed_scaling_factor": 2.446,
        "model_max_length": 4096,
    },
    # Gemma 4 text (sliding and full attention, no linear attention): the target
    # FROZEN_KV_MTP's assistant draft binds to. SGLang's hybrid-SWA pool reads
    # ``swa_num_key_value_heads``, which transformers' Gemma4TextConfig does not
    # define: given explicitly.
    "gemma4": {
        **_gemma4_text(128, _GEMMA4_LAYERS * 2),
        "architectures": ["Gemma4ForCausalLM"],
        "swa_num_key_value_heads": 1,
    },
}


_DRAFT_COMMON = {
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB_SIZE,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
DRAFT_CONFIGS = {
    # A plain small causal LM: what STANDALONE drafts with.
    "llama": {
        **_DRAFT_COMMON,
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "head_dim": 16,
    },
    # An EAGLE3 head: reads the target's hidden states, so the target's width.
    "eagle3": {
        **_DRAFT_COMMON,
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": CONFIG["hidden_size"],
        "intermediate_size": 256,
        "draft_vocab_size": VOCAB_SIZE,
    },
    # DFlash and DSpark block drafts (a Qwen3 config plus the block and the target
    # layers whose hidden states they read): the target's width. DSpark's Markov
    # head (rank > 0) is read at the top level of the config.
    "dflash": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": CONFIG["hidden_size"],
        "intermediate_size": 256,
        "num_target_layers": CONFIG["num_hidden_layers"],
        "block_size": 4,
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 2]},
    },
    "dspark": {
        **_DRAFT_COMMON,
        "architectures": ["DSparkDraftModel"],
        "model_type": "qwen3",
        "hidden_size": CONFIG["hidden_size"],
        "intermediate_size": 256,
        "num_target_layers": CONFIG["num_hidden_layers"],
        "block_size": 3,
        "markov_rank": 4,
        "markov_head_type": "vanilla",
        "dspark_config": {
            "mask_token_id": 3,
            "target_layer_ids": [1, 2],
            "markov_rank": 4,
            "markov_head_type": "vanilla",
        },
    },
    # A Gemma 4 assistant (``backbone_hidden_size``: its target's width).
    "gemma4-assistant": {
        "architectures": ["Gemma4AssistantForCausalLM"],
        "model_type": "gemma4_assistant",
        "torch_dtype": "bfloat16",
        "backbone_hidden_size": 128,
        "use_ordered_embeddings": False,
        "tie_word_embeddings": True,
        "text_config": _gemma4_text(64, _GEMMA4_LAYERS),
    },
}


def write_model(folder: str, kind: str = "qwen3-next") -> str:
    """Write the tiny model ``kind`` of ``MODEL_CONFIGS`` (config.json and a
    word-level tokenizer) into ``folder``; return it."""
    return _write(folder, MODEL_CONFIGS[kind])


def write_draft(folder: str, kind: str) -> str:
    """Write the tiny draft ``kind`` of ``DRAFT_CONFIGS`` (config.json and the
    target's tokenizer) into ``folder``; return it."""
    return _write(folder, DRAFT_CONFIGS[kind])


def _write(folder: str, config: dict) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    words = SPECIAL_TOKENS + [f"w{i}" for i in range(VOCAB_SIZE - len(SPECIAL_TOKENS))]
    tokenizer = Tokenizer(
        models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>")
    )
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "<unk>",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "model_max_length": 4096,
            },
            f,
            indent=2,
        )
    return folder
