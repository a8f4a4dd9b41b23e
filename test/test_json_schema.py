"""``report --json`` against docs/json.md, both ways: every key a report prints is
documented, and every documented key is printed by one of these reports."""

from __future__ import annotations

import json

from helpers import (
    assert_documented,
    doc_text,
    documented_keys,
    sglang_minor,
    sglang_refuses_lazy_under_pd,
)

from sglang_pd_lean import cli
from sglang_pd_lean.cli.commands import SCHEMA_VERSION

QWEN35_TP8 = ("--model", "qwen3.5-397b-a17b", "--tp", "8")
CASES = [
    QWEN35_TP8,  # census flags alone: not sized
    # Sized with --available-gib; upstream does not fit, the plugin does.
    (*QWEN35_TP8, "--available-gib", "30", "--max-mamba-cache-size", "768"),
    # The README's main job: a launch command on an H200, with the advice.
    (
        *("--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--weights-gib", "40"),
        *("--", "--tp", "4", "--disaggregation-mode", "prefill"),
        *("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"),
        *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
        *("--max-running-requests", "256"),
    ),
    # A unified-only flag: the prefill column is refused (``refused``).
    (
        *("--model", "qwen3-next-80b-a3b", "--available-gib", "60", "--"),
        *("--tp", "2", "--mamba-radix-cache-strategy", "extra_buffer_lazy"),
    ),
]
# Printed only where an advised choice does not fit; the same key as the
# capacity's own reason, which the cases print.
RARE = {"advice[].capacity.reason"}


def unprinted(documented: set[str]) -> set[str]:
    """What no case prints: the rare key, ``refused`` where SGLang refuses no role
    the unified-only case (0.5.16 accepts extra_buffer_lazy under PD), and from
    SGLang 0.5.22 every advice key, since that SGLang sizes a prefill target
    natively and nothing is left to spend (test_advice.py checks that the advice is
    empty there)."""
    rare = set(RARE) if sglang_refuses_lazy_under_pd() else {*RARE, "refused{}"}
    if sglang_minor() < 22:
        return rare
    return rare - RARE | {key for key in documented if key.startswith("advice[].")}


def report_json(capsys, flags: tuple[str, ...]) -> dict:
    cut = flags.index("--") if "--" in flags else len(flags)
    assert cli.main(["report", *flags[:cut], "--json", *flags[cut:]]) == 0
    return json.loads(capsys.readouterr().out)


def test_docs_list_every_key_report_prints_and_no_other(capsys):
    printed = set()
    for flags in CASES:
        result = report_json(capsys, flags)
        assert result["schema_version"] == SCHEMA_VERSION == 1
        printed |= assert_documented(result, "json.md")
    documented = set(documented_keys("json.md"))
    assert "advice[].choice" in documented
    assert documented - printed == unprinted(documented)


def test_a_key_not_in_the_docs_is_found():
    result = {"schema_version": 1, "roles": {"null": {"upstream": {"bytes": 1}}}}
    try:
        assert_documented(result, "json.md")
    except AssertionError as exc:
        assert "not in docs/json.md" in str(exc)
    else:
        raise AssertionError("an undocumented key passed")


def test_the_census_parts_are_frozen_and_become_json_only_when_printed(capsys):
    """The pools, sizings, change and advice are frozen dataclasses; printed, a
    sizing SGLang would stop at carries its reason and no figures, one that fits
    its figures and no reason, and the change where a column does not fit is null
    (docs/json.md)."""
    import dataclasses

    import pytest
    from helpers import typed_census

    from sglang_pd_lean.census.results import Choice, PoolSummary, RoleSizing

    # 1 GiB per rank: not even the 768 mamba slots fit, upstream or plugin.
    flags = (*QWEN35_TP8, "--available-gib", "1", "--max-mamba-cache-size", "768")
    typed = typed_census(*flags)
    assert isinstance(typed.roles["prefill"].plugin, PoolSummary)
    sizing = typed.capacity["prefill"]
    assert isinstance(sizing, RoleSizing)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizing.plugin.kv_tokens = 1
    printed = report_json(capsys, flags)["capacity"]["prefill"]
    assert not sizing.upstream.fits and not sizing.plugin.fits
    for column in ("upstream", "plugin"):
        assert set(printed[column]) == {
            "fits",
            "reason",
            "mamba_sizing",
            "requests_capped",
        }
        assert printed[column]["reason"] == sizing.column(column).reason
    assert printed["change"] is None
    main_job = CASES[2]
    typed = typed_census(*main_job)
    assert all(isinstance(choice, Choice) for choice in typed.advice)
    printed = report_json(capsys, main_job)["capacity"]["decode"]["plugin"]
    assert typed.capacity["decode"].plugin.fits and "reason" not in printed
    assert printed["kv_tokens"] == typed.capacity["decode"].plugin.kv_tokens


def test_each_roles_memory_source_is_the_documented_value(capsys):
    """``memory{*}.source`` is one of the two values docs/json.md gives: the flag,
    where --available-gib names the memory, and the formula, where a GPU does."""
    lines = doc_text("json.md").splitlines()
    line = next(x for x in lines if x.startswith("memory{*}.source "))
    given, formula = line.split(None, 1)[1].strip().split(" | ")
    model = ("--model", "qwen3-next-80b-a3b")
    for flags, source in (
        ((*model, "--available-gib", "30"), given),
        ((*model, "--gpu", "h200"), formula),
    ):
        memory = report_json(capsys, flags)["memory"]
        assert {role: m["source"] for role, m in memory.items()} == {
            role: source for role in ("prefill", "decode", "null")
        }
