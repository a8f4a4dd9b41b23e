"""The report's spine: one ``census.report(launch) -> Report``, each role resolved by
SGLang once, the whole report frozen.

SGLang's resolutions are counted where SGLang does them
(``sglang.srt.server_args.prepare_server_args``): one per role shown, plus one per
set of flags an advice step tries (``census.columns.prefill_capacity`` with flags);
nothing else (the weights build, the model on one rank, the advice's mamba ratio,
the launch as given) resolves again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io

import pytest
from helpers import NEXTN, tiny_model_folder

from sglang_pd_lean import census
from sglang_pd_lean.census import columns
from sglang_pd_lean.census.gpus import LOCAL, gpu_facts
from sglang_pd_lean.census.inputs import ROLES


@contextlib.contextmanager
def counted(monkeypatch):
    """Counts of SGLang's resolutions and of the advice steps that add flags."""
    from sglang.srt import server_args

    counts = {"resolutions": 0, "steps": 0}
    prepare, capacity = server_args.prepare_server_args, columns.prefill_capacity

    def resolving(*args, **kwargs):
        counts["resolutions"] += 1
        return prepare(*args, **kwargs)

    def step(done, flags, weights):
        counts["steps"] += bool(flags)
        return capacity(done, flags, weights)

    monkeypatch.setattr(server_args, "prepare_server_args", resolving)
    monkeypatch.setattr(columns, "prefill_capacity", step)
    with contextlib.redirect_stderr(io.StringIO()):
        yield counts


def report_of(argv, **launch):
    gpu = launch.pop("gpu", gpu_facts("h200"))
    return census.report(census.Launch(argv=tuple(argv), gpu=gpu, **launch))


def test_a_sized_report_resolves_each_role_once_and_each_advice_step_once(
    monkeypatch,
):
    argv = ("--tp", "4", "--disaggregation-mode", "prefill", *NEXTN)
    with counted(monkeypatch) as counts:
        report = report_of(argv, model="qwen3-next-80b-a3b", weights_gib=40.0)
    assert tuple(report.roles) == ROLES
    if report.advice:  # kv, and each step of the search for (b)
        assert counts["steps"] >= 2
    else:  # 0.5.22+ sizes a prefill target natively: nothing to spend, no step
        assert "prefill" in report.nothing_to_spend and counts["steps"] == 0
    assert counts["resolutions"] == len(ROLES) + counts["steps"]


def test_an_unsized_report_resolves_each_role_once(monkeypatch):
    with counted(monkeypatch) as counts:
        argv = ("--tp", "2", *NEXTN)
        report = report_of(argv, model="qwen3-next-80b-a3b", sized=False)
    assert report.advice is None and report.memory is None
    assert (counts["resolutions"], counts["steps"]) == (len(ROLES), 0)


def test_a_report_of_one_role_resolves_that_role_once(monkeypatch, tmp_path):
    """``check`` predicts each server in its own role (the role its flags name):
    one resolution."""
    folder = tiny_model_folder(tmp_path / "tiny")
    argv = ("--model-path", folder, "--device", "cpu")
    argv += ("--disaggregation-mode", "decode")
    argv += ("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")
    with counted(monkeypatch) as counts:
        report = census.report(
            census.Launch(argv=argv, gpu=gpu_facts(LOCAL), available_gib=2.0),
            roles=("decode",),
        )
    assert tuple(report.roles) == ("decode",)
    assert counts["resolutions"] == 1


def test_the_report_is_frozen_to_its_leaves():
    report = report_of(("--tp", "4", *NEXTN), model="qwen3-next-80b-a3b", sized=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.model = "another"
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.inputs.tp = 8
    with pytest.raises(TypeError):
        report.roles["prefill"] = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.roles["prefill"].plugin.total_bytes = 0
    with pytest.raises(TypeError):
        census.Report("0.5.17", "m")  # keyword-only, as KVCacheConfigResult
    assert isinstance(report.launch.argv, tuple)


def test_each_memory_is_one_of_two_types():
    """``--available-gib`` names the memory (no weights in it); a GPU and the
    weights give the modelled one, which carries the weights an advice step
    reruns with."""
    from sglang_pd_lean.census.results import GivenMemory, ModelledMemory

    argv = ("--tp", "4", *NEXTN)
    given = report_of(argv, model="qwen3-next-80b-a3b", available_gib=30.0)
    modelled = report_of(argv, model="qwen3-next-80b-a3b", weights_gib=40.0)
    assert {type(m) for m in given.memory.values()} == {GivenMemory}
    assert {type(m) for m in modelled.memory.values()} == {ModelledMemory}
    assert columns.weights_of(given.memory["prefill"]) is None
    weights = columns.weights_of(modelled.memory["prefill"])
    assert weights.target_bytes == modelled.memory["prefill"].weights_bytes == 40 << 30


def test_the_prefill_pieces_are_the_audits_row_for_the_worker_sglang_picks():
    """``prefill_pieces``: the worker class SGLang's own dispatch picks for the
    launch (EAGLE without multi-layer flags: the row doctor lists for EAGLE), and
    each piece of that row, said as not built / not captured / still built."""
    from sglang_pd_lean import audit

    argv = ("--tp", "4", "--disaggregation-mode", "prefill", *NEXTN)
    report = report_of(argv, model="qwen3-next-80b-a3b", sized=False)
    pieces = dict(report.prefill_pieces)
    (row,) = [r for r in audit.matrix() if "EAGLE" in r.algorithms and not r.flags]
    assert pieces.pop("worker") == row.worker_name
    shown = {p.title: row.cells[p.key] for p in audit.PIECES}
    assert set(pieces) == {
        title for title, cell in shown.items() if cell.state is not audit.State.ABSENT
    }
    for title, said in pieces.items():
        state = shown[title].state
        by = {audit.State.NATIVE: "(SGLang)", audit.State.PLUGIN: "(the plugin)"}
        if state in by:
            assert said.startswith("not ") and said.endswith(by[state]), said
        else:
            assert said.startswith("still "), (title, said)
        assert ("captured" in said) == title.endswith("graph"), (title, said)
    unspeculative = report_of(("--tp", "4"), model="qwen3-next-80b-a3b", sized=False)
    assert unspeculative.prefill_pieces is None
