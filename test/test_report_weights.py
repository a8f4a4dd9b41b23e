"""``report``'s weights per rank: SGLang's own model classes built for rank 0 of the
launch (``census.weights``), else the checkpoint's safetensors index, else an error
that names both. Exactness against a real server's parameters is the e2e test
``test/e2e/test_e2e_weights.py``; here, the choice of source, the TP sharding, the
draft model, and each model's size against the parameter count in its name."""

from __future__ import annotations

import json
import os

import pytest
from helpers import NEXTN

from sglang_pd_lean import census, cli
from sglang_pd_lean.census import model, weights
from sglang_pd_lean.census.inputs import MODELS_DIR
from sglang_pd_lean.census.launch import GPUS
from sglang_pd_lean.census.weights import BUILD_ENV
from sglang_pd_lean.units import GIB

INDEX_TOTAL = 160 * GIB  # a made-up checkpoint size, unlike the model's own


def report_memory(capsys, *args: str) -> dict:
    code = cli.main(["report", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    return result["memory"][result["launch"]["role"]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """The bundled Qwen3-Next's config with a safetensors index beside it."""
    folder = tmp_path_factory.mktemp("ckpt")
    with open(os.path.join(MODELS_DIR, "qwen3-next-80b-a3b.json")) as f:
        (folder / "config.json").write_text(f.read())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": INDEX_TOTAL}, "weight_map": {}})
    )
    return str(folder)


def unified_memory(argv: tuple[str, ...]) -> dict:
    """The memory of a unified server's census on a B200, as JSON."""
    launch = census.Launch(argv=argv, gpu=GPUS["b200"])
    return census.jsonable(census.report(launch, roles=("null",)))["memory"]["null"]


@pytest.fixture(scope="module")
def built(checkpoint) -> dict:
    """Memory of the launch's role, one census per TP (1 without, 2 with NEXTN)."""
    argv = {1: [], 2: ["--tp", "2", *NEXTN]}
    return {
        tp: unified_memory(("--model-path", checkpoint, *more))
        for tp, more in argv.items()
    }


def test_sglangs_class_answers_before_the_index(built):
    for tp, memory in built.items():
        assert memory["weights_source"].startswith("SGLang's model class"), memory
        assert (
            f"for rank 0 of TP {tp}, EP 1: Qwen3NextForCausalLM"
            in memory["weights_source"]
        )
        assert memory["weights_bytes"] != INDEX_TOTAL // tp


def test_the_built_weights_are_the_80b_models_and_shard_over_tp(built):
    one, two = built[1]["weights_bytes"], built[2]["weights_bytes"]
    # 80 B parameters in bfloat16, from the model's name: within 3% at TP 1.
    assert abs(one - 80e9 * 2) < 0.03 * 80e9 * 2
    # TP 2 holds half of every sharded tensor and all of the replicated ones.
    assert one / 2 <= two < 0.51 * one


def test_the_draft_model_is_built_only_with_speculative_decoding(built):
    assert built[1]["draft_weights_bytes"] == 0
    assert "draft" not in built[1]["weights_source"]
    assert "draft Qwen3NextForCausalLMMTP" in built[2]["weights_source"]
    # One MTP decoder layer (of 48) plus its own embedding and LM head shards.
    layer = built[2]["weights_bytes"] / 48
    assert layer < built[2]["draft_weights_bytes"] < 3 * layer


def test_the_index_answers_when_the_build_is_off(checkpoint, capsys, monkeypatch):
    monkeypatch.setenv(BUILD_ENV, "false")
    memory = report_memory(
        capsys, "--gpu", "h200", "--", "--model-path", checkpoint, "--tp", "4"
    )
    assert memory["weights_bytes"] == INDEX_TOTAL // 4
    assert memory["weights_source"] == "model.safetensors.index.json total_size / TP 4"


def test_no_build_and_no_index_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setenv(BUILD_ENV, "0")
    with open(os.path.join(MODELS_DIR, "qwen3-next-80b-a3b.json")) as f:
        folder = model.model_folder(json.load(f))
    code = cli.main(["report", "--gpu", "h200", "--", "--model-path", folder])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"{BUILD_ENV} is off" in lines[0] and "--weights-gib" in lines[0]


def test_a_hybrid_transformers_cannot_build_gets_sglangs_class(capsys):
    """Kimi-Linear (48 B parameters in its name, bfloat16) at TP 2: SGLang's class
    builds (its side stream too) where transformers has no class for it."""
    try:
        import sglang.srt.models.kimi_linear  # noqa: F401
    except ModuleNotFoundError as exc:
        # 0.5.15 imports its DSA kernels (cutlass) with the model: not on a CPU venv.
        pytest.skip(f"SGLang's Kimi-Linear module needs {exc.name}, not installed here")
    memory = report_memory(
        capsys, "--model", "kimi-linear-48b-a3b", "--gpu", "h200", "--", "--tp", "2"
    )
    assert "KimiLinearForCausalLM" in memory["weights_source"]
    assert abs(memory["weights_bytes"] - 48e9) < 0.05 * 48e9


def test_a_failed_build_falls_back_to_the_index_and_says_why(
    checkpoint, capsys, monkeypatch
):
    """The child's failure comes back through the pipe: the index answers, and the
    source says why the class did not; without an index it is one line, exit 2."""

    def fails(server_args):
        raise RuntimeError("no class for this host")

    monkeypatch.setattr(weights, "build", fails)  # the forked child inherits it
    memory = report_memory(
        capsys, "--gpu", "h200", "--", "--model-path", checkpoint, "--tp", "4"
    )
    assert memory["weights_bytes"] == INDEX_TOTAL // 4
    assert memory["weights_source"] == (
        "model.safetensors.index.json total_size / TP 4 (SGLang's model class did "
        "not build: RuntimeError: no class for this host)"
    )
    with open(os.path.join(MODELS_DIR, "qwen3-next-80b-a3b.json")) as f:
        folder = model.model_folder(json.load(f))
    code = cli.main(["report", "--gpu", "h200", "--", "--model-path", folder])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "did not build (RuntimeError: no class for this host)" in err


def dp_attention_spellings() -> list[list[str]]:
    """The launch flags of attention DP 2 the installed SGLang takes: the
    ``--enable-dp-attention`` spelling on every release, and ``--attn-dp-size``
    where SGLang has that field (0.5.22+, where the first is deprecated)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    spellings = [["--dp", "2", "--enable-dp-attention"]]
    if "--attn-dp-size" in parser._option_string_actions:
        spellings.append(["--attn-dp-size", "2"])
    return spellings


def test_attention_dp_reaches_sglangs_groups(checkpoint, built):
    """Attention DP 2 at TP 2: SGLang's groups for rank 0 have attention TP 1, so
    the attention weights are whole on the rank and the rest is still halved: more
    than TP 2 without it, less than TP 1. Built by SGLang's class, never the index
    (on 0.5.22 and 0.5.23 the deprecated flag resolves to ``attn_dp_size``, which the
    build's width check once missed)."""
    for flags in dp_attention_spellings():
        memory = unified_memory(("--model-path", checkpoint, "--tp", "2", *flags))
        source = memory["weights_source"]
        assert "for rank 0 of TP 2, EP 1: Qwen3NextForCausalLM" in source, flags
        target = memory["weights_bytes"]
        assert built[2]["weights_bytes"] < target < built[1]["weights_bytes"], flags


def test_plain_data_parallelism_builds_each_replica_as_its_tp(checkpoint):
    """``--dp 2`` without attention DP: each replica is a whole TP 2 model, so a
    rank holds what a TP 2 rank holds, built by SGLang's class for rank 0 of TP 2
    (a width check that took the DP width for attention's, or refused plain DP,
    would fall back to the index or build another split)."""
    base = ("--model-path", checkpoint, "--tp", "2")
    tp = unified_memory(base)
    dp = unified_memory((*base, "--dp", "2"))
    for memory in (tp, dp):
        source = memory["weights_source"]
        assert "for rank 0 of TP 2, EP 1: Qwen3NextForCausalLM" in source, source
    assert dp["weights_bytes"] == tp["weights_bytes"]


def test_expert_parallelism_reaches_sglangs_groups(capsys):
    """``--ep 4`` at TP 4: SGLang's own MoE group the model is built in has 4 ranks
    (each holds a quarter of the experts, whole, instead of a quarter of each)."""
    memory = report_memory(
        capsys,
        "--model",
        "qwen3-next-80b-a3b",
        "--gpu",
        "h200",
        "--",
        "--tp",
        "4",
        "--ep",
        "4",
    )
    assert "for rank 0 of TP 4, EP 4: Qwen3NextForCausalLM" in memory["weights_source"]


def test_a_weights_seam_sglang_lacks_falls_back_to_the_index_naming_it(
    checkpoint, capsys, monkeypatch
):
    """A release without the loader's ``_initialize_model``: no build is tried, the
    index answers, and the source names the seam and ``doctor``."""
    from sglang.srt.model_loader import loader

    monkeypatch.delattr(loader, "_initialize_model")
    memory = report_memory(
        capsys, "--gpu", "h200", "--", "--model-path", checkpoint, "--tp", "4"
    )
    assert memory["weights_bytes"] == INDEX_TOTAL // 4
    source = memory["weights_source"]
    assert source.startswith("model.safetensors.index.json total_size / TP 4 (")
    assert "sglang.srt.model_loader.loader._initialize_model" in source
    assert "sglang-pd-lean doctor" in source


# SGLang's reading of a boolean variable (``environ.EnvBool``), written out.
SGLANG_BOOLEANS = {
    "true": True,
    "1": True,
    "yes": True,
    "Y": True,
    "TRUE": True,
    "false": False,
    "0": False,
    "no": False,
    "N": False,
    "False": False,
}


@pytest.mark.parametrize("value", sorted(SGLANG_BOOLEANS))
def test_the_build_switch_reads_as_sglang_reads_its_booleans(value, monkeypatch):
    monkeypatch.setenv(BUILD_ENV, value)
    assert weights.build_weights() is SGLANG_BOOLEANS[value]


def test_the_build_is_on_unless_switched_off(monkeypatch):
    monkeypatch.delenv(BUILD_ENV, raising=False)
    assert weights.build_weights() is True


def test_a_build_switch_that_is_no_boolean_is_one_line(checkpoint, capsys, monkeypatch):
    monkeypatch.setenv(BUILD_ENV, "sometimes")
    code = cli.main(["report", "--gpu", "h200", "--", "--model-path", checkpoint])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{BUILD_ENV}=sometimes" in err


def test_groups_without_the_launchs_ep_fall_back_to_the_index_and_say_why(
    checkpoint, capsys, monkeypatch
):
    """SGLang's groups built with another EP width than the launch resolved (as a
    release that stopped reading it would): the weights per rank would be another
    launch's, so the index answers and the source names the width."""
    from sglang.srt.distributed import parallel_state as ps

    monkeypatch.setattr(ps, "get_moe_expert_parallel_world_size", lambda: 1)
    memory = report_memory(
        capsys, "--gpu", "h200", "--", "--model-path", checkpoint, "--tp", "4"
    )  # EP 1 resolved, EP 1 built: the class answers
    assert memory["weights_source"].startswith("SGLang's model class"), memory
    memory = report_memory(
        capsys,
        "--gpu",
        "h200",
        "--",
        "--model-path",
        checkpoint,
        "--tp",
        "4",
        "--ep",
        "4",
    )
    assert memory["weights_bytes"] == INDEX_TOTAL // 4
    assert "EP 1 (the launch resolved 4)" in memory["weights_source"]


def test_a_width_argument_sglang_no_longer_takes_falls_back_to_the_index(
    checkpoint, capsys, monkeypatch
):
    import inspect

    from sglang.srt.distributed import parallel_state as ps

    original = ps.initialize_model_parallel
    signature = inspect.signature(original)
    if "expert_model_parallel_size" not in signature.parameters:
        pytest.skip("this SGLang takes no widths: it reads the published launch")

    def narrowed(*args, **kwargs):
        return original(*args, **kwargs)

    narrowed.__signature__ = signature.replace(
        parameters=[
            p
            for p in signature.parameters.values()
            if p.name != "expert_model_parallel_size"
        ]
    )
    monkeypatch.setattr(ps, "initialize_model_parallel", narrowed)
    argv = ["--model-path", checkpoint, "--tp", "4", "--ep", "4"]
    memory = report_memory(capsys, "--gpu", "h200", "--", *argv)
    assert memory["weights_bytes"] == INDEX_TOTAL // 4
    assert "takes no expert_model_parallel_size=4" in memory["weights_source"]


# ------------------------------------------------------------- the forked child


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _sleeps(server_args) -> bytes:
    import time

    time.sleep(60)
    return b"{}"


def test_a_build_that_outlasts_its_time_is_killed_and_said(monkeypatch):
    """A child still building after ``TIMEOUT_S``: killed, reaped, its pipe
    closed, and the report told how long it waited."""
    monkeypatch.setattr(weights, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(weights, "answer", _sleeps)
    build = weights.Build(None)
    pid, fd = build._process.pid, build._read
    got = build.result()
    assert got.error == "building the model took over 0.5 s"
    assert got.target_bytes == 0
    assert _reaped(pid) and _closed(fd)


def test_a_child_that_answers_no_json_is_said(monkeypatch):
    monkeypatch.setattr(weights, "answer", lambda server_args: b"not json")
    build = weights.Build(None)
    pid = build._process.pid
    assert build.result().error == "the build process ended without an answer"
    assert _reaped(pid)


def test_cancel_kills_and_reaps_the_child_and_closes_its_pipe(monkeypatch):
    monkeypatch.setattr(weights, "answer", _sleeps)
    build = weights.Build(None)
    pid, fd = build._process.pid, build._read
    build.cancel()
    assert _reaped(pid) and _closed(fd)
    assert build.result().error == "cancelled"
    build.cancel()  # a second cancel is nothing


def test_a_host_that_cannot_fork_is_said_and_leaks_no_pipe(monkeypatch):
    import multiprocessing

    def refuse(process):
        raise OSError(11, "Resource temporarily unavailable")

    before = set(os.listdir("/proc/self/fd"))
    fork = multiprocessing.get_context("fork")
    monkeypatch.setattr(fork.Process, "_Popen", staticmethod(refuse))
    build = weights.Build(None)
    assert set(os.listdir("/proc/self/fd")) == before
    got = build.result()
    assert got.error == "cannot fork: [Errno 11] Resource temporarily unavailable"
    build.cancel()
    assert build.result().error == got.error


def test_a_daemonic_process_that_may_not_fork_is_said_and_leaks_no_pipe(monkeypatch):
    """multiprocessing forks no child from a daemonic process (a library caller in
    a daemonic worker): the build says so and the other sources answer."""
    import multiprocessing

    before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setitem(multiprocessing.current_process()._config, "daemon", True)
    build = weights.Build(None)
    assert set(os.listdir("/proc/self/fd")) == before
    assert build.result().error == (
        "cannot fork: daemonic processes are not allowed to have children"
    )
