"""What the operator asks about: the census inputs, the model's config.json, the guard
that keeps bad input to one line before SGLang's (slow) import.

    inputs = Inputs(model="qwen3-next-80b-a3b", tp=4)
    inputs.validate()
    data = read_config_dict(inputs)  # plain Python: no SGLang import yet

Every error meant for the operator is a ``CensusError`` with a one-line message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
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


@dataclasses.dataclass
class Inputs:
    model: str | None = None  # a bundled model name
    config: str | None = None  # a config.json or a model folder
    tp: int = 1
    pp: int = 1
    max_running_requests: int = 256
    max_mamba_cache_size: int | None = None
    speculative_num_draft_tokens: int = 4
    mamba_ssm_dtype: str | None = None  # default: the model's
    context_length: int | None = None  # default: the model's
    available_gib: float | None = None  # SGLang's total_rest_memory: sizes the pools
    disable_radix_cache: bool = False
    page_size: int = 1
    mamba_radix_cache_strategy: str | None = None  # default: ServerArgs' own

    def validate(self) -> None:
        """Raise CensusError for anything the census cannot run on (library guard)."""
        counts = {
            "tp": self.tp,
            "pp": self.pp,
            "max_running_requests": self.max_running_requests,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
            "page_size": self.page_size,
            "max_mamba_cache_size": self.max_mamba_cache_size,
            "context_length": self.context_length,
        }
        for name, value in counts.items():
            flag = f"--{name.replace('_', '-')}"
            if value is None and name in ("max_mamba_cache_size", "context_length"):
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise CensusError(f"{flag} must be a whole number, got {value!r}")
            if value <= 0:
                raise CensusError(f"{flag} must be positive, got {value}")
        for name in ("max_running_requests", "max_mamba_cache_size"):
            value = counts[name]
            if value is not None and value > MAX_SLOTS:
                raise CensusError(
                    f"--{name.replace('_', '-')} {value:,} is more than the census "
                    f"builds ({MAX_SLOTS:,} slots)"
                )
        if self.available_gib is not None:
            value = self.available_gib
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise CensusError(
                    f"--available-gib must be a positive finite number, got {value!r}"
                )
        if self.mamba_ssm_dtype not in (None, *SSM_DTYPES):
            raise CensusError(
                f"--mamba-ssm-dtype must be one of {', '.join(SSM_DTYPES)}, "
                f"got {self.mamba_ssm_dtype!r}"
            )
        if self.mamba_radix_cache_strategy not in (None, *MAMBA_RADIX_CACHE_STRATEGIES):
            raise CensusError(
                f"--mamba-radix-cache-strategy must be one of "
                f"{', '.join(MAMBA_RADIX_CACHE_STRATEGIES)}, "
                f"got {self.mamba_radix_cache_strategy!r}"
            )
        if (self.model is None) == (self.config is None):
            raise CensusError("give exactly one of --model NAME or --config PATH")


def bundled_models() -> list[str]:
    return sorted(
        name[: -len(".json")]
        for name in os.listdir(MODELS_DIR)
        if name.endswith(".json")
    )


def config_path(inputs: Inputs) -> str:
    """The config.json the census reads: a bundled model's, the file given, or the
    config.json inside the folder given."""
    if inputs.model is not None:
        path = os.path.join(MODELS_DIR, f"{inputs.model}.json")
        if not os.path.isfile(path):
            raise CensusError(
                f"unknown model {inputs.model!r}; bundled: {', '.join(bundled_models())}"
            )
        return path
    path = inputs.config
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    return path


def read_config_dict(inputs: Inputs) -> dict:
    """The config as a dict; plain Python, so bad input is found before SGLang's
    import. Reads a regular file of at most MAX_CONFIG_BYTES."""
    path = config_path(inputs)
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


@contextlib.contextmanager
def sglang_rejects(what: str) -> Iterator[None]:
    """Any error SGLang raises in the block becomes one CensusError line."""
    try:
        yield
    except CensusError:
        raise
    except Exception as exc:
        raise CensusError(f"{what}: {type(exc).__name__}: {one_line(exc)}") from exc


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
