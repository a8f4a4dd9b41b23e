"""The record as Prometheus gauges (``metrics.py``), each case in a fresh interpreter
(``prometheus_client`` keeps one registry per process, and reads
``PROMETHEUS_MULTIPROC_DIR`` once, at import): after SGLang's real
``Scheduler.__init__`` hook chain as ``HookRegistry`` applies it, the gauges read
back through ``prometheus_client``'s multiprocess collector (what SGLang's HTTP
process serves) equal the record, with the scheduler collector's labels; nothing at
all, not even the import, where the scheduler has no metrics collector. The real
server and a real Prometheus: ``test/e2e/test_e2e_check.py``."""

from __future__ import annotations

import json

from helpers import run_python

# A scheduler stand-in: ``Scheduler.__init__`` replaced for the test by one that
# only sets what SGLang's sets (``metrics_collector``, None with metrics off), then
# the plugin's hooks applied by SGLang's own HookRegistry on the real class. One
# scheduler per collector of COLLECTORS, in turn; then what the multiprocess
# directory serves, read as SGLang's HTTP process reads it.
SCHEDULERS = r"""
import json, os, sys
from sglang.srt.managers import scheduler as module
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
from sglang_pd_lean import record

def __init__(self, collector):
    self.metrics_collector = (
        None if collector is None else type("C", (), {"labels": collector})()
    )

module.Scheduler.__init__ = __init__
hook = record.metrics_hook()
HookRegistry.register(hook.target, hook.fn, HookType[hook.when.value])
HookRegistry.apply_hooks()
record.registered("0.5.x", {"pool": "applied by the plugin", "graph": "native upstream"}, "")
record.acted("pool", **{"verify ssm snapshots": 19404341248, "verify conv windows": 227376128})
record.stepped_aside("graph", "upstream captures no decode graph here")
imported, written = [], []
for collector in json.loads(os.environ["COLLECTORS"]):
    module.Scheduler(collector)
    imported.append("prometheus_client" in sys.modules)
    written.append(sorted(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])))
served = []
if imported[-1]:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    served = [
        [sample.name, sample.labels, sample.value]
        for family in registry.collect()
        for sample in family.samples
    ]
print(json.dumps({"imported": imported, "written": written, "served": served}))
"""

LABELS = {
    "model_name": "qwen3-next",
    "engine_type": "prefill",
    "tp_rank": 1,
    "pp_rank": 0,
    "moe_ep_rank": 0,
    "dp_rank": 0,
}


def _schedulers(collectors: list, tmp_path) -> tuple[dict, str]:
    env = {
        "COLLECTORS": json.dumps(collectors),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
    }
    done = run_python(SCHEDULERS, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_the_gauges_equal_the_record_with_the_schedulers_labels(tmp_path):
    """First a scheduler with metrics off (no collector), and one whose collector
    has no labels to join: nothing, not even the import, and nothing written to the
    directory; then one with a collector."""
    result, _ = _schedulers([None, "not a mapping", LABELS], tmp_path)
    assert result["imported"] == [False, False, True]
    assert result["written"][:2] == [[], []] and result["written"][2]
    served = result["served"]
    rank = {key: str(value) for key, value in LABELS.items()}
    freed = {
        sample[1].pop("component"): sample[2]
        for sample in served
        if sample[0] == "sglang_pd_lean_not_allocated_bytes"
    }
    assert freed == {
        "verify ssm snapshots": 19404341248.0,
        "verify conv windows": 227376128.0,
    }
    states = {}
    for name, labels, value in served:
        assert {key: labels[key] for key in rank} == rank
        if name == "sglang_pd_lean_gate_state":
            assert value == 1.0 and set(labels) == {*rank, "gate", "state"}
            states[labels["gate"]] = labels["state"]
    assert states == {"pool": "acted", "graph": "stepped aside"}
    assert {name for name, _, _ in served} == {
        "sglang_pd_lean_not_allocated_bytes",
        "sglang_pd_lean_gate_state",
    }


def test_a_gauge_prometheus_client_refuses_warns_and_the_scheduler_starts(tmp_path):
    """``prometheus_client`` refuses a label name starting with ``__``: one WARNING,
    no exception out of ``Scheduler.__init__``."""
    result, stderr = _schedulers([{"__reserved": "x"}], tmp_path)
    assert result["imported"] == [True]
    assert "[sglang-pd-lean] no /metrics gauges: ValueError" in stderr
