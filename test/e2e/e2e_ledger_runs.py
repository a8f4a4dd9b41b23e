"""The start-up allocation ledger's runs, and reading what they wrote.

``LEDGER_RUNS`` (merged into ``e2e_runs.RUNS``): the NEXTN prefill recipe of
``e2e_runs`` as a PD prefill server and as a unified server, each with the plugin
and with the plugin left out of ``SGLANG_PLUGINS``, each with the ledger on
(``site/e2e_ledger.py``: every tensor ``Scheduler.__init__`` allocates, and the
SGLang function that asked). A CPU server sizes its KV cache and mamba slots from
the host's free memory, so two runs would differ for that alone: these runs pin
both with SGLang's own flags (``--max-total-tokens``: ``_apply_token_constraints``
takes the smaller of it and the profiled capacity; ``--max-mamba-cache-size``:
``_handle_max_mamba_cache`` takes it as the slot count and only subtracts the
reserve from the budget), as long as the budget holds them (a few MiB here).

``python test/e2e/e2e_ledger_runs.py FOLDER`` prints the summary of each ledger
in FOLDER (a session's ``servers`` folder: ``pytest --basetemp=B`` keeps it as
``B/servers0``) and each role's difference (the figures of docs/testing.md).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import re
import sys

from e2e_algos import NOT_OUR_PLUGIN
from harness import LEDGER_ENV, PD_TRANSFER_ARGS

KV_TOKENS = 65536
MAMBA_SLOTS = 64
PINNED_ARGS = [
    "--max-total-tokens", str(KV_TOKENS),
    "--max-mamba-cache-size", str(MAMBA_SLOTS),
]  # fmt: skip
ROLES = {
    "prefill": ["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS],
    "null": [],
}
WITHOUT_US = ", allow-list without us"
LEDGER_RUNS = {
    f"{role}, ledger{off}": (
        [*flags, *PINNED_ARGS],
        {LEDGER_ENV: "1", **({"SGLANG_PLUGINS": NOT_OUR_PLUGIN} if off else {})},
    )
    for role, flags in ROLES.items()
    for off in ("", WITHOUT_US)
}


def pair(role: str) -> tuple[str, str]:
    """(the run with the plugin, the run without it) of ``role``."""
    return f"{role}, ledger", f"{role}, ledger{WITHOUT_US}"


@dataclasses.dataclass(frozen=True)
class Ledger:
    entries: list[dict]
    # SGLang's modules already imported when the scheduler's start-up began.
    modules: frozenset[str]
    end: dict


def read_ledgers(path: str) -> list[Ledger]:
    """Every block of a ledger file, one per rank (in the order written); fails
    unless each block has its one opening and one closing line (no closing line:
    that scheduler's start-up never returned)."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    blocks, start = [], None
    for i, line in enumerate(lines):
        if line.get("start"):
            assert start is None, f"{path}: line {i} opens a block inside another"
            start = i
        elif line.get("end"):
            assert start is not None, f"{path}: line {i} closes no block"
            blocks.append(
                Ledger(lines[start + 1 : i], frozenset(lines[start]["modules"]), line)
            )
            start = None
    assert start is None and blocks, f"{path}: {len(blocks)} blocks, one left open"
    return blocks


def read_ledger(path: str) -> Ledger:
    """A one-rank server's ledger file (exactly one block)."""
    blocks = read_ledgers(path)
    assert len(blocks) == 1, f"{path}: {len(blocks)} blocks, one expected"
    return blocks[0]


def imported_before(entries: list[dict], modules: frozenset[str]) -> list[dict]:
    """The entries allocated by the import of a module of ``modules``: module-level
    objects, which another process that had imported the module before its
    start-up began allocated too, outside its ledger."""
    return [e for e in entries if e["import"] in modules]


def key(entry: dict) -> tuple:
    """What one allocation is, for comparing two ledgers: who asked, and what."""
    return entry["function"], tuple(entry["shape"]), entry["dtype"], entry["device"]


def multiset(entries: list[dict]) -> collections.Counter:
    return collections.Counter(key(e) for e in entries)


def difference(left: list[dict], right: list[dict]) -> list[dict]:
    """The entries of ``left`` that ``right`` has not (as multisets of ``key``)."""
    extra = multiset(left) - multiset(right)
    found = []
    for entry in left:
        if extra[key(entry)] > 0:
            extra[key(entry)] -= 1
            found.append(entry)
    return found


def summary(entries: list[dict], top: int = 5) -> dict:
    """Entries and bytes in all and still held when the start-up returned, and the
    functions that asked for the most bytes."""
    by_function = collections.Counter()
    for entry in entries:
        by_function[entry["function"]] += entry["bytes"]
    return {
        "entries": len(entries),
        "bytes": sum(e["bytes"] for e in entries),
        "live_bytes": sum(e["bytes"] for e in entries if e["live"]),
        "top": by_function.most_common(top),
    }


def _run_of(ledger_path: str) -> str:
    """ "ROLE, plugin" or "ROLE, no plugin", read from the server's log beside its
    ledger (the harness names both after the server's port)."""
    folder, name = os.path.split(ledger_path)
    log_path = os.path.join(folder, name.replace("ledger-", "server-", 1))
    with open(log_path.removesuffix(".jsonl") + ".log", errors="replace") as f:
        log = f.read()
    role = re.search(r"disaggregation_mode'?[=:] ?'(\w+)'", log)[1]
    return f"{role}, {'plugin' if '[sglang-pd-lean]' in log else 'no plugin'}"


def _print_summary(name: str, ledger: Ledger) -> None:
    s = summary(ledger.entries)
    print(
        f"{name}: {s['entries']} entries, {s['bytes']:,} bytes "
        f"({s['live_bytes']:,} held at the end), ledger errors {ledger.end['errors']}"
    )
    for function, nbytes in s["top"]:
        print(f"  {nbytes:>15,}  {function}")


def main(folder: str) -> None:
    """Each ledger in ``folder`` (a session's ``servers`` folder), then each
    role's difference: entries only with the plugin, only without it."""
    ledgers = {
        _run_of(path): read_ledger(path)
        for path in sorted(glob.glob(os.path.join(folder, "ledger-*.jsonl")))
    }
    for name in sorted(ledgers):
        _print_summary(name, ledgers[name])
    for role in sorted({name.split(",")[0] for name in ledgers}):
        on, off = ledgers.get(f"{role}, plugin"), ledgers.get(f"{role}, no plugin")
        if on is None or off is None:
            continue
        for label, left, right in (("only with", on, off), ("only without", off, on)):
            for e in difference(left.entries, right.entries):
                early = " (import, load order)" if e["import"] in right.modules else ""
                print(
                    f"{role} {label} the plugin: {e['bytes']:,} B {e['dtype']} "
                    f"{e['shape']} {e['function']}:{e['line']}{early}"
                )


if __name__ == "__main__":
    main(sys.argv[1])
