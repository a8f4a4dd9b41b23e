"""``census.live``: a running server's ``/server_info`` back to the launch flags
that give it, each written the way its flag's argparse action reads it, and the
model path the census reads. Each case parses the words back with argparse itself:
the flags must give the value they were written from."""

from __future__ import annotations

import argparse

import pytest
from helpers import tiny_model_folder

from sglang_pd_lean.census import live
from sglang_pd_lean.census.inputs import CensusError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--enable-x", action="store_true")
    p.add_argument("--keep-y", dest="keep_y", action="store_false")
    p.add_argument("--mode-z", dest="mode", action="store_const", const="z")
    p.add_argument("--json-model-override-args", dest="overrides", type=str)
    p.add_argument("--tokens", nargs="+", type=int)
    p.add_argument("--pair", nargs=2, type=int)
    p.add_argument("--chunks", nargs="*")
    p.add_argument("--listed", type=str)
    p.add_argument("-t", "--tp-size", dest="tp_size", type=int)
    p.add_argument("-q", dest="quiet", type=int)
    return p


def words(dest: str, value) -> list[str]:
    (action,) = [a for a in parser()._actions if a.dest == dest]
    return live._words(action, value)


@pytest.mark.parametrize(
    "dest, value, expected",
    [
        ("overlap", True, ["--overlap"]),
        ("overlap", False, ["--no-overlap"]),
        ("enable_x", True, ["--enable-x"]),
        ("enable_x", False, []),
        ("keep_y", False, ["--keep-y"]),
        ("keep_y", True, []),
        ("mode", "z", ["--mode-z"]),
        ("mode", "w", []),
        ("overrides", {"a": 1}, ["--json-model-override-args", '{"a": 1}']),
        ("tokens", [1, 2], ["--tokens", "1", "2"]),
        ("tokens", [], []),
        ("pair", (3, 4), ["--pair", "3", "4"]),
        ("chunks", ["a"], ["--chunks", "a"]),
        ("listed", [1, 2], ["--listed", "[1, 2]"]),
        ("tp_size", 4, ["--tp-size", "4"]),  # the long spelling where there is one
        ("quiet", 2, ["-q", "2"]),
    ],
)
def test_each_value_is_written_as_its_flag_reads_it(dest, value, expected):
    assert words(dest, value) == expected


@pytest.mark.parametrize(
    "dest, value",
    [
        ("overlap", False),
        ("enable_x", True),
        ("keep_y", False),
        ("mode", "z"),
        ("tokens", [1, 2]),
        ("pair", [3, 4]),
        ("tp_size", 4),
    ],
)
def test_the_words_parse_back_to_the_value(dest, value):
    assert getattr(parser().parse_args(words(dest, value)), dest) == value


def test_the_census_reads_the_model_given_else_the_servers_own(tmp_path):
    folder = tiny_model_folder(tmp_path / "tiny")
    assert live.model_of({"model_path": "/elsewhere"}, folder) == folder
    assert live.model_of({"model_path": folder}, None) == folder
    for info in ({"model_path": "/no/such/model"}, {}):
        with pytest.raises(CensusError) as raised:
            live.model_of(info, None)
        assert str(raised.value) == (
            f"the server's model path {info.get('model_path')!r} is not readable "
            "here: give --config (a config.json or a model folder) or --model-path"
        )


def test_a_cpu_server_without_a_record_has_no_budget_to_predict_with(tmp_path):
    from sglang_pd_lean.census.launch import LOCAL, gpu_facts

    info = {"model_path": tiny_model_folder(tmp_path / "tiny"), "device": "cpu"}
    with pytest.raises(CensusError) as raised:
        live.predict(info, gpu_facts(LOCAL), None, None)
    assert str(raised.value) == (
        "a CPU server's budget is the host's free memory at start-up, and without "
        "the plugin's record it is not on /server_info"
    )


def test_a_server_is_predicted_in_its_own_role_only(tmp_path):
    from sglang_pd_lean.census.launch import LOCAL, gpu_facts

    folder = tiny_model_folder(tmp_path / "tiny")
    info = {
        "model_path": folder,
        "device": "cpu",
        "disaggregation_mode": None,
        # The e2e servers' CPU settings (extra_buffer needs a GPU kernel).
        "mamba_radix_cache_strategy": "no_buffer",
        "disable_overlap_schedule": True,
    }
    result = live.predict(info, gpu_facts(LOCAL), None, 2.0)
    assert list(result.roles) == ["null"] and result.advice is None
    info["disaggregation_mode"] = "decode"
    result = live.predict(info, gpu_facts(LOCAL), None, 2.0)
    assert list(result.roles) == ["decode"] and result.advice is None
