"""``report --png``: where each figure sits in the chart. The left axes stack each
role column's pool by the table's rows (the legend, top to bottom as the stack);
the right axes give the KV cache per role column and per advised choice, each bar
labelled with its KV tokens. Expected figures come from the result's own bytes and
sizing, not from the chart code; the PNG is read back as a file."""

from __future__ import annotations

import struct

import pytest
from helpers import NEXTN, hide_package, typed_census

from sglang_pd_lean import cli
from sglang_pd_lean.cli.chart import capacity_bars
from sglang_pd_lean.units import GIB

# The README's main job: a sized prefill launch with advice.
MAIN_JOB = [
    *("--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--"),
    *("--tp", "4", "--disaggregation-mode", "prefill", *NEXTN),
    *("--max-running-requests", "256"),
]
# 30 GiB at TP 8: upstream does not fit on every role; the plugin fits the prefill
# target only (test_cli.py's case the plugin exists for).
TIGHT = [
    *("--model", "qwen3.5-397b-a17b", "--tp", "8", "--available-gib", "30"),
    *("--max-mamba-cache-size", "768"),
]
BLUE, ORANGE, GREEN = "tab:blue", "tab:orange", "tab:green"
# Each role in a word, where the chart's space is short.
WORDS = {"prefill": "prefill", "decode": "decode", "null": "unified"}


@pytest.fixture(scope="module")
def sized():
    return typed_census(*MAIN_JOB)


@pytest.fixture(scope="module")
def tight():
    return typed_census(*TIGHT)


@pytest.fixture(scope="module")
def unsized():
    return typed_census("--model", "kimi-linear-48b-a3b", "--tp", "2")


def rgba(color):
    from matplotlib.colors import to_rgba

    return to_rgba(color)


def stack_of(ax, label: str) -> list[tuple[float, float, tuple]]:
    """(bottom, height, colour) of each segment drawn over the x label, in order."""
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    x = ticks.index(label)
    return [
        (p.get_y(), p.get_height(), p.get_facecolor())
        for p in ax.patches
        if abs(p.get_x() + p.get_width() / 2 - x) < 1e-9
    ]


def test_each_bar_stacks_its_columns_bytes_by_the_tables_rows(sized, unsized):
    for result in (sized, unsized):
        fig = cli.chart(result)
        fig.canvas.draw()
        ax = fig.axes[0]
        rows = cli.component_rows(result.roles)
        tallest = 0.0
        for role, columns in result.roles.items():
            for column in ("upstream", "plugin"):
                components = columns.column(column).components
                stack = stack_of(ax, f"{cli.ROLE_TITLES[role]}\n{column}")
                assert len(stack) == len(rows)
                bottom = 0.0
                for (label, names), (low, height, _) in zip(rows, stack, strict=True):
                    assert low == pytest.approx(bottom, abs=1e-12), (role, label)
                    expected = sum(components.get(n, 0) for n in names) / GIB
                    assert height == pytest.approx(expected, rel=1e-12), (role, label)
                    bottom += height
                total = sum(components.values()) / GIB
                assert bottom == pytest.approx(total, rel=1e-9)
                tallest = max(tallest, total)
        # Room above the tallest stack, none wasted.
        assert ax.get_ylim()[1] == pytest.approx(tallest * 1.05, rel=1e-9)
        assert ax.get_ylabel() == "GiB per rank"


def test_the_title_names_the_model_tp_draft_tokens_and_sglang(sized, unsized):
    for result in (sized, unsized):
        inputs = result.inputs
        model = str(result.model).rsplit("/", 1)[-1]
        title = cli.chart(result).axes[0].get_title()
        assert title == (
            f"{model}: TP {inputs.tp}, {inputs.speculative_num_draft_tokens} "
            f"draft tokens (SGLang {result.sglang_version})"
        )
    assert cli.chart(sized).axes[0].get_title().startswith("qwen3-next-80b-a3b: TP 4")


def test_the_legend_reads_top_down_as_the_stack_in_its_rows_colours(sized):
    fig = cli.chart(sized)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend()
    rows = [label for label, _ in cli.component_rows(sized.roles)]
    names = [t.get_text() for t in legend.get_texts()]
    assert names == rows[::-1]
    stack = stack_of(ax, "prefill target\nupstream")
    colours = {label: colour for label, (_, _, colour) in zip(rows, stack, strict=True)}
    for name, handle in zip(names, legend.legend_handles, strict=True):
        assert handle.get_facecolor() == colours[name], name
    assert all(t.get_fontsize() == 8 for t in legend.get_texts())
    # Just right of the axes, its top at the axes' top.
    box, axes = legend.get_window_extent(), ax.get_window_extent()
    assert 0 < box.x0 - axes.x1 < 0.03 * axes.width
    assert 0 <= axes.y1 - box.y1 < 0.03 * axes.height


def test_the_capacity_axes_give_each_columns_kv_cache_and_tokens(sized, tight):
    for result in (sized, tight):
        fig = cli.chart(result)
        fig.canvas.draw()
        ax = fig.axes[1]
        rows = [
            (WORDS[role], column, sizing.column(column))
            for role, sizing in result.capacity.items()
            for column in ("upstream", "plugin")
        ]
        rows += [
            ("prefill", choice.choice, choice.capacity)
            for choice in (result.advice or ())
        ]
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == [f"{role}\n{column}" for role, column, _ in rows]
        colours = [BLUE, ORANGE] * len(result.capacity)
        colours += [GREEN] * len(result.advice or ())
        texts = [t.get_text() for t in ax.texts]
        for i, (bar, (_, _, sizing)) in enumerate(zip(ax.patches, rows, strict=True)):
            assert bar.get_facecolor() == rgba(colours[i])
            if sizing.fits:
                assert bar.get_height() == pytest.approx(sizing.kv_cache_bytes / GIB)
                assert texts[i] == f"{sizing.kv_tokens:,} tok"
            else:
                assert bar.get_height() == 0.0
                assert texts[i] == "does not fit"
        assert all(t.get_rotation() == 90 and t.get_fontsize() == 8 for t in ax.texts)
        tallest = max(b.get_height() for b in ax.patches)
        assert ax.get_ylim()[1] == pytest.approx(tallest * 1.35)
        assert ax.get_ylabel() == "KV cache, GiB per rank"
        assert ax.get_title() == "capacity: KV cache (labels: KV tokens)"
        assert all(t.get_fontsize() == 8 for t in ax.get_xticklabels())
        assert all(t.get_fontsize() != 8 for t in ax.get_yticklabels())
    spends = "prefill" not in sized.nothing_to_spend  # 0.5.22+: nothing to
    assert [c.choice for c in sized.advice] == (
        ["kv", "requests", "automatic"] if spends else []
    )
    assert not tight.capacity["decode"].upstream.fits


def test_a_bar_label_sits_just_above_its_bar(sized):
    fig = cli.chart(sized)
    fig.canvas.draw()
    ax = fig.axes[1]
    for bar, text in zip(ax.patches, ax.texts, strict=True):
        gap = text.get_window_extent().y0 - bar.get_window_extent().y1
        # 3 points of padding at the figure's 100 dpi.
        assert gap == pytest.approx(3 * fig.dpi / 72, abs=0.6)


def test_capacity_axes_with_nothing_that_fits_keep_a_unit_scale():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sglang_pd_lean.census.results import RoleSizing, Sizing

    unfit = Sizing(fits=False, reason="no GPU memory for the KV cache")
    fig, ax = plt.subplots()
    capacity_bars(
        ax, {"decode": RoleSizing(upstream=unfit, plugin=unfit, change=None)}, []
    )
    assert ax.get_ylim()[1] == 1.0
    assert [b.get_height() for b in ax.patches] == [0.0, 0.0]
    plt.close(fig)


def test_a_sized_chart_is_wider_with_the_pools_wider_than_the_capacity(sized, unsized):
    fig = cli.chart(sized)
    assert tuple(fig.get_size_inches()) == (18, 6)
    pools, capacity = (ax.get_position().width for ax in fig.axes)
    assert pools / capacity == pytest.approx(3 / 2, rel=0.02)  # three fifths, two
    assert tuple(cli.chart(unsized).get_size_inches()) == (12, 5)
    assert len(cli.chart(unsized).axes) == 1


def png_chunks(data: bytes) -> dict[bytes, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        chunks.setdefault(kind, data[at + 8 : at + 8 + length])
        at += 12 + length
    return chunks


def test_the_png_is_110_dpi_cropped_to_the_drawing_and_the_figure_freed(
    sized, tmp_path
):
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())
    path = tmp_path / "chart.png"
    cli.draw_png(sized, str(path))
    chunks = png_chunks(path.read_bytes())
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    per_metre = struct.unpack(">IIB", chunks[b"pHYs"])
    assert per_metre == (round(110 / 0.0254), round(110 / 0.0254), 1)
    # Cropped to what is drawn (the legend outside the axes included): not the
    # 18 x 6 in page.
    fig = cli.chart(sized)
    fig.canvas.draw()
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    # savefig's tight crop pads 0.1 in on each side.
    assert abs(width - (tight.width + 0.2) * 110) <= 3
    assert abs(height - (tight.height + 0.2) * 110) <= 3
    assert (width, height) != (18 * 110, 6 * 110)
    assert set(plt.get_fignums()) - before == {fig.number}
    plt.close(fig)


def test_png_without_matplotlib_says_how_to_install_it(monkeypatch, tmp_path):
    hide_package(monkeypatch, "matplotlib")
    with pytest.raises(cli.UsageError) as raised:
        cli.check_png_target(str(tmp_path / "chart.png"))
    assert str(raised.value) == (
        "--png needs matplotlib: pip install 'sglang-pd-lean[report]'"
    )
