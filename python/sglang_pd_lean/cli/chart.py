"""The report as a PNG: a stacked bar per role and column, the table's rows as legend.

    check_png_target("census.png")  # before the census: fail early, write nothing
    draw_png(report, "census.png")

Needs matplotlib (``pip install 'sglang-pd-lean[report]'``); drawn with the Agg backend.
"""

from __future__ import annotations

import importlib.util
import os

from sglang_pd_lean.census.inputs import COLUMNS, ROLE_LABELS, ROLE_TITLES
from sglang_pd_lean.cli.args import UsageError
from sglang_pd_lean.cli.table import component_rows


def chart(report):
    """A matplotlib figure: a stacked bar per role and column, the table's rows as
    its legend, outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sglang_pd_lean.units import GIB

    roles = report.roles
    labels, columns = [], []
    for role, cols in roles.items():
        for col in COLUMNS:
            labels.append(f"{ROLE_TITLES[role]}\n{col}")
            columns.append(cols.column(col).components)
    capacity = report.capacity
    if capacity:
        fig, (ax, kv_ax) = plt.subplots(
            1, 2, figsize=(18, 6), gridspec_kw={"width_ratios": [3, 2]}
        )
    else:
        fig, ax = plt.subplots(figsize=(12, 5))
    bottoms = [0.0] * len(columns)
    for label, names in component_rows(roles):
        heights = [sum(col.get(n, 0) for n in names) / GIB for col in columns]
        ax.bar(labels, heights, bottom=bottoms, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    inputs = report.inputs
    ax.set_ylabel("GiB per rank")
    ax.set_title(
        f"{os.path.basename(str(report.model))}: TP {inputs.tp}, "
        f"{inputs.speculative_num_draft_tokens} draft tokens "
        f"(SGLang {report.sglang_version})"
    )
    ax.set_ylim(top=max(bottoms) * 1.05 or 1.0)
    # Outside the axes, so it never covers a bar; top to bottom as the stack.
    handles, names = ax.get_legend_handles_labels()
    ax.legend(
        handles[::-1],
        names[::-1],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    if capacity:
        capacity_bars(kv_ax, capacity, report.advice or ())
    fig.tight_layout()
    return fig


def capacity_bars(ax, capacity, advice) -> None:
    """KV cache GiB per role and column (and per advised choice on the prefill
    target), each bar labelled with its KV tokens."""
    from sglang_pd_lean.units import GIB

    labels, heights, texts = [], [], []
    rows = [
        (f"{ROLE_LABELS[role]}\n{col}", sizing.column(col))
        for role, sizing in capacity.items()
        for col in COLUMNS
    ]
    rows += [
        (f"{ROLE_LABELS['prefill']}\n{choice.choice}", choice.capacity)
        for choice in advice
    ]
    for label, sized in rows:
        labels.append(label)
        heights.append(sized.kv_cache_bytes / GIB if sized.fits else 0.0)
        texts.append(f"{sized.kv_tokens:,} tok" if sized.fits else "does not fit")
    colors = ["tab:blue", "tab:orange"] * len(capacity) + ["tab:green"] * len(advice)
    bars = ax.bar(labels, heights, color=colors)
    ax.bar_label(bars, texts, fontsize=8, rotation=90, padding=3)
    ax.set_ylabel("KV cache, GiB per rank")
    ax.set_title("capacity: KV cache (labels: KV tokens)")
    ax.set_ylim(top=max(heights, default=0) * 1.35 or 1.0)
    ax.tick_params(axis="x", labelsize=8)


def draw_png(report, path: str) -> None:
    """The chart as PNG, to exactly ``path`` whatever its extension."""
    import matplotlib.pyplot as plt

    fig = chart(report)
    with open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def check_png_target(path: str) -> None:
    """Fail before the census if the chart cannot be written to ``path``."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--png needs matplotlib: pip install 'sglang-pd-lean[report]'")
    if os.path.isdir(path):
        raise UsageError(f"cannot write --png {path}: it is a folder")
    existed = os.path.exists(path)
    flags = os.O_WRONLY | (os.O_APPEND if existed else os.O_CREAT | os.O_EXCL)
    try:
        os.close(os.open(path, flags, 0o644))
    except OSError as exc:
        raise UsageError(f"cannot write --png {path}: {exc.strerror}") from None
    if not existed:
        os.unlink(path)
