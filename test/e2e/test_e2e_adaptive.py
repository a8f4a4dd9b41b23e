"""``--speculative-adaptive`` on a real PD prefill server (issue 45): the adaptive
gate builds no runtime state beyond the launch's own.

The NEXTN recipe (SGLang resolves NEXTN to EAGLE; topk 1) with
``--speculative-adaptive``, as a prefill server with the plugin and with the plugin
left out of ``SGLANG_PLUGINS``. SGLang's default adaptive config has other candidate
step counts than the launch's own, so upstream's ``AdaptiveController.init_states``
asks ``EAGLEWorkerV2.build_adaptive_runtime_state`` for each: another target and
draft attention backend (and verify graphs with a decode graph backend). On a CPU that
build stops the server (its first CUDA call: "Found no NVIDIA driver"), which shows
upstream reached it; on a GPU upstream starts and logs each state it built. With the
plugin the server starts, logs the gate's line, and its record says the gate acted.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

BUILT = "Built adaptive runtime state steps="


def test_a_prefill_server_with_the_plugin_builds_no_other_adaptive_state(runs, device):
    run = runs.get("prefill, adaptive", device)
    assert run.ready, run.explain("the adaptive prefill server did not start")
    assert "AdaptiveSpeculativeParams initialized" in run.log, run.explain(
        "no adaptive"
    )
    lines = [line for line in run.log.splitlines() if "adaptive gate:" in line]
    assert len(lines) == 1, run.explain("no adaptive gate line")
    assert "built no adaptive runtime state for steps [" in lines[0]
    assert BUILT not in run.log
    for state in run.internal_states():
        assert state["pd_lean"]["gates"]["adaptive"] == "acted"


def test_upstream_builds_the_other_adaptive_states_on_a_prefill_server(runs, device):
    run = runs.get("prefill, adaptive, allow-list without us", device)
    assert "[sglang-pd-lean]" not in run.log
    if device == "cuda":
        assert run.ready, run.explain(
            "upstream's adaptive prefill server did not start"
        )
        assert BUILT in run.log, run.explain("upstream built no adaptive state")
        return
    # On a CPU: upstream's build of another step's state is what stops it.
    assert not run.ready
    trace = run.log[run.log.index("Scheduler hit an exception") :]
    assert (
        "in init_states" in trace and "in build_adaptive_runtime_state" in trace
    ), run.explain("not stopped by the adaptive build")
