"""Byte figures for people: binary units, labelled as such, never raising.

>>> human_bytes(18.07 * (1 << 30))
'18.07 GiB'
>>> human_bytes(3 << 20)
'3.00 MiB'
"""

from __future__ import annotations

import math

GIB = 1 << 30
_UNITS = (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10))


def human_bytes(value: object) -> str:
    """``value`` bytes in the largest binary unit that keeps it >= 1; "?" if it is
    not a number (a log figure is best effort)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return "?"
    if not math.isfinite(number):
        return "?"
    for unit, size in _UNITS:
        if abs(number) >= size:
            return f"{number / size:.2f} {unit}"
    return f"{number:.0f} B"
