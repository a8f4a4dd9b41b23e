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


# ``report`` flags, given last (they end with the launch flags after --): SGLang's
# no-buffer strategy, 3 mamba slots per running request as ``formulas`` has it (it
# needs the overlap schedule off), and an EAGLE chain of 4 draft tokens, as the
# census flags alone describe.
NO_BUFFER = (
    *("--", "--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"),
    *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"),
    *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
)


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
    "frozen_kv_graph": None,
    "multi_layer_graph": None,
    "dflash_graph": None,
    "adaptive": None,
}


# A plain transformer's config (no linear-attention layers): nothing to count.
LLAMA_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
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


def tiny_model_folder(folder, kind: str = "qwen3-next") -> str:
    """The e2e tests' tiny model ``kind`` (``tiny_model.MODEL_CONFIGS``; default the
    tiny Qwen3-Next: 3 GDN + 1 full attention layer, hidden 128) as a model folder
    holding its config.json; ``folder`` a ``pathlib.Path``."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "e2e"))
    try:
        from tiny_model import MODEL_CONFIGS
    finally:
        sys.path.pop(0)
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(MODEL_CONFIGS[kind]))
    return str(folder)


def server_fields(
    inputs,
    role: str,
    *,
    speculative: bool = True,
    sizing: bool = False,
    slots: int | None = None,
    requests: int | None = None,
) -> dict:
    """Placeholder ServerArgs fields for one role, for the gate tests that build a
    pool or size a budget on a role SGLang did not resolve (the report resolves
    launch flags instead). ``sizing``: leave the mamba slot count to upstream's
    budget code unless set; ``slots`` / ``requests``: the counts to build with."""
    from formulas import SLOTS_PER_REQUEST

    if slots is None:
        slots = inputs.max_mamba_cache_size or (
            None if sizing else SLOTS_PER_REQUEST * inputs.max_running_requests
        )
    fields = dict(
        disaggregation_mode=role,
        max_running_requests=requests or inputs.max_running_requests,
        max_mamba_cache_size=slots,
        disable_radix_cache=inputs.disable_radix_cache,
        tp_size=inputs.tp,
        pp_size=inputs.pp,
        page_size=inputs.page_size,
    )
    if inputs.mamba_radix_cache_strategy is not None:
        fields["mamba_radix_cache_strategy"] = inputs.mamba_radix_cache_strategy
    if speculative:
        fields.update(
            speculative_algorithm="EAGLE",
            speculative_num_draft_tokens=inputs.speculative_num_draft_tokens,
            speculative_num_steps=max(inputs.speculative_num_draft_tokens - 1, 1),
            speculative_eagle_topk=1,
        )
    if role == "decode":
        # Upstream's PD hook defaults this to 0 (2x the batch below 33 requests).
        per_worker = inputs.max_running_requests
        fields["disaggregation_decode_extra_slots"] = (
            2 * per_worker if per_worker <= 32 else 0
        )
    return fields


def census_of(*flags: str) -> dict:
    """The report's census for ``report`` flags (census flags, --model, --gpu, ...,
    and ``--`` launch flags), as the command runs it, without printing: as JSON
    (``report --json``'s keys, checked against docs/json.md)."""
    from sglang_pd_lean.census.results import jsonable

    result = jsonable(typed_census(*flags))
    assert_documented(result, "json.md")
    return result


def typed_census(*flags: str):
    """``census_of``, as the typed ``census.Report`` the table and the chart read."""
    from sglang_pd_lean import census
    from sglang_pd_lean.cli.args import parse
    from sglang_pd_lean.cli.commands import report_launch

    return census.report(report_launch(parse(["report", *flags])))


def doc_text(doc: str) -> str:
    """The text of ``docs/<doc>``."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", doc)) as f:
        return f.read()


def documented_keys(doc: str) -> list[str]:
    """The key paths of the ``schema`` block of ``docs/<doc>``."""
    block = doc_text(doc).split("```schema\n", 1)[1].split("```", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def printed_keys(value, documented: list[str], path: str = "") -> set[str]:
    """Every key path in ``value``, as the docs write them: ``[]`` a list's items;
    an object the docs mark ``{}`` holds data as keys and is not descended into;
    one marked ``{*}`` holds data as keys, each value descended into."""
    if path + "{}" in documented:
        return {path + "{}"}
    found = {path} if path else set()
    if isinstance(value, dict) and path + "{*}" in documented:
        found = (found - {path}) | {path + "{*}"}
        for item in value.values():
            found |= printed_keys(item, documented, path + "{*}")
    elif isinstance(value, dict):
        for key, item in value.items():
            found |= printed_keys(item, documented, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        found = (found - {path}) | {path + "[]"}
        for item in value:
            found |= printed_keys(item, documented, path + "[]")
    return found


def assert_documented(result: dict, doc: str) -> set[str]:
    """Every key ``result`` prints is in docs/``doc``; returns the keys printed."""
    documented = documented_keys(doc)
    printed = printed_keys(result, documented)
    assert printed - set(documented) == set(), f"printed, not in docs/{doc}"
    return printed


def hide_package(monkeypatch, name: str) -> None:
    """``importlib.util.find_spec(name)`` answers None for the test, as it does
    where the package is not installed; every other package is found as before."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda asked, *args: None if asked == name else find_spec(asked, *args),
    )


def table_row(out: str, label: str) -> list[str]:
    """The cells of the one row of the report's table labelled ``label`` (cells are
    separated by 2+ spaces; a heading row alone has none)."""
    import re

    (line,) = [x for x in out.splitlines() if re.match(re.escape(label) + r"(  |$)", x)]
    return re.split(r"\s{2,}", line[len(label) :].strip()) if line != label else []


def sglang_refuses_lazy_under_pd() -> bool:
    """Whether the installed SGLang refuses ``--mamba-radix-cache-strategy
    extra_buffer_lazy`` on a PD prefill server (0.5.17+ do; 0.5.16 accepts it):
    asked of SGLang's own resolution."""
    from sglang_pd_lean import census
    from sglang_pd_lean.census.launch import resolve
    from sglang_pd_lean.census.model import model_folder

    folder = model_folder(census.read_config_dict(model="qwen3-next-80b-a3b"))
    argv = ["--model-path", folder, "--tp", "2", "--disaggregation-mode", "prefill"]
    argv += ["--mamba-radix-cache-strategy", "extra_buffer_lazy"]
    try:
        resolve(argv, census.gpu_facts("h200"))
    except census.CensusError:
        return True
    return False


# The graph gate's upstream: where this release captures the decode graph.
def capture_module():
    """The module whose code captures the decode graph: 0.5.16+'s
    ``cuda_graph_setup``, else (0.5.14, 0.5.15) ``model_runner``, whose
    ``ModelRunner.init_decode_cuda_graph`` does it."""
    try:
        from sglang.srt.model_executor.model_runner_components import (
            cuda_graph_setup,
        )
    except ImportError:  # 0.5.14 and 0.5.15: no model_runner_components package
        from sglang.srt.model_executor import model_runner

        return model_runner
    return cuda_graph_setup


def capture_by_method() -> bool:
    """Whether this SGLang captures in the ``ModelRunner`` method (0.5.14, 0.5.15)."""
    return not hasattr(capture_module(), "capture_decode_graph")


def call_capture(fn, runner):
    """``fn`` (upstream's capture, or the hook around it) on ``runner``, called as
    upstream's own caller calls it on this release."""
    return fn(runner) if capture_by_method() else fn(model_runner=runner)
