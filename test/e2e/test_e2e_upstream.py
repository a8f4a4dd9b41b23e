"""The same prefill server with the plugin off: SGLang's allow-list naming another
plugin (``SGLANG_PLUGINS``: SGLang never loads ours), and our kill switch
(``SGLANG_PD_LEAN=0``: loaded, registers nothing). Upstream's outcome, exactly.

SGLang 0.5.16/0.5.17 allocate a prefill target's verify ssm snapshots and conv
windows in ``MambaPool.__init__`` with ``device="cuda"`` written in the source (the
allocation the pool gate removes). On a CPU that alone kills the server (``Found no
NVIDIA driver``); the e2e stand-in (test/e2e/site/e2e_standins.py, item 5) moves
exactly those allocations to the CPU, same shapes and dtypes, and prints one
``[e2e-standin]`` line per allocation. So instead of "upstream dies", which says
only that upstream touched CUDA, the test asserts what upstream does on a GPU: it
allocates the verify state (the stand-in's lines are there, and the server's own
``Mamba Cache is allocated`` line carries the verify components), and every size it
logs equals report's upstream column at the budget the server received. The same
server with the plugin never reaches that allocation (no stand-in line). From 0.5.18
upstream skips the allocation on a prefill server itself: no stand-in line either
way. Where the plugin's gates are all native (0.5.22+), the server sizes the same
with the plugin on and off: both runs equal report's upstream column at the budget
each one received (a CPU's budget is the host's free memory, different per run).
"""

from __future__ import annotations

import pytest
from e2e_runs import (
    PLUGIN_PREFIX,
    cuda_allocations_redirected,
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
    assert run.ready, run.explain("the server did not start")
    for state in run.internal_states():
        assert "pd_lean" not in state
    report = runs.report_for(run)
    assert logged_sizes(run) == reported_sizes(report, "prefill", "upstream", run=run)
    if device == "cpu":
        verify_on_cuda = not upstream_has("pool")
        assert (cuda_allocations_redirected(run) > 0) == verify_on_cuda, run.explain(
            "upstream's MambaPool allocates the verify state on 'cuda' "
            f"{'before' if verify_on_cuda else 'not from'} 0.5.18"
        )
        assert ("verify ssm snapshots" in logged_sizes(run)) == verify_on_cuda


def test_prefill_server_with_the_plugin_allocates_nothing_on_cuda(runs):
    """The stand-in never helps the plugin's own prefill server: with the pool gate
    (plugin or native), MambaPool is built without the verify state."""
    run = runs.get("prefill", "cpu")
    assert run.ready, run.explain("the server did not start")
    assert cuda_allocations_redirected(run) == 0, run.explain("verify state built")
    assert "verify ssm snapshots" not in logged_sizes(run)


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
