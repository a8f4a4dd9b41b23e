"""Independent formulas for the tests' expected figures: a GDN model's state bytes
from its config.json fields, never from the code under test. A plain helper module
(not a test module): test modules import it instead of each other."""

from __future__ import annotations

import json
import os

import sglang_pd_lean

GIB = 1 << 30
BF16, FP32 = 2, 4
# The bundled config.json files (data, read here by hand).
MODELS_DIR = os.path.join(os.path.dirname(sglang_pd_lean.__file__), "models")


def load_config(name: str) -> dict:
    with open(os.path.join(MODELS_DIR, f"{name}.json")) as f:
        return json.load(f)


def gdn_dims(cfg: dict, *, tp: int) -> dict:
    """A GDN model's linear layers and per-layer, per-slot state bytes from its
    config.json fields (fp32 ssm state, conv state in the model dtype, bf16 here)."""
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
    conv_dim = (2 * hk * k + hv * v) // tp
    return {
        "layers": layers,
        "ssm": hv // tp * v * k * FP32,
        "conv": conv_dim * (kernel - 1) * BF16,
        "conv_dim": conv_dim,
        "kernel": kernel,
    }


def gdn_expected(
    name: str,
    *,
    tp: int,
    requests: int,
    slots: int,
    draft: int,
    cfg: dict | None = None,
) -> dict:
    """Bytes per component of a GDN model's mamba state, from its config.json fields."""
    d = gdn_dims(cfg or load_config(name), tp=tp)
    layers = d["layers"]
    return {
        "ssm state": layers * (slots + 1) * d["ssm"],
        "conv state": layers * (slots + 1) * d["conv"],
        "verify ssm snapshots": layers * (requests + 1) * draft * d["ssm"],
        # CUDA + linear draft chain: one shared [dim, D + K - 2] window per slot.
        "verify conv windows": layers
        * (requests + 1)
        * d["conv_dim"]
        * (draft + d["kernel"] - 2)
        * BF16,
    }


def binary(nbytes: int) -> str:
    """``nbytes`` written out by hand in the unit the operator should read (tests
    compare the code's ``human_bytes`` with this, not with itself)."""
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"
