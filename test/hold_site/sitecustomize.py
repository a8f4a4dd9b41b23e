"""Test-only start-up code for the report processes of the signal test (never part
of the package): ``test/test_cli_edges.py`` puts this folder first on PYTHONPATH.

With ``SGLANG_PD_LEAN_TEST_HOLD=FILE``, the report is held where its census is
computed (temporary model folder still there, nothing printed): FILE is created,
then the process waits up to two minutes in short sleeps, so the test can signal it
while it provably works (a signal that lands on another thread runs its Python
handler only when the main thread next wakes).
"""

from __future__ import annotations

import os
import time

HOLD = "SGLANG_PD_LEAN_TEST_HOLD"

if os.environ.get(HOLD):
    from sglang_pd_lean.cli import commands

    _print = commands._print

    def _held_print(args, report):
        open(os.environ[HOLD], "w").close()
        for _ in range(1200):
            time.sleep(0.1)
        return _print(args, report)

    commands._print = _held_print
