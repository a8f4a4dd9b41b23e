"""Plain helpers the test modules import (test modules never import each other,
and ``conftest`` is not importable by name once a second conftest.py is loaded):
the release oracle for native gates, a model runner stand-in, a fresh interpreter.
Expected figures live in ``formulas``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# (bundled model, TP) of the layouts the budget and patch tests size: each hybrid
# family (GDN, KDA, Mamba2) and TP 2 to 8.
LAYOUTS = [
    ("qwen3-next-80b-a3b", 4),
    ("qwen3.5-397b-a17b", 8),
    ("kimi-linear-48b-a3b", 2),
    ("nemotron-h-8b", 2),
]


# The usual NEXTN launch for Qwen3-Next / Qwen3.5 (no draft model path): 3 steps,
# top-k 1, 4 draft tokens.
NEXTN_DRAFT_TOKENS = 4
NEXTN = [
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    str(NEXTN_DRAFT_TOKENS),
]


# The release that first does each gate's job itself (from upstream's sources), an
# oracle independent of the plugin's own detection in ``compat``.
# None: no supported release (up to 0.5.23) does it.
NATIVE_FROM = {
    "pool": 18,
    "graph": 18,
    "warmup": 18,
    "budget": 22,
    "draft_graph": None,
    "autotune": None,
}


def sglang_minor() -> int:
    import sglang

    return int(sglang.__version__.split(".")[2][:2])


def sizing_pad() -> int:
    """Padding slots SGLang's mamba sizing charges beside the slots it counts: one
    from 0.5.17 (its ``_handle_max_mamba_cache``: "+1: the pool's padding slot", on
    the state and on the verify snapshots); 0.5.16's sizing charges none, though its
    pool allocates the padding slot too."""
    return 0 if sglang_minor() <= 16 else 1


# Set by test_patches.py when the SGLang under test carries one of patches/: the
# gates that patch makes upstream's own (comma-separated).
PATCHED_ENV = "SGLANG_PD_LEAN_TEST_PATCHED_GATES"


def upstream_has(gate: str, version: str | None = None) -> bool:
    """Whether SGLang ``version`` (default: the installed one, patched or not) does
    ``gate``'s job itself, by the oracle above."""
    if version is None:
        if gate in os.environ.get(PATCHED_ENV, "").split(","):
            return True
        minor = sglang_minor()
    else:
        minor = int(version.split(".")[2][:2])
    since = NATIVE_FROM[gate]
    return since is not None and minor >= since


def stand_in_model_runner(server_args, fields: dict, *, is_draft_worker: bool, **extra):
    """The fields of a ModelRunner that graph setup and warmup read (a real one needs a
    GPU and weights), for the worker the published ``fields`` describe."""
    import types

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    draft_tokens = fields.get("speculative_num_draft_tokens") or 1
    values = dict(
        server_args=server_args,
        is_draft_worker=is_draft_worker,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            fields.get("speculative_algorithm")
        ),
        is_generation=True,
        device="cuda",
        gpu_id=0,
        decode_num_tokens_per_req=lambda: draft_tokens,
    )
    values.update(extra)
    return types.SimpleNamespace(**values)


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter of this venv; stdout and stderr captured."""
    full_env = dict(os.environ)
    full_env.pop("SGLANG_PLUGINS", None)
    full_env.pop("SGLANG_PD_LEAN", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def tiny_model_folder(folder) -> str:
    """The e2e tests' tiny Qwen3-Next (3 GDN + 1 full attention layer, hidden 128)
    as a model folder holding its config.json; ``folder`` a ``pathlib.Path``."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "e2e"))
    try:
        from tiny_model import CONFIG
    finally:
        sys.path.pop(0)
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return str(folder)
