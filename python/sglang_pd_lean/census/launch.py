"""Launch flags -> the ``ServerArgs`` SGLang resolves from them, on a named GPU.

    gpu = gpu_facts("h200")
    server_args = resolve(["--model-path", folder, "--tp", "4"], gpu).server_args
    done = resolve_launch(Launch(argv=("--tp", "4"), gpu=gpu))  # every role, once
    done.resolved["decode"].server_args, done.folder, done.role

The flags go through the installed SGLang's own ``prepare_server_args`` (its parser,
defaults, role hooks and derivations; on 0.5.19+ ``resolve_once``), with SGLang's
platform probes answering for the GPU named (``census.gpu_probes``; the GPUs a report
can name are ``census.gpus``, re-exported here). Environment variables and the root
logger, which resolution touches, are restored after; what resolution exported is
kept beside the ``ServerArgs`` (``Resolved``), for the census to apply again.
``ResolvedLaunch`` is one report's launch: the flags (read by SGLang's parser,
``census.flags``), the model folder, the role the flags name and each role's
resolution, each done once.
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
import types
from collections.abc import Iterator, Mapping
from typing import Any

from sglang_pd_lean.census.flags import given_role, merged_argv, model_path, role_argv

# The GPU catalogue and the probes, where the callers of this module find them.
from sglang_pd_lean.census.gpu_probes import PROBE_PATTERN, on_gpu, probes  # noqa: F401
from sglang_pd_lean.census.gpus import (  # noqa: F401
    DEFAULT_GPU,
    GPUS,
    LOCAL,
    Gpu,
    gpu_facts,
)
from sglang_pd_lean.census.inputs import (
    DEFAULT_MODEL,
    ENVIRONMENT_ERRORS,
    ROLES,
    CensusError,
    environment_failure,
    failure,
    read_config_dict,
)
from sglang_pd_lean.census.results import RESOLVED_FIELDS, Resolution
from sglang_pd_lean.shims import field_names, resolve_once, resolved_value


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
        except ENVIRONMENT_ERRORS as exc:
            raise CensusError(environment_failure(exc)) from None
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


def summary(server_args: Any) -> Resolution:
    """The resolved values that change bytes (an enum as its name)."""
    out = {}
    for name in RESOLVED_FIELDS:
        value = resolved_value(server_args, name)
        out[name] = (
            value
            if isinstance(value, (int, float, str, bool, type(None)))
            else str(value)
        )
    return Resolution(**out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Launch:
    """What the operator asks a report of: launch flags on a GPU, the memory."""

    argv: tuple[str, ...]  # launch_server flags, as the operator passes them
    gpu: Gpu
    shorthand: tuple[str, ...] = ()  # the census flags' launch flags, added to argv
    model: str | None = None  # a bundled model, as --model-path
    config: str | None = None  # a config.json or model folder, as --model-path
    available_gib: float | None = None  # exact total_rest_memory, every role
    weights_gib: float | None = None  # target + draft weights per rank
    # False: no memory is named (census flags alone): the pools at the flags' own
    # counts, with no weights, sizing, capacity or advice.
    sized: bool = True


def check(launch: Launch) -> None:
    """Everything plain Python can check, before SGLang's import."""
    if launch.gpu.sm == 0 and launch.available_gib is None:
        raise CensusError(
            "--gpu local supplies no GPU memory: give --available-gib (the "
            "total_rest_memory the server's sizing receives)"
        )
    if launch.model or launch.config:
        read_config_dict(model=launch.model, config=launch.config)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResolvedLaunch:
    """One launch as SGLang resolved it, once per report: the flags with the
    model's path, the model folder and its name for the report, the role the
    flags name and each role's resolution (the named role's always)."""

    launch: Launch
    argv: tuple[str, ...]
    folder: str
    name: str
    role: str
    resolved: Mapping[str, Resolved]
    # Other roles SGLang refuses these flags for (a unified-only flag under PD):
    # role -> SGLang's reason, one line. The named role is never here.
    refused: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )

    @property
    def named(self) -> Resolved:
        """The resolution of the role the flags name."""
        return self.resolved[self.role]

    def more(self, roles: tuple[str, ...]) -> ResolvedLaunch:
        """The same launch with ``roles`` resolved too (each not resolved yet,
        once). A role SGLang refuses these flags for is kept in ``refused`` with
        SGLang's reason: the role the flags name is still answered."""
        wanted = [
            r
            for r in ROLES
            if r in roles and r not in self.resolved and r not in self.refused
        ]
        if not wanted:
            return self
        resolved, refused = dict(self.resolved), dict(self.refused)
        for r in wanted:
            try:
                resolved[r] = resolve(role_argv(list(self.argv), r), self.launch.gpu)
            except CensusError as exc:
                refused[r] = str(exc)
        return dataclasses.replace(
            self,
            resolved=types.MappingProxyType(
                {r: resolved[r] for r in ROLES if r in resolved}
            ),
            refused=types.MappingProxyType(
                {r: refused[r] for r in ROLES if r in refused}
            ),
        )


def resolve_launch(launch: Launch, roles: tuple[str, ...] = ROLES) -> ResolvedLaunch:
    """``launch`` resolved by SGLang for ``roles`` and the role its flags name,
    once each (``ResolvedLaunch.more`` resolves more roles later)."""
    from sglang_pd_lean.census.model import model_folder

    argv = merged_argv(list(launch.shorthand), list(launch.argv))
    path = model_path(argv)
    if path is not None and (launch.model or launch.config):
        raise CensusError(
            "give the model once: --model/--config, or --model-path after --"
        )
    if path is None and not launch.config:
        name = launch.model or DEFAULT_MODEL
        folder = model_folder(read_config_dict(model=name))
    else:
        given_path = launch.config or path
        data = read_config_dict(config=given_path)
        name = os.path.abspath(given_path)
        if os.path.isdir(given_path):
            folder = given_path
        elif os.path.basename(given_path) == "config.json":
            folder = os.path.dirname(name)
        else:
            folder = model_folder(data)
    if path is None:
        argv += ["--model-path", folder]
    role = given_role(argv)
    named = {role: resolve(role_argv(argv, role), launch.gpu)}
    done = ResolvedLaunch(
        launch=launch,
        argv=tuple(argv),
        folder=folder,
        name=name,
        role=role,
        resolved=types.MappingProxyType(named),
    )
    return done.more(roles)
