"""Fixtures every end-to-end module uses, from ``e2e_runs``: ``runs`` (one real
server per kind, started once per session) and ``device`` ("cpu", and "cuda" where
there is one). Modules import that module's helpers; pytest finds these here."""

from e2e_runs import device, runs  # noqa: F401

# Importing ``conftest`` by name finds whichever conftest.py pytest loaded last:
# the root conftest's re-exports, so such imports work from either (prefer helpers).
from helpers import (  # noqa: F401
    NATIVE_FROM,
    PATCHED_ENV,
    run_python,
    sglang_minor,
    stand_in_model_runner,
    upstream_has,
)
