"""Launch flags -> the ``ServerArgs`` SGLang resolves from them, on a named GPU.

    gpu = gpu_facts("h200")
    server_args = resolve(["--model-path", folder, "--tp", "4"], gpu).server_args
    resolved_value(server_args, "page_size"), role_argv(argv, "decode")

The flags go through the installed SGLang's own ``prepare_server_args`` (its parser,
defaults, role hooks and derivations; on 0.5.19+ ``resolve_once``), with SGLang's
platform probes answering for the GPU named (``census.gpu_probes``; the GPUs a report
can name are ``census.gpus``, re-exported here). Environment variables and the root
logger, which resolution touches, are restored after; what resolution exported is
kept beside the ``ServerArgs`` (``Resolved``), for the census to apply again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import logging
import os
import pkgutil
from collections.abc import Iterator
from typing import Any

# The GPU catalogue and the probes, where the callers of this module find them.
from sglang_pd_lean.census.gpu_probes import PROBE_PATTERN, on_gpu, probes  # noqa: F401
from sglang_pd_lean.census.gpus import (  # noqa: F401
    DEFAULT_GPU,
    GPUS,
    LOCAL,
    Gpu,
    gpu_facts,
)
from sglang_pd_lean.census.inputs import ROLES, CensusError, failure
from sglang_pd_lean.shims import field_names, resolve_once, resolved_value

# Resolved values that change bytes: shown in the report's header, per role.
RESOLVED_FIELDS = (
    "disaggregation_mode",
    "page_size",
    "attention_backend",
    "linear_attn_backend",
    "mamba_radix_cache_strategy",
    "disable_radix_cache",
    "mem_fraction_static",
    "max_running_requests",
    "max_mamba_cache_size",
    "context_length",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "disaggregation_decode_extra_slots",
    "mamba_ssm_dtype",
    "tp_size",
    "pp_size",
    "chunked_prefill_size",
)


@functools.cache
def _preimport() -> None:
    """Import what resolution imports lazily, before the probes answer for a GPU:
    a module imported under them would take the GPU's import-time branches."""
    import sglang.srt.arg_groups as groups

    for name in (
        "sglang.srt.configs.model_config",
        "sglang.srt.mem_cache.kv_cache_configurator",
        "sglang.srt.speculative.spec_info",
        *(
            m.name
            for m in pkgutil.walk_packages(groups.__path__, groups.__name__ + ".")
        ),
    ):
        with contextlib.suppress(Exception):
            importlib.import_module(name)


_hints: dict[tuple, dict[str, Any]] = {}


@contextlib.contextmanager
def _type_hints_once() -> Iterator[None]:
    """SGLang's launch_server parser asks ``typing.get_type_hints`` of every
    ServerArgs dataclass each time it is built (``arg_groups.arg_utils``, most of a
    resolution's time); a class's hints do not change, so in the block each is
    asked once per process. The parser, its flags and what it resolves are
    SGLang's own. Where ``arg_utils`` asks otherwise, nothing is cached."""
    from sglang.srt.arg_groups import arg_utils

    asked = getattr(arg_utils, "get_type_hints", None)
    if asked is None:
        yield
        return

    def once(obj, *args, **kwargs):
        key = (obj, args, tuple(sorted(kwargs.items())))
        if key not in _hints:
            _hints[key] = asked(obj, *args, **kwargs)
        return dict(_hints[key])

    arg_utils.get_type_hints = once
    try:
        yield
    finally:
        arg_utils.get_type_hints = asked


@dataclasses.dataclass(frozen=True)
class Resolved:
    """SGLang's resolution of one set of launch flags: its ``ServerArgs``, and what
    it exported into the environment while it resolved (``SGLANG_MAMBA_SSM_DTYPE``
    and the rest: a server process keeps them; the report applies them again
    around the census with ``exported``)."""

    server_args: Any
    environ: dict[str, str]


@contextlib.contextmanager
def _contained(exports: dict[str, str]) -> Iterator[io.StringIO]:
    """Environment, root logger and stderr as they were after the block; what the
    block set in the environment goes to ``exports``."""
    env = dict(os.environ)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            yield err
    finally:
        exports.update((k, v) for k, v in os.environ.items() if env.get(k) != v)
        os.environ.clear()
        os.environ.update(env)
        root.handlers[:] = handlers
        root.setLevel(level)


@contextlib.contextmanager
def exported(environ: dict[str, str]) -> Iterator[None]:
    """The variables a resolution exported, set again for the block."""
    saved = {name: os.environ.get(name) for name in environ}
    os.environ.update(environ)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def resolve(argv: list[str], gpu: Gpu) -> Resolved:
    """SGLang's own ``ServerArgs`` for the launch flags ``argv`` on ``gpu``, with
    what it exported; whatever SGLang rejects is one ``CensusError`` line with
    SGLang's message."""
    from sglang.srt.server_args import prepare_server_args

    _preimport()
    exports: dict[str, str] = {}
    with _contained(exports) as err, on_gpu(gpu), _type_hints_once():
        try:
            server_args = prepare_server_args(list(argv))
            resolve_once(server_args)
        except SystemExit:
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            message = lines[-1] if lines else "invalid launch flags"
            raise CensusError(f"SGLang's launch_server parser: {message}") from None
        except Exception as exc:
            raise CensusError(
                f"SGLang rejects these launch flags: {failure(exc)}"
            ) from None
    return Resolved(server_args, exports)


def resolved_fields(server_args: Any) -> dict[str, Any]:
    """Every field as resolved, for publishing the same configuration again."""
    return {
        name: resolved_value(server_args, name) for name in field_names(server_args)
    }


def summary(server_args: Any) -> dict[str, Any]:
    """The resolved values that change bytes, JSON-ready."""
    out = {}
    for name in RESOLVED_FIELDS:
        value = resolved_value(server_args, name)
        out[name] = (
            value
            if isinstance(value, (int, float, str, bool, type(None)))
            else str(value)
        )
    return out


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
    given = {k: v for k, v in values.items() if v is not None and v is not False}
    if alone:
        given = {**SHORTHAND_DEFAULTS, **given}
    argv = []
    for dest, value in given.items():
        argv += [SHORTHAND[dest]] if value is True else [SHORTHAND[dest], str(value)]
    if alone:
        steps = max(given["speculative_num_draft_tokens"] - 1, 1)
        argv += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps"]
        argv += [str(steps), "--speculative-eagle-topk", "1"]
    return argv


def _given(argv: list[str]) -> dict[str, Any]:
    """The fields ``argv`` sets, as SGLang's own launch_server parser reads them
    (defaults left out); {} where the parser refuses them (``resolve`` says why)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        action.default, action.required = argparse.SUPPRESS, False
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return vars(parser.parse_known_args(argv)[0])
        except SystemExit:
            return {}


def merged_argv(shorthand: list[str], argv: list[str]) -> list[str]:
    """The launch flags ``argv`` plus the census flags' ``shorthand``; a field both
    set to different values is one CensusError line."""
    if not shorthand:
        return list(argv)
    ours, theirs = _given(shorthand), _given(argv)
    for dest, value in ours.items():
        if dest in theirs and theirs[dest] != value:
            flag = f"--{dest.replace('_', '-')}"
            raise CensusError(
                f"{flag}: the census flags say {value!r}, the flags after -- say "
                f"{theirs[dest]!r}; give it once"
            )
    return [*argv, *shorthand]


def role_argv(argv: list[str], role: str) -> list[str]:
    """The same flags with ``--disaggregation-mode`` replaced by ``role``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--disaggregation-mode":
            skip = True
            continue
        if arg.startswith("--disaggregation-mode="):
            continue
        out.append(arg)
    return [*out, "--disaggregation-mode", role]


def given_role(argv: list[str]) -> str:
    """The role the flags themselves name (``null`` when they name none)."""
    role = "null"
    for i, arg in enumerate(argv):
        if arg == "--disaggregation-mode" and i + 1 < len(argv):
            role = argv[i + 1]
        elif arg.startswith("--disaggregation-mode="):
            role = arg.split("=", 1)[1]
    return role if role in ROLES else "null"


def model_path(argv: list[str]) -> str | None:
    """The ``--model-path`` (or ``--model``) the flags give, if any."""
    for i, arg in enumerate(argv):
        for flag in ("--model-path", "--model"):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None
