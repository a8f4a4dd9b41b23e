"""The monitoring files in examples/monitoring/, checked with the real ``promtool``
of the Prometheus the end-to-end tests run (``prometheus_run``): the alert rules
load, the example configuration loads with them, and the rules' own unit test
(test/data/monitoring/rules_test.yml: series written by hand, both spellings of
SGLang's names) passes. A real scrape of real servers: test_e2e_check.py."""

from __future__ import annotations

import os
import subprocess

import pytest
from prometheus_run import REPO, RULES, binary

pytestmark = pytest.mark.e2e

MONITORING = os.path.join(REPO, "examples", "monitoring")


def promtool(*args: str, cwd: str = REPO) -> str:
    done = subprocess.run(
        [binary("promtool"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_promtool_checks_the_rules_and_the_example_configuration():
    assert "SUCCESS: 2 rules found" in promtool("check", "rules", RULES)
    out = promtool("check", "config", os.path.join(MONITORING, "prometheus.yml"))
    assert "SUCCESS: 1 rule files found" in out


def test_the_rules_unit_test_passes():
    data = os.path.join(REPO, "test", "data", "monitoring")
    assert "SUCCESS" in promtool("test", "rules", "rules_test.yml", cwd=data)
