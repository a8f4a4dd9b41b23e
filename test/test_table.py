"""``report``'s table: which figure sits under which heading and on which row, for
the memory, capacity and sizing parts. Each expected cell comes from the census's
own result (its memory per role, SGLang's sizing per column), read by role and
column, so a figure moved to another row or column, or a row renamed, fails."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from helpers import NEXTN, table_row, typed_census, upstream_has

from sglang_pd_lean import cli
from sglang_pd_lean.units import human_bytes

ROLES = ("prefill", "decode", "null")
# The README's main job: weights built, sized per role, automatic mamba split.
MAIN_JOB = [
    *("--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--"),
    *("--tp", "4", "--disaggregation-mode", "prefill", *NEXTN),
    *("--max-running-requests", "256"),
]
# 30 GiB at TP 8 with 768 slots: columns that do not fit, a capped request count.
TIGHT = [
    *("--model", "qwen3.5-397b-a17b", "--tp", "8", "--available-gib", "30"),
    *("--max-mamba-cache-size", "768"),
]


# The censuses are computed once per module; each test renders its own table
# (a table rendered in a module fixture would be linked to one test only by
# mutation runs, which then run only that test against a fault in the table).
@pytest.fixture(scope="module")
def main_census():
    return typed_census(*MAIN_JOB)


@pytest.fixture(scope="module")
def tight_census():
    return typed_census(*TIGHT)


@pytest.fixture
def main_job(main_census):
    return main_census, cli.render_table(main_census)


@pytest.fixture
def tight(tight_census):
    return tight_census, cli.render_table(tight_census)


def labels(out: str) -> list[str]:
    return [re.split(r"\s{2,}", line)[0] for line in out.splitlines()]


def per_column(result, value) -> list[str]:
    """``value(sizing)`` of each role's upstream and plugin column, in table order."""
    return [
        value(result.capacity[role].column(column))
        for role in ROLES
        for column in ("upstream", "plugin")
    ]


def test_memory_rows_give_each_roles_weights_draft_layers_and_memory(main_job):
    result, out = main_job
    memory = result.memory
    assert table_row(out, "draft layers in KV") == [
        str(memory[r].draft_layers_in_kv_sizing) for r in ROLES
    ]
    assert table_row(out, "weights") == [
        human_bytes(memory[r].weights_bytes) for r in ROLES
    ]
    assert table_row(out, "draft weights") == [
        human_bytes(memory[r].draft_weights_bytes) for r in ROLES
    ]
    assert table_row(out, "available (A)") == [
        human_bytes(memory[r].available_gib * (1 << 30)) for r in ROLES
    ]
    # A NEXTN draft is built from the model's own MTP layer: it has weights.
    assert memory["prefill"].draft_weights_bytes > 0
    order = labels(out)
    assert order.index("draft layers in KV") + 1 == order.index("weights")
    assert order.index("weights") + 2 == order.index("available (A)")


def test_memory_given_exactly_has_no_weights_rows(tight):
    result, out = tight
    assert "weights" not in labels(out) and "draft weights" not in labels(out)
    assert table_row(out, "available (A)") == ["30.00 GiB"] * 3


def test_capacity_rows_give_each_columns_kv_cache_and_tokens(main_job, tight):
    for result, out in (main_job, tight):
        order = labels(out)
        start = order.index("capacity:")
        assert table_row(out, "capacity:") == []
        assert order[start + 1 : start + 3] == ["KV cache", "KV tokens"]
        assert table_row(out, "KV cache") == per_column(
            result,
            lambda s: human_bytes(s.kv_cache_bytes) if s.fits else "does not fit",
        )
        assert table_row(out, "KV tokens") == per_column(
            result, lambda s: f"{s.kv_tokens:,}" if s.fits else "does not fit"
        )


def test_the_sizing_line_says_where_the_memory_and_slots_come_from(main_job, tight):
    _, out = main_job
    assert (
        "Sizing: SGLang's own, from the available memory above, per role; mamba "
        "slots automatic (ratio of the budget)." in out.splitlines()
    )
    assert (
        "Automatic split: SGLang gives the mamba state a fixed share of the budget; "
        "on a prefill target the plugin spends the verify reservation on more mamba "
        "slots, not on KV (docs/memory-model.md)." in out.splitlines()
    )
    _, out = tight
    assert (
        "Sizing: SGLang's own, from the available memory above, per role; mamba "
        "slots explicit (--max-mamba-cache-size)." in out.splitlines()
    )
    assert "Automatic split" not in out


def test_notes_name_each_column_that_does_not_fit_and_each_capped_one(tight):
    result, out = tight
    lines = out.splitlines()
    unfit = {}
    for role in ROLES:
        for column in ("upstream", "plugin"):
            sized = result.capacity[role].column(column)
            if not sized.fits:
                unfit.setdefault(sized.reason, []).append(
                    f"{column} {cli.ROLE_TITLES[role]}"
                )
    assert len(unfit) >= 2  # decode's budget differs: two reasons
    for reason, where in unfit.items():
        assert f"does not fit ({reason}): {', '.join(where)}" in lines
    said = " ".join(line for line in lines if line.startswith("does not fit ("))
    assert "plugin prefill target" not in said  # the plugin's prefill column fits
    assert ("upstream prefill target" in said) != upstream_has("budget")
    plugin = result.capacity["prefill"].plugin
    asked = result.resolved["prefill"].max_running_requests
    assert plugin.requests_capped and plugin.max_running_requests < asked
    assert (
        f"plugin prefill target: {plugin.max_running_requests:,} of {asked:,} running "
        "requests (SGLang caps them by the mamba slots and KV tokens it sized)"
    ) in lines


def ends(line: str) -> list[int]:
    """Where each cell after the first ends (cells: 2+ spaces apart)."""
    return [m.end() for m in re.finditer(r"(?<=  )\S+(?: \S+)*", line)]


def block(out: str, first: str, last: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(first))
    stop = next(i for i, x in enumerate(lines) if i > start and x.startswith(last))
    return lines[start : stop + 1]


def test_the_head_names_release_model_layout_and_cache_strategy(main_job):
    result, out = main_job
    lines = out.splitlines()
    assert lines[0] == (
        f"SGLang {result.sglang_version}, model qwen3-next-80b-a3b: bytes per rank"
    )
    strategy = result.resolved["prefill"].mamba_radix_cache_strategy
    # Qwen3-Next: 48 layers on the one stage, a 262,144-token context.
    assert lines[1] == (
        "TP 4, PP 1 (layers 0-47), 4 draft tokens, ssm float32, KV bfloat16, "
        f"context 262144, page size 1, mamba radix cache {strategy}"
    )
    assert lines[2] == ""


def test_the_head_has_no_strategy_where_sglang_resolves_none():
    from sglang_pd_lean.census.results import Inputs
    from sglang_pd_lean.cli import table

    inputs = Inputs(
        tp=2,
        pp=2,
        pp_stage_layers=(0, 24),
        max_running_requests=None,
        max_mamba_cache_size=None,
        speculative_num_draft_tokens=0,
        mamba_ssm_dtype="bfloat16",
        context_length=4096,
        page_size=64,
        mamba_radix_cache_strategy=None,
        attn_tp=1,
        attn_dp=2,
        pp_rank=0,
        use_mla_backend=True,
        kv_cache_dtype="float8_e4m3fn",
    )
    result = SimpleNamespace(sglang_version="0.5.16", model="m", inputs=inputs)
    assert table._head(result) == [
        "SGLang 0.5.16, model m: bytes per rank",
        "TP 2 (attention TP 1 x DP 2), PP 2 (layers 0-23), 0 draft tokens, ssm "
        "bfloat16, KV MLA float8_e4m3fn, context 4096, page size 64",
        "Pipeline stage 0 of 2 shown (layers 0-23: the most linear-attention "
        "layers); every stage sized, KV tokens the smallest stage's, as SGLang's "
        "stages agree.",
        "Attention DP 2: pools, slots and requests per shard (SGLang divides "
        "--max-running-requests and --max-mamba-cache-size).",
        "",
    ]


def test_the_launch_block_puts_each_resolved_value_under_its_role(main_job):
    result, out = main_job
    lines = block(out, "Launch flags:", "available (A)")
    assert lines[0] == "Launch flags: " + " ".join(result.launch.argv)
    # nvidia-smi gives an H200 143,771 MiB: 140.40 GiB.
    assert lines[1] == (
        "Launch flags resolved by SGLang on NVIDIA H200 (140.40 GiB, SM 90); the "
        "other roles: the same flags with --disaggregation-mode replaced."
    )
    assert table_row(out, "resolved by SGLang") == [
        "prefill target",
        "decode target",
        "unified (null)",
    ]
    assert table_row(out, "server flags give") == [
        "this server",
        "other role",
        "other role",
    ]
    resolved = result.resolved
    shown = {
        "page size": "page_size",
        "attention backend": "attention_backend",
        "radix cache off": "disable_radix_cache",
        "max running requests": "max_running_requests",
        "draft model path": "speculative_draft_model_path",
    }
    for label, key in shown.items():
        values = [getattr(resolved[r], key) for r in ROLES]
        assert table_row(out, label) == ["-" if v is None else str(v) for v in values]
    fractions = [f"{resolved[r].mem_fraction_static:.4g}" for r in ROLES]
    assert table_row(out, "mem fraction static") == fractions
    assert table_row(out, "radix cache off") == [
        "False",
        "True",
        "False",
    ]  # SGLang's PD
    # Right-aligned under the role titles, every row.
    table = lines[2:]
    assert table[0].startswith("resolved by SGLang  ")
    assert all(ends(x) == ends(table[0]) for x in table), "\n".join(table)
    assert len({len(re.match(r"\S+(?: \S+)*", x).group()) for x in table}) > 1


def test_the_memory_source_says_where_a_comes_from(main_job, tight):
    result, out = main_job
    memory = result.memory["prefill"]
    assert (
        f"Weights: {memory.weights_source}. A = (T - C) * mem_fraction_static - "
        f"weights, T the GPU's memory, C = {memory.cuda_context_gib:g} GiB of CUDA "
        "context and communicators (--available-gib gives A exactly)."
    ) in out.splitlines()
    _, out = tight
    assert "Available memory A per rank: --available-gib, exactly." in out.splitlines()


def test_an_unsized_census_says_its_pools_are_at_the_flags_counts():
    result = typed_census("--model", "kimi-linear-48b-a3b", "--tp", "2")
    out = cli.render_table(result)
    assert (
        "Not sized: no memory named, so each pool is built at the flags' own counts "
        "(--gpu or --available-gib sizes them as the server would)."
    ) in out.splitlines()
    assert "capacity:" not in labels(out) and "Sizing:" not in out


def test_a_gpu_named_without_facts_is_shown_by_name():
    from sglang_pd_lean.census.gpus import Gpu
    from sglang_pd_lean.cli import table

    assert table._where(Gpu("local", 0, 0)) == "local"
    gpu = Gpu(name="NVIDIA B200", sm=100, memory_mib=183359)
    assert table._where(gpu) == "NVIDIA B200 (179.06 GiB, SM 100)"


def test_pool_rows_give_each_columns_slots_bytes_totals_and_change(main_job):
    result, out = main_job
    roles = result.roles

    def cells(value):
        columns = ("upstream", "plugin")
        return [value(roles[r].column(c)) for r in ROLES for c in columns]

    grid = block(out, "component", "KV tokens")
    head = out.splitlines()[out.splitlines().index(grid[0]) - 1]
    assert re.split(r"\s{2,}", head.strip()) == [cli.ROLE_TITLES[r] for r in ROLES]
    assert head.startswith(" " * 10)
    assert table_row(out, "component") == ["upstream", "plugin"] * 3
    assert table_row(out, "request slots") == cells(lambda c: f"{c.request_slots:,}")
    assert table_row(out, "mamba slots") == cells(lambda c: f"{c.mamba_slots:,}")
    assert table_row(out, "total") == cells(lambda c: human_bytes(c.total_bytes))
    assert table_row(out, "verify-only") == cells(
        lambda c: human_bytes(c.verify_only_bytes)
    )
    assert table_row(out, "ssm state") == cells(
        lambda c: human_bytes(c.components["ssm state"])
    )
    change = [
        roles[r].plugin.total_bytes - roles[r].upstream.total_bytes for r in ROLES
    ]
    sign = ["+" if d > 0 else "-" if d < 0 else "" for d in change]
    assert table_row(out, "change with plugin") == [
        s + human_bytes(abs(d)) for s, d in zip(sign, change, strict=True)
    ]
    assert table_row(out, "warmup, transient:") == []
    warm = result.warmup
    assert table_row(out, "autotune buffers") == [
        human_bytes(warm[r].column(c).autotune_buffers_bytes)
        for r in ROLES
        for c in ("upstream", "plugin")
    ]
    # Every figure right-aligned in its column; each role title ends where its
    # plugin column does.
    figures = [x for x in grid if len(ends(x)) == 6]
    assert len(figures) > 10 and all(ends(x) == ends(grid[0]) for x in figures)
    assert ends(head) == ends(grid[0])[1::2]


def test_a_signed_size_reads_plus_minus_or_nothing():
    from sglang_pd_lean.cli import table

    assert table._signed(1) == "+1 B"
    assert table._signed(3 << 20) == "+3.00 MiB"
    assert table._signed(-(3 << 30)) == "-3.00 GiB"
    assert table._signed(0) == "0 B"


def test_a_resolved_cell_reads_none_as_a_dash_and_floats_to_4_figures():
    from sglang_pd_lean.cli import table

    assert [table._cell(v) for v in (None, 0, False, "fa3", 0.90412)] == [
        "-",
        "0",
        "False",
        "fa3",
        "0.9041",
    ]


def test_parts_of_the_report_are_one_blank_line_apart(main_job):
    _, out = main_job
    lines = out.splitlines()
    sizing = next(i for i, x in enumerate(lines) if x.startswith("Sizing:"))
    advice = next(
        i
        for i, x in enumerate(lines)
        if x.startswith("How to spend") or ": nothing to spend: " in x
    )
    assert lines[sizing - 1] == "" and lines[sizing - 2].startswith("KV tokens")
    assert lines[advice - 1] == "" and lines[advice - 2] != ""


def starts(line: str) -> list[int]:
    return [m.start() for m in re.finditer(r"(?<=  )\S+(?: \S+)*", line)]


def test_each_column_is_as_wide_as_its_widest_cell(main_job):
    """Columns two spaces apart, each as wide as its widest cell; in the pools'
    grid a role title spans its two columns, and where it is the wider, the
    plugin column widens to hold it."""
    _, out = main_job
    for lines, titled in (
        (block(out, "resolved by SGLang", "available (A)"), False),
        (block(out, "component", "KV tokens"), True),
    ):
        full = [x for x in lines if len(ends(x)) == len(ends(lines[0]))]
        cells = [re.split(r"\s{2,}", x.strip()) for x in full]
        widest = [max(len(c[k]) for c in cells) for k in range(len(cells[0]))]
        edges = [widest[0], *ends(full[0])]
        widths = [b - a - 2 for a, b in zip(edges, edges[1:], strict=False)]
        if not titled:
            assert widths == widest[1:]
            continue
        lines_all = out.splitlines()
        head = lines_all[lines_all.index(lines[0]) - 1]
        titles = re.split(r"\s{2,}", head.strip())
        changes = table_row(out, "change with plugin")  # under the plugin columns only
        for j, title in enumerate(titles):
            up = widest[1 + 2 * j]
            plugin = max(widest[2 + 2 * j], len(changes[j]))
            assert widths[2 * j] == up, title
            assert widths[2 * j + 1] == max(plugin, len(title) - up - 2), title


def test_advice_where_upstream_does_not_fit_starts_from_the_launch(tight):
    """30 GiB at TP 8: upstream's prefill target does not fit, so the only choice
    is the launch as given; the table says why, under its headings."""
    result, out = tight
    if result.capacity["prefill"].upstream.fits:
        pytest.skip("this SGLang sizes upstream's prefill target to fit (0.5.22+)")
    lines = out.splitlines()
    intro = lines.index(
        "How to spend what the plugin frees on the prefill target: each choice's "
        "flags added to the prefill server's flags, SGLang's sizing run again with "
        "them."
    )
    head = lines[intro + 1]
    assert re.split(r"\s{2,}", head.strip()) == [
        "KV cache",
        "KV tokens",
        "mamba slots",
        "request slots",
        "fits",
    ]
    upstream = lines[intro + 2]
    assert upstream.startswith("upstream, without the plugin  ")
    assert re.split(r"\s{2,}", upstream)[1:] == ["does not fit"] * 4 + ["no"]
    (choice,) = result.advice
    assert choice.choice == "automatic" and choice.capacity.fits
    row = lines[intro + 3]
    assert row.startswith(choice.title + "  ")
    assert re.split(r"\s{2,}", row)[1:] == [
        human_bytes(choice.capacity.kv_cache_bytes),
        f"{choice.capacity.kv_tokens:,}",
        f"{choice.capacity.mamba_slots:,}",
        f"{choice.capacity.max_running_requests:,}",
        "yes",
    ]
    assert lines[intro + 4] == "    add: nothing"
    # Right-aligned under the headings, the first column as wide as its longest.
    assert ends(head) == ends(upstream) == ends(row)
    widest = max(len("upstream, without the plugin"), len(choice.title))
    assert min(starts(upstream)[0], starts(row)[0]) == widest + 2
    assert lines[intro + 5] == (
        "upstream does not fit, so there is no upstream KV cache or slot count to "
        "start from: only the launch as given."
    )


def test_an_advised_choice_that_does_not_fit_is_a_row_and_says_why():
    """A choice whose flags SGLang cannot size: its row says "does not fit" under
    every heading and "no" under fits, and one line after the table gives SGLang's
    reason; a choice that fits gets no such line."""
    from sglang_pd_lean.census.results import Capacity, Choice, RoleSizing, Sizing
    from sglang_pd_lean.cli.table import advice_lines

    sized = Sizing(
        fits=True,
        kv_cache_bytes=1 << 30,
        kv_tokens=1000,
        mamba_slots=10,
        max_running_requests=8,
    )
    room = Capacity(
        fits=True,
        available_gib=2.0,
        kv_cache_bytes=2 << 30,
        kv_tokens=2000,
        mamba_slots=20,
        max_running_requests=16,
    )
    stop = Capacity(fits=False, available_gib=2.0, reason="SGLang stops: too few")
    result = SimpleNamespace(
        advice=(
            Choice(choice="kv", title="more KV", flags=("--a", "1"), capacity=room),
            Choice(
                choice="requests",
                title="more requests",
                flags=("--b", "2"),
                capacity=stop,
            ),
        ),
        capacity={"prefill": RoleSizing(upstream=sized, plugin=sized, change=None)},
        nothing_to_spend={},
    )
    lines = advice_lines(result)
    row = next(line for line in lines if line.startswith("more requests  "))
    assert re.split(r"\s{2,}", row)[1:] == ["does not fit"] * 4 + ["no"]
    assert lines[lines.index(row) + 1] == "    add: --b 2"
    assert lines[-1] == "more requests: SGLang stops: too few"
    assert not [line for line in lines if line.startswith("more KV:")]


def test_each_capped_column_gives_its_own_request_count():
    """Requests SGLang capped: one note per column, each with that column's own
    count against the count the flags asked for."""
    from sglang_pd_lean.census.results import RoleSizing, Sizing
    from sglang_pd_lean.cli.table import ROLE_TITLES, _capacity_notes

    def capped(requests):
        return Sizing(fits=True, max_running_requests=requests, requests_capped=True)

    result = SimpleNamespace(
        capacity={
            "prefill": RoleSizing(upstream=capped(5), plugin=capped(9), change=None)
        },
        resolved={"prefill": SimpleNamespace(max_running_requests=1200)},
    )
    title = ROLE_TITLES["prefill"]
    tail = (
        "running requests (SGLang caps them by the mamba slots and KV tokens it sized)"
    )
    assert _capacity_notes(result) == [
        f"upstream {title}: 5 of 1,200 {tail}",
        f"plugin {title}: 9 of 1,200 {tail}",
    ]


def test_a_role_title_wider_than_its_two_columns_widens_the_second():
    """The grid by hand: each role title right-aligned over its two columns; a
    title wider than them widens its second column, so the rows end under it."""
    from sglang_pd_lean.cli.table import _grid

    header = ["", "A", "a wide title"]
    rows = [["row", "1", "22", "333", "4"], ["longer label", "55", "6", "7", "88"]]
    assert _grid(header, rows) == [
        " " * 12 + "       A" + "  a wide title",
        "row" + " " * 9 + "   1  22  333        4",
        "longer label  55   6    7       88",
    ]


def test_each_roles_mamba_sizing_names_how_sglang_set_its_slots():
    """SGLang's own resolution turns the radix cache off on the PD decode server:
    its mamba slots then come from its running requests, one each, and the census
    names it so in both columns; the other roles split the budget automatically.
    (Its own census, not the module's: a mutation run links a module fixture's
    calls to one test only.)"""
    result = typed_census(
        *("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--"),
        *("--tp", "4", "--disaggregation-mode", "prefill", *NEXTN),
        *("--max-running-requests", "64"),
    )
    assert result.resolved["decode"].disable_radix_cache is True
    for col in ("upstream", "plugin"):
        decode = result.capacity["decode"].column(col)
        assert decode.mamba_sizing == "from running requests (radix cache off)"
        assert decode.mamba_slots == decode.max_running_requests
        for role in ("prefill", "null"):
            assert not result.resolved[role].disable_radix_cache
            sized = result.capacity[role].column(col)
            assert sized.mamba_sizing == "automatic (ratio of the budget)", role


def test_without_speculative_decoding_every_role_says_there_is_nothing_to_spend():
    """A launch with no speculative algorithm: no role verifies, so the table's
    advice part is one "nothing to spend" line per role, each saying so (not a
    decode or unified server's verify step, which this launch does not have)."""
    result = typed_census(
        *("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--"),
        *("--tp", "4", "--disaggregation-mode", "prefill"),
    )
    lines = cli.render_table(result).splitlines()
    assert not any(line.startswith("How to spend") for line in lines)
    reason = "no speculative decoding: no role verifies, so there is no verify state"
    assert [line for line in lines if ": nothing to spend: " in line] == [
        f"{title}: nothing to spend: {reason} to free."
        for title in ("prefill target", "decode target", "unified (null)")
    ]
