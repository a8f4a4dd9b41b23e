"""Byte figures for operators: the largest binary unit that keeps the figure >= 1,
labelled as such; "?" where there is no number."""

from __future__ import annotations

import pytest

from sglang_pd_lean.units import GIB, human_bytes


@pytest.mark.parametrize(
    "nbytes,shown",
    [
        (1 << 30, "1.00 GiB"),
        ((1 << 30) - (1 << 20), "1023.00 MiB"),
        (1 << 20, "1.00 MiB"),
        ((1 << 20) - 1024, "1023.00 KiB"),
        (1024, "1.00 KiB"),
        (1023, "1023 B"),
        (0, "0 B"),
        (-(1 << 30), "-1.00 GiB"),
        (19404341248, "18.07 GiB"),
    ],
)
def test_each_figure_reads_in_the_largest_unit_that_keeps_it_at_least_one(
    nbytes, shown
):
    assert human_bytes(nbytes) == shown


@pytest.mark.parametrize(
    "value", [None, "many", float("nan"), float("inf"), float("-inf"), "-inf", 10**400]
)
def test_a_figure_that_is_not_a_number_reads_as_a_question_mark(value):
    assert human_bytes(value) == "?"


def test_one_gib_constant():
    assert GIB == 1073741824
