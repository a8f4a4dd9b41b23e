"""``report``'s table: which figure sits under which heading and on which row, for
the memory, capacity and sizing parts. Each expected cell comes from the census's
own result (its memory per role, SGLang's sizing per column), read by role and
column, so a figure moved to another row or column, or a row renamed, fails."""

from __future__ import annotations

import re

import pytest
from helpers import NEXTN, typed_census, upstream_has

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


@pytest.fixture(scope="module")
def main_job():
    result = typed_census(*MAIN_JOB)
    return result, cli.render_table(result)


@pytest.fixture(scope="module")
def tight():
    result = typed_census(*TIGHT)
    return result, cli.render_table(result)


def row(out: str, label: str) -> list[str]:
    """The cells of the row ``label`` (cells are separated by 2+ spaces)."""
    (line,) = [x for x in out.splitlines() if re.match(re.escape(label) + r"(  |$)", x)]
    return re.split(r"\s{2,}", line[len(label) :].strip()) if line != label else []


def labels(out: str) -> list[str]:
    return [re.split(r"\s{2,}", line)[0] for line in out.splitlines()]


def per_column(result, value) -> list[str]:
    """``value(sizing)`` of each role's upstream and plugin column, in table order."""
    return [
        value(result["capacity"][role].column(column))
        for role in ROLES
        for column in ("upstream", "plugin")
    ]


def test_memory_rows_give_each_roles_weights_draft_layers_and_memory(main_job):
    result, out = main_job
    memory = result["memory"]
    assert row(out, "draft layers in KV") == [
        str(memory[r]["draft_layers_in_kv_sizing"]) for r in ROLES
    ]
    assert row(out, "weights") == [
        human_bytes(memory[r]["weights_bytes"]) for r in ROLES
    ]
    assert row(out, "draft weights") == [
        human_bytes(memory[r]["draft_weights_bytes"]) for r in ROLES
    ]
    assert row(out, "available (A)") == [
        human_bytes(memory[r]["available_gib"] * (1 << 30)) for r in ROLES
    ]
    # A NEXTN draft is built from the model's own MTP layer: it has weights.
    assert memory["prefill"]["draft_weights_bytes"] > 0
    order = labels(out)
    assert order.index("draft layers in KV") + 1 == order.index("weights")
    assert order.index("weights") + 2 == order.index("available (A)")


def test_memory_given_exactly_has_no_weights_rows(tight):
    result, out = tight
    assert "weights" not in labels(out) and "draft weights" not in labels(out)
    assert row(out, "available (A)") == ["30.00 GiB"] * 3


def test_capacity_rows_give_each_columns_kv_cache_and_tokens(main_job, tight):
    for result, out in (main_job, tight):
        order = labels(out)
        start = order.index("capacity:")
        assert row(out, "capacity:") == []
        assert order[start + 1 : start + 3] == ["KV cache", "KV tokens"]
        assert row(out, "KV cache") == per_column(
            result,
            lambda s: human_bytes(s.kv_cache_bytes) if s.fits else "does not fit",
        )
        assert row(out, "KV tokens") == per_column(
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
            sized = result["capacity"][role].column(column)
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
    plugin = result["capacity"]["prefill"].plugin
    asked = result["resolved"]["prefill"]["max_running_requests"]
    assert plugin.requests_capped and plugin.max_running_requests < asked
    assert (
        f"plugin prefill target: {plugin.max_running_requests:,} of {asked:,} running "
        "requests (SGLang caps them by the mamba slots and KV tokens it sized)"
    ) in lines
