"""Launch flags as SGLang's own launch_server parser reads them: the census
shorthand, merging it with the flags after ``--``, and the role and model a set of
flags names.

    given(["--tp", "4", "--model", "m"])   # {"tp_size": 4, "model_path": "m"}
    role_argv(argv, "decode")               # the same flags, for a decode server

One parser: every flag is read by ``ServerArgs.add_cli_args``'s parser, defaults
left out, so an alias (``--model`` for ``--model-path``, ``--tp`` for
``--tp-size``), ``--flag=value`` and a repeated flag (the last one wins) read as
SGLang reads them. A role's flags are the operator's with ``--disaggregation-mode``
appended: SGLang's parser keeps the last value given.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from typing import Any

from sglang_pd_lean.census.inputs import ROLES, CensusError

# ``report``'s census flags: shorthand for the launch_server flags they name.
SHORTHAND = {
    "tp": "--tp-size",
    "pp": "--pp-size",
    "max_running_requests": "--max-running-requests",
    "max_mamba_cache_size": "--max-mamba-cache-size",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
    "mamba_ssm_dtype": "--mamba-ssm-dtype",
    "context_length": "--context-length",
    "page_size": "--page-size",
    "disable_radix_cache": "--disable-radix-cache",
    "mamba_radix_cache_strategy": "--mamba-radix-cache-strategy",
}
# What the census flags alone describe where they are silent: a speculative server
# (an EAGLE chain, as a NEXTN/MTP draft resolves) of 256 requests, 4 draft tokens.
SHORTHAND_DEFAULTS = {"max_running_requests": 256, "speculative_num_draft_tokens": 4}


def shorthand_argv(values: dict[str, Any], *, alone: bool) -> list[str]:
    """The launch flags the census flags ``values`` (dest -> value, None: not
    given) name. ``alone`` (no flags after --): with the defaults above and the
    speculative algorithm, steps and top-k of a one-chain draft."""
    given_values = {k: v for k, v in values.items() if v is not None and v is not False}
    if alone:
        given_values = {**SHORTHAND_DEFAULTS, **given_values}
    argv = []
    for dest, value in given_values.items():
        argv += [SHORTHAND[dest]] if value is True else [SHORTHAND[dest], str(value)]
    if alone:
        steps = max(given_values["speculative_num_draft_tokens"] - 1, 1)
        argv += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps"]
        argv += [str(steps), "--speculative-eagle-topk", "1"]
    return argv


def launch_parser() -> argparse.ArgumentParser:
    """SGLang's own launch_server parser (``ServerArgs.add_cli_args``)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """SGLang's launch_server parser, every default and requirement left out."""
    parser = launch_parser()
    for action in parser._actions:
        action.default, action.required = argparse.SUPPRESS, False
    return parser


def given(argv: list[str]) -> dict[str, Any]:
    """The fields ``argv`` sets, as SGLang's own launch_server parser reads them
    (defaults left out); {} where the parser refuses them (``resolve`` says why)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return vars(_parser().parse_known_args(list(argv))[0])
        except SystemExit:
            return {}


def merged_argv(shorthand: list[str], argv: list[str]) -> list[str]:
    """The launch flags ``argv`` plus the census flags' ``shorthand``; a field both
    set to different values is one CensusError line."""
    if not shorthand:
        return list(argv)
    ours, theirs = given(shorthand), given(argv)
    for dest, value in ours.items():
        if dest in theirs and theirs[dest] != value:
            flag = f"--{dest.replace('_', '-')}"
            raise CensusError(
                f"{flag}: the census flags say {value!r}, the flags after -- say "
                f"{theirs[dest]!r}; give it once"
            )
    return [*argv, *shorthand]


def role_argv(argv: list[str], role: str) -> list[str]:
    """The same flags for a ``role`` server (the parser keeps the last
    ``--disaggregation-mode``)."""
    return [*argv, "--disaggregation-mode", role]


def given_role(argv: list[str]) -> str:
    """The role the flags themselves name (``null`` when they name none)."""
    role = given(argv).get("disaggregation_mode")
    return role if role in ROLES else "null"


def model_path(argv: list[str]) -> str | None:
    """The ``--model-path`` (or an alias of it) the flags give, if any."""
    return given(argv).get("model_path")
