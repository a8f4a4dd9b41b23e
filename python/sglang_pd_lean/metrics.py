"""The plugin's record as Prometheus gauges on SGLang's own ``/metrics``.

    python -m sglang.launch_server --enable-metrics --disaggregation-mode prefill ...
    curl -s localhost:30000/metrics | grep sglang_pd_lean_
    sglang_pd_lean_not_allocated_bytes{component="verify ssm snapshots",engine_type="prefill",...} 1.94e+10
    sglang_pd_lean_gate_state{engine_type="prefill",gate="pool",state="acted",...} 1.0

Called by the record's hook AFTER ``Scheduler.__init__`` (``record.to_metrics``), on
SGLang 0.5.16 to 0.5.23. By then every gate of the rank has run (pools, budget,
graphs, warm-up and the speculative workers are built inside it), so the gauges are
set once, as SGLang sets its own start-up gauges (``weight_memory_usage_gb``,
``kv_cache_memory_usage_gb``, ``graph_memory_usage_gb``), and equal the rank's
``/server_info`` record:

- ``sglang_pd_lean_not_allocated_bytes{component}``: bytes the plugin kept this
  rank from allocating, per component (the record's ``not_allocated_bytes``);
- ``sglang_pd_lean_gate_state{gate, state}``: 1 for each gate, ``state`` being the
  record's text (``acted``, ``stepped aside``, ``native upstream``, ``not used by
  this launch``, ``not registered: ...``).

Each series carries the labels of SGLang's scheduler gauges on the same rank
(``SchedulerMetricsCollector.labels``: ``model_name``, ``engine_type``, ``tp_rank``,
``pp_rank``, ``moe_ep_rank``, and ``dp_rank``, ``priority`` and
``--extra-metric-labels`` where SGLang adds them), so the two join in PromQL.
Names have no ``:`` (that is for recording rules; ``prometheus_client`` writes it as
``_`` in OpenMetrics). The gauges are ``multiprocess_mode="mostrecent"``, as
SGLang's: the HTTP process serves them from SGLang's multiprocess directory.

Nothing happens where the scheduler has no metrics collector (``--enable-metrics``
off): ``prometheus_client`` is imported only here, in a scheduler process, after
SGLang created its own collector there, never at ``load_plugins()`` time (an import
before SGLang sets ``PROMETHEUS_MULTIPROC_DIR`` would hide the process's gauges).
Never raises.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

PREFIX = "sglang_pd_lean_"
NOT_ALLOCATED = f"{PREFIX}not_allocated_bytes"
GATE_STATE = f"{PREFIX}gate_state"

DOCUMENTATION = {
    NOT_ALLOCATED: "Bytes sglang-pd-lean kept this rank from allocating, per component.",
    GATE_STATE: "1 per sglang-pd-lean gate; state: what the gate did on this rank.",
}

_gauges: dict[tuple[str, tuple[str, ...]], Any] = {}


def _gauge(name: str, documentation: str, labelnames: tuple[str, ...]):
    """One gauge per name and label set in this process (a second scheduler built
    in the same process reuses it: ``prometheus_client`` refuses a name twice)."""
    key = (name, labelnames)
    if key not in _gauges:
        from prometheus_client import Gauge

        _gauges[key] = Gauge(
            name=name,
            documentation=documentation,
            labelnames=labelnames,
            multiprocess_mode="mostrecent",
        )
    return _gauges[key]


def series(
    entry: dict[str, Any], labels: dict[str, Any]
) -> list[tuple[str, dict, float]]:
    """The series a record entry (``record.snapshot()``) gives, on a rank whose
    SGLang scheduler gauges carry ``labels``: (name, labels, value)."""
    base = {key: str(value) for key, value in labels.items()}
    out = []
    for component, nbytes in sorted(entry.get("not_allocated_bytes", {}).items()):
        out.append((NOT_ALLOCATED, {**base, "component": component}, float(nbytes)))
    for gate, state in sorted(entry.get("gates", {}).items()):
        out.append((GATE_STATE, {**base, "gate": gate, "state": state}, 1.0))
    return out


def export(entry: dict[str, Any], scheduler: Any) -> None:
    """Set the gauges from a record entry (``record.snapshot()``) on ``scheduler``'s
    rank, where SGLang built it a metrics collector. Never raises."""
    try:
        collector = getattr(scheduler, "metrics_collector", None)
        labels = getattr(collector, "labels", None)
        if not isinstance(labels, dict):
            return  # --enable-metrics off (or a collector we cannot join)
        for name, values, value in series(entry, labels):
            gauge = _gauge(name, DOCUMENTATION[name], tuple(values))
            gauge.labels(**values).set(value)
    except Exception as exc:  # a gauge never breaks a start-up
        logger.warning(f"[sglang-pd-lean] no /metrics gauges: {exc!r}")
