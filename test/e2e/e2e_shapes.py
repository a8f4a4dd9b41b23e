"""The end-to-end runs of model families other than the GQA hybrid: an MLA model
with an MTP layer (a tiny DeepSeek V3, NEXTN) and an MLA hybrid (a tiny Kimi
Linear: KDA linear attention, MLA full attention), each a PD prefill server with
the plugin, on the CPU recipe. ``test_e2e_shapes`` holds ``report`` given each
server's own launch flags and budget to what the server logged.

The multi-rank shapes do not start on a CPU here, with SGLang's own error:

- ``--tp 2`` (and so ``--dp 2 --enable-dp-attention`` on two ranks): SGLang's
  process groups build a ``PyNcclCommunicator`` for the CPU group
  (``distributed/parallel_state.py``, ``GroupCoordinator.__init__``), and torch
  answers ``ValueError: Expected a cuda device, but got: cpu``; SGLang's CPU engine
  (``SGLANG_USE_CPU_ENGINE=1``), which skips it, needs sgl-kernel's CPU build.
- ``--pp-size 2``: the same process groups.

Those shapes are held to the config's own fields (``test/test_report_shapes.py``).
"""

from __future__ import annotations

import os

from harness import COMMON_ARGS, PD_TRANSFER_ARGS, SPEC_ARGS
from tiny_model import write_model

PREFILL = ["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS]
# name -> (tiny_model.MODEL_CONFIGS kind, launch flags after the CPU recipe)
SHAPE_RUNS = {
    # NEXTN on the MTP layer; the draft's layer counted in the KV budget as the
    # report counts it (with a draft model path: the checkpoint itself).
    "mla prefill": ("deepseek-v3", [*SPEC_ARGS, "--cuda-graph-backend-decode", "full"]),
    # No MTP layer: no speculative decoding; no CUDA graphs on a CPU.
    "mla hybrid prefill": ("kimi-linear", ["--disable-cuda-graph"]),
}


def shape_args(name: str, workdir: str) -> tuple[str, list[str]]:
    """(model folder, launch flags after the model path) of the run ``name`` of
    ``SHAPE_RUNS``; writes the tiny model under ``workdir`` on first use."""
    kind, flags = SHAPE_RUNS[name]
    folder = os.path.join(workdir, f"tiny-{kind}")
    if not os.path.exists(os.path.join(folder, "config.json")):
        write_model(folder, kind)
    args = [*COMMON_ARGS, *flags, *PREFILL]
    if "--speculative-algorithm" in flags:
        args += ["--speculative-draft-model-path", folder]
    return folder, args
