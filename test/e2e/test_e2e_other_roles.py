"""A PD decode server and a unified (no PD) server, speculative (NEXTN): workers
that can run TARGET_VERIFY. No gate acts; sizes are upstream's.

Each server runs with the plugin and without it (SGLang's allow-list naming another
plugin); both must equal ``report``'s upstream column for the role at the budget
each received, and ``report`` must see no plugin effect for the role. On a CPU,
SGLang 0.5.16/0.5.17 allocate these servers' verify state with ``device="cuda"`` in
``MambaPool.__init__`` (no gate touches it for these roles); the e2e stand-in moves
those allocations to the CPU (test/e2e/site/e2e_standins.py, item 5), same bytes.
"""

from __future__ import annotations

import pytest
from e2e_runs import gate_lines, logged_sizes, reported_sizes

pytestmark = pytest.mark.e2e

ROLES = ["decode", "null"]


def started(runs, name: str, device: str):
    run = runs.get(name, device)
    assert run.ready, run.explain(f"the {name} server did not start")
    return run


@pytest.mark.parametrize("role", ROLES)
def test_no_gate_acts_on_a_server_that_verifies(runs, device, role):
    run = started(runs, role, device)
    assert gate_lines(run) == {}, run.explain("a gate acted")
    for state in run.internal_states():
        record = state["pd_lean"]
        assert "acted" not in record["gates"].values()
        assert record["budget"] == {} and record["not_allocated_bytes"] == {}
        assert record["total_rest_memory_gib"] == run.budget_gib()


@pytest.mark.parametrize("role", ROLES)
def test_sizes_equal_upstream_with_and_without_plugin(runs, device, role):
    for name in (role, f"{role}, allow-list without us"):
        run = started(runs, name, device)
        report = runs.report_for(run)
        assert logged_sizes(run) == reported_sizes(report, role, "upstream", run=run)
        assert report["roles"][role]["plugin"] == report["roles"][role]["upstream"]
        assert (
            report["capacity"][role]["plugin"] == report["capacity"][role]["upstream"]
        )
