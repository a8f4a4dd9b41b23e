"""``report`` given a server's own launch flags equals what that server logged.

For every server the e2e suite starts (prefill, decode, unified; with the plugin and
without it), ``sglang-pd-lean report --gpu local --available-gib B --json -- ARGV``
runs with the server's argv (``Run.argv``: ``harness.Server``'s own command after
``launch_server``, ports included)
and the budget B the server measured (the e2e probe's line), nothing else: SGLang
resolves the flags on this machine as the server did. Its column for the server's
role (``plugin`` where our plugin is loaded, else ``upstream``) must equal the
server's ``Mamba Cache is allocated`` and ``KV Cache is allocated`` figures.
"""

from __future__ import annotations

import pytest
from e2e_runs import RUNS, launch_report, logged_sizes, reported_sizes

pytestmark = pytest.mark.e2e

# Run names whose server has our plugin loaded and enabled.
PLUGIN_OFF = ("allow-list without us", "kill switch")
# Runs upstream cannot start on a CPU: their start-up reaches a GPU call that the
# plugin removes on a prefill server (test_e2e_adaptive.py holds them to that).
NO_CPU_START = ("prefill, adaptive, allow-list without us",)


def started(runs, name: str, device: str):
    run = runs.get(name, device)
    assert run.ready, run.explain(f"the {name} server did not start")
    return run


@pytest.mark.parametrize("name", sorted(RUNS))
def test_report_of_the_servers_own_argv_equals_its_log(runs, device, name):
    if device == "cpu" and name in NO_CPU_START:
        pytest.skip("upstream's start-up of this server needs a GPU")
    run = started(runs, name, device)
    result = launch_report(run.argv, run.budget_gib())
    role = result["launch"]["role"]
    assert name.startswith(role)
    column = "upstream" if name.endswith(PLUGIN_OFF) else "plugin"
    assert logged_sizes(run) == reported_sizes(result, role, column, run=run)
    resolved = result["resolved"][role]
    for field in ("disable_radix_cache", "max_running_requests", "page_size"):
        assert resolved[field] == run.server_info[field], field
