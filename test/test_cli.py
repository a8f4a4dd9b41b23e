"""The ``sglang-pd-lean report`` command: its output, every kind of bad input (one
line on stderr, exit code 2, never a traceback), the host-safety caps, and the
conventions (--json, defaults in --help). Doctor: test_doctor.py; signals, handlers
and process-level edges: test_cli_edges.py."""

from __future__ import annotations

import json
import re

import pytest
from formulas import GIB, automatic_split, binary, gdn_dims, gdn_expected, load_config
from helpers import (
    LLAMA_CONFIG,
    NATIVE_FROM,
    NO_BUFFER,
    assert_documented,
    sizing_pad,
    table_row,
    typed_census,
    upstream_has,
)
from helpers import tiny_model_folder as tiny_model

from sglang_pd_lean import census, cli

# The e2e servers' flags that shape the pool; given last (they end with the launch
# flags after --: no_buffer needs the overlap schedule off).
E2E_FLAGS = [
    *("--page-size", "1", "--context-length", "2048"),
    *("--max-running-requests", "8", "--speculative-num-draft-tokens", "2"),
    *("--", "--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"),
    *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1"),
    *("--speculative-eagle-topk", "1"),
]


# The worked example's 768 mamba slots (3 per request) in every role.
SLOTS_768 = ("--max-mamba-cache-size", "768")


def report(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def report_json(capsys, *args: str) -> dict:
    """The report's JSON (``--json`` goes before any launch flags after --)."""
    cut = args.index("--") if "--" in args else len(args)
    code, out, err = report(capsys, *args[:cut], "--json", *args[cut:])
    assert code == 0, err
    result = json.loads(out)
    assert_documented(result, "json.md")
    return result


def write_config(tmp_path, **changes) -> str:
    """The bundled Qwen3-Next config with ``changes`` (None: drop the field)."""
    cfg = load_config("qwen3-next-80b-a3b")
    for key, value in changes.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


# ---------------------------------------------------------------- report output


def test_table_shows_the_worked_example_figures(capsys):
    """docs/memory-model.md's Qwen3.5-397B TP 8 example, cell by cell."""
    code, out, _ = report(
        capsys, "--model", "qwen3.5-397b-a17b", "--tp", "8", *SLOTS_768
    )
    assert code == 0
    expected = gdn_expected("qwen3.5-397b-a17b", tp=8, requests=256, slots=768, draft=4)
    for component, nbytes in expected.items():
        cells = table_row(out, component)
        verify = component.startswith("verify")
        lean = 0 if verify else nbytes
        prefill_upstream = 0 if verify and upstream_has("pool") else nbytes
        assert (
            cells
            == [binary(v) for v in (prefill_upstream, lean)] + [binary(nbytes)] * 4
        ), component
    assert table_row(out, "mamba slots") == ["768"] * 6
    assert table_row(out, "request slots") == ["256"] * 6
    snapshots = expected["verify ssm snapshots"] + expected["verify conv windows"]
    given_back = "0 B" if upstream_has("pool") else "-" + binary(snapshots)
    assert table_row(out, "change with plugin") == [given_back, "0 B", "0 B"]


def test_table_columns_align_and_small_pools_read_in_small_units(tmp_path, capsys):
    folder = tiny_model(tmp_path / "tiny")
    code, out, _ = report(
        capsys, "--config", folder, "--max-mamba-cache-size", "24", *E2E_FLAGS
    )
    assert code == 0
    grid = [block for block in out.split("\n\n") if "\ncomponent  " in block]
    lines = grid[0].splitlines()
    full = [line for line in lines if len(re.split(r"\s{2,}", line.strip())) == 7]
    assert len(full) >= 8
    assert len({len(line) for line in full}) == 1  # right edges line up
    assert len(lines[0]) == len(full[0])  # so do the role titles
    assert not re.search(r"(?<![\d.])0\.00 ", out)  # no "0.00 GiB" for a small pool
    assert table_row(out, "ssm state")[0].endswith(" MiB")
    assert table_row(out, "other bookkeeping")[0].endswith(" B")


def test_json_has_every_component_and_the_pool_counts(capsys):
    result = report_json(
        capsys, "--model", "kimi-linear-48b-a3b", "--tp", "2", *SLOTS_768
    )
    for role in census.ROLES:
        for column in ("upstream", "plugin"):
            entry = result["roles"][role][column]
            assert set(census.COMPONENT_ORDER) <= set(entry["components"])
            assert entry["mamba_slots"] == 768 and entry["request_slots"] == 256
    assert result["roles"]["prefill"]["plugin"]["components"][
        "verify ssm snapshots"
    ] == (0)
    assert set(result["plugin_gates"]) == set(NATIVE_FROM) | {"replayssm"}


def test_the_text_report_ends_with_the_gates_doctor_lists_and_json_is_indented(
    capsys,
):
    """The table's last line names each gate and its state on this SGLang, in
    ``doctor``'s order and words; ``--json`` prints the same result indented by two
    spaces, one key per line."""
    assert cli.main(["doctor", "--json"]) == 0
    gates = json.loads(capsys.readouterr().out)["gates"]
    code, out, _ = report(capsys, "--model", "qwen3-next-80b-a3b", "--tp", "4")
    assert code == 0
    assert out.rstrip("\n").splitlines()[-1] == "plugin gates on this SGLang: " + (
        ", ".join(f"{g['name']}: {g['state']}" for g in gates)
    )
    code, out, _ = report(
        capsys, "--model", "qwen3-next-80b-a3b", "--tp", "4", "--json"
    )
    assert out == json.dumps(json.loads(out), indent=2) + "\n"


def test_upstream_that_does_not_fit_shows_sglangs_reason(capsys):
    """The case the plugin exists for: a traceback before, now a table."""
    args = ["--model", "qwen3.5-397b-a17b", "--tp", "8", "--available-gib", "30"]
    code, out, err = report(capsys, *args, "--max-mamba-cache-size", "768")
    assert code == 0 and err == ""
    kv = table_row(out, "KV cache")
    d = gdn_dims(load_config("qwen3.5-397b-a17b"), tp=8)
    slots = 768 + sizing_pad()  # charged by SGLang's sizing
    lean_kv = int((30 - slots * d["layers"] * (d["ssm"] + d["conv"]) / GIB) * GIB)
    assert kv[1] == binary(lean_kv)
    assert kv[2:] == ["does not fit"] * 4
    assert (kv[0] == "does not fit") != upstream_has("budget")
    notes = [line for line in out.splitlines() if line.startswith("does not fit (")]
    assert notes and all("no GPU memory for the KV cache" in n for n in notes)
    for column in ("upstream decode target", "plugin unified (null)"):
        assert any(column in note for note in notes)


def test_automatic_split_is_reported_as_slots_bought_and_kv_lost(capsys):
    code, out, _ = report(
        capsys,
        *("--model", "qwen3-next-80b-a3b", "--tp", "4", "--available-gib", "100"),
        *("--max-running-requests", "256", *NO_BUFFER),
    )
    assert code == 0
    assert "KV cache +" not in out  # the plugin's KV change here is a loss
    d = gdn_dims(load_config("qwen3-next-80b-a3b"), tp=4)
    per_slot = d["layers"] * (d["ssm"] + d["conv"])
    lean, verify = (
        automatic_split(per_slot, 100, 256, 4, verify=v, pad=sizing_pad())
        for v in (False, True)
    )
    if sizing_pad():  # docs/memory-model.md's worked example (0.5.17+)
        assert (lean[0], verify[0]) == (2632, 1126)
    upstream = lean if upstream_has("budget") else verify
    kv = table_row(out, "KV cache")
    assert kv[1] == binary(int(lean[1] * GIB))
    assert kv[0] == binary(int(upstream[1] * GIB))
    slots = table_row(out, "mamba slots")
    assert slots[1] == f"{lean[0]:,}"
    assert slots[0] == f"{upstream[0]:,}"
    if not upstream_has("budget"):
        assert (
            f"prefill target with the plugin: +{lean[0] - verify[0]:,} mamba slots, "
            f"KV cache -{binary(int((verify[1] - lean[1]) * GIB))}" in out
        )
    assert "Automatic split" in out


def test_report_reproduces_the_e2e_servers_sizing_inputs(tmp_path, capsys):
    """The e2e server's flags and a model folder; --available-gib used exactly
    (rounding it to 4 digits moves the KV budget by bytes)."""
    folder = tiny_model(tmp_path / "tiny")
    exact = "0.0123456789"
    result = report_json(
        capsys, "--config", folder, "--available-gib", exact, *E2E_FLAGS
    )
    assert result["inputs"]["available_gib"] == float(exact)
    assert result["inputs"]["page_size"] == 1
    assert result["inputs"]["mamba_radix_cache_strategy"] == "no_buffer"
    cfg = json.loads((tmp_path / "tiny" / "config.json").read_text())
    d = gdn_dims(cfg, tp=1)
    per_slot = d["layers"] * (d["ssm"] + d["conv"])
    lean = result["capacity"]["prefill"]["plugin"]
    pad = sizing_pad()
    share = float(exact) * 0.9 / 1.9 * GIB
    slots = int((share - per_slot * pad) // per_slot)
    assert lean["mamba_slots"] == slots
    assert lean["kv_cache_bytes"] == int(
        (float(exact) - (slots + pad) * per_slot / GIB) * GIB
    )
    assert lean["max_running_requests"] == 8
    pool = result["roles"]["prefill"]["plugin"]
    assert pool["mamba_slots"] == slots
    assert pool["components"]["ssm state"] == d["layers"] * (slots + 1) * d["ssm"]
    assert pool["components"]["conv state"] == d["layers"] * (slots + 1) * d["conv"]


def test_page_size_aligns_the_kv_tokens(capsys):
    args = ["--model", "qwen3-next-80b-a3b", "--tp", "4", "--available-gib", "50"]
    one = report_json(capsys, *args)["capacity"]["null"]["upstream"]["kv_tokens"]
    paged = report_json(capsys, *args, "--page-size", "64")
    tokens = paged["capacity"]["null"]["upstream"]["kv_tokens"]
    assert tokens % 64 == 0 and one - 64 < tokens <= one


# ---------------------------------------------------------------------- the PNG


def test_png_is_written_to_exactly_the_path_given(tmp_path, capsys):
    for name in ("chart", "chart.pdf"):
        path = tmp_path / name
        code, _, err = report(
            capsys, "--model", "kimi-linear-48b-a3b", "--tp", "2", "--png", str(path)
        )
        assert code == 0
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart", "chart.pdf"]


def test_png_legend_uses_the_table_rows_and_covers_no_bar(capsys):
    result = typed_census("--model", "qwen3-next-80b-a3b", "--tp", "4")
    fig = cli.chart(result)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend()
    names = [t.get_text() for t in legend.get_texts()]
    rows = [label for label, _ in cli.component_rows(result.roles)]
    assert names == rows[::-1]
    box = legend.get_window_extent()
    bars = [p.get_window_extent() for p in ax.patches if p.get_height() > 0]
    assert bars and not any(box.overlaps(bar) for bar in bars)


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "no-such-model"], "unknown model"),
        (["--config", "/no/such/config.json"], "cannot read config"),
        (["--config", "/dev/zero"], "not a regular file"),
        (["--tp", "3"], "does not divide"),
        (["--tp", "0"], "must be positive"),
        (["--max-running-requests", "-4"], "must be positive"),
        (["--speculative-num-draft-tokens", "0"], "must be positive"),
        (["--available-gib", "nan"], "positive finite"),
        (["--available-gib", "inf"], "positive finite"),
        (["--available-gib", "-1"], "positive finite"),
        (["--tp", "four"], "not a whole number: 'four'"),
        (["--available-gib", "lots"], "not a number: 'lots'"),
        (["--max-running-requests", "1000000000"], "more than the census builds"),
        (["--max-mamba-cache-size", "1000000000"], "more than the census builds"),
        (["--pp", "49"], "more than this model's 48 layers"),
        (["--png", "/no/such/dir/chart.png"], "cannot write --png"),
        (["--png", "/"], "it is a folder"),
        (["--available-gib", "1000000000"], "more than the census builds"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, message, capsys):
    if "--model" not in args and "--config" not in args:
        args = ["--model", "qwen3-next-80b-a3b", "--tp", "4", *args]
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(cli.main(["report", *args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(num_hidden_layers=0), "none of this config's 0 layers"),
        (dict(full_attention_interval=1), "none of this config's 48 layers"),
        (
            dict(linear_num_value_heads=0, linear_num_key_heads=0),
            "0 bytes of ssm state and of conv state",
        ),
        # Resolution reads the config first where the release's ServerArgs does.
        (dict(hidden_size="wide"), "hidden_size"),
        (dict(linear_conv_kernel_dim=-3), "negative dimension"),
    ],
)
def test_a_config_sglang_rejects_or_empties_is_one_line(
    changes, message, tmp_path, capsys
):
    code, out, err = report(capsys, "--config", write_config(tmp_path, **changes))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_linear_layers_with_only_conv_state_are_counted(tmp_path, capsys):
    """Short-convolution hybrids keep a conv window and no ssm state per layer:
    the census shows the conv state and the verify conv windows."""
    config = write_config(tmp_path, linear_num_value_heads=0)
    result = report_json(capsys, "--config", config, "--tp", "4")
    null = result["roles"]["null"]["upstream"]["components"]
    assert null["ssm state"] == 0 and null["conv state"] > 0
    assert null["verify conv windows"] > 0


def test_an_architecture_this_sglang_gives_no_mamba_pool_is_named(tmp_path, capsys):
    """Jamba has mamba layers, but SGLang builds it no mamba pool: say so."""
    from transformers import JambaConfig

    cfg = JambaConfig(
        num_hidden_layers=8,
        hidden_size=256,
        intermediate_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        num_experts=2,
    ).to_dict()
    cfg["architectures"] = ["JambaForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = report(capsys, "--config", str(tmp_path))
    assert code == 2
    assert "gives JambaForCausalLM no mamba pool" in err
    assert "no linear-attention" not in err


def test_a_model_without_linear_attention_is_reported_from_sglangs_sizing(
    tmp_path, capsys
):
    """A plain transformer (issue 36): no mamba state in any role; the KV cache
    takes the whole budget, its tokens as many as fit at the bytes per token of
    every layer's K and V, the draft's layers SGLang counts included; the request
    pool is the req_to_token map alone; and the prefill target says why there is
    nothing to spend."""
    from sglang_pd_lean.census.advice import NO_LINEAR_STATE

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    data = report_json(
        capsys,
        *("--config", str(tmp_path), "--available-gib", "2", "--"),
        *("--disaggregation-mode", "prefill", "--context-length", "1024"),
        *("--max-running-requests", "16", "--speculative-algorithm", "EAGLE3"),
        *("--speculative-draft-model-path", str(tmp_path)),
        *("--speculative-num-steps", "1", "--speculative-eagle-topk", "1"),
        *("--speculative-num-draft-tokens", "2"),
    )
    assert data["inputs"]["mamba_ssm_dtype"] is None
    head_dim = LLAMA_CONFIG["hidden_size"] // LLAMA_CONFIG["num_attention_heads"]
    for role in census.ROLES:
        layers = LLAMA_CONFIG["num_hidden_layers"]
        layers += data["memory"][role]["draft_layers_in_kv_sizing"]
        per_token = 2 * layers * LLAMA_CONFIG["num_key_value_heads"] * head_dim * 2
        for column in ("upstream", "plugin"):
            sized = data["capacity"][role][column]
            pool = data["roles"][role][column]
            assert sized["fits"] and sized["mamba_slots"] == 0
            assert sized["kv_cache_bytes"] == 2 * GIB
            assert sized["kv_tokens"] == 2 * GIB // per_token, (role, column)
            assert pool["mamba_slots"] == 0 and pool["verify_only_bytes"] == 0
            assert pool["components"]["ssm state"] == 0
            assert pool["components"]["conv state"] == 0
            requests = pool["request_slots"]
            assert requests == sized["max_running_requests"] <= 16
            # SGLang's ReqToTokenPool: int32 per (request + 1 padding, + a decode
            # server's extra slots) and token of the context (plus the few SGLang
            # adds for the draft's tokens).
            extra = data["resolved"][role]["disaggregation_decode_extra_slots"] or 0
            map_bytes = pool["components"]["req_to_token map"]
            per_request, rest = divmod(map_bytes, (requests + extra + 1) * 4)
            assert rest == 0 and 1024 <= per_request <= 1024 + 16, map_bytes
    assert data["advice"] == []
    assert data["nothing_to_spend"]["prefill"] == NO_LINEAR_STATE


def test_oversized_config_is_not_read_whole(tmp_path, capsys):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(census.MAX_CONFIG_BYTES + 1)
    code, _, err = report(capsys, "--config", str(path))
    assert code == 2 and "larger than" in err


def test_unreadable_config_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    code, _, err = report(capsys, "--config", str(tmp_path))
    assert code == 2 and "cannot read config" in err


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--max-running-requests"])
def test_cli_guard_rejects_zero_on_its_own(flag, capsys):
    """The parser's own check, with the library never reached."""
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["report", flag, "0"])
    assert exit_info.value.code == 2
    assert "must be positive" in capsys.readouterr().err


# ---------------------------------------------------------------- conventions


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "speculative server of 256 requests and 4 draft tokens" in text
    assert "--available-gib" in text and "(default: h200)" in text
    # A switch (off unless given) and a flag with no default show none.
    assert "--json print one JSON object --png FILE" in text
    assert "(default: False)" not in text and "(default: None)" not in text


def test_list_models_lists_the_bundled_configs(capsys):
    assert cli.main(["report", "--list-models"]) == 0
    listed = capsys.readouterr().out.split()
    assert {
        "qwen3-next-80b-a3b",
        "qwen3.5-397b-a17b",
        "kimi-linear-48b-a3b",
        "nemotron-h-8b",
    } <= set(listed)


def test_the_command_freezes_the_collector_before_exit_and_main_does_not(
    monkeypatch, capsys
):
    """The console command (and ``python -m``) leaves SGLang's objects out of the
    interpreter's teardown collections; a caller of ``main`` keeps its collector."""
    import gc
    import importlib.metadata

    from sglang_pd_lean.cli import commands

    (script,) = [
        e
        for e in importlib.metadata.entry_points(group="console_scripts")
        if e.name == "sglang-pd-lean"
    ]
    assert script.load() is commands.run
    gc.unfreeze()
    try:
        assert cli.main(["report", "--list-models"]) == 0
        assert gc.get_freeze_count() == 0
        monkeypatch.setattr("sys.argv", ["sglang-pd-lean", "report", "--list-models"])
        assert commands.run() == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert "qwen3-next-80b-a3b" in capsys.readouterr().out.split()


@pytest.mark.parametrize("command", ["", "report", "doctor", "check"])
def test_docs_cli_md_holds_each_commands_help(command, capsys, monkeypatch):
    """docs/cli.md is the commands' own ``--help``, word for word."""
    import pathlib

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        cli.main([c for c in (command, "--help") if c])
    printed = capsys.readouterr().out
    page = (pathlib.Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    title = f"## `sglang-pd-lean{' ' + command if command else ''} --help`"
    documented = page.split(title + "\n\n```text\n", 1)[1].split("```", 1)[0]
    assert printed == documented
