"""The end-to-end runs of speculative algorithms other than NEXTN.

``e2e_runs.RUNS`` runs NEXTN (the MTP layer inside the target's checkpoint); these
runs start the same tiny target with another algorithm, each as a PD prefill server
and as a unified server (no ``--disaggregation-mode``), each with the plugin and
with the plugin left out of SGLang's allow-list (``SGLANG_PLUGINS``):

- EAGLE3 and STANDALONE draft with a separate checkpoint, written next to the
  target with dummy weights (``tiny_model.write_draft``): an EAGLE3 head and a
  one-layer Llama.
- NGRAM has no draft model: its worker (``NGRAMWorker``) drafts from a token trie
  (``NgramCorpus``, SGLang's JIT-compiled C++) and verifies on the target.

``LEDGER_ALGORITHMS`` run only as a PD prefill server with the plugin, keeping the
start-up allocation ledger (``test_e2e_audit_ledger.py`` accounts for each entry):

- FROZEN_KV_MTP: a Gemma 4 assistant draft on a tiny Gemma 4 text target (the
  assistant binds to its target's Gemma 4 layer types; the Qwen3-Next target has
  none).
- DFLASH and DSPARK: block drafts on the tiny Qwen3-Next. SGLang refuses both on
  ``--device cpu`` while it resolves its arguments (a device check, no kernel);
  the CPU stand-in 9 (``site/e2e_standins.py``) lifts that check alone.

``Runs.server`` in ``e2e_runs`` builds a server of ``ALGO_RUNS`` with
``algo_args``; ``Runs.get`` starts it as it starts the others.
"""

from __future__ import annotations

import ast
import dataclasses
import os

from harness import COMMON_ARGS, LEDGER_ENV, PD_TRANSFER_ARGS
from tiny_model import write_draft, write_model

# SGLang's allow-list of plugins, naming a plugin that is not ours.
NOT_OUR_PLUGIN = "some_other_plugin"
ONE_STEP = [
    "--speculative-num-steps", "1",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "2",
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Algorithm:
    flags: list[str]
    # ``tiny_model.DRAFT_CONFIGS`` key of its separate draft checkpoint; None: none.
    draft: str | None = None
    # ``tiny_model.MODEL_CONFIGS`` key of its target; None: the session's
    # tiny Qwen3-Next.
    target: str | None = None


ALGORITHMS = {
    "EAGLE3": Algorithm(["--speculative-algorithm", "EAGLE3", *ONE_STEP], "eagle3"),
    "STANDALONE": Algorithm(
        ["--speculative-algorithm", "STANDALONE", *ONE_STEP], "llama"
    ),
    # NgramCorpus's default capacity (10,000,000 trie nodes) takes ~2 GiB of host
    # memory while the worker is built, between the two free-memory readings SGLang
    # sizes a CPU server's pools from: at the e2e share (0.1) the budget turns
    # negative (``total_rest_memory=-0.01 GB``, 0.5.23) and the server refuses.
    "NGRAM": Algorithm(
        [
            "--speculative-algorithm", "NGRAM",
            "--speculative-num-draft-tokens", "4",
            "--speculative-ngram-capacity", "10000",
        ]  # fmt: skip
    ),
}
# Prefill servers with the ledger only.
LEDGER_ALGORITHMS = {
    "FROZEN_KV_MTP": Algorithm(
        ["--speculative-algorithm", "FROZEN_KV_MTP", *ONE_STEP],
        "gemma4-assistant",
        "gemma4",
    ),
    # The block size of each draft config; the draft attention backend named, as
    # the resolution would pick a GPU one for the device the stand-in shows it.
    "DFLASH": Algorithm(
        [
            "--speculative-algorithm", "DFLASH",
            "--speculative-dflash-block-size", "4",
            "--speculative-draft-attention-backend", "triton",
        ],  # fmt: skip
        "dflash",
    ),
    "DSPARK": Algorithm(
        [
            "--speculative-algorithm", "DSPARK",
            "--speculative-dspark-block-size", "3",
            "--speculative-draft-attention-backend", "triton",
        ],  # fmt: skip
        "dspark",
    ),
}
PREFILL = ["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS]
# role suffix -> (role's launch flags, environment)
# The prefill servers keep the start-up allocation ledger (site/e2e_ledger.py):
# test_e2e_audit_ledger.py accounts for every entry.
ROLES = {
    "prefill": (PREFILL, {LEDGER_ENV: "1"}),
    "prefill, allow-list without us": (
        PREFILL,
        {"SGLANG_PLUGINS": NOT_OUR_PLUGIN, LEDGER_ENV: "1"},
    ),
    "null": ([], {}),
    "null, allow-list without us": ([], {"SGLANG_PLUGINS": NOT_OUR_PLUGIN}),
}
# "ALGORITHM role" -> (algorithm, role suffix)
ALGO_RUNS = {
    **{f"{algo} {role}": (algo, role) for algo in ALGORITHMS for role in ROLES},
    **{f"{algo} prefill": (algo, "prefill") for algo in LEDGER_ALGORITHMS},
}


def algo_args(
    name: str, workdir: str, model_dir: str
) -> tuple[str, list[str], dict[str, str]]:
    """(target folder, launch flags after the model path, environment) of the run
    ``name`` of ``ALGO_RUNS``; ``model_dir``: the session's tiny Qwen3-Next. Writes
    its draft (and its own target) under ``workdir`` on first use. As the NEXTN
    runs: the CPU recipe and an explicit decode graph backend (set, upstream's draft
    worker reaches its graph-capture step, where the draft_graph gate sits)."""
    algo, role = ALGO_RUNS[name]
    algorithm = {**ALGORITHMS, **LEDGER_ALGORITHMS}[algo]
    args = [*COMMON_ARGS, *algorithm.flags, "--cuda-graph-backend-decode", "full"]
    if algorithm.draft is not None:
        folder = os.path.join(workdir, f"tiny-draft-{algorithm.draft}")
        if not os.path.exists(os.path.join(folder, "config.json")):
            write_draft(folder, algorithm.draft)
        args += ["--speculative-draft-model-path", folder]
    if algorithm.target is not None:
        model_dir = os.path.join(workdir, f"tiny-{algorithm.target}")
        if not os.path.exists(os.path.join(model_dir, "config.json")):
            write_model(model_dir, algorithm.target)
    extra, env = ROLES[role]
    return model_dir, [*args, *extra], dict(env)


# -- what the runs logged ------------------------------------------------------

STANDIN_ALLOCATION = (
    r"\[e2e-standin\] MambaPool: torch\.zeros\(device='cuda'\) allocated on cpu: "
    r"size=(?P<size>.*) dtype=torch\.(?P<dtype>\w+)$"
)


def redirected_allocations(run) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each of MambaPool's ``device="cuda"`` allocations the CPU
    stand-in moved to the CPU (``site/e2e_standins.py``, item 5), in order."""
    found = []
    for m in run.lines(STANDIN_ALLOCATION):
        size = ast.literal_eval(m["size"])
        if size and isinstance(size[0], tuple):  # torch.zeros((a, b, ...))
            size = size[0]
        found.append((tuple(size), m["dtype"]))
    return found


def redirected_bytes(run) -> int:
    """The bytes of ``redirected_allocations(run)``."""
    import math

    import torch

    return sum(
        math.prod(shape) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        for shape, dtype in redirected_allocations(run)
    )


JIT_ERROR = (
    r"(?P<file>sglang/kernels/jit/csrc/\S+?):(?P<line>\d+):\d+: error: (?P<error>.*)"
)
SRT_FRAME = (
    r'File "[^"]*/(?P<file>sglang/srt/\S+\.py)", line (?P<line>\d+), in (?P<fn>\w+)'
)


def jit_build_failure(run) -> str | None:
    """Where SGLang's JIT C++ build (``sglang.kernels.jit``, ninja) failed while the
    server started: the compiler's first error (file:line), the compiler, and the
    last ``sglang/srt`` frame that asked for the build; None if the run did not
    fail so."""
    if run.ready or not run.lines(r"RuntimeError: ninja exited with status"):
        return None
    errors = run.lines(JIT_ERROR)
    if not errors:
        return None
    frames = run.lines(SRT_FRAME)
    caller = (
        f", built from {frames[-1]['file']}:{frames[-1]['line']} ({frames[-1]['fn']})"
        if frames
        else ""
    )
    return (
        f"{errors[0]['file']}:{errors[0]['line']}: error: {errors[0]['error']} "
        f"({_compiler_version()}{caller})"
    )


def _compiler_version() -> str:
    """The first line of ``c++ --version`` (the compiler SGLang's build runs)."""
    import subprocess

    try:
        done = subprocess.run(
            ["c++", "--version"], capture_output=True, text=True, timeout=30
        )
    except OSError:
        return "c++"
    return done.stdout.splitlines()[0].strip() if done.stdout else "c++"
