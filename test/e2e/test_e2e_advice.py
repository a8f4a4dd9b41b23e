"""A prefill server started with the flag ``report`` advises for spending the freed
bytes on KV cache (choice "kv": ``--max-mamba-cache-size N``, upstream's slot count)
logs the mamba slots and KV tokens the report predicts for that launch.

The advice is computed from the plugin-on prefill server's own argv and budget, and
its figures must be the report's own for the advised launch at that budget. The
advised server then starts with that argv plus the advised flags. A CPU server's
budget is the host's free memory, different per run, so its log is compared with
the report for its own argv at the budget it measured: the slot count advised, and
the KV tokens SGLang's sizing gives with the flag. Only where the plugin frees
bytes on a prefill target (its budget gate acts: SGLang 0.5.16 to 0.5.21).
"""

from __future__ import annotations

import pytest
from e2e_runs import launch_report, logged_sizes
from helpers import upstream_has

pytestmark = pytest.mark.e2e


def advice(argv: list[str], available_gib: float) -> dict:
    """``report --json``'s advice for ``argv`` at ``available_gib``, by choice."""
    result = launch_report(argv, available_gib)
    return {entry["choice"]: entry for entry in result["advice"]}


@pytest.mark.skipif(
    upstream_has("budget"), reason="SGLang sizes a prefill target lean itself here"
)
def test_server_started_with_the_advised_kv_flag_logs_what_report_predicted(
    runs, device
):
    base = runs.get("prefill", device)
    assert base.ready, base.explain("the prefill server did not start")
    kv = advice(base.argv, base.budget_gib())["kv"]
    flags = tuple(kv["flags"])
    assert flags[0] == "--max-mamba-cache-size"

    capacity = launch_report([*base.argv, *flags], base.budget_gib())["capacity"]
    for key, value in kv["capacity"].items():
        if key in capacity["prefill"]["plugin"]:
            assert capacity["prefill"]["plugin"][key] == value, key

    advised = runs.get("prefill", device, added=flags)
    assert advised.ready, advised.explain("the advised prefill server did not start")
    logged = logged_sizes(advised)
    predicted = launch_report(advised.argv, advised.budget_gib())["capacity"]
    assert logged["mamba_slots"] == int(flags[1])
    assert logged["mamba_slots"] == predicted["prefill"]["plugin"]["mamba_slots"]
    assert logged["kv_tokens"] == predicted["prefill"]["plugin"]["kv_tokens"]
