"""The SGLang the command runs against: quiet while it loads, and the plugin applied to
it exactly as an SGLang process applies it (entry-point discovery).

    require_sglang()  # CensusError when SGLang is not installed
    load_sglang_plugins()  # the same, then the plugins as SGLang loads them
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import warnings

from sglang_pd_lean.census.inputs import CensusError


def quiet_sglang() -> None:
    """No import-time notes about the missing GPU, no start-up INFO logs."""
    warnings.filterwarnings("ignore")
    for name in (
        "sglang",
        "sglang_pd_lean",
        "transformers",
        "torch",
        "torch.utils.cpp_extension",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


def require_sglang() -> None:
    """CensusError where SGLang is not installed; else SGLang is made quiet."""
    if importlib.util.find_spec("sglang") is None:
        raise CensusError(
            f"SGLang is not installed for {sys.executable}: install a supported "
            f"release (pip install 'sglang-pd-lean[sglang]') or run "
            f"scripts/sglang-pd-lean"
        )
    quiet_sglang()


def load_sglang_plugins() -> None:
    """Apply the plugin exactly as an SGLang process does (entry point discovery)."""
    require_sglang()
    from sglang.srt.plugins import load_plugins

    load_plugins()


def require_seams() -> None:
    """One line naming what the report needs and the installed SGLang lacks."""
    from sglang_pd_lean import compat, seams, survey

    blockers = survey.missing(seams.Part.REPORT)
    if blockers:
        first = blockers[0]
        more = f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""
        raise CensusError(
            f"SGLang {compat.sglang_version()} lacks {first.seam.label}, which the "
            f"report needs ({first.seam.why}){more}; `sglang-pd-lean doctor` lists "
            f"what is missing"
        )
