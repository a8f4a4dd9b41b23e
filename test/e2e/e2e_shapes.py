"""The end-to-end runs of the shapes beyond one rank of a GQA hybrid, each a PD
prefill server with the plugin, on the CPU recipe:

- model families: an MLA model with an MTP layer (a tiny DeepSeek V3, NEXTN) and an
  MLA hybrid (a tiny Kimi Linear: KDA linear attention, MLA full attention);
- parallel shapes, each on two ranks over gloo: TP 2 and attention DP (``--tp 2
  --dp 2 --enable-dp-attention``) on the tiny Qwen3-Next with NEXTN, and PP 2 on the
  tiny DeepSeek V3 (Qwen3-Next's model class takes no pipeline split: SGLang refuses
  ``--pp-size`` for it). Two CPU ranks need the NCCL stand-in
  (``site/e2e_standins.py``, 8) and one core each where SGLang binds them
  (``SGLANG_CPU_OMP_THREADS_BIND``, SGLang's own setting for more ranks than NUMA
  nodes: ``one_core_per_rank``).

``test_e2e_shapes`` holds ``report`` given each server's own launch flags and
budget to what every rank of the server logged, and to what its pools allocated
(the start-up allocation ledger), to the byte.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

from harness import COMMON_ARGS, LEDGER_ENV, PD_TRANSFER_ARGS, SPEC_ARGS
from tiny_model import write_model

PREFILL = ["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS]
NEXTN = [*SPEC_ARGS, "--cuda-graph-backend-decode", "full"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShapeRun:
    kind: str  # tiny_model.MODEL_CONFIGS
    flags: list[str]  # launch flags after the CPU recipe
    tp: int = 1
    ranks: int = 1


SHAPE_RUNS = {
    # NEXTN on the MTP layer; the draft's layer counted in the KV budget as the
    # report counts it (with a draft model path: the checkpoint itself).
    "mla prefill": ShapeRun(kind="deepseek-v3", flags=NEXTN),
    # No MTP layer: no speculative decoding; no CUDA graphs on a CPU.
    "mla hybrid prefill": ShapeRun(kind="kimi-linear", flags=["--disable-cuda-graph"]),
    "tp 2 prefill": ShapeRun(
        kind="qwen3-next",
        flags=[*NEXTN, "--tp", "2"],
        tp=2,
        ranks=2,
    ),
    "attention dp prefill": ShapeRun(
        kind="qwen3-next",
        flags=[*NEXTN, "--tp", "2", "--dp", "2", "--enable-dp-attention"],
        tp=2,
        ranks=2,
    ),
    # One layer a stage.
    "pp 2 mla prefill": ShapeRun(
        kind="deepseek-v3",
        flags=["--disable-cuda-graph", "--pp-size", "2"],
        ranks=2,
    ),
}


def one_core_per_rank(run: ShapeRun) -> dict[str, str]:
    """SGLang's CPU thread binding for ``run``, one core a rank. Without it SGLang
    refuses more ranks than NUMA nodes: counting TP ranks up to 0.5.18
    (``numa_utils.init_threads_binding(tp_rank, tp_size)``, which then also refuses
    a binding for more than TP's ranks), every rank from 0.5.19 (``(numa_index,
    world_size)``)."""
    from sglang.srt.utils import numa_utils

    binds = inspect.signature(numa_utils.init_threads_binding).parameters
    bound = run.ranks if "world_size" in binds else run.tp
    if bound == 1:
        return {}
    return {"SGLANG_CPU_OMP_THREADS_BIND": "|".join(map(str, range(bound)))}


def shape_args(name: str, workdir: str) -> tuple[str, list[str], dict[str, str]]:
    """(model folder, launch flags after the model path, environment) of the run
    ``name`` of ``SHAPE_RUNS``, with the start-up allocation ledger on; writes the
    tiny model under ``workdir`` on first use."""
    run = SHAPE_RUNS[name]
    folder = os.path.join(workdir, f"tiny-{run.kind}")
    if not os.path.exists(os.path.join(folder, "config.json")):
        write_model(folder, run.kind)
    args = [*COMMON_ARGS, *run.flags, *PREFILL]
    if "--speculative-algorithm" in run.flags:
        args += ["--speculative-draft-model-path", folder]
    return folder, args, {**one_core_per_rank(run), LEDGER_ENV: "1"}
