"""The start-up allocation ledger: what a server allocates with the plugin against
the same server without it, tensor by tensor, is exactly what ``report`` names.

Each ledger run (``e2e_ledger_runs.LEDGER_RUNS``) records every tensor storage its
scheduler's start-up allocates (``site/e2e_ledger.py``: bytes, dtype, device, shape,
the SGLang function that asked), with sizes pinned by SGLang's own flags so the
host's free memory changes nothing. The two ledgers of a role (with the plugin, and
with the plugin left out of ``SGLANG_PLUGINS``), as multisets of (function, shape,
dtype, device):

- the plugin's server allocates nothing the upstream server does not;
- what only the upstream server allocates is, to the byte, what
  ``sglang-pd-lean report`` (the upstream server's own launch flags and budget)
  names as upstream's column minus the plugin's for that role, component by
  component, each allocated by the ``MambaPool`` function that builds that
  component; everything else is identical.

On 0.5.16/0.5.17 that is a prefill server's verify ssm snapshots and conv windows
(on a CPU, allocated through the e2e stand-in that moves upstream's
``device="cuda"`` to the CPU: same shapes, same bytes). From 0.5.18 SGLang leaves
them out of a prefill server itself, and a unified server is upstream's with or
without the plugin: the report's columns agree and the ledgers are equal.
"""

from __future__ import annotations

import collections

import pytest
from e2e_ledger_runs import (
    KV_TOKENS,
    MAMBA_SLOTS,
    difference,
    imported_before,
    pair,
    read_ledger,
)
from e2e_runs import launch_report, logged_sizes

pytestmark = pytest.mark.e2e

MAMBA_POOL = "sglang.srt.mem_cache.memory_pool:MambaPool"
# The function that allocates each verify component (0.5.16/0.5.17's MambaPool):
# the ssm snapshots in ``__init__``; the conv windows in
# ``_allocate_deduplicated_conv_window`` (deduplicated layout) or in
# ``__init__``'s list comprehension (dense layout).
BUILDS = {
    f"{MAMBA_POOL}.__init__": "verify ssm snapshots",
    f"{MAMBA_POOL}._allocate_deduplicated_conv_window": "verify conv windows",
    f"{MAMBA_POOL}.__init__.<locals>.<listcomp>": "verify conv windows",
}


def ledgered(runs, name: str, device: str):
    """The finished run ``name`` and its ledger; fails unless the server started,
    kept sizes pinned, and the ledger closed without an error."""
    run = runs.get(name, device)
    assert run.ready, run.explain(f"the {name} server did not start")
    sizes = logged_sizes(run)
    assert (sizes["kv_tokens"], sizes["mamba_slots"]) == (KV_TOKENS, MAMBA_SLOTS)
    ledger = read_ledger(run.ledger_path)
    assert ledger.end["errors"] == 0, ledger.end
    assert ledger.end["entries"] == len(ledger.entries) > 0, ledger.end
    return run, ledger


def unexplained(only: list[dict], other) -> list[dict]:
    """``only`` (entries one ledger has and the ``other`` has not) less those that
    the import of a module allocated which the other process had imported before
    its start-up began (load order, not an allocation more or less)."""
    early = imported_before(only, other.modules)
    return [e for e in only if e not in early]


def named_difference(report: dict, role: str) -> dict[str, int]:
    """component -> bytes upstream's column allocates beyond the plugin's, for
    ``role`` (``report --json``); components the two columns agree on left out."""
    upstream = report["roles"][role]["upstream"]["components"]
    plugin = report["roles"][role]["plugin"]["components"]
    found = {c: upstream.get(c, 0) - plugin.get(c, 0) for c in {*upstream, *plugin}}
    return {c: nbytes for c, nbytes in found.items() if nbytes}


def by_component(entries: list[dict]) -> dict[str, int]:
    """Bytes of ``entries`` per component, by the function that allocated each;
    an entry no such function allocated keeps its function's name."""
    found = collections.Counter()
    for entry in entries:
        found[component_of(entry)] += entry["bytes"]
    return dict(found)


def component_of(entry: dict) -> str:
    """0.5.15 allocates the deduplicated conv windows in ``__init__``'s own loop:
    there the 6-dim tensor ([layers, slots, draft tokens, heads, K, V]) is the ssm
    snapshots and any other the conv windows."""
    function = entry["function"]
    if function == f"{MAMBA_POOL}.__init__" and len(list(entry["shape"])) != 6:
        return "verify conv windows"
    return BUILDS.get(function, function)


def describe(entries: list[dict]) -> str:
    return "\n".join(
        f"  {e['bytes']:>12,} {e['dtype']} {e['device']} {e['shape']} "
        f"{e['function']}:{e['line']} via {e['via']}"
        for e in entries
    )


@pytest.mark.parametrize("role", ["prefill", "null"])
def test_ledger_difference_is_what_report_names(runs, device, role):
    on_name, off_name = pair(role)
    on, with_plugin = ledgered(runs, on_name, device)
    off, upstream = ledgered(runs, off_name, device)
    only_plugin = unexplained(
        difference(with_plugin.entries, upstream.entries), upstream
    )
    assert not only_plugin, f"only with the plugin:\n{describe(only_plugin)}"
    only_upstream = unexplained(
        difference(upstream.entries, with_plugin.entries), with_plugin
    )
    expected = named_difference(launch_report(off.argv, off.budget_gib()), role)
    assert by_component(only_upstream) == expected, (
        f"only without the plugin:\n{describe(only_upstream)}\n"
        f"report names: {expected}"
    )
    assert sum(e["bytes"] for e in only_upstream) == sum(expected.values())
    assert all(e["live"] for e in only_upstream), describe(only_upstream)


def test_on_a_cpu_the_difference_is_what_upstream_asked_of_cuda(runs):
    """The stand-in allocates upstream's ``device="cuda"`` verify state on the CPU
    and logs each allocation: those, and only those, are the ledger's difference
    (none from 0.5.18, where upstream asks nothing of CUDA on a prefill server)."""
    from e2e_algos import redirected_allocations

    on, with_plugin = ledgered(runs, pair("prefill")[0], "cpu")
    off, upstream = ledgered(runs, pair("prefill")[1], "cpu")
    assert redirected_allocations(on) == []
    only_upstream = unexplained(
        difference(upstream.entries, with_plugin.entries), with_plugin
    )
    assert sorted((tuple(e["shape"]), e["dtype"]) for e in only_upstream) == sorted(
        (shape, f"torch.{dtype}") for shape, dtype in redirected_allocations(off)
    ), describe(only_upstream)
