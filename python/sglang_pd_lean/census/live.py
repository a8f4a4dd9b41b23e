"""The census of a running server, from what its ``/server_info`` says.

    argv = server_argv(info, model=None)            # launch_server flags
    predicted = predict(info, gpu, model=None)      # the report's figures for it

``/server_info`` holds every field of the server's resolved ``ServerArgs``. The
flags are rebuilt with the installed SGLang's own launch_server parser
(``ServerArgs.add_cli_args``): every field whose value differs from the parser's
default, written the way that flag's action reads it (a switch given or not, a
list as its items, a dict as JSON). SGLang then resolves them again, as for
``report -- <flags>``, and the census runs on them with the budget the plugin's
record says the server's sizing received (exact); without a record, from the GPU
named (the report's memory model).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from sglang_pd_lean.census.flags import launch_parser
from sglang_pd_lean.census.gpus import Gpu
from sglang_pd_lean.census.inputs import CensusError

REDACTED = "<redacted>"

# Fields that name this server's own sockets and files, not its sizing.
NOT_SIZING = (
    "host",
    "port",
    "nccl_port",
    "dist_init_addr",
    "disaggregation_bootstrap_port",
    "tokenizer_path",
    "served_model_name",
    "log_level",
    # Resolved from the --cuda-graph-* flags, with keys its own flag does not read
    # back; the graphs' share of memory is in the resolved mem_fraction_static.
    "cuda_graph_config",
)


def _flag(action: argparse.Action) -> str:
    longs = [s for s in action.option_strings if s.startswith("--")]
    return (longs or action.option_strings)[0]


def _words(action: argparse.Action, value: Any) -> list[str]:
    """``value`` as the words ``action`` reads back into it."""
    flag = _flag(action)
    if isinstance(action, argparse.BooleanOptionalAction):
        negative = [s for s in action.option_strings if s.startswith("--no-")]
        return [flag] if value else negative[:1]
    if isinstance(action, argparse._StoreTrueAction):
        return [flag] if value is True else []
    if isinstance(action, argparse._StoreFalseAction):
        return [flag] if value is False else []
    if isinstance(action, argparse._StoreConstAction):
        return [flag] if value == action.const else []
    if isinstance(value, dict):
        return [flag, json.dumps(value)]
    if isinstance(value, (list, tuple)):
        if action.nargs in ("*", "+") or isinstance(action.nargs, int):
            return [flag, *map(str, value)] if value else []
        return [flag, json.dumps(value)]
    return [flag, str(value)]


def server_argv(info: dict, model: str | None = None) -> list[str]:
    """The launch_server flags that give the resolved arguments in ``info``;
    ``model``: another model path (the server's is not readable here), for the
    draft too where the server's draft is its target's checkpoint."""
    fields = dict(info)
    if model is not None:
        # A draft that is the target's own checkpoint (NEXTN/MTP, the e2e
        # servers) moves with it.
        if fields.get("speculative_draft_model_path") == fields.get("model_path"):
            fields["speculative_draft_model_path"] = model
        fields["model_path"] = model
    argv = []
    for action in launch_parser()._actions:
        dest = action.dest
        if not action.option_strings or dest not in fields or dest in NOT_SIZING:
            continue
        value = fields[dest]
        # A secret /server_info redacts (0.5.23's watermark keys) is not sizing.
        if value is None or value == action.default or value == REDACTED:
            continue
        argv += _words(action, value)
    return argv


def model_of(info: dict, model: str | None) -> str:
    """The model path the census reads: ``model`` if given, else the server's."""
    if model is not None:
        return model
    path = info.get("model_path")
    if not path or not os.path.exists(str(path)):
        raise CensusError(
            f"the server's model path {path!r} is not readable here: give "
            f"--config (a config.json or a model folder) or --model-path"
        )
    return str(path)


def predict(info: dict, gpu: Gpu, model: str | None, available_gib: float | None):
    """The report (``census.report``) for the server ``info`` describes, its
    role only, with the advice for a prefill server."""
    from sglang_pd_lean.census.launch import Launch
    from sglang_pd_lean.census.report import report

    argv = server_argv(info, model_of(info, model))
    if info.get("device") == "cpu" and available_gib is None:
        raise CensusError(
            "a CPU server's budget is the host's free memory at start-up, and "
            "without the plugin's record it is not on /server_info"
        )
    launch = Launch(argv=tuple(argv), gpu=gpu, available_gib=available_gib)
    return report(launch, roles=(info.get("disaggregation_mode") or "null",))
