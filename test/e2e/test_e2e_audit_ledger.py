"""Every tensor a CPU prefill server keeps from its start-up, accounted for.

For every speculative algorithm whose PD prefill server starts on a CPU (NEXTN,
EAGLE3, STANDALONE, NGRAM, FROZEN_KV_MTP; DFLASH and DSPARK with SGLang's device
check lifted by a stand-in: ``e2e_ledger_runs`` and ``e2e_algos``; NEXTN also on the
MLA, TP 2 and attention-DP shapes of ``e2e_shapes``; why UNO cannot start on a CPU:
docs/testing.md),
the plugin's server keeps a start-up allocation ledger (``site/e2e_ledger.py``):
each storage ``Scheduler.__init__`` allocated and still holds when it returns, with
the SGLang call chain that asked for it. Each such entry is accounted for by the
first frame of its chain (innermost first) that a rule below names:

- ``VERIFY_ONLY``: code only a verify or decode step reads. Its piece must read
  "still built" in the audit's row for the server's worker class (``audit.row_for``,
  what ``doctor`` and ``report`` print); a piece the audit calls removed or native
  must not be in the plugin's ledger at all.
- ``SERVES_PREFILL``: code a prefill step uses (weights, pools, the PD transfer
  buffers, the eager runner's input registry, which SGLang's own docstring says
  serves "BOTH eager decode and eager prefill").

An entry no rule names fails the test: a release that allocates something new at
start-up must be read and classified before it passes. The rules were written from
the ledgers of 0.5.17 and 0.5.23 (``python test/e2e/e2e_ledger_runs.py FOLDER``
prints a ledger's functions).
"""

from __future__ import annotations

import collections

import pytest
from e2e_algos import ALGORITHMS, LEDGER_ALGORITHMS, jit_build_failure
from e2e_ledger_runs import read_ledgers

pytestmark = pytest.mark.e2e

# The frame (module:qualname, or its qualname's tail) -> the audit piece it builds.
VERIFY_ONLY = {
    "NGRAMWorker._init_preallocated_tensors": "verify_buffers",
    "build_verify_intermediate_state_indices": "verify_indices",
    "EagleDraftWorkerBase._rebuild_topk1_chain_buffers": "verify_buffers",
    # DFlash's and DSpark's draft block: position offsets, an empty spec info, and
    # DSpark's draft noise offset.
    "build_block_pos_offsets": "block_inputs",
    "make_draft_block_spec_info": "block_inputs",
    "DraftBlockProposer.__init__": "block_inputs",
}
# The frame -> why a prefill step uses what it allocates.
SERVES_PREFILL = {
    "ModelRunner.load_model": "weights",
    "GroupCoordinator.__init__": "process groups",
    "ModelRunner.maybe_init_expert_location_metadata": "expert placement",
    "KVCacheConfigurator.configure": "KV cache, mamba state, request slots",
    "Scheduler.init_disaggregation": "PD transfer metadata",
    "build_eager_registry": "the eager runner's inputs (prefill and decode)",
    "EagerRunner.__init__": "the eager runner",
    "init_attention_backends": "attention backends",
    "Scheduler.init_overlap": "the overlap scheduler's future map",
    "create_tree_cache": "the prefix cache",
    "Scheduler.init_schedule_policy": "the schedule policy",
    "broadcast_pyobj": "rank start-up handshake",
    # Two int64 scalars of the worker's own state (num_new_pages_per_topk,
    # extend_lens), which no step reads.
    "EAGLEWorkerV2.__init__": "worker state",
    "StandaloneWorkerV2.__init__": "worker state",
    "FrozenKVMTPWorkerV2.__init__": "worker state",
}
# The plugin's speculative prefill servers that keep a ledger (runs of
# e2e_runs.RUNS, e2e_algos.ALGO_RUNS and e2e_shapes.SHAPE_RUNS) -> their algorithm.
PREFILL_RUNS = {
    "prefill, ledger": "NEXTN",
    **{f"{algo} prefill": algo for algo in [*ALGORITHMS, *LEDGER_ALGORITHMS]},
    # The shapes: MLA (DeepSeek V3), TP 2 and attention DP, NEXTN each.
    "mla prefill": "NEXTN",
    "tp 2 prefill": "NEXTN",
    "attention dp prefill": "NEXTN",
}


def _rule(frame: str, rules: dict[str, str]) -> str | None:
    qualname = frame.partition(":")[2]
    for name, value in rules.items():
        if qualname == name or qualname.endswith("." + name):
            return value
    return None


def account(entry: dict) -> tuple[str, str] | None:
    """("verify", piece) or ("prefill", why) for a ledger entry; None: nobody's."""
    for frame in entry.get("stack") or [entry["function"]]:
        piece = _rule(frame, VERIFY_ONLY)
        if piece is not None:
            return "verify", piece
        why = _rule(frame, SERVES_PREFILL)
        if why is not None:
            return "prefill", why
    return None


def worker_row(algorithm: str):
    """The audit's row for the worker class SGLang builds for ``algorithm`` (no
    multi-layer flag, as the e2e runs launch it)."""
    from sglang_pd_lean import audit

    # NEXTN resolves to EAGLE for the tiny Qwen3-Next (frozen-KV MTP only for a
    # Gemma 4 assistant draft).
    name = {"NEXTN": "EAGLE"}.get(algorithm, algorithm)
    rows = [r for r in audit.matrix() if name in r.algorithms and not r.flags]
    assert len(rows) == 1, (algorithm, [r.worker for r in rows])
    return rows[0]


def started_ledger(runs, name: str, device: str):
    algorithm = PREFILL_RUNS[name]
    run = runs.get(name, device)
    if not run.ready and device == "cpu":
        failure = jit_build_failure(run)
        if failure:
            pytest.skip(f"{algorithm} cannot start on this CPU: {failure}")
    assert run.ready, run.explain(f"the {algorithm} prefill server did not start")
    assert run.ledger_path, run.explain("no start-up ledger")
    ledgers = read_ledgers(run.ledger_path)
    assert ledgers and all(not ledger.end.get("errors") for ledger in ledgers)
    return run, ledgers


@pytest.mark.parametrize("name", list(PREFILL_RUNS))
def test_every_tensor_a_prefill_server_keeps_is_accounted_for(runs, device, name):
    from sglang_pd_lean.audit import State

    algorithm = PREFILL_RUNS[name]
    run, ledgers = started_ledger(runs, name, device)
    row = worker_row(algorithm)
    unaccounted, verify = [], collections.Counter()
    for ledger in ledgers:
        for entry in ledger.entries:
            if not entry["live"]:
                continue
            found = account(entry)
            if found is None:
                unaccounted.append(entry)
            elif found[0] == "verify":
                verify[found[1]] += entry["bytes"]
    assert not unaccounted, run.explain(
        "ledger entries no rule accounts for: "
        + "; ".join(
            f"{e['bytes']} B {e['shape']} from {' < '.join(e['stack'][:6])}"
            for e in unaccounted[:8]
        )
    )
    for piece, nbytes in verify.items():
        cell = row.cells[piece]
        assert cell.state == State.BUILT, (algorithm, piece, nbytes, cell)
    for key, cell in row.cells.items():
        if cell.state in (State.PLUGIN, State.NATIVE):
            assert key not in verify, (algorithm, key, verify[key])


def test_ngrams_verify_tensors_are_the_bytes_the_audit_names(runs, device):
    """NGRAM's preallocated verify tensors, against the audit's words: five int64
    tensors of max running requests x draft tokens and a bool mask of max running
    requests x draft tokens squared (the server's own resolved figures)."""
    run, ledgers = started_ledger(runs, "NGRAM prefill", device)
    cell = worker_row("NGRAM").cells["verify_buffers"]
    assert "5 x int64" in cell.detail and "bool" in cell.detail
    kept = sum(
        entry["bytes"]
        for ledger in ledgers
        for entry in ledger.entries
        if entry["live"] and account(entry) == ("verify", "verify_buffers")
    )
    requests = run.server_info["max_running_requests"]
    tokens = run.server_info["speculative_num_draft_tokens"]
    assert kept == requests * tokens * (5 * 8 + tokens)


# The draft-graph gate of each ledger-only algorithm's own worker, read by hand:
# FROZEN_KV_MTP's draft captures in FrozenKVMTPCudaGraphRunner, DFlash in its own
# worker; DSPARK asks the disaggregation mode itself (no gate of ours).
OWN_GATE = {
    "FROZEN_KV_MTP": "frozen_kv_graph",
    "DFLASH": "dflash_graph",
    "DSPARK": None,
}
WORKER_GATES = {"frozen_kv_graph", "dflash_graph", "multi_layer_graph"}


@pytest.mark.parametrize("algorithm", list(LEDGER_ALGORITHMS))
def test_the_launch_registers_its_own_workers_gate_and_no_other(
    runs, device, algorithm
):
    """Registration per launch on a real server (plugin.launch): the gate of the
    algorithm's own worker is registered and asked on its prefill server; the other
    workers' gates are "not used by this launch"."""
    from e2e_runs import gate_lines

    run, _ = started_ledger(runs, f"{algorithm} prefill", device)
    own = OWN_GATE[algorithm]
    lines = gate_lines(run)
    for state in run.internal_states():
        gates = state["pd_lean"]["gates"]
        for gate in WORKER_GATES - {own}:
            assert gates[gate] == "not used by this launch", (gate, gates)
        if own is not None:
            assert gates[own] in ("acted", "stepped aside"), (own, gates)
            line = lines.get(own, "")
            assert f"prefill target ({algorithm}) cannot run TARGET_VERIFY" in line
