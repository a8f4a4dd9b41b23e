"""``report`` given an MLA server's own launch flags equals what the server logged.

For each run of ``e2e_shapes.SHAPE_RUNS`` (a tiny DeepSeek V3 with NEXTN, a tiny
Kimi Linear; PD prefill servers with the plugin), ``sglang-pd-lean report --gpu
local --available-gib B --json -- ARGV`` with the server's argv and the budget it
sized with must give the KV tokens of its ``KV Cache is allocated`` line, exactly,
and for the hybrid its ``Mamba Cache is allocated`` slots and state sizes. Before
the census derived SGLang's MLA backend, it counted the MLA layers as GQA heads:
5.6x too few KV tokens for Kimi Linear.
"""

from __future__ import annotations

import pytest
from e2e_runs import KV_LINE, MAMBA_LINE, launch_report
from e2e_shapes import SHAPE_RUNS

pytestmark = pytest.mark.e2e

GIB = 1 << 30


@pytest.mark.parametrize("name", sorted(SHAPE_RUNS))
def test_report_of_an_mla_servers_own_argv_equals_its_log(runs, device, name):
    run = runs.get(name, device)
    assert run.ready, run.explain(f"the {name} server did not start")
    result = launch_report(run.argv, run.budget_gib())
    assert result["launch"]["role"] == "prefill"
    assert result["inputs"]["use_mla_backend"] is True
    pool = result["roles"]["prefill"]["plugin"]
    sized = result["capacity"]["prefill"]["plugin"]
    assert sized["kv_tokens"] == int(run.one(KV_LINE)["tokens"])
    mamba = run.lines(MAMBA_LINE)
    assert bool(mamba) == (pool["mamba_slots"] > 0)
    if mamba:
        logged = mamba[0]
        assert pool["mamba_slots"] == int(logged["slots"])
        for component, key in (("conv state", "conv"), ("ssm state", "ssm")):
            assert f"{pool['components'][component] / GIB:.2f}" == logged[key]
