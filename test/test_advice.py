"""``report -- <launch flags>``: how to spend what the plugin frees on a prefill target.
Each choice's flags and figures equal SGLang's sizing formula worked from the config's
fields (the independent check), and the report of the launch with those flags added,
as the operator would run it next; nothing to spend where the plugin changes nothing.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from formulas import GIB, binary, gdn_dims, load_config
from helpers import NEXTN, NEXTN_DRAFT_TOKENS, sglang_minor, sizing_pad, typed_census

from sglang_pd_lean import cli

MODEL = "qwen3.5-397b-a17b"
TP, REQUESTS, DRAFT, AVAILABLE = 8, 256, NEXTN_DRAFT_TOKENS, 24.0
FLAGS = [
    "--tp",
    str(TP),
    "--disaggregation-mode",
    "prefill",
    *NEXTN,
    "--max-running-requests",
    str(REQUESTS),
]
# SGLang's default --mamba-full-memory-ratio: the automatic split's mamba share.
FULL_MEMORY_RATIO = 0.9
budget_acts = pytest.mark.skipif(
    sglang_minor() >= 22, reason="SGLang 0.5.22+ sizes a prefill target natively"
)


def report(*args: str, table: bool = False):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["report", *([] if table else ["--json"]), *args])
    assert code == 0
    return out.getvalue() if table else json.loads(out.getvalue())


def launch(*flags: str, table: bool = False):
    return report(
        "--model",
        MODEL,
        "--available-gib",
        str(AVAILABLE),
        "--",
        *FLAGS,
        *flags,
        table=table,
    )


@pytest.fixture(scope="module")
def result() -> dict:
    return launch()


@pytest.fixture(scope="module")
def expected() -> dict:
    """SGLang 0.5.17's sizing of this prefill target, worked by hand from the config:
    per-request state bytes, the automatic split with and without the verify
    reservation, and the three choices' mamba slots, requests and KV bytes (0.5.16:
    without the padding slot, ``sizing_pad``)."""
    import importlib

    # The ratios' module: the configurator's, else (0.5.14-0.5.15.post1) the mixin's.
    try:
        kvc = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    except ImportError:
        kvc = importlib.import_module(
            "sglang.srt.model_executor.model_runner_kv_cache_mixin"
        )

    d = gdn_dims(load_config(MODEL), tp=TP)
    per_req = d["layers"] * (d["ssm"] + d["conv"])
    # extra_buffer with the overlap schedule: 3 + 2 mamba slots per request.
    ratio = (
        kvc.MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
        + kvc.MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP
    )
    pad = sizing_pad()
    share = AVAILABLE * FULL_MEMORY_RATIO / (1 + FULL_MEMORY_RATIO) * GIB
    up_slots = int(
        (share - per_req * (1 + DRAFT) * pad) // (per_req * (1 + DRAFT / ratio))
    )
    capped = min(REQUESTS, up_slots // ratio)
    up_units = (up_slots + pad) + (capped + pad) * DRAFT  # state + verify, per_req
    auto_slots = int((share - per_req * pad) // per_req)
    most = (up_units - pad) // ratio  # most requests whose state fits in up_units

    def kv(units: int) -> int:
        return int((AVAILABLE - units * per_req / GIB) * GIB)

    text = load_config(MODEL).get("text_config", load_config(MODEL))
    full = text["num_hidden_layers"] // text["full_attention_interval"]
    kv_heads = max(text["num_key_value_heads"] // TP, 1)
    cell = full * 2 * kv_heads * text["head_dim"] * 2  # K and V, bf16, per token
    return {
        "ratio": ratio,
        "cell": cell,
        "upstream": {"mamba_slots": up_slots, "kv_cache_bytes": kv(up_units)},
        "kv": {
            "flags": ["--max-mamba-cache-size", str(up_slots)],
            "mamba_slots": up_slots,
            "max_running_requests": capped,
            "kv_cache_bytes": kv(up_slots + pad),
        },
        "requests": {
            "flags": [
                "--max-running-requests",
                str(most),
                "--max-mamba-cache-size",
                str(most * ratio),
            ],
            "mamba_slots": most * ratio,
            "max_running_requests": most,
            "kv_cache_bytes": kv(most * ratio + pad),
        },
        "automatic": {
            "flags": [],
            "mamba_slots": auto_slots,
            "max_running_requests": min(REQUESTS, auto_slots // ratio),
            "kv_cache_bytes": kv(auto_slots + pad),
        },
    }


def choices(result: dict) -> dict:
    return {choice["choice"]: choice for choice in result["advice"]}


@budget_acts
def test_upstream_sizing_is_the_hand_worked_one(result, expected):
    """The baseline the choices start from (guards the formula below)."""
    assert result["resolved"]["prefill"]["mamba_radix_cache_strategy"] == "extra_buffer"
    upstream = result["capacity"]["prefill"]["upstream"]
    assert upstream["mamba_slots"] == expected["upstream"]["mamba_slots"]
    assert upstream["kv_cache_bytes"] == pytest.approx(
        expected["upstream"]["kv_cache_bytes"], abs=64
    )


@budget_acts
@pytest.mark.parametrize("key", ["kv", "requests", "automatic"])
def test_each_choice_has_the_flags_and_figures_of_sglangs_sizing(key, result, expected):
    choice, want = choices(result)[key], expected[key]
    capacity = choice["capacity"]
    assert choice["flags"] == want["flags"]
    assert capacity["fits"] is True
    assert capacity["mamba_slots"] == want["mamba_slots"]
    assert capacity["max_running_requests"] == want["max_running_requests"]
    assert capacity["kv_cache_bytes"] == pytest.approx(want["kv_cache_bytes"], abs=64)
    assert capacity["kv_tokens"] == capacity["kv_cache_bytes"] // expected["cell"]


@budget_acts
def test_all_to_kv_keeps_upstreams_slots_and_adds_the_verify_reservation(
    result, expected
):
    upstream = result["capacity"]["prefill"]["upstream"]
    kv = choices(result)["kv"]["capacity"]
    assert kv["mamba_slots"] == upstream["mamba_slots"]
    assert kv["max_running_requests"] == upstream["max_running_requests"]
    assert kv["kv_tokens"] > upstream["kv_tokens"]


@budget_acts
def test_more_requests_stops_where_the_kv_cache_would_drop_below_upstreams(result):
    """One request more, with its mamba slots, leaves less KV cache than upstream had:
    the report of that launch says so (SGLang's sizing, not the advice's search)."""
    upstream = result["capacity"]["prefill"]["upstream"]
    chosen = choices(result)["requests"]
    most, slots = int(chosen["flags"][1]), int(chosen["flags"][3])
    assert chosen["capacity"]["kv_tokens"] >= upstream["kv_tokens"]
    ratio = slots // most
    beyond = launch(
        "--max-running-requests",
        str(most + 1),
        "--max-mamba-cache-size",
        str((most + 1) * ratio),
    )
    assert beyond["capacity"]["prefill"]["plugin"]["kv_tokens"] < upstream["kv_tokens"]


@budget_acts
@pytest.mark.parametrize("key", ["kv", "requests"])
def test_the_suggested_launch_reports_the_advised_figures(key, result):
    """The operator's next step: the launch with the flags added, reported as is."""
    choice = choices(result)[key]
    again = launch(*choice["flags"])["capacity"]["prefill"]["plugin"]
    for name, value in choice["capacity"].items():
        if name != "available_gib":
            assert again[name] == value, name


@budget_acts
def test_the_table_shows_each_choice_with_its_flags(result):
    text = launch(table=True)
    section = text[text.index("How to spend") :]
    for choice in result["advice"]:
        capacity = choice["capacity"]
        row = next(
            line for line in section.splitlines() if line.startswith(choice["title"])
        )
        assert binary(capacity["kv_cache_bytes"]) in row
        assert f"{capacity['kv_tokens']:,}" in row
        assert f"add: {' '.join(choice['flags']) or 'nothing'}" in section


def test_decode_and_unified_have_nothing_to_spend(result):
    nothing = result["nothing_to_spend"]
    assert "TARGET_VERIFY" in nothing["decode"]
    assert "verifies" in nothing["null"]


@pytest.mark.skipif(sglang_minor() < 22, reason="the budget gate acts before 0.5.22")
def test_a_native_prefill_target_has_nothing_to_spend(result):
    assert result["advice"] == []
    assert "already builds and sizes this prefill target" in (
        result["nothing_to_spend"]["prefill"]
    )
    prefill = result["capacity"]["prefill"]
    assert prefill["upstream"]["kv_tokens"] == prefill["plugin"]["kv_tokens"]


def test_without_speculative_decoding_there_is_nothing_to_spend():
    result = report(
        "--model",
        MODEL,
        "--available-gib",
        str(AVAILABLE),
        "--",
        "--tp",
        str(TP),
        "--disaggregation-mode",
        "prefill",
    )
    assert result["advice"] == []
    nothing = result["nothing_to_spend"]
    assert sorted(nothing) == ["decode", "null", "prefill"]
    assert all(why.startswith("no speculative decoding") for why in nothing.values())


@budget_acts
def test_png_shows_the_kv_cache_per_role_column_and_choice(tmp_path):
    import struct

    from sglang_pd_lean.census.results import jsonable
    from sglang_pd_lean.cli.chart import chart, draw_png

    result = typed_census(
        "--model", MODEL, "--available-gib", str(AVAILABLE), "--", *FLAGS
    )
    path = tmp_path / "report.png"
    draw_png(result, str(path))
    head = path.read_bytes()[:24]
    width, height = struct.unpack(">II", head[16:24])
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert 1500 <= width <= 2600 and 500 <= height <= 900
    fig = chart(result)
    fig.canvas.draw()
    pools, kv = fig.axes
    assert kv.get_title() == "capacity: KV cache (labels: KV tokens)"
    assert [t.get_text() for t in kv.get_xticklabels()] == [
        "prefill\nupstream",
        "prefill\nplugin",
        "decode\nupstream",
        "decode\nplugin",
        "unified\nupstream",
        "unified\nplugin",
        "prefill\nkv",
        "prefill\nrequests",
        "prefill\nautomatic",
    ]
    data = jsonable(result)
    sized = [
        data["capacity"][role][col]
        for role in ("prefill", "decode", "null")
        for col in ("upstream", "plugin")
    ] + [choice["capacity"] for choice in data["advice"]]
    labels = [t.get_text() for t in kv.texts]
    assert labels == [
        f"{s['kv_tokens']:,} tok" if s["fits"] else "does not fit" for s in sized
    ]
    assert min(t.get_fontsize() for t in kv.texts) >= 8
    # The pool legend sits outside the pool axes and clear of the capacity bars.
    box = pools.get_legend().get_window_extent()
    assert not any(box.overlaps(p.get_window_extent()) for p in kv.patches)


@budget_acts
def test_the_advice_table_puts_each_figure_under_its_heading_in_order(result):
    """Upstream's row first, then each choice's row with its ``add:`` line right
    under it, (a) to (c); every figure under its own heading."""
    import re

    text = launch(table=True)
    lines = text[text.index("How to spend") :].splitlines()[1:]
    header = re.split(r"\s{2,}", lines[0].strip())
    assert header == ["KV cache", "KV tokens", "mamba slots", "request slots", "fits"]

    def cells(line: str, title: str) -> dict:
        assert line.startswith(title), (line, title)
        values = re.split(r"\s{2,}", line[len(title) :].strip())
        return dict(zip(header, values, strict=True))

    def expected(capacity: dict) -> dict:
        return {
            "KV cache": binary(capacity["kv_cache_bytes"]),
            "KV tokens": f"{capacity['kv_tokens']:,}",
            "mamba slots": f"{capacity['mamba_slots']:,}",
            "request slots": f"{capacity['max_running_requests']:,}",
            "fits": "yes",
        }

    upstream = result["capacity"]["prefill"]["upstream"]
    assert cells(lines[1], "upstream, without the plugin") == expected(upstream)
    assert [c["choice"] for c in result["advice"]] == ["kv", "requests", "automatic"]
    for i, choice in enumerate(result["advice"]):
        row, add = lines[2 + 2 * i], lines[3 + 2 * i]
        assert choice["title"].startswith(f"({'abc'[i]}) ")
        assert cells(row, choice["title"]) == expected(choice["capacity"])
        assert add.strip() == f"add: {' '.join(choice['flags']) or 'nothing'}"


def test_a_choice_sglang_would_stop_carries_sglangs_reason():
    """A choice's capacity is SGLang's sizing with its flags, field for field: where
    SGLang would stop the server, its reason is what the table prints."""
    from sglang_pd_lean.census.results import Capacity, Sizing

    stopped = Capacity.of(Sizing(fits=False, reason="SGLang stops: no room"), 3.5)
    assert (stopped.fits, stopped.reason, stopped.available_gib) == (
        False,
        "SGLang stops: no room",
        3.5,
    )
    sized = Sizing(
        fits=True,
        kv_cache_bytes=7,
        kv_tokens=11,
        mamba_slots=13,
        max_running_requests=17,
    )
    fits = Capacity.of(sized, 2.0)
    assert (fits.kv_cache_bytes, fits.kv_tokens, fits.mamba_slots) == (7, 11, 13)
    assert fits.max_running_requests == 17 and fits.reason is None
