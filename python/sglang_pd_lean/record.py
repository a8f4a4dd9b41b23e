"""What the plugin did in this process, for the operator: logs and ``/server_info``.

    curl -s localhost:30000/server_info | jq '.internal_states[0].pd_lean'
    {"sglang_version": "0.5.17",
     "gates": {"pool": "acted", "graph": "stepped aside", "budget": "acted", ...},
     "stepped_aside_because": {"graph": "upstream captures no decode graph here"},
     "not_allocated_bytes": {"verify ssm snapshots": 19404341248, ...},
     "total_rest_memory_gib": 91.2,
     "budget": {"available_gib": 91.2,
                "upstream": {"kv_bytes": ..., "kv_tokens": ..., "mamba_slots": ...},
                "plugin": {"kv_bytes": ..., "kv_tokens": ..., "mamba_slots": ...}}}

``plugin.register()`` (or, in a scheduler rank, the plugin's launch hook) writes
each gate's state on the installed SGLang (native upstream, applied by the plugin,
not used by this launch, ...). A gate asked on this rank turns it into
"acted" where it removed work upstream would have done, else "stepped aside" with
the reason; "acted" is never turned back. Four reporting hooks carry the record to
the operator: ``Scheduler.__init__`` (BEFORE) logs the registration summary once
SGLang has configured the rank's logging (where ``register()`` registered every
gate at once; the launch hook logs its own there), ``Scheduler.__init__`` (AFTER)
sets the record's gauges on ``/metrics`` where SGLang's metrics are on
(``to_metrics``, ``metrics.py``), ``Scheduler.get_internal_state`` (AFTER)
adds ``"pd_lean"`` to the scheduler's ``/server_info`` entry, and
``KVCacheConfigurator._handle_max_mamba_cache`` (BEFORE; on 0.5.14 and 0.5.15
``ModelRunnerKVCacheMixin.handle_max_mamba_cache``) keeps the budget the
target's sizing received (``total_rest_memory``, GiB; SGLang does not log it, and
``check`` gives it to the report to predict this rank's sizes exactly, on every
role and release). All four exist on SGLang 0.5.16 to 0.5.23; where one is
missing, the gates still apply and only that part of the report is lost. Never
raises. ``reset()`` empties it (tests).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from enum import Enum
from typing import Any

from sglang_pd_lean import seams
from sglang_pd_lean.hook import Hook, When

logger = logging.getLogger(__name__)

SCHEDULER = seams.SCHEDULER


class Outcome(str, Enum):
    """What a gate did on this rank (the value is what ``/server_info`` shows)."""

    ACTED = "acted"  # removed work upstream would have done here
    STEPPED_ASIDE = "stepped aside"  # left upstream's behaviour as it is

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(kw_only=True)
class Record:
    """The plugin's entry on one scheduler rank's ``/server_info``
    (``internal_states[i]["pd_lean"]``): written in the rank by the gates (this
    module's functions), read by ``check`` (``Record.read``). Its keys are the
    field names; ``budget`` is the budget gate's figures (``available_gib``, and
    ``upstream`` / ``plugin``, each with ``kv_bytes``, ``kv_tokens`` and
    ``mamba_slots``; ``upstream`` None where SGLang had no sizing to rerun)."""

    sglang_version: str | None = None
    gates: dict[str, str] = dataclasses.field(default_factory=dict)
    stepped_aside_because: dict[str, str] = dataclasses.field(default_factory=dict)
    not_allocated_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    total_rest_memory_gib: float | None = None
    budget: dict[str, Any] = dataclasses.field(default_factory=dict)

    def entry(self) -> dict[str, Any]:
        """The entry as ``/server_info`` serves it (plain JSON/msgpack types)."""
        return copy.deepcopy(dataclasses.asdict(self))

    @classmethod
    def read(cls, entry: Any) -> Record | None:
        """A served entry -> ``Record``; None where it is not one (no plugin). A
        key missing reads as its default (a release of the plugin without it);
        a value of another type raises ``UnreadableRecord`` naming it, so that
        ``check`` judges the server instead of failing on the value later."""
        if not isinstance(entry, dict):
            return None
        fields = {}
        for name in (f.name for f in dataclasses.fields(cls)):
            value = entry.get(name)
            if value is None:
                continue
            wrong = _wrong_type(name, value)
            if wrong:
                raise UnreadableRecord(f"{name}: {wrong}")
            fields[name] = copy.deepcopy(value)
        return cls(**fields)

    def budget_figure(self, column: str, key: str) -> Any:
        """One figure the budget gate recorded (``column``: upstream or plugin);
        None where it recorded none."""
        figures = self.budget.get(column)
        return figures.get(key) if isinstance(figures, dict) else None


class UnreadableRecord(ValueError):
    """A served record with a field of another type than ``Record`` gives it."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# field -> (what it must be, the test of each of its values if a mapping)
_FIELD_TYPES = {
    "sglang_version": ("a string", lambda v: isinstance(v, str), None),
    "gates": ("a mapping", lambda v: isinstance(v, dict), ("a string", str)),
    "stepped_aside_because": (
        "a mapping",
        lambda v: isinstance(v, dict),
        ("a string", str),
    ),
    "not_allocated_bytes": (
        "a mapping",
        lambda v: isinstance(v, dict),
        ("a whole number of bytes", int),
    ),
    "total_rest_memory_gib": ("a number", _number, None),
    "budget": ("a mapping", lambda v: isinstance(v, dict), None),
}


def _wrong_type(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the field ``name`` of a ``Record``; None if it can."""
    what, test, items = _FIELD_TYPES[name]
    if not test(value):
        return f"{type(value).__name__} {value!r:.60}, not {what}"
    if items is not None:
        item_what, item_type = items
        for key, item in value.items():
            ok = isinstance(item, item_type) and not isinstance(item, bool)
            if not isinstance(key, str) or not ok:
                return f"[{key!r:.40}] is {item!r:.60}, not {item_what}"
    return None


_record = Record()
_summary: str | None = None
_announced = False


def reset() -> None:
    """Forget everything this process recorded (tests)."""
    global _record, _summary, _announced
    _record = Record()
    _summary = None
    _announced = False


def registered(version: str | None, gates: dict[str, str], summary: str) -> None:
    """What ``plugin.register()`` decided, before any gate ran."""
    global _summary
    _record.sglang_version = version
    _record.gates = {name: str(state) for name, state in gates.items()}
    _summary = summary


def acted(gate: str, **not_allocated: int | None) -> bool:
    """``gate`` removed work on this rank; ``not_allocated`` maps a component name
    to the bytes it did not allocate (None: not measured). True the first time."""
    first = _record.gates.get(gate) != Outcome.ACTED.value
    _record.gates[gate] = Outcome.ACTED.value
    _record.stepped_aside_because.pop(gate, None)
    for component, nbytes in not_allocated.items():
        if nbytes is not None:
            _record.not_allocated_bytes[component] = int(nbytes)
    return first


def stepped_aside(gate: str, reason: str) -> bool:
    """``gate`` was asked on this rank and kept upstream's behaviour, because of
    ``reason``. A gate that acted for one worker stays "acted" when another worker
    of the rank steps aside. True if this changed the record."""
    if _record.gates.get(gate) == Outcome.ACTED.value:
        return False
    changed = _record.stepped_aside_because.get(gate) != reason
    _record.gates[gate] = Outcome.STEPPED_ASIDE.value
    _record.stepped_aside_because[gate] = reason
    return changed


def budget(available_gib: float, upstream: dict | None, plugin: dict) -> None:
    _record.budget = {
        "available_gib": float(available_gib),
        "upstream": upstream,
        "plugin": plugin,
    }


def sizing_received(*args: Any, **kwargs: Any) -> None:
    """BEFORE ``KVCacheConfigurator._handle_max_mamba_cache``: the budget the
    target's mamba and KV sizing receives (a draft worker's is not kept)."""
    try:
        configurator = args[0]
        if getattr(configurator, "is_draft_worker", False):
            return
        rest = args[1] if len(args) > 1 else kwargs["total_rest_memory"]
        _record.total_rest_memory_gib = float(rest)
    except Exception as exc:  # a report never breaks a start-up
        logger.debug(f"[sglang-pd-lean] budget not recorded: {exc!r}")


def snapshot() -> dict[str, Any]:
    """This process's record as ``/server_info`` serves it (a copy)."""
    return _record.entry()


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


def to_metrics(result: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``Scheduler.__init__``: the record as gauges on SGLang's ``/metrics``,
    where the scheduler has a metrics collector (``metrics.py``)."""
    from sglang_pd_lean import metrics

    metrics.export(snapshot(), args[0] if args else None)


def metrics_hook() -> Hook:
    return Hook(f"{SCHEDULER}.__init__", to_metrics, When.AFTER)


def _sizing_target() -> str:
    """Where the installed SGLang sizes mamba slots and KV: the budget gate's
    target (the configurator's, or 0.5.14-0.5.15's model runner mixin's): the
    first whose class the installed SGLang has, so that a method it lacks is named
    where it should be."""
    from sglang_pd_lean.survey import resolve_first

    candidates = seams.HOOK_TARGETS["budget"]
    for candidate in candidates:
        if resolve_first((candidate.rsplit(".", 1)[0],))[0] is not None:
            return candidate
    return candidates[0]


def hooks() -> list[Hook]:
    return [
        Hook(f"{SCHEDULER}.__init__", announce, When.BEFORE),
        metrics_hook(),
        Hook(f"{SCHEDULER}.get_internal_state", add_to_internal_state, When.AFTER),
        Hook(_sizing_target(), sizing_received, When.BEFORE),
    ]
