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


MAMBA_FULL_MEMORY_RATIO = 0.9  # SGLang's default --mamba-full-memory-ratio
SLOTS_PER_REQUEST = 3  # upstream's mamba slots per running request (radix cache on)


def automatic_split(
    per_slot: int,
    available_gib: float,
    requests: int,
    draft: int,
    *,
    verify: bool,
    pad: int,
) -> tuple[int, float]:
    """(mamba slots, KV GiB) of SGLang's automatic sizing, solved by hand: the mamba
    state gets r / (1 + r) of the budget; a worker that can verify also fits
    snapshots for slots / 3 requests in it, then charges them for min(R, slots / 3);
    ``pad`` padding slots charged on both (1 from SGLang 0.5.17, 0 on 0.5.16)."""
    share = available_gib * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
    share_bytes = share * GIB
    if not verify:
        slots = int((share_bytes - per_slot * pad) // per_slot)
        return slots, available_gib - (slots + pad) * per_slot / GIB
    slots = int(
        (share_bytes - per_slot * (1 + draft) * pad)
        // (per_slot * (1 + draft / SLOTS_PER_REQUEST))
    )
    charged = min(requests, slots // SLOTS_PER_REQUEST)
    verify_gib = per_slot * (charged + pad) * draft / GIB
    return slots, available_gib - verify_gib - (slots + pad) * per_slot / GIB
