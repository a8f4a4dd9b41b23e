"""What the operator types reaches SGLang as typed: the GPU facts (published
figures, not the code's table), the units of ``--gpu-memory-gib`` and ``--gpu-sm``,
the terms of the available-memory formula, the role the flags name (either flag
spelling SGLang accepts), and every census flag, each to its own input."""

from __future__ import annotations

import json

import pytest
from formulas import GIB
from helpers import NEXTN

from sglang_pd_lean import cli
from sglang_pd_lean.census import flags, gpu_probes, launch

# nvidia-smi's memory.total (MiB) and the compute capability of each part.
PUBLISHED = {
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 81920, (8, 0)),
    "h100": ("NVIDIA H100 80GB HBM3", 81559, (9, 0)),
    "h20": ("NVIDIA H20", 97871, (9, 0)),
    "h200": ("NVIDIA H200", 143771, (9, 0)),
    "b200": ("NVIDIA B200", 183359, (10, 0)),
    "gb200": ("NVIDIA GB200", 189471, (10, 0)),
}


def report_json(capsys, *args: str) -> dict:
    code = cli.main(["report", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("gpu", sorted(PUBLISHED))
def test_a_named_gpu_answers_sglangs_probes_with_its_published_facts(gpu):
    from sglang.srt.utils import common

    name, memory_mib, capability = PUBLISHED[gpu]
    with launch.on_gpu(launch.gpu_facts(gpu)):
        assert common.get_device_name() == name
        assert common.get_device_memory_capacity() == memory_mib
        assert common.get_device_capability() == capability
        assert common.get_device_sm() == capability[0] * 10 + capability[1]
        assert common.is_sm90_supported() is (capability[0] == 9)
        assert common.is_sm100_supported() is (capability[0] == 10)
        assert common.is_blackwell_supported() is (capability[0] >= 10)


def test_gpu_memory_gib_and_sm_are_gib_and_major_minor():
    """96 GiB is 98,304 MiB to SGLang; SM 103 is capability (10, 3)."""
    from sglang.srt.utils import common

    with launch.on_gpu(launch.gpu_facts(None, 96.0, 103)):
        assert common.get_device_memory_capacity() == 96 * 1024
        assert common.get_device_capability() == (10, 3)
        assert common.get_device_sm() == 103
        assert common.is_sm100_supported() and not common.is_sm90_supported()


@pytest.fixture(scope="module")
def h200_report() -> dict:
    code_out = {}

    def run():
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code_out["code"] = cli.main(
                ["report", "--json", "--model", "qwen3-next-80b-a3b", "--gpu", "h200"]
                + ["--", "--tp", "4", *NEXTN]
            )
        return json.loads(out.getvalue())

    result = run()
    assert code_out["code"] == 0
    return result


def test_the_named_gpu_reaches_the_report_as_published(h200_report):
    gpu = h200_report["launch"]["gpu"]
    assert (gpu["name"], gpu["memory_mib"]) == PUBLISHED["h200"][:2]
    memory = h200_report["memory"]["null"]
    assert memory["gpu_gib"] == 143771 / 1024


def test_available_memory_is_total_less_context_times_mfs_less_both_weights(
    h200_report,
):
    """SGLang's ``total_rest_memory``: (T - C) * mem_fraction_static - W, with
    C = 1 GiB and W the target's and the draft's weights (both built here)."""
    memory = h200_report["memory"]["null"]
    mfs = h200_report["resolved"]["null"]["mem_fraction_static"]
    assert memory["mem_fraction_static"] == mfs
    assert memory["draft_weights_bytes"] > 0 and memory["weights_bytes"] > 0
    weights = memory["weights_bytes"] + memory["draft_weights_bytes"]
    expected = (143771 / 1024 - 1.0) * mfs - weights / GIB
    assert memory["available_gib"] == pytest.approx(expected, rel=1e-12)
    assert h200_report["inputs"]["available_gib"] == memory["available_gib"]


@pytest.mark.parametrize(
    "argv,role",
    [
        (["--tp", "4"], "null"),
        (["--disaggregation-mode", "prefill"], "prefill"),
        (["--disaggregation-mode=decode"], "decode"),
        (
            ["--disaggregation-mode=prefill", "--disaggregation-mode", "decode"],
            "decode",
        ),
        (
            ["--disaggregation-mode", "decode", "--disaggregation-mode=prefill"],
            "prefill",
        ),
    ],
)
def test_the_role_the_flags_name_is_the_last_one_in_either_spelling(argv, role):
    """argparse keeps the last of repeated flags, in either spelling."""
    assert flags.given_role(argv) == role


@pytest.mark.parametrize(
    "argv",
    [
        ["--tp", "4", "--disaggregation-mode", "prefill"],
        ["--disaggregation-mode=prefill", "--tp", "4"],
        ["--tp", "4"],
    ],
)
def test_another_role_replaces_the_flag_in_either_spelling(argv):
    """SGLang's parser reads the same flags, the role replaced."""
    out = flags.role_argv(argv, "decode")
    assert flags.given(out) == {**flags.given(argv), "disaggregation_mode": "decode"}
    assert flags.given(out)["tp_size"] == 4


@pytest.mark.parametrize("spelling", ["split", "equals"])
def test_model_path_in_either_spelling(spelling):
    argv = (
        ["--tp", "2", "--model-path", "/m"]
        if spelling == "split"
        else ["--model-path=/m", "--tp", "2"]
    )
    assert flags.model_path(argv) == "/m"
    assert flags.model_path(["--tp", "2"]) is None


def test_the_launch_flags_equals_spelling_resolves_as_the_split_one(capsys):
    flags = {"--tp": "4", "--disaggregation-mode": "prefill"}
    flags["--max-running-requests"] = "64"
    model = ("--model", "qwen3-next-80b-a3b", "--weights-gib", "40", "--")
    split = report_json(capsys, *model, *(x for kv in flags.items() for x in kv))
    equals = report_json(capsys, *model, *(f"{k}={v}" for k, v in flags.items()))
    assert equals["launch"]["role"] == split["launch"]["role"] == "prefill"
    assert equals["resolved"] == split["resolved"]
    assert equals["resolved"]["prefill"]["tp_size"] == 4
    assert equals["resolved"]["prefill"]["max_running_requests"] == 64


def test_every_census_flag_reaches_its_own_input(capsys):
    """Distinct values, so a dropped or swapped argument shows."""
    result = report_json(
        capsys,
        "--model",
        "qwen3-next-80b-a3b",
        "--tp",
        "2",
        "--max-running-requests",
        "24",
        "--max-mamba-cache-size",
        "77",
        "--speculative-num-draft-tokens",
        "3",
        "--mamba-ssm-dtype",
        "bfloat16",
        "--context-length",
        "4096",
        "--available-gib",
        "33.5",
    )
    inputs = result["inputs"]
    assert inputs["tp"] == 2 and inputs["pp"] == 1
    assert inputs["max_running_requests"] == 24
    assert inputs["max_mamba_cache_size"] == 77
    assert inputs["speculative_num_draft_tokens"] == 3
    assert inputs["mamba_ssm_dtype"] == "bfloat16"
    assert inputs["context_length"] == 4096
    assert inputs["available_gib"] == 33.5
    assert result["roles"]["prefill"]["upstream"]["mamba_slots"] == 77


# ------------------------------------------------------------------ words of an error


@pytest.mark.parametrize(
    "config, hints",
    [
        ({"mamba_d_state": 16, "hidden_size": 8}, ["mamba_d_state"]),
        # A multimodal model keeps its language model's fields in text_config.
        ({"text_config": {"linear_num_value_heads": 4}}, ["linear_num_value_heads"]),
        ({"text_config": "not a section", "ssm_state_size": 4}, ["ssm_state_size"]),
        ({"layer_types": ["full_attention", "linear_attention"]}, ["layer_types"]),
        ({"layer_types": ["attention", "mamba"]}, ["layer_types"]),
        ({"layer_types": ["full_attention", "sliding_attention"]}, []),
        ({"layer_types": "linear_attention"}, []),  # not a list of layers
        ({"block_names": ["mamba_mixer"]}, []),  # only layer_types lists layers
        ({"num_hidden_layers": 4, "sliding_window": 8}, []),
    ],
)
def test_the_fields_that_describe_linear_layers_are_named(config, hints):
    from sglang_pd_lean.census.inputs import linear_hints

    assert linear_hints(config) == hints


def test_an_error_is_one_line_of_at_most_its_limit():
    from sglang_pd_lean.census.inputs import one_line

    assert one_line(ValueError("a\n  b\tc ")) == "a b c"
    assert one_line(ValueError("x" * 400)) == "x" * 400  # exactly the limit: whole
    cut = one_line(ValueError("y" * 401))
    assert cut == "y" * 397 + "..." and len(cut) == 400
    assert one_line(ValueError("abcdefgh"), limit=6) == "abc..."


def test_every_sglang_module_holding_a_probe_by_name_answers_for_the_gpu(monkeypatch):
    """A module that imported ``is_cuda`` by name (``from ... import is_cuda``) holds
    its own reference: inside ``on_gpu`` it too answers for the named GPU, found
    afresh (the search's cache emptied), and after, it holds SGLang's own again."""
    import sys

    from sglang.srt.utils import common

    original = common.is_cuda
    holders = [
        m
        for m in list(sys.modules.values())
        if getattr(m, "__name__", "").startswith("sglang")
        and m is not common
        and getattr(m, "is_cuda", None) is original
    ]
    assert holders, "no SGLang module holds is_cuda by name"
    monkeypatch.setattr(gpu_probes, "_holders", {})
    with launch.on_gpu(launch.gpu_facts("h200")):
        assert [m.is_cuda() for m in holders] == [True] * len(holders)
        assert all(m.is_cuda is not original for m in holders)
    assert all(m.is_cuda is original for m in holders)


def test_a_module_swapped_for_another_of_the_same_count_is_searched_again(
    monkeypatch,
):
    """The search for the probes' holders is cached on SGLang's modules by name and
    object: one module replaced by another (as many modules as before) that holds
    ``is_cuda`` by name answers for the named GPU too."""
    import sys
    import types

    from sglang.srt.utils import common

    with launch.on_gpu(launch.gpu_facts("h200")):
        pass  # the search ran and is cached
    name = next(n for n in sorted(sys.modules) if n.startswith("sglang.srt."))
    swapped = types.ModuleType(name)
    swapped.is_cuda = common.is_cuda
    monkeypatch.setitem(sys.modules, name, swapped)
    with launch.on_gpu(launch.gpu_facts("h200")):
        assert swapped.is_cuda() is True
    assert swapped.is_cuda is common.is_cuda


def _raised(tmp_path, source: str) -> BaseException:
    """What ``f()`` of a module written from ``source`` raises."""
    import importlib.util

    path = tmp_path / "refuses.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("refuses", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Exception) as raised:
        module.f()
    return raised.value


def test_an_error_without_a_message_names_the_whole_statement_that_raised(tmp_path):
    """A bare ``assert`` over several lines: from its first line, on one line."""
    from sglang_pd_lean.census.inputs import failure

    exc = _raised(
        tmp_path,
        "def f(a=None, b=1):\n"
        "    if a is None:\n"
        "        assert (\n"
        "            a is None\n"
        "            and b is None\n"
        "        )\n",
    )
    assert failure(exc) == (
        f"AssertionError at {tmp_path / 'refuses.py'}:3: "
        "assert (a is None and b is None)"
    )


def test_an_error_raised_in_a_compound_statements_header_names_the_header(tmp_path):
    from sglang_pd_lean.census.inputs import failure

    exc = _raised(
        tmp_path,
        "def f(xs=None):\n    for x in (\n        iter(xs)\n    ):\n        pass\n",
    )
    assert failure(exc) == "TypeError: 'NoneType' object is not iterable"
    exc.args = ()  # the same error without its message
    assert failure(exc) == (
        f"TypeError at {tmp_path / 'refuses.py'}:2: for x in (iter(xs)):"
    )


def test_an_error_with_a_message_is_its_type_and_message():
    from sglang_pd_lean.census.inputs import failure

    assert failure(ValueError("no\n room")) == "ValueError: no room"
