"""The audit (issue 36): every speculative algorithm the installed SGLang accepts,
the worker class it builds, and what a PD prefill server builds there only for a
verify step; docs/releases.md's rows for this release; a worker class nobody has
audited named in doctor and in one WARNING at start-up."""

from __future__ import annotations

import json
import logging
import types

import pytest
from helpers import doc_text, sglang_minor, upstream_has

from sglang_pd_lean import audit, census, cli
from sglang_pd_lean.audit import State

_SPEC = "sglang.srt.speculative"


@pytest.fixture(scope="module")
def matrix():
    return audit.matrix()


# What each worker's draft pieces are on a prefill server, from upstream's code
# read by hand (independent of the audit's own checks): a gate's name where the
# plugin removes it (native where the release or a patch does it itself).
DRAFT_PIECES = {
    # SGLang takes --speculative-adaptive for EAGLE / EAGLE3 on EAGLEWorkerV2 only.
    # The EAGLE family's draft builds its topk-1 chain buffers on every role.
    "EAGLEWorkerV2": ("draft_graph", "draft_graph", "built", "adaptive", "-", "-"),
    "StandaloneWorkerV2": ("draft_graph", "draft_graph", "built", "-", "-", "-"),
    "MultiLayerEagleWorkerV2": (
        "-", "multi_layer_graph", "built from 17", "-", "-", "-",
    ),  # fmt: skip
    "FrozenKVMTPWorkerV2": ("frozen_kv_graph", "-", "-", "-", "-", "-"),
    # DFlash rehearses verify sampling in prewarm_sampling from 0.5.20, on every role.
    # DFlash and DSpark build their draft block's position offsets in __init__.
    "DFlashWorkerV2": (
        "dflash_graph", "-", "dflash_graph", "-", "built from 20", "built",
    ),  # fmt: skip
    # DSPARK asks the disaggregation mode itself from 0.5.17.
    "DSparkWorkerV2": ("dspark", "-", "dspark", "-", "-", "built"),
    # UNO (0.5.20+) captures its tree draft graph only with the target's; its
    # private tree-draft attention backend is built on every role.
    "UnoWorkerV2": ("native", "-", "built", "-", "-", "-"),
    # NGRAM preallocates its verify tensors (and its trie) on every role.
    "NGRAMWorker": ("-", "-", "built", "-", "-", "-"),
}
DRAFT_KEYS = (
    "draft_decode_graph",
    "draft_extend_graph",
    "verify_buffers",
    "adaptive_states",
    "verify_prewarm",
    "block_inputs",
)


def expected_state(word: str) -> State:
    if word == "-":
        return State.ABSENT
    if word == "native":
        return State.NATIVE
    if word == "built":
        return State.BUILT
    if word.startswith("built from "):
        since = int(word.rpartition(" ")[2])
        return State.BUILT if sglang_minor() >= since else State.ABSENT
    if word == "dspark":
        return State.NATIVE if sglang_minor() >= 17 else State.BUILT
    return State.NATIVE if upstream_has(word) else State.PLUGIN


def test_every_algorithm_this_sglang_accepts_has_a_row(matrix):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    named = {name for row in matrix for name in row.algorithms}
    members = {m.name for m in SpeculativeAlgorithm if m.name != "NONE"}
    assert members <= named
    assert "NEXTN" in named  # SGLang's reserved spelling of EAGLE
    assert all(row.worker for row in matrix)


def test_each_algorithm_maps_to_the_worker_class_sglang_builds_for_it(matrix):
    """The audit's routes are ``create_worker``'s answers, where it can be asked
    on a CPU (UNO and NGRAM import GPU kernels)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    for row in matrix:
        for name in row.algorithms:
            if name not in SpeculativeAlgorithm.__members__:
                continue
            args = types.SimpleNamespace(
                enable_multi_layer_eagle=bool(row.flags),
                disable_overlap_schedule=True,
            )
            try:
                worker = SpeculativeAlgorithm[name].create_worker(args)
            except ImportError:
                continue
            assert f"{worker.__module__}.{worker.__qualname__}" == row.worker, name


def test_every_worker_of_a_supported_release_is_audited(matrix):
    for row in matrix:
        assert row.audited, row.worker
        assert row.worker_name in DRAFT_PIECES, row.worker
        assert not [c for c in row.cells.values() if c.state == State.NOT_AUDITED]


def test_each_draft_piece_has_the_state_read_from_upstreams_code(matrix):
    for row in matrix:
        want = [expected_state(w) for w in DRAFT_PIECES[row.worker_name]]
        have = [row.cells[key].state for key in DRAFT_KEYS]
        assert have == want, (row.worker_name, have)


def test_a_piece_still_built_says_under_which_flags(matrix):
    for row in matrix:
        for cell in row.cells.values():
            if cell.state == State.BUILT:
                assert cell.detail.startswith("when "), cell


def test_target_pieces_follow_their_gates(matrix):
    from sglang_pd_lean import compat

    plans = {plan.name: plan.state for plan in compat.plan()}
    words = {
        compat.GateState.NATIVE: State.NATIVE,
        compat.GateState.NEEDED: State.PLUGIN,
    }
    for row in matrix:
        for key, handling in audit.TARGET.items():
            if not isinstance(handling, audit.ByGate):
                continue
            want = words.get(plans[handling.gate], State.BUILT)
            assert row.cells[key].state == want, (row.label, key)


def test_the_linear_attention_verify_index_table_is_still_built_from_0_5_17(matrix):
    """Read by hand: GDN's and KDA's backends build it in __init__ on every role
    from 0.5.17 (0.5.16 has no such table); the ledger of a real prefill server
    holds it (test_e2e_audit_ledger.py)."""
    want = State.BUILT if sglang_minor() >= 17 else State.ABSENT
    for row in matrix:
        assert row.cells["verify_indices"].state == want, row.label


def test_the_draft_worker_each_audited_worker_builds_is_the_audited_one():
    for worker, audited in audit.AUDITED.items():
        if audited.draft is None or audit._class_node(worker) is None:
            continue
        assert audit._draft_of(worker, audited.draft) is None, worker


def test_a_class_that_overrides_the_hooked_method_is_not_taken_for_it():
    eagle = f"{_SPEC}.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs"
    standalone = f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker"
    multi = f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker"
    assert audit.runs_own(standalone, eagle) == (True, "")
    runs, why = audit.runs_own(multi, eagle)
    assert not runs
    assert why == "MultiLayerEagleDraftWorker overrides _capture_cuda_graphs"


# --- a worker class nobody audited ------------------------------------------------


class PluginSpecWorker:
    """A plugin's speculative worker (SpeculativeAlgorithm.register)."""


@pytest.fixture
def plugin_algorithm(monkeypatch):
    """``MY_SPEC``, registered the way a plugin registers one, for the test."""
    from sglang.srt.speculative import spec_registry
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    monkeypatch.setattr(spec_registry, "_REGISTRY", {})
    SpeculativeAlgorithm.register("MY_SPEC")(lambda server_args: PluginSpecWorker)
    return f"{__name__}.PluginSpecWorker"


def test_a_plugin_algorithms_worker_reads_not_audited(plugin_algorithm):
    (row,) = [r for r in audit.matrix() if r.algorithms == ("MY_SPEC",)]
    assert row.worker == plugin_algorithm and not row.audited
    for key in DRAFT_KEYS:
        assert row.cells[key] == audit.Cell(
            State.NOT_AUDITED, "a worker class the plugin has not read"
        )


def test_doctor_names_a_worker_class_nobody_audited(plugin_algorithm, capsys):
    cli.main(["doctor"])
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("  MY_SPEC")]
    assert lines[0].split()[:2] == ["MY_SPEC", "PluginSpecWorker"]
    assert (
        "  MY_SPEC: draft decode graph not audited: a worker class the plugin has "
        "not read" in lines
    )


def warnings_for(role: str, worker, caplog) -> list[str]:
    fields = dict(
        disaggregation_mode=role,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=4,
        speculative_num_steps=3,
        speculative_eagle_topk=1,
    )
    with census.published(**fields) as server_args:
        scheduler = types.SimpleNamespace(server_args=server_args, draft_worker=worker)
        with caplog.at_level(logging.WARNING, logger="sglang_pd_lean"):
            audit.warn_unaudited(None, scheduler)
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("sglang_pd_lean")
    ]


@pytest.fixture
def fresh_warnings():
    audit.reset()
    yield
    audit.reset()


def test_an_unaudited_worker_gets_one_warning_on_a_prefill_server(
    fresh_warnings, caplog
):
    worker = PluginSpecWorker()
    first = warnings_for("prefill", worker, caplog)
    again = warnings_for("prefill", worker, caplog)
    name = f"{__name__}.PluginSpecWorker"
    assert len(first) == 1 and first == again
    assert first[0].startswith(
        f"[sglang-pd-lean] {name}: a speculative worker class the plugin has not "
        f"audited; it runs as upstream on this prefill target (EAGLE)"
    )


@pytest.mark.parametrize("role", ["decode", "null"])
def test_no_warning_where_the_target_can_verify(fresh_warnings, caplog, role):
    assert warnings_for(role, PluginSpecWorker(), caplog) == []


def test_an_audited_worker_and_its_own_draft_worker_get_no_warning(
    fresh_warnings, caplog
):
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    worker = object.__new__(EAGLEWorkerV2)
    worker.__dict__["_draft_worker"] = object.__new__(EagleDraftWorker)
    assert audit.unaudited(worker) == []
    assert warnings_for("prefill", worker, caplog) == []
    worker.__dict__["_draft_worker"] = PluginSpecWorker()
    assert audit.unaudited(worker) == [f"{__name__}.PluginSpecWorker"]
    assert len(warnings_for("prefill", worker, caplog)) == 1


def test_no_speculative_worker_no_warning(fresh_warnings, caplog):
    assert audit.unaudited(None) == []
    assert warnings_for("prefill", None, caplog) == []


def test_the_warning_never_breaks_a_start_up(fresh_warnings, caplog):
    audit.warn_unaudited(None, object())  # no server_args: nothing to say
    assert warnings_for("prefill", PluginSpecWorker(), caplog)


def test_the_start_up_check_is_an_after_hook_on_the_scheduler():
    (hook,) = audit.hooks()
    assert hook.target == "sglang.srt.managers.scheduler.Scheduler.__init__"
    assert hook.when.value == "AFTER" and hook.fn is audit.warn_unaudited


# --- doctor and docs/releases.md --------------------------------------------------


def test_doctor_prints_the_matrix_it_gives_in_json(capsys):
    cli.main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    speculative = report["speculative"]
    assert speculative["error"] is None
    assert [p["key"] for p in speculative["pieces"]] == list(audit.PIECE_KEYS)
    cli.main(["doctor"])
    out = capsys.readouterr().out.splitlines()
    start = out.index(
        "speculative algorithms on a PD prefill server (pieces only a verify step "
        "uses):"
    )
    heading, *rows = out[start + 1 : start + 2 + len(speculative["rows"])]
    assert heading.split()[:2] == ["algorithm", "worker"]
    for line, row in zip(rows, speculative["rows"], strict=True):
        words = [
            {"native upstream": "native", "removed by the plugin": "plugin"}.get(
                row["cells"][p["key"]]["state"], None
            )
            for p in speculative["pieces"]
        ]
        assert line.startswith("  " + ", ".join(row["algorithms"]))
        assert [w for w in words if w] == [
            w for w in line.split() if w in ("native", "plugin")
        ]


def releases_md_rows(version: str) -> list[str]:
    text = doc_text("releases.md")
    section = text.split("## Every speculative algorithm", 1)[1]
    return [line for line in section.splitlines() if line.startswith(f"| {version} |")]


def test_docs_releases_md_holds_this_releases_speculative_rows():
    """docs/releases.md (scripts/releases_table.sh) matches doctor's audit on the
    installed release; CI runs this on every supported release."""
    from sglang_pd_lean.cli.doctor import doctor_report, speculative_rows

    report = doctor_report()
    if upstream_has("draft_graph"):
        pytest.skip("a patched SGLang: docs/releases.md describes the releases")
    assert releases_md_rows(report["sglang_version"]) == speculative_rows(report)
