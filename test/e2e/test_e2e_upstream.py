"""The same prefill server with the plugin off: SGLang's allow-list naming another
plugin (``SGLANG_PLUGINS``: SGLang never loads ours), and our kill switch
(``SGLANG_PD_LEAN=0``: loaded, registers nothing). Upstream's outcome, exactly.

On a CPU, SGLang 0.5.16/0.5.17 dies building the prefill target's pool: ``MambaPool``
allocates the verify ssm snapshots with ``device="cuda"`` written in its source, the
allocation the pool gate removes. From 0.5.18 upstream skips it on a prefill server
itself, the server starts, and its sizes must be upstream's as ``report`` computes
them. Where the plugin's gates are all native (0.5.22+), the server sizes the same
with the plugin on and off: both runs equal report's upstream column at the budget
each one received (a CPU's budget is the host's free memory, different per run).
"""

from __future__ import annotations

import pytest
from e2e_runs import (
    PLUGIN_PREFIX,
    cuda_snapshot_failure,
    logged_sizes,
    reported_sizes,
)
from helpers import upstream_has

pytestmark = pytest.mark.e2e

PLUGIN_OFF = ["prefill, allow-list without us", "prefill, kill switch"]


@pytest.mark.parametrize("name", PLUGIN_OFF)
def test_prefill_server_without_the_plugin_is_upstream(runs, device, name):
    run = runs.get(name, device)
    assert PLUGIN_PREFIX not in run.log, run.explain("the plugin spoke")
    if device == "cpu" and not upstream_has("pool"):
        assert not run.ready and run.exit_code != 0, run.explain("expected to die")
        assert cuda_snapshot_failure(run) is not None, run.explain(
            "expected to die allocating the verify ssm snapshots on cuda"
        )
        return
    assert run.ready, run.explain("the server did not start")
    for state in run.internal_states():
        assert "pd_lean" not in state
    report = runs.report_for(run)
    assert logged_sizes(run) == reported_sizes(report, "prefill", "upstream", run=run)


@pytest.mark.skipif(
    not all(upstream_has(g) for g in ("pool", "budget")),
    reason="the plugin's pool and budget gates change a prefill server's sizes here",
)
def test_native_release_sizes_the_prefill_server_alike_with_and_without_plugin(
    runs, device
):
    on = runs.get("prefill", device)
    off = runs.get("prefill, allow-list without us", device)
    for run in (on, off):
        assert run.ready, run.explain("the server did not start")
        report = runs.report_for(run)
        assert logged_sizes(run) == reported_sizes(
            report, "prefill", "upstream", run=run
        )
        assert (
            report["roles"]["prefill"]["plugin"]
            == report["roles"]["prefill"]["upstream"]
        )
