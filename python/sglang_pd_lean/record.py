"""What the plugin did in this process, for the operator: logs and ``/server_info``.

    curl -s localhost:30000/server_info | jq '.internal_states[0].pd_lean'
    {"sglang_version": "0.5.17",
     "gates": {"pool": "acted", "graph": "acted", "budget": "acted", ...},
     "not_allocated_bytes": {"verify ssm snapshots": 19404341248, ...},
     "budget": {"available_gib": 91.2,
                "upstream": {"kv_bytes": ..., "kv_tokens": ..., "mamba_slots": ...},
                "plugin": {"kv_bytes": ..., "kv_tokens": ..., "mamba_slots": ...}}}

``plugin.register()`` writes each gate's state on the installed SGLang (native
upstream, applied by the plugin, ...); a gate that removes something on this rank
turns its state into "acted" and files its figures here, as the rank measured them.
Two reporting hooks carry the record to the operator: ``Scheduler.__init__``
(BEFORE) logs the registration summary once SGLang has configured the rank's
logging, and ``Scheduler.get_internal_state`` (AFTER) adds ``"pd_lean"`` to the
scheduler's ``/server_info`` entry. Both exist on SGLang 0.5.16 to 0.5.23; where one
is missing, the gates still apply and only the report is lost. Never raises.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from sglang_pd_lean.gates import Hook

logger = logging.getLogger(__name__)

ACTED = "acted"
STEPPED_ASIDE = "stepped aside"

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"

_record: dict[str, Any] = {
    "sglang_version": None,
    "gates": {},
    "not_allocated_bytes": {},
    "budget": {},
}
_summary: str | None = None
_announced = False


def registered(version: str | None, gates: dict[str, str], summary: str) -> None:
    """What ``plugin.register()`` decided, before any gate ran."""
    global _summary
    _record["sglang_version"] = version
    _record["gates"] = dict(gates)
    _summary = summary


def acted(gate: str, **not_allocated: int | None) -> None:
    """``gate`` removed something on this rank; ``not_allocated`` maps a census
    component name to the bytes it did not allocate (None: not measured)."""
    _record["gates"][gate] = ACTED
    for component, nbytes in not_allocated.items():
        if nbytes is not None:
            _record["not_allocated_bytes"][component] = int(nbytes)


def stepped_aside(gate: str) -> None:
    """``gate`` was asked on this rank and the worker keeps upstream's behaviour
    (a gate that acted for one worker stays "acted" when another steps aside)."""
    if _record["gates"].get(gate) != ACTED:
        _record["gates"][gate] = STEPPED_ASIDE


def budget(available_gib: float, upstream: dict | None, plugin: dict) -> None:
    _record["budget"] = {
        "available_gib": float(available_gib),
        "upstream": upstream,
        "plugin": plugin,
    }


def snapshot() -> dict[str, Any]:
    """A copy of this process's record (plain JSON/msgpack types)."""
    return copy.deepcopy(_record)


def announce(*args: Any, **kwargs: Any) -> None:
    """BEFORE ``Scheduler.__init__``: the registration summary, once per process,
    after SGLang configured the rank's logging."""
    global _announced
    if _summary is not None and not _announced:
        _announced = True
        logger.info(_summary)


def add_to_internal_state(result: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``Scheduler.get_internal_state``: ``"pd_lean"`` in its answer."""
    try:
        result.internal_state["pd_lean"] = snapshot()
    except Exception as exc:  # a report never breaks /server_info
        logger.debug(f"[sglang-pd-lean] no /server_info record: {exc!r}")


def hooks() -> list[Hook]:
    return [
        Hook(f"{SCHEDULER}.__init__", announce, "BEFORE"),
        Hook(f"{SCHEDULER}.get_internal_state", add_to_internal_state, "AFTER"),
    ]
