"""The one grid every table of the command is drawn with (``report``'s pools,
launch and advice tables; ``check``'s servers).

    grid([["", "a", "b"], ["row", "1", "22"]])  # first column left, the rest right
    grid(rows, align="<", below={1: "    gates: ..."})

A column is as wide as its widest cell (or ``widths``); cells are two spaces apart;
the first column is left-aligned, the others as ``align`` says; a line is never
followed by spaces. ``below``: a line to print under a row, by the row's index.
"""

from __future__ import annotations


def column_widths(rows: list[list[str]]) -> list[int]:
    return [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]


def grid(
    rows: list[list[str]],
    *,
    align: str = ">",
    widths: list[int] | None = None,
    below: dict[int, str] | None = None,
) -> list[str]:
    widths = widths or column_widths(rows)
    lines = []
    for i, row in enumerate(rows):
        cells = "".join(
            f"  {cell:{align}{widths[k]}}" for k, cell in enumerate(row[1:], 1)
        )
        lines.append(f"{row[0]:{widths[0]}}{cells}".rstrip())
        if below and i in below:
            lines.append(below[i])
    return lines
