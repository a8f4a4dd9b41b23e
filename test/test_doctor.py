"""``sglang-pd-lean doctor``: each gate's state on the installed SGLang, and exit
code 0 only where the plugin can do its whole job (text and ``--json`` alike)."""

from __future__ import annotations

import json

import pytest
from helpers import NATIVE_FROM, hide_package, upstream_has

from sglang_pd_lean import cli, compat
from sglang_pd_lean.hook import Hook, When

UNSUPPORTED = "not applied (unsupported SGLang)"
# Every state a gate can show on a supported release (what doctor prints there).
SUPPORTED_STATES = {state.value for state in compat.GateState}


def doctor(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["doctor", *args])
    return code, capsys.readouterr().out


def fake_plan(state: str, target: str) -> list:
    def hook(original, *args, **kwargs):
        return original(*args, **kwargs)

    return [
        compat.GatePlan(
            "pool", "test gate", state, "", (Hook(target, hook, When.AROUND),)
        )
    ]


def test_doctor_is_healthy_on_this_sglang(capsys):
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["healthy"] and report["supported"]
    assert [g["name"] for g in report["gates"]] == list(NATIVE_FROM) + ["replayssm"]
    for gate in report["gates"]:
        if gate["name"] in NATIVE_FROM:
            native = upstream_has(gate["name"])
            assert (gate["state"] == compat.GateState.NATIVE) == native, gate


@pytest.fixture
def unsupported_release(monkeypatch):
    monkeypatch.setattr(compat, "sglang_version", lambda: "0.5.99")


def test_doctor_fails_on_an_unsupported_release(unsupported_release, capsys):
    code, out = doctor(capsys)
    assert code == 1 and "supported: no" in out


def test_doctor_json_fails_on_an_unsupported_release(unsupported_release, capsys):
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 1
    assert report["supported"] is False and report["healthy"] is False


def test_doctor_on_an_unsupported_release_applies_no_gate(unsupported_release, capsys):
    """The plugin registers nothing there: no gate reads as applied or native."""
    _, out = doctor(capsys)
    rows = [line for line in out.splitlines() if line.split(" ", 1)[0] in NATIVE_FROM]
    assert len(rows) == len(NATIVE_FROM)
    for row in rows:
        assert UNSUPPORTED in row, row
        assert not any(state in row for state in SUPPORTED_STATES), row
    _, out = doctor(capsys, "--json")
    assert {gate["state"] for gate in json.loads(out)["gates"]} == {UNSUPPORTED}


@pytest.fixture
def pool_gate_hooking(monkeypatch):
    """``pool_gate_hooking(target)``: the pool gate's only candidate is ``target``."""
    from sglang_pd_lean.gates import pool

    return lambda target: monkeypatch.setattr(type(pool.GATE), "targets", (target,))


def test_doctor_fails_on_a_missing_hook_target_and_names_the_gates_off(
    pool_gate_hooking, capsys
):
    target = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator.gone"
    pool_gate_hooking(target)
    code, out = doctor(capsys)
    assert (
        code == 1
        and f"missing hook target: pool: no hook target resolves: {target}" in out
    )
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 1 and target in report["gates_off"]["pool"]
    states = {gate["name"]: gate["state"] for gate in report["gates"]}
    assert states["pool"] == compat.GateState.MISSING
    if not upstream_has("budget"):  # it requires the pool gate: off with it
        assert states["budget"] == compat.GateState.UNSAFE
        assert "pool" in report["gates_off"]["budget"]


def test_doctor_names_the_import_error_of_a_hooked_module(
    pool_gate_hooking, monkeypatch, tmp_path, capsys
):
    (tmp_path / "broken_hooked_module.py").write_text(
        "import a_dependency_that_is_not_installed\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pool_gate_hooking("broken_hooked_module.function")
    code, out = doctor(capsys)
    assert code == 1
    assert "No module named 'a_dependency_that_is_not_installed'" in out


def test_doctor_fails_on_an_unhandled_gate(monkeypatch, capsys):
    target = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator.__init__"
    monkeypatch.setattr(
        compat,
        "plan",
        lambda unused=None: fake_plan(compat.GateState.UNHANDLED, target),
    )
    code, out = doctor(capsys)
    assert code == 1 and "unhandled: pool" in out


def test_doctor_under_the_kill_switch_disables_needed_gates_and_keeps_native_ones(
    monkeypatch, capsys
):
    """Every release needs some gate (draft_graph and autotune are native nowhere):
    those read "disabled by kill switch"; a native gate still reads native."""
    monkeypatch.setenv(compat.KILL_SWITCH, "0")
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["kill_switch"] is True
    states = {gate["name"]: gate["state"] for gate in report["gates"]}
    disabled = {
        name for name, state in states.items() if state == "disabled by kill switch"
    }
    native = {name for name, state in states.items() if state == "native upstream"}
    assert disabled == {gate for gate in NATIVE_FROM if not upstream_has(gate)}
    assert native == {gate for gate in NATIVE_FROM if upstream_has(gate)}
    assert {"draft_graph", "autotune"} <= disabled
    code, text = doctor(capsys)
    assert code == 0
    for gate in disabled:
        row = next(line for line in text.splitlines() if line.startswith(gate + " "))
        assert "disabled by kill switch" in row


def test_an_unsafe_gate_fails_doctor_and_takes_the_gates_requiring_it(
    monkeypatch, capsys
):
    """The pool gate unsafe (SGLang would transfer what it removes): the budget gate,
    which requires it, is off too where it is needed; every other gate as before."""
    from sglang_pd_lean.gates import all_gates, pool

    before = {g.name: g.state for g in compat.plan()}
    monkeypatch.setattr(
        type(pool.GATE), "applicable", lambda self: "SGLang transfers the state"
    )
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    states = {gate["name"]: gate["state"] for gate in report["gates"]}
    requiring = {g.name for g in all_gates() if "pool" in g.requires}
    if upstream_has("pool"):  # native: upstream does it, nothing to be unsafe about
        assert code == 0 and states == {k: v.value for k, v in before.items()}
        return
    assert code == 1 and report["healthy"] is False
    assert states["pool"] == compat.GateState.UNSAFE
    assert report["gates_off"]["pool"] == "SGLang transfers the state"
    for name, state in before.items():
        if name in requiring and state == compat.GateState.NEEDED:
            assert states[name] == compat.GateState.UNSAFE, name
            assert "pool" in report["gates_off"][name]
        elif name != "pool":
            assert states[name] == state, name
    assert sorted(report["unsafe_gates"]) == sorted(
        {"pool"} | {n for n in requiring if before[n] == compat.GateState.NEEDED}
    )
    _, text = doctor(capsys)
    for name in report["unsafe_gates"]:
        assert (
            f"not registered: {name} (unsafe on this SGLang, see its detail)"
        ) in text.splitlines()


def test_docs_releases_md_holds_this_releases_doctor_row():
    """docs/releases.md (scripts/releases_table.sh) matches doctor on the installed
    release: CI runs this on every supported release."""
    import pathlib

    from sglang_pd_lean.cli.doctor import doctor_report, release_row

    table = pathlib.Path(__file__).parents[1] / "docs" / "releases.md"
    version = compat.sglang_version()
    gates_table = table.read_text().split("\n## ", 1)[0]  # the first table
    rows = [
        line for line in gates_table.splitlines() if line.startswith(f"| {version} |")
    ]
    assert rows == [release_row(doctor_report())]


def test_a_release_row_reads_each_gates_state_and_the_report():
    report = {
        "sglang_version": "0.5.99",
        "gates": [
            {"name": "pool", "state": "native upstream"},
            {"name": "budget", "state": "not registered: hook target missing"},
        ],
        "report_can_run": False,
        "missing_seams": [{"seam": "sglang.srt.x.KVCacheConfigurator._gone"}],
    }
    from sglang_pd_lean.cli.doctor import release_row

    assert release_row(report) == "| 0.5.99 | native | missing | no | _gone |"


def test_a_release_row_keeps_a_state_it_has_no_short_word_for_and_every_seam():
    from sglang_pd_lean.cli.doctor import release_row

    report = {
        "sglang_version": "0.5.99",
        "gates": [{"name": "pool", "state": "a state from a later doctor"}],
        "report_can_run": True,
        "missing_seams": [
            {"seam": "sglang.srt.a.One._gone"},
            {"seam": "sglang.srt.b.two"},
        ],
    }
    assert release_row(report) == (
        "| 0.5.99 | a state from a later doctor | yes | _gone, two |"
    )


def test_doctor_seams_lists_every_seam_found_or_missing(capsys, monkeypatch):
    from sglang.srt.model_executor import pool_configurator

    from sglang_pd_lean import seams

    monkeypatch.delattr(pool_configurator, "create_memory_pool_configurator")
    code, out = doctor(capsys, "--seams")
    lines = [
        line
        for line in out.splitlines()
        if line.split(" ", 1)[0] in ("found", "MISSING", "absent")
    ]
    assert len(lines) == len(seams.SEAMS)
    gone = [line for line in lines if line.startswith("MISSING")]
    assert len(gone) == 1 and "create_memory_pool_configurator" in gone[0] and code == 1
    # After the gates: the seam with its part, why the report needs it, and the
    # error resolving it gave; then the verdict.
    (seam,) = [
        s for s in seams.SEAMS if s.label.endswith(".create_memory_pool_configurator")
    ]
    said = [line for line in out.splitlines() if line.startswith("missing seam (")]
    assert len(said) == 1
    assert said[0].startswith(
        f"missing seam ({seam.part.value}: {seam.why}): {seam.label}: "
    )
    assert "create_memory_pool_configurator" in said[0].rsplit(": ", 1)[1]
    assert out.splitlines()[-1] == (
        "report: cannot run on this SGLang (see the missing seams above)"
    )
    report = json.loads(doctor(capsys, "--json")[1])
    (missing,) = report["missing_seams"]
    assert missing["why"] == seam.why and missing["error"]
    assert {s["seam"] for s in report["seams"]} == {s.label for s in seams.SEAMS}
    assert {s["seam"]: (s["part"], s["why"]) for s in report["seams"]} == {
        s.label: (s.part.value, s.why) for s in seams.SEAMS
    }


def test_doctor_text_gives_the_release_and_each_gate_in_aligned_columns(capsys):
    """The text report, line by line, against the JSON one of the same run."""
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    code, out = doctor(capsys)
    lines = out.splitlines()
    low, high = compat.SUPPORTED[0], compat.SUPPORTED[-1]
    assert report["supported_releases"] == ["0.5.15", "0.5.23"] == [low, high]
    assert lines[0] == f"SGLang {compat.sglang_version()}"
    assert lines[1] == "supported: yes (0.5.15 to 0.5.23)"
    gates = report["gates"]
    width = max(len(g["state"]) for g in gates) + 2  # the widest state, 2 spaces
    names = max(13, *(len(g["name"]) + 2 for g in gates))  # 13, or widest + 2
    heading = "gate" + " " * (names - 4) + "state" + " " * (width - 5) + "detail"
    assert lines[2] == heading
    for line, gate in zip(lines[3:], gates, strict=False):
        name, state = f"{gate['name']:<{names}}", f"{gate['state']:<{width}}"
        assert line == name + state + gate["detail"]
        assert line[names + width - 2 : names + width] == "  "  # 2 before detail
        assert line[names - 2 : names] == "  "  # 2 after the widest name at least
    assert any(len(g["state"]) == width - 2 for g in gates)
    assert lines[-1] == "report: can run on this SGLang (every seam it needs resolves)"
    assert code == 0


def test_doctor_json_is_indented_by_two(capsys):
    _, out = doctor(capsys, "--json")
    assert out.startswith('{\n  "sglang_version": ')


def test_a_gate_with_no_detail_shows_its_summary(monkeypatch):
    from sglang_pd_lean.cli.doctor import doctor_report

    plans = compat.plan()
    monkeypatch.setattr(
        compat,
        "plan",
        lambda unused=None: [
            compat.GatePlan(p.name, f"summary of {p.name}", p.state, "", p.hooks)
            for p in plans
        ],
    )
    gates = doctor_report()["gates"]
    assert [g["detail"] for g in gates] == [f"summary of {p.name}" for p in plans]


def test_doctor_without_sglang_says_so_and_exits_1(monkeypatch, capsys):
    hide_package(monkeypatch, "sglang")
    monkeypatch.setattr(compat, "sglang_version", lambda: None)
    code, out = doctor(capsys)
    assert code == 1
    assert out == "SGLang: not installed (supported: 0.5.15 to 0.5.23)\n"
    code, out = doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 1 and report["seams"] == [] and report["missing_seams"] == []


def test_the_releases_table_heads_each_gate_and_gives_a_row_per_release():
    from sglang_pd_lean.cli.doctor import release_table

    def report(version, pool, budget, runs):
        return {
            "sglang_version": version,
            "gates": [
                {"name": "pool", "state": pool},
                {"name": "budget", "state": budget},
            ],
            "report_can_run": runs,
            "missing_seams": [],
        }

    table = release_table(
        [
            report("0.5.16", "applied by the plugin", "applied by the plugin", True),
            report("0.5.22", "native upstream", "native upstream", False),
        ]
    )
    assert table.splitlines() == [
        "| SGLang | pool | budget | report runs | missing seams |",
        "|---|---|---|---|---|",
        "| 0.5.16 | plugin | plugin | yes | none |",
        "| 0.5.22 | native | native | no | none |",
    ]
    one = release_table([report("0.5.17", "not applicable", "native upstream", True)])
    assert one.splitlines()[2] == "| 0.5.17 | n/a | native | yes | none |"


def test_the_report_refuses_in_one_line_naming_the_first_seam_and_counting_the_rest(
    monkeypatch,
):
    """What the report needs and SGLang lacks: the first seam (in the seams list's
    order) with why the report needs it, and how many more, in one line."""
    import sglang.srt.distributed.utils as dist_utils
    from sglang.srt.model_executor import pool_configurator

    from sglang_pd_lean import seams
    from sglang_pd_lean.census.environment import require_seams
    from sglang_pd_lean.census.inputs import CensusError

    labels = (
        "sglang.srt.distributed.utils.get_pp_indices",
        "sglang.srt.model_executor.pool_configurator.create_memory_pool_configurator",
    )
    gone = [s for s in seams.SEAMS if s.label in labels]
    assert len(gone) == 2
    version = compat.sglang_version()
    tail = "`sglang-pd-lean doctor` lists what is missing"

    monkeypatch.delattr(pool_configurator, "create_memory_pool_configurator")
    (one,) = [s for s in gone if s.label == labels[1]]
    with pytest.raises(CensusError) as raised:
        require_seams()
    assert str(raised.value) == (
        f"SGLang {version} lacks {one.label}, which the report needs ({one.why}); "
        + tail
    )
    monkeypatch.delattr(dist_utils, "get_pp_indices")
    with pytest.raises(CensusError) as raised:
        require_seams()
    assert str(raised.value) == (
        f"SGLang {version} lacks {gone[0].label}, which the report needs "
        f"({gone[0].why}) (and 1 more); " + tail
    )


def test_doctor_quiets_sglangs_loggers_before_it_imports_sglang(capsys):
    """SGLang's import-time notes and start-up INFO logs would bury the doctor's
    report: with SGLang installed, its loggers (and transformers' and torch's) are
    at ERROR before the doctor reads it."""
    import logging

    names = ("sglang", "sglang_pd_lean", "transformers", "torch")
    before = {n: logging.getLogger(n).level for n in names}
    try:
        for name in names:
            logging.getLogger(name).setLevel(logging.NOTSET)
        cli.main(["doctor", "--json"])
        json.loads(capsys.readouterr().out)  # the report, and nothing before it
        assert {n: logging.getLogger(n).level for n in names} == dict.fromkeys(
            names, logging.ERROR
        )
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)


def test_doctor_names_the_entry_points_that_never_load_plugins(monkeypatch):
    """Each entry doctor names has no ``load_plugins`` anywhere in its source text;
    an entry that calls it (the scheduler's module) is not named."""
    import importlib.util

    from sglang_pd_lean import seams
    from sglang_pd_lean.cli.doctor import entries_without_plugins

    scheduler = "sglang.srt.managers.scheduler"
    listed = {what for _, what in seams.MODEL_ENTRIES}
    entries = (*seams.MODEL_ENTRIES, ((scheduler,), "the scheduler"))
    monkeypatch.setattr(seams, "MODEL_ENTRIES", entries)
    named = entries_without_plugins()
    assert scheduler not in {entry["module"] for entry in named}
    with open(importlib.util.find_spec(scheduler).origin) as f:
        assert "load_plugins()" in f.read()  # the check below can tell
    for entry in named:
        path = importlib.util.find_spec(scheduler).origin.replace(
            "srt/managers/scheduler.py", entry["module"][7:].replace(".", "/") + ".py"
        )
        with open(path) as f:
            assert "load_plugins" not in f.read(), entry
    # Both exist on every supported release, and neither loads plugins there.
    assert {entry["entry"] for entry in named} == listed
