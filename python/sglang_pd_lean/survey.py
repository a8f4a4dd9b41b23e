"""The seams (``seams.SEAMS``) resolved on the installed SGLang: what ``doctor``
shows, what ``report`` refuses on, and the first of a hook's candidate targets that
the installed release has.

    for missing in survey.missing(seams.Part.REPORT):
        print(missing.line)
    target, why = survey.resolve_first(seams.HOOK_TARGETS["pool"])
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from sglang_pd_lean.seams import SEAMS, Part, Seam


@dataclass(frozen=True)
class Missing:
    seam: Seam
    error: str  # why none of its candidates resolves

    @property
    def line(self) -> str:
        return f"{self.seam.label} ({self.seam.part}: {self.seam.why}): {self.error}"


def resolve_first(candidates: tuple[str, ...]) -> tuple[str | None, str]:
    """(the first candidate that resolves, "") or (None, why the last one did not)."""
    from sglang_pd_lean.upstream import resolve

    error = "no candidates"
    for candidate in candidates:
        try:
            resolve(candidate)
        except (ImportError, AttributeError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            continue
        return candidate, ""
    return None, error


@dataclass(frozen=True)
class Survey:
    seam: Seam
    found: str | None  # the candidate that resolves, if any
    error: str  # why none does ("" where one does)
    expected: bool  # whether this release should have it


def _release(version: str | None) -> str | None:
    if version is not None:
        return version
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def survey(version: str | None = None) -> list[Survey]:
    """Every seam, resolved once on the installed SGLang (release ``version``,
    else the installed one): what ``doctor`` shows."""
    version = _release(version)
    out = []
    for seam in SEAMS:
        found, error = resolve_first(seam.candidates)
        out.append(Survey(seam, found, error, seam.expected_on(version)))
    return out


def missing(*parts: Part, version: str | None = None) -> list[Missing]:
    """The seams of ``parts`` (all parts when none given) that the installed SGLang
    (release ``version``, else the installed one) should have and does not."""
    version = _release(version)
    out = []
    for seam in SEAMS:
        if (parts and seam.part not in parts) or not seam.expected_on(version):
            continue
        found, error = resolve_first(seam.candidates)
        if found is None:
            out.append(Missing(seam, error))
    return out
