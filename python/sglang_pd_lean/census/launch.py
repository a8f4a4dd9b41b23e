"""Launch flags -> the ``ServerArgs`` SGLang resolves from them, on a named GPU.

    gpu = gpu_facts("h200")
    server_args = resolve(["--model-path", folder, "--tp", "4"], gpu).server_args
    resolved_value(server_args, "page_size"), role_argv(argv, "decode")

The flags go through the installed SGLang's own ``prepare_server_args`` (its parser,
defaults, role hooks and derivations; on 0.5.19+ ``resolve_once``). Every platform
question SGLang asks (is it CUDA, NPU, XPU, MUSA, MPS, its SM version, its memory,
its name, the host CPU's AMX) is answered from the GPU named here, only while the
resolution runs: on 0.5.19+ through SGLang's own ``override_platform`` for every
fact of its ``_PLATFORM_PROBES`` / ``_PLATFORM_VALUES`` table, and on every release
by swapping the probe functions wherever SGLang's modules hold them (0.5.23 still
imports some directly, e.g. ``is_npu``), put back after. ``PROBE_PATTERN`` says
which functions of ``sglang.srt.utils.common`` are platform probes; a test fails
when the installed SGLang has one that ``probes`` does not answer. Environment
variables and the root logger, which resolution touches, are restored too; what
resolution exported is kept beside the ``ServerArgs`` (``Resolved``), for the census
to apply again.
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
import re
import sys
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.census.inputs import ROLES, CensusError, one_line
from sglang_pd_lean.shims import (
    field_names,
    platform_table,
    resolve_once,
    resolved_value,
)


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str  # as torch.cuda.get_device_name reports it
    memory_mib: float  # total memory, as nvidia-smi's memory.total reports it
    sm: int  # compute capability, major * 10 + minor
    cores: int = 132  # streaming multiprocessors

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


# Total memory as nvidia-smi reports it on each part (MiB), and its SM version.
GPUS = {
    "a100-80gb": Gpu("NVIDIA A100-SXM4-80GB", 81920, 80, 108),
    "h100": Gpu("NVIDIA H100 80GB HBM3", 81559, 90, 132),
    "h20": Gpu("NVIDIA H20", 97871, 90, 78),
    "h200": Gpu("NVIDIA H200", 143771, 90, 132),
    "b200": Gpu("NVIDIA B200", 183359, 100, 148),
    "gb200": Gpu("NVIDIA GB200", 189471, 100, 152),
}
DEFAULT_GPU = "h200"
# No facts supplied: SGLang probes the machine the report runs on (a CPU-only host
# resolves as a CPU server would, a GPU host as its GPU); needs --available-gib.
LOCAL = "local"

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


def gpu_facts(
    name: str | None, memory_gib: float | None = None, sm: int | None = None
) -> Gpu:
    """The GPU the launch runs on: a name from ``GPUS``, or memory and SM given."""
    if memory_gib is not None or sm is not None:
        if name is not None:
            raise CensusError("give --gpu NAME, or --gpu-memory-gib and --gpu-sm")
        if memory_gib is None or sm is None:
            raise CensusError("--gpu-memory-gib and --gpu-sm go together")
        if not (0 < memory_gib < 1 << 20) or not (10 <= sm < 1000):
            raise CensusError(
                f"--gpu-memory-gib {memory_gib:g} --gpu-sm {sm}: not a GPU "
                f"(SM is major*10+minor, e.g. 90 for Hopper)"
            )
        return Gpu(f"GPU with {memory_gib:g} GiB, SM {sm}", memory_gib * 1024, sm)
    key = (name or DEFAULT_GPU).lower()
    if key == LOCAL:
        return Gpu("this machine, as SGLang probes it", 0, 0, 0)
    if key not in GPUS:
        raise CensusError(f"unknown --gpu {name!r}; known: {', '.join(GPUS)}, {LOCAL}")
    return GPUS[key]


# The functions of ``sglang.srt.utils.common`` that ask what machine this is.
PROBE_PATTERN = re.compile(
    r"is_(cuda|cuda_alike|hip|npu|xpu|musa|mps|hpu|cpu|sail)"
    r"|is_sm\d+\w*|is_(blackwell|hopper|ampere)\w*|is_gfx\d+\w*"
    r"|is_mnnvl_fabric_device|is_flashinfer_available|is_habana_available"
    r"|is_host_cpu_\w+|cpu_has_\w+"
    r"|get_device|get_device_(sm|name|capability|core_count|memory_capacity)"
    r"|get_nvgpu_memory_capacity"
)


def probes(gpu: Gpu) -> dict[str, Any]:
    """What each of SGLang's platform probes (``sglang.srt.utils.common``) answers
    on ``gpu``: an NVIDIA GPU on a host whose CPU is Grace (arm64, on a multi-node
    NVLink fabric) for GB200 and x86 otherwise; no other accelerator; the CPU
    backend (and its AMX kernels) off."""
    major, minor = divmod(gpu.sm, 10)
    grace = "GB200" in gpu.name

    def answer(value):
        return lambda *args, **kwargs: value

    return {
        "is_cuda": answer(True),
        "is_cuda_alike": answer(True),
        "is_hip": answer(False),
        "is_npu": answer(False),
        "is_xpu": answer(False),
        "is_musa": answer(False),
        "is_mps": answer(False),
        "is_hpu": answer(False),
        "is_habana_available": answer(False),
        "is_cpu": answer(False),
        "is_sail": answer(False),
        "is_host_cpu_x86": answer(not grace),
        "is_host_cpu_arm64": answer(grace),
        "cpu_has_amx_support": answer(False),
        "is_gfx95_supported": answer(False),
        "is_gfx942_supported": answer(False),
        "is_gfx1250_supported": answer(False),
        "is_flashinfer_available": answer(True),
        "get_device": answer("cuda"),
        "get_device_memory_capacity": answer(gpu.memory_mib),
        "get_nvgpu_memory_capacity": answer(gpu.memory_mib),
        "get_device_sm": answer(gpu.sm),
        "get_device_capability": answer((major, minor)),
        "get_device_name": answer(gpu.name),
        "get_device_core_count": answer(gpu.cores),
        "is_mnnvl_fabric_device": answer(grace),
        "is_ampere_with_cuda_12_3": answer(major == 8),
        "is_sm80_supported": answer(major == 8),
        "is_sm90_supported": answer(major == 9),
        "is_hopper_with_cuda_12_3": answer(major == 9),
        "is_sm100_supported": answer(major == 10),
        "is_sm110_supported": answer(major == 11),
        "is_sm100_or_sm110_supported": answer(major in (10, 11)),
        "is_sm120_supported": answer(major == 12),
        "is_sm120": answer((major, minor) == (12, 0)),
        "is_sm121": answer((major, minor) == (12, 1)),
        "is_blackwell_supported": answer(major in (10, 11, 12)),
        "is_blackwell": answer(major in (10, 11, 12)),
    }


def platform_facts(fakes: dict[str, Any]) -> dict[str, Any] | None:
    """The facts of SGLang's own platform table (``shims.platform_table``: 0.5.19+)
    as the fakes answer them; None on a release without it. A fact whose probe we
    do not answer is an error here, not the host's answer: ``probes`` must cover
    the table."""
    table = platform_table()
    if table is None:
        return None
    unanswered = sorted(probe for probe in table.values() if probe not in fakes)
    if unanswered:
        raise CensusError(
            f"SGLang's platform table has probe(s) the report does not answer for "
            f"a named GPU: {', '.join(unanswered)}; `sglang-pd-lean doctor` says "
            f"more"
        )
    return {fact: fakes[probe]() for fact, probe in table.items()}


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


_holders: dict[int, list[tuple[Any, str, str]]] = {}


def _probe_holders(common, names: tuple[str, ...]) -> list[tuple[Any, str, str]]:
    """(module, attribute, probe name) wherever a module of SGLang holds one of the
    probes; found again only when modules were imported since the last search."""
    count = len(sys.modules)
    if count not in _holders:
        by_id = {id(getattr(common, n)): n for n in names if hasattr(common, n)}
        found = []
        for module in list(sys.modules.values()):
            if not getattr(module, "__name__", "").startswith("sglang"):
                continue
            for attr, value in list(vars(module).items()):
                if id(value) in by_id:
                    found.append((module, attr, by_id[id(value)]))
        _holders.clear()
        _holders[count] = found
    return _holders[count]


@contextlib.contextmanager
def on_gpu(gpu: Gpu) -> Iterator[None]:
    """SGLang's platform probes answer for ``gpu`` in the block: SGLang's own
    ``override_platform`` where the release has it, and the probe functions
    wherever a module of SGLang holds them (by identity), and torch's capability
    query too; for the local machine (SM 0) they answer as they do."""
    if gpu.sm == 0:
        yield
        return
    from sglang.srt import runtime_context

    fakes = probes(gpu)
    facts = platform_facts(fakes)
    override = (
        runtime_context.override_platform(**facts)
        if facts is not None
        else contextlib.nullcontext()
    )
    with override, _swapped(fakes):
        yield


@contextlib.contextmanager
def _swapped(fakes: dict[str, Any]) -> Iterator[None]:
    """The probe functions replaced by ``fakes`` wherever SGLang's modules hold them."""
    import torch
    from sglang.srt.utils import common

    originals = {n: getattr(common, n) for n in fakes if hasattr(common, n)}
    swapped = []
    for module, attr, name in _probe_holders(common, tuple(fakes)):
        value = getattr(module, attr)
        if value is originals[name]:
            swapped.append((module, attr, value))
            setattr(module, attr, fakes[name])
    capability = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = fakes["get_device_capability"]
    before = set(sys.modules)
    try:
        yield
    finally:
        torch.cuda.get_device_capability = capability
        for module, attr, value in swapped:
            setattr(module, attr, value)
        # A module imported in the block took the stand-ins: give it the probes.
        stand_ins = {id(f): n for n, f in fakes.items() if n in originals}
        for name in set(sys.modules) - before:
            module = sys.modules.get(name)
            for attr, value in list(vars(module).items()) if module else ():
                if id(value) in stand_ins:
                    setattr(module, attr, originals[stand_ins[id(value)]])


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
                f"SGLang rejects these launch flags: {type(exc).__name__}: "
                f"{one_line(exc)}"
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
