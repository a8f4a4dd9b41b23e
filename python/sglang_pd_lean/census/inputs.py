"""What the operator asks about: the model's config.json, the caps that keep the host
safe, and the guard that keeps bad input to one line before SGLang's (slow) import.

    check_slots(max_running_requests=256, max_mamba_cache_size=None)
    data = read_config_dict(model="qwen3-next-80b-a3b")  # plain Python: no SGLang yet

Every error meant for the operator is a ``CensusError`` with a one-line message;
an error SGLang raises is one line too (``failure``: its message, or where a bare
``assert`` stands in SGLang's code).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterator

ROLES = ("prefill", "decode", "null")
# Each role's pair of columns: upstream as released, and with the plugin.
COLUMNS = ("upstream", "plugin")
# How the report names each role: in the table, and where space is short (the chart).
ROLE_TITLES = {
    "prefill": "prefill target",
    "decode": "decode target",
    "null": "unified (null)",
}
ROLE_LABELS = {"prefill": "prefill", "decode": "decode", "null": "unified"}
DEFAULT_MODEL = "qwen3-next-80b-a3b"
MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "models")

# Caps that keep the host safe. SGLang's pools keep host-side free lists per slot
# (about 1.3 GB of RSS at 2^20 request slots, 3 GB at 2^24, OOM at 10^9).
MAX_SLOTS = 1 << 20


MAX_CONFIG_BYTES = 16 << 20


MAMBA_RADIX_CACHE_STRATEGIES = (
    "auto",
    "no_buffer",
    "extra_buffer",
    "extra_buffer_lazy",
)


SSM_DTYPES = ("float32", "bfloat16", "float16")


class CensusError(ValueError):
    """Bad input for the census: the message is one line for the operator."""


def check_slots(**counts: int | None) -> None:
    """One CensusError line for a request or slot count (flag dest -> value, None:
    not given) over what the census builds, ``MAX_SLOTS``."""
    for dest, value in counts.items():
        if value is not None and value > MAX_SLOTS:
            raise CensusError(
                f"--{dest.replace('_', '-')} {value:,} is more than the census "
                f"builds ({MAX_SLOTS:,} slots)"
            )


def bundled_models() -> list[str]:
    return sorted(
        name[: -len(".json")]
        for name in os.listdir(MODELS_DIR)
        if name.endswith(".json")
    )


def config_path(*, model: str | None = None, config: str | None = None) -> str:
    """The config.json the census reads: the bundled ``model``'s, or the file
    ``config`` names, or the config.json inside the folder it names."""
    if model is not None:
        path = os.path.join(MODELS_DIR, f"{model}.json")
        if not os.path.isfile(path):
            raise CensusError(
                f"unknown model {model!r}; bundled: {', '.join(bundled_models())}"
            )
        return path
    path = config
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    return path


def read_config_dict(*, model: str | None = None, config: str | None = None) -> dict:
    """The config (``config_path``) as a dict; plain Python, so bad input is found
    before SGLang's import. Reads a regular file of at most MAX_CONFIG_BYTES."""
    path = config_path(model=model, config=config)
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
        if regular:
            with open(path, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise CensusError(f"cannot read config {path}: {exc.strerror}") from None
    if not regular:
        raise CensusError(f"cannot read config {path}: not a regular file")
    if len(raw) > MAX_CONFIG_BYTES:
        raise CensusError(
            f"cannot read config {path}: larger than {MAX_CONFIG_BYTES >> 20} MiB, "
            f"not a config.json"
        )
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CensusError(f"cannot read config {path}: {one_line(exc)}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise CensusError(f"{path} is not a Hugging Face config.json (no model_type)")
    return data


# Errors of the report's own host, not of the launch: a GPU kernel library SGLang
# imports that a CPU machine cannot load. Said as the tool's environment, never as
# SGLang's verdict on the flags.
ENVIRONMENT_ERRORS = (ImportError, OSError)


def environment_failure(exc: BaseException) -> str:
    """One line blaming the report's environment for ``exc``."""
    return (
        f"the report's environment cannot run SGLang's code for this launch (a "
        f"GPU-only import on this host, not a verdict on the flags): {failure(exc)}"
    )


@contextlib.contextmanager
def sglang_rejects(what: str) -> Iterator[None]:
    """Any error SGLang raises in the block becomes one CensusError line; an error
    of the report's own environment says so instead."""
    try:
        yield
    except CensusError:
        raise
    except ENVIRONMENT_ERRORS as exc:
        raise CensusError(environment_failure(exc)) from exc
    except Exception as exc:
        raise CensusError(f"{what}: {failure(exc)}") from exc


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    return _clipped(str(exc), limit)


def _clipped(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure(exc: BaseException) -> str:
    """``exc`` as one line: its type and message; where it has no message (a bare
    ``assert``), its type and where it was raised instead (``raised_at``)."""
    message = one_line(exc)
    if message:
        return f"{type(exc).__name__}: {message}"
    return f"{type(exc).__name__} at {raised_at(exc)}"


def raised_at(exc: BaseException) -> str:
    """``file:line: statement`` of the innermost frame of ``exc``'s traceback in
    SGLang's code (else the innermost frame): the file as from site-packages
    (``sglang/srt/server_args.py``), the statement as its source reads, from its
    first line (a compound statement's header only)."""
    import sys
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "an unknown place"
    sglang = getattr(sys.modules.get("sglang"), "__file__", None)
    site = os.path.dirname(os.path.dirname(sglang)) if sglang else None
    inside = [f for f in frames if site and _under(f.filename, site, "sglang")]
    frame = (inside or frames)[-1]
    path = frame.filename
    if site and _under(path, site):
        path = os.path.relpath(path, site)
    first, source = _statement(frame.filename, frame.lineno)
    return _clipped(f"{path}:{first}: {source or '(no source)'}")


def _under(path: str, *folders: str) -> bool:
    return path.startswith(os.path.join(*folders) + os.sep)


def _statement(filename: str, line: int) -> tuple[int, str]:
    """(first line, source on one line) of the innermost statement of ``filename``
    holding ``line`` (of a compound statement, its header); the line alone where
    the source does not parse."""
    import ast
    import linecache

    lines = linecache.getlines(filename)
    first = last = line
    try:
        nodes = ast.walk(ast.parse("".join(lines)))
    except (SyntaxError, ValueError):
        nodes = iter(())
    held = [
        node
        for node in nodes
        if isinstance(node, ast.stmt) and node.lineno <= line <= node.end_lineno
    ]
    if held:
        node = min(held, key=lambda n: n.end_lineno - n.lineno)
        body = getattr(node, "body", None)
        first = node.lineno
        last = body[0].lineno - 1 if isinstance(body, list) else node.end_lineno
        if not first <= line <= last:  # not in the header: the line alone
            first = last = line
    text = " ".join(text.strip() for text in lines[first - 1 : last])
    return first, re.sub(r"(?<=[(\[{]) | (?=[)\]}])", "", text)


# Config fields that name linear-attention layers, whatever the architecture.
_LINEAR_FIELD_HINTS = (
    "linear_attn",
    "linear_num",
    "linear_conv",
    "mamba",
    "ssm_state",
    "hybrid_override_pattern",
    "layers_block_type",
)


def linear_hints(data: dict) -> list[str]:
    """Fields of a config.json that describe linear-attention layers."""
    found = set()
    text = data.get("text_config")
    for section in (data, text if isinstance(text, dict) else {}):
        for key, value in section.items():
            if any(hint in key for hint in _LINEAR_FIELD_HINTS):
                found.add(key)
            elif key == "layer_types" and isinstance(value, list):
                if any("linear" in str(v) or "mamba" in str(v) for v in value):
                    found.add(key)
    return sorted(found)
