"""Every script in ``benchmark/`` runs: each with its tiny run, in a fresh process of
this venv, ends with exit code 0 and prints its table. Timings are not judged here
(``docs/performance.md`` has the figures); a script that no longer runs against the
package it measures fails here first. On one release only (0.5.17), to bound CI time.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import sglang_minor

BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmark")
# Script, its tiny run, and the start of its table's heading row.
TINY_RUNS = [
    ("census.py", ["--smoke"], "model                   TP  prefill upstream GiB"),
    ("report.py", ["--smoke"], "                         seconds   x floor"),
    ("measuring_build.py", ["--smoke"], "model                            with ms"),
    ("startup.py", ["--runs", "1"], "process"),
]

pytestmark = pytest.mark.skipif(
    sglang_minor() != 17, reason="the benchmarks' tiny runs are on SGLang 0.5.17 only"
)


def test_every_benchmark_script_has_a_tiny_run_here():
    scripts = sorted(name for name in os.listdir(BENCHMARK) if name.endswith(".py"))
    assert scripts == sorted(script for script, _, _ in TINY_RUNS)


@pytest.mark.parametrize(
    "script, args, heading", TINY_RUNS, ids=[script for script, _, _ in TINY_RUNS]
)
def test_a_benchmarks_tiny_run_ends_well_and_prints_its_table(script, args, heading):
    env = dict(os.environ)
    env.pop("SGLANG_PLUGINS", None)
    env.pop("SGLANG_PD_LEAN", None)
    done = subprocess.run(
        [sys.executable, os.path.join(BENCHMARK, script), *args],
        capture_output=True,
        text=True,
        env=env,
        # startup.py starts processes back to back: beside the e2e servers (CI's
        # two lanes) it takes several times its ~1 min alone.
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith(heading) for line in lines), done.stdout
    # The heading is followed by at least one row.
    rows = lines[next(i for i, x in enumerate(lines) if x.startswith(heading)) + 1 :]
    assert [row for row in rows if row.strip() and not set(row) <= {"-"}], done.stdout
