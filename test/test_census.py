"""Census numbers against independent formulas from the model configs, SGLang's
sizing against the budget formula, and the census's own slot cap (the library,
without the CLI in front of it)."""

from __future__ import annotations

import json
import os
import types

import pytest
from formulas import FP32, GIB, gdn_dims, gdn_expected, load_config
from formulas import automatic_split as split
from helpers import NO_BUFFER, census_of, sizing_pad, upstream_has
from placeholder import model_config

from sglang_pd_lean import census


def flags(model: str, tp: int, requests: int, draft: int) -> tuple[str, ...]:
    """``report``'s census flags for a model, TP, requests and draft tokens."""
    return (
        *("--model", model, "--tp", str(tp)),
        *("--max-running-requests", str(requests)),
        *("--speculative-num-draft-tokens", str(draft)),
    )


@pytest.mark.parametrize(
    "model,tp,requests,draft",
    [
        ("qwen3-next-80b-a3b", 4, 256, 4),
        ("qwen3.5-397b-a17b", 8, 256, 4),
        ("qwen3.5-397b-a17b", 2, 64, 2),
    ],
)
def test_census_matches_config_formula(model, tp, requests, draft):
    result = census_of(*flags(model, tp, requests, draft))
    for role in ("prefill", "decode", "null"):
        slots = result["roles"][role]["upstream"]["mamba_slots"]
        expected = gdn_expected(
            model, tp=tp, requests=requests, slots=slots, draft=draft
        )
        upstream = result["roles"][role]["upstream"]["components"]
        lean_upstream = role == "prefill" and upstream_has("pool")
        for component, nbytes in expected.items():
            if lean_upstream and component.startswith("verify"):
                nbytes = 0  # 0.5.18+ build a prefill target's pool lean themselves
            assert upstream.get(component, 0) == nbytes, (role, component)
    lean = result["roles"]["prefill"]["plugin"]
    assert lean["verify_only_bytes"] == 0
    slots = lean["mamba_slots"]
    expected = gdn_expected(model, tp=tp, requests=requests, slots=slots, draft=draft)
    assert lean["components"]["ssm state"] == expected["ssm state"]
    for role in ("decode", "null"):
        assert result["roles"][role]["plugin"] == result["roles"][role]["upstream"]


def test_qwen35_tp8_prefill_rank_gives_back_the_verify_snapshots():
    """The issue's figure: ~22.6 GiB (24.3 GB) of ssm snapshots per prefill rank."""
    result = census_of("--model", "qwen3.5-397b-a17b", "--tp", "8")
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
    cfg = load_config(model)
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
    result = census_of(*flags(model, tp, requests, draft))
    upstream = result["roles"]["null"]["upstream"]["components"]
    assert (
        upstream["verify ssm snapshots"] == layers * (requests + 1) * draft * per_slot
    )
    assert result["roles"]["prefill"]["plugin"]["verify_only_bytes"] == 0


def test_pipeline_parallel_counts_one_stage():
    """Qwen3.5 at PP 2 (Qwen3-Next's class takes no PP): the stage shown holds the
    most linear-attention layers, from the config's layer types."""
    text = load_config("qwen3.5-397b-a17b")["text_config"]
    linear = [
        i for i, kind in enumerate(text["layer_types"]) if kind != "full_attention"
    ]
    half_layers = len(text["layer_types"]) // 2
    most = max(
        sum(i < half_layers for i in linear), sum(i >= half_layers for i in linear)
    )
    whole = census_of("--model", "qwen3.5-397b-a17b", "--tp", "8")
    half = census_of("--model", "qwen3.5-397b-a17b", "--tp", "8", "--pp", "2")

    def ssm(result):
        return result["roles"]["decode"]["upstream"]["components"]["ssm state"]

    assert ssm(half) * len(linear) == ssm(whole) * most


def test_mamba_ssm_dtype_bfloat16_halves_the_ssm_state_and_snapshots():
    base = ("--model", "qwen3-next-80b-a3b", "--tp", "4")
    fp32 = census_of(*base)
    bf16 = census_of(*base, "--mamba-ssm-dtype", "bfloat16")
    assert bf16["inputs"]["mamba_ssm_dtype"] == "bfloat16"
    for component in ("ssm state", "verify ssm snapshots"):
        full = fp32["roles"]["null"]["upstream"]["components"][component]
        half = bf16["roles"]["null"]["upstream"]["components"][component]
        assert half * 2 == full


def test_every_component_is_present_and_totals_match_the_formula():
    """Named components are reported at 0 where empty, and each total is the
    formula's state + verify bytes + a req_to_token map counted by hand."""
    tp, requests, draft = 4, 64, 3
    result = census_of(*flags("qwen3-next-80b-a3b", tp, requests, draft))
    # (R + 1) rows of context + 4 + D int32 entries (page size 1; no decode
    # pre-allocation slots above 32 requests).
    req_to_token = (requests + 1) * (result["inputs"]["context_length"] + 4 + draft) * 4
    for role in census.ROLES:
        for column in ("upstream", "plugin"):
            entry = result["roles"][role][column]
            expected = gdn_expected(
                "qwen3-next-80b-a3b",
                tp=tp,
                requests=requests,
                slots=entry["mamba_slots"],
                draft=draft,
            )
            assert set(census.COMPONENT_ORDER) <= set(entry["components"])
            verify = {c: n for c, n in expected.items() if c.startswith("verify")}
            if role == "prefill" and (column == "plugin" or upstream_has("pool")):
                verify = dict.fromkeys(verify, 0)
                assert entry["components"]["verify ssm snapshots"] == 0
            assert entry["components"]["replayssm rings"] == 0
            assert entry["verify_only_bytes"] == sum(verify.values())
            other = sum(
                n
                for c, n in entry["components"].items()
                if c not in census.COMPONENT_ORDER
            )
            assert entry["total_bytes"] == (
                expected["ssm state"]
                + expected["conv state"]
                + sum(verify.values())
                + req_to_token
                + other
            ), (role, column)
            assert other < 64 * 1024  # bookkeeping: free lists, indices


def test_library_caps_slot_counts_that_would_exhaust_host_memory():
    with pytest.raises(census.CensusError, match="more than the census builds"):
        census_of("--model", "qwen3-next-80b-a3b", "--max-running-requests", str(10**9))


def test_automatic_split_spends_the_verify_reservation_on_mamba_slots():
    """Qwen3-Next TP 4, 100 GiB: a prefill target gets 2632 slots and 52.63 GiB of
    KV (upstream 0.5.16-0.5.21: 1126 and 61.23; 0.5.22+ natively as the plugin)."""
    tp, requests, draft, available = 4, 256, 4, 100.0
    d = gdn_dims(load_config("qwen3-next-80b-a3b"), tp=tp)
    per_slot = d["layers"] * (d["ssm"] + d["conv"])
    result = census_of(
        *flags("qwen3-next-80b-a3b", tp, requests, draft),
        *("--available-gib", str(available)),
        *NO_BUFFER,
    )
    pad = sizing_pad()
    lean = split(per_slot, available, requests, draft, verify=False, pad=pad)
    verify = split(per_slot, available, requests, draft, verify=True, pad=pad)
    if sizing_pad():  # the worked example of docs/memory-model.md (0.5.17+)
        assert lean[0] == 2632 and round(lean[1], 2) == 52.63
        assert verify[0] == 1126 and round(verify[1], 2) == 61.23
    for role in ("prefill", "null"):  # decode: radix off, slots from requests
        for column in ("upstream", "plugin"):
            lean_here = role == "prefill" and (
                column == "plugin" or upstream_has("budget")
            )
            slots, kv_gib = lean if lean_here else verify
            sized = result["capacity"][role][column]
            assert sized["fits"] and sized["mamba_slots"] == slots, (role, column)
            assert sized["kv_cache_gib"] == pytest.approx(kv_gib, rel=1e-12)
            # The pool is built with the slots the sizing settled on.
            pool = result["roles"][role][column]
            assert pool["mamba_slots"] == slots
            assert (
                pool["components"]["ssm state"] == d["layers"] * (slots + 1) * d["ssm"]
            )
    change = result["capacity"]["prefill"]["change"]
    if upstream_has("budget"):
        assert change["mamba_slots"] == 0  # upstream with upstream: both lean
    else:
        assert change["mamba_slots"] == lean[0] - verify[0]
        assert change["kv_cache_bytes"] < 0


def test_upstream_that_does_not_fit_is_reported_beside_the_plugin_capacity():
    """Qwen3.5-397B TP 8, 30 GiB, 768 slots: state 17.2 GiB fits, state + verify
    reservation does not (upstream stops the server); the plugin leaves 12.81 GiB."""
    available, slots, requests, draft = 30.0, 768, 256, 4
    d = gdn_dims(load_config("qwen3.5-397b-a17b"), tp=8)
    per_slot = d["layers"] * (d["ssm"] + d["conv"])
    result = census_of(
        *flags("qwen3.5-397b-a17b", 8, requests, draft),
        *("--available-gib", str(available), "--max-mamba-cache-size", str(slots)),
        *NO_BUFFER,
    )
    pad = sizing_pad()
    lean_kv = available - (slots + pad) * per_slot / GIB
    verify_kv = lean_kv - (min(requests, slots // 3) + pad) * draft * per_slot / GIB
    assert verify_kv < 0 < lean_kv
    capacity = result["capacity"]
    plugin = capacity["prefill"]["plugin"]
    assert plugin["fits"] and plugin["kv_cache_gib"] == pytest.approx(lean_kv)
    assert plugin["kv_cache_bytes"] == int(plugin["kv_cache_gib"] * GIB)
    for role in ("decode", "null"):
        for column in ("upstream", "plugin"):
            assert not capacity[role][column]["fits"]
            assert "no GPU memory for the KV cache" in capacity[role][column]["reason"]
    assert capacity["prefill"]["upstream"]["fits"] == upstream_has("budget")
    # Where upstream does not fit, its pool is the one the flags ask for.
    assert result["roles"]["prefill"]["upstream"]["mamba_slots"] == slots


def test_a_context_longer_than_the_models_is_one_line_from_sglang():
    """A context longer than the model's: SGLang's own resolution refuses it."""
    with pytest.raises(census.CensusError) as raised:
        census_of("--model", "qwen3-next-80b-a3b", "--context-length", str(1 << 24))
    assert str(raised.value).startswith("SGLang rejects these launch flags: ")
    assert "context_length" in str(raised.value) and "\n" not in str(raised.value)


def test_one_config_is_one_folder_for_sglangs_loader_whatever_its_key_order(
    monkeypatch,
):
    """SGLang's loaders read a folder: each distinct config is written once, as
    config.json in a folder of its own named for this package, and the same config
    in another key order gets the same folder."""
    from sglang_pd_lean.census import model

    monkeypatch.setattr(model, "_model_folders", {})
    first = model.model_folder({"model_type": "x", "hidden_size": 8})
    again = model.model_folder({"hidden_size": 8, "model_type": "x"})
    other = model.model_folder({"model_type": "x", "hidden_size": 16})
    assert first == again != other
    assert os.path.basename(first).startswith("sglang-pd-lean-model-")
    with open(os.path.join(first, "config.json")) as f:
        assert json.load(f) == {"model_type": "x", "hidden_size": 8}


@pytest.mark.parametrize("field", ["max_running_requests", "max_mamba_cache_size"])
def test_the_slot_cap_builds_2_to_the_20_and_names_the_flag_past_it(field):
    """The host-safety cap, in one place (``census.check_slots``; the command asks
    it before SGLang's import): exactly ``MAX_SLOTS`` is built, one more is one
    line naming the flag, the value and the cap."""
    census.check_slots(**{field: census.MAX_SLOTS})
    census.check_slots(**{field: None})  # not given
    with pytest.raises(census.CensusError) as raised:
        census.check_slots(**{field: census.MAX_SLOTS + 1})
    flag = "--" + field.replace("_", "-")
    assert str(raised.value) == (
        f"{flag} {census.MAX_SLOTS + 1:,} is more than the census builds "
        f"({census.MAX_SLOTS:,} slots)"
    )


@pytest.mark.parametrize(
    "field, depth",
    [("num_nextn_predict_layers", 2), ("mtp_num_hidden_layers", 3), (None, 1)],
)
def test_the_draft_description_has_the_configs_own_mtp_depth(field, depth):
    """Where no draft description is given, the configurator gets an MTP draft of
    the depth the model's config.json names (``num_nextn_predict_layers`` or
    ``mtp_num_hidden_layers``), one layer where it names neither."""
    from sglang_pd_lean.census.pools import spec_aux_config

    config = census.read_config_dict(model="qwen3-next-80b-a3b")
    for name in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        config.pop(name, None)
    if field is not None:
        config[field] = depth
    mc = model_config(config, context_length=None)
    assert spec_aux_config(mc).eagle_draft_num_layers == depth


def test_an_error_sglangs_sizing_does_not_expect_is_one_line_naming_the_step():
    """SGLang's sizing raising what it never raises on a launch it refuses (an API
    that changed under the report): one CensusError line naming the step."""
    import types

    from sglang_pd_lean.census.roles import _sized

    def changed(available_gib):
        raise TypeError("takes 1 positional argument but 2 were given")

    conf = types.SimpleNamespace(_handle_max_mamba_cache=changed, mambaish_config=1)
    plan = types.SimpleNamespace(available_gib=10.0, fields={}, pp_size=1)
    with pytest.raises(census.CensusError) as raised:
        _sized(lambda server_args: conf, plan)
    assert str(raised.value) == (
        "SGLang cannot size this model's pools: TypeError: takes 1 positional "
        "argument but 2 were given"
    )


def decode_buffer_bytes(mc, requests: int, tokens_per_request: int) -> int:
    """Bytes of SGLang's own decode-shaped dummy buffers (``_allocate_decode_buffers``,
    run here under FakeTensorMode) for ``requests`` x ``tokens_per_request`` tokens
    on one rank: each tensor it returns, summed."""
    import inspect

    import torch
    from sglang.srt.model_executor.runner import base_runner
    from torch._subclasses.fake_tensor import FakeTensorMode

    given = dict(
        device="cuda",
        max_bs=requests,
        max_num_token=requests * tokens_per_request,
        hidden_size=mc.hidden_size,
        vocab_size=mc.vocab_size,
        dtype=mc.dtype,
        dp_size=1,
        pp_size=1,
        is_encoder_decoder=False,
        require_mlp_tp_gather=False,
        seq_len_fill_value=1,
        encoder_len_fill_value=0,
        num_tokens_per_req=tokens_per_request,
        num_tokens_per_bs=tokens_per_request,  # its name on 0.5.14 and 0.5.15
        cache_loc_dtype=torch.int64,
        enable_mamba_track=False,
    )
    taken = inspect.signature(base_runner._allocate_decode_buffers).parameters
    with FakeTensorMode(allow_non_fake_inputs=True):
        buffers = base_runner._allocate_decode_buffers(
            **{k: v for k, v in given.items() if k in taken}
        )
    tensors = [v for v in vars(buffers).values() if isinstance(v, torch.Tensor)]
    return sum(t.nbytes for t in tensors)


def test_warmup_buffers_are_sglangs_decode_buffers_at_each_roles_tokens():
    """The warm-up's FlashInfer-autotune buffers are SGLang's decode-shaped dummy
    buffers for the eager batch: a speculative target's hold every draft token of
    each request (the verify shape); with the plugin, a prefill target's hold one
    token per request, as a server without speculation does; decode and unified
    targets are upstream's. Expected: SGLang's allocator run here with those shapes."""
    from sglang_pd_lean.census.pools import parallel, published
    from sglang_pd_lean.census.warmup import warmup_rows

    config = census.read_config_dict(model="qwen3-next-80b-a3b")
    mc = model_config(config, context_length=None)
    spec = dict(
        speculative_algorithm="EAGLE",
        speculative_num_steps=2,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=3,
    )

    def slots(upstream: int, plugin: int):  # each column's server's requests
        return types.SimpleNamespace(
            upstream=types.SimpleNamespace(request_slots=upstream),
            plugin=types.SimpleNamespace(request_slots=plugin),
        )

    # The prefill columns' servers settle on different request counts (the mamba
    # cap changes with the plugin): each column's batch is its own server's.
    plans = {
        "prefill": ({"disaggregation_mode": "prefill", **spec}, slots(30, 24), 3),
        "decode": ({"disaggregation_mode": "decode", **spec}, slots(16, 16), 3),
        "null": ({"disaggregation_mode": "null", **spec}, slots(8, 8), 3),
        "no-spec": ({"disaggregation_mode": "prefill"}, slots(40, 40), 1),
    }
    prefill_native = upstream_has("autotune")
    expected = {
        "prefill": ((30, 1 if prefill_native else 3), (24, 1)),
        "decode": ((16, 3), (16, 3)),
        "null": ((8, 3), (8, 3)),
        "no-spec": ((40, 1), (40, 1)),
    }
    with parallel(tp=1):  # one rank, as the census sizes it
        rows = warmup_rows(mc, plans)
        for role, shapes in expected.items():
            with published(**plans[role][0]):
                expected_bytes = [decode_buffer_bytes(mc, *shape) for shape in shapes]
                assert [
                    rows[role].column(column).autotune_buffers_bytes
                    for column in ("upstream", "plugin")
                ] == expected_bytes, role
    assert set(rows) == set(expected)


def test_the_census_builds_exactly_2_to_the_20_slots_and_requests():
    """The census builds up to 2^20 mamba slots and 2^20 requests, the most the
    flags admit: a launch at the cap is built, in every role and column, at those
    counts (one more is refused in one line: test_cli_edges)."""
    cap = str(2**20)
    result = census_of(
        *("--model", "qwen3-next-80b-a3b", "--max-mamba-cache-size", cap),
        *("--max-running-requests", cap),
    )
    for role, columns in result["roles"].items():
        for column, pools in columns.items():
            got = (pools["mamba_slots"], pools["request_slots"])
            assert got == (2**20, 2**20), (role, column)


def test_a_config_of_16_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    """docs/report.md: configs over 16 MiB are refused, in one line saying so; one of
    exactly 16 MiB (a bundled config padded with spaces) reads as the config."""
    bundled = load_config("qwen3-next-80b-a3b")
    text = json.dumps(bundled)
    path = tmp_path / "config.json"
    path.write_text(text + " " * ((16 << 20) - len(text)))
    assert census.read_config_dict(config=str(path)) == bundled
    path.write_text(text + " " * ((16 << 20) + 1 - len(text)))
    with pytest.raises(census.CensusError) as raised:
        census.read_config_dict(config=str(path))
    assert str(raised.value) == (
        f"cannot read config {path}: larger than 16 MiB, not a config.json"
    )


@pytest.mark.parametrize("data", [{"architectures": ["Qwen3NextForCausalLM"]}, []])
def test_json_without_a_model_type_is_not_a_config(tmp_path, data):
    """A JSON file that is not an object with ``model_type`` is no Hugging Face
    config.json, and the census says so in one line before SGLang is asked."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(census.CensusError) as raised:
        census.read_config_dict(config=str(path))
    assert str(raised.value) == (
        f"{path} is not a Hugging Face config.json (no model_type)"
    )
