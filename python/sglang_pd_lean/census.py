"""Per-role, per-component byte census of a hybrid model's request pool, with no GPU.

    from sglang_pd_lean import census
    result = census.run(census.Inputs(model="qwen3-next-80b-a3b", tp=4))
    result["roles"]["prefill"]["upstream"]["verify_only_bytes"]

The census walks SGLang's own start-up road on a CPU: the model's config through
SGLang's config loader, SGLang's cache parameters, a real ``KVCacheConfigurator``
(built as the plain dataclass it is) and its ``_build_req_to_token_pool``, which
runs the real ``HybridReqToTokenPool`` / ``MambaPool`` constructors. They run under
``FakeTensorMode``, so their CUDA allocations cost nothing and every byte is
counted from the tensors upstream asked for. Each role is built twice: inside
``role.upstream_behaviour()`` (every gate steps aside: upstream as released) and
without it (the gates this SGLang needs, as the plugin registered them).
With ``available_gib`` (the ``total_rest_memory`` SGLang's mamba sizing receives)
each column first runs SGLang's sizing (``_handle_max_mamba_cache``,
``config_from_budget``, ``resolve_max_num_reqs``) and builds its pool with the slot
and request counts that settled on, as a server would; where SGLang would stop, the
column says so with SGLang's reason. Bad input, and any error SGLang raises on a
config, is a one-line ``CensusError``. Works on SGLang 0.5.16 to 0.5.23.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import os
import shutil
import stat
import tempfile
import types
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.accounting import (
    COMPONENT_ORDER,
    COMPONENTS,
    VERIFY_ONLY,
    component_bytes,
    pool_tensors,
)
from sglang_pd_lean.role import setting, upstream_behaviour

ROLES = ("prefill", "decode", "null")
DEFAULT_MODEL = "qwen3-next-80b-a3b"
MODELS_DIR = os.path.join(os.path.dirname(__file__), "models")

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


GIB = 1 << 30
_NO_KERNEL_WARMUP = "SGLANG_DISABLE_FUSED_MAMBA_SLOT_OPS"
_SSM_DTYPE_ENV = "SGLANG_MAMBA_SSM_DTYPE"


class CensusError(ValueError):
    """Bad input for the census: the message is one line for the operator."""


@dataclasses.dataclass
class Inputs:
    model: str | None = None  # a bundled model name
    config: str | None = None  # a config.json or a model folder
    tp: int = 1
    pp: int = 1
    max_running_requests: int = 256
    max_mamba_cache_size: int | None = None  # default: 3 x max_running_requests
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

    @property
    def mamba_slots(self) -> int:
        """Slots the pool census builds: the explicit size, else upstream's target
        ratio of mamba slots per running request."""
        if self.max_mamba_cache_size:
            return self.max_mamba_cache_size
        from sglang.srt.mem_cache import kv_cache_configurator

        ratio = getattr(
            kv_cache_configurator, "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO", 3
        )
        return ratio * self.max_running_requests


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


_model_folders: dict[str, str] = {}


def model_folder(data: dict) -> str:
    """A folder holding ``data`` as config.json, for SGLang's loaders (kept per process)."""
    key = json.dumps(data, sort_keys=True)
    if key not in _model_folders:
        folder = tempfile.mkdtemp(prefix="sglang-pd-lean-model-")
        atexit.register(shutil.rmtree, folder, True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write(key)
        _model_folders[key] = folder
    return _model_folders[key]


def model_config(data: dict, *, context_length: int | None) -> Any:
    """SGLang's own ModelConfig for the config (its config classes and loader)."""
    from sglang.srt.configs.model_config import ModelConfig

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with sglang_rejects("SGLang cannot load this config"):
        return ModelConfig(model_folder(data), context_length=context_length)


def linear_state_config(mc) -> Any:
    from sglang.srt.configs.hybrid_arch import mambaish_config

    return mambaish_config(mc)


@contextlib.contextmanager
def published(**fields: Any) -> Iterator[Any]:
    """Publish a ServerArgs carrying ``fields`` as SGLang's configuration for the block."""
    from sglang.srt.runtime_context import get_context

    fields.setdefault("page_size", 1)
    with get_context().override_server_args(**fields) as server_args:
        yield server_args


@contextlib.contextmanager
def parallel(*, tp: int) -> Iterator[None]:
    """Attention-TP layout of one rank (rank 0) for SGLang's cache-parameter code."""
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(
        tp_size=tp, tp_rank=0, attn_tp_size=tp, attn_tp_rank=0
    ):
        yield


def configurator(mc, server_args, *, is_draft_worker: bool, layers: tuple[int, int]):
    """A real KVCacheConfigurator, filled in as a plain dataclass."""
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    fields = [f for f in dataclasses.fields(KVCacheConfigurator) if f.init]
    required = {
        f.name: None
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    values = dict(required)
    known = dict(
        device="cuda",
        gpu_id=0,
        model_config=mc,
        server_args=server_args,
        page_size=1,
        kv_cache_dtype=mc.dtype,
        model_dtype=mc.dtype,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            setting("get_spec", "speculative_algorithm", server_args)
        ),
        is_draft_worker=is_draft_worker,
        post_capture_kv_active=False,
        is_hybrid_swa=False,
        is_hybrid_swa_compress=False,
        use_mla_backend=False,
        layer_info=layer_info(*layers),
        spec_aux_config=spec_aux_config(mc),
        ps=types.SimpleNamespace(pp_size=1, attn_dp_size=1, attn_cp_size=1, pp_rank=0),
        pp_size=1,  # 0.5.21+ keep these on the configurator itself
        attn_dp_size=1,
    )
    names = {f.name for f in fields}
    values.update({k: v for k, v in known.items() if k in names})
    return KVCacheConfigurator(**values)


def spec_aux_config(mc) -> Any:
    """Upstream's draft-model description: an MTP draft of the model's own MTP depth
    (one layer where the config does not say), which shares the KV budget."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        SpecAuxHiddenStateConfig,
    )

    text = mc.hf_text_config
    layers = getattr(text, "num_nextn_predict_layers", None) or getattr(
        text, "mtp_num_hidden_layers", None
    )
    return SpecAuxHiddenStateConfig(eagle_draft_num_layers=int(layers or 1))


def layer_info(start: int, end: int) -> Any:
    """SGLang's ModelLayerInfo for a [start, end) stage (a namespace before it existed)."""
    try:
        from sglang.srt.model_executor.model_runner_components.layer_setup import (
            ModelLayerInfo,
        )
    except ImportError:
        return types.SimpleNamespace(start_layer=start, end_layer=end)
    return ModelLayerInfo(
        start_layer=start, end_layer=end, num_effective_layers=end - start
    )


def build_request_pool(conf, max_num_reqs: int, *, fake: bool = True):
    """Run upstream's request-pool build; under FakeTensorMode (no memory used)
    unless ``fake`` is False (real CUDA allocations, for the GPU check)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # 0.5.23 warms a Triton slot-copy kernel as the pool is built: a launch, not an
    # allocation, and impossible without a GPU. SGLang's own switch turns it off.
    saved = os.environ.get(_NO_KERNEL_WARMUP)
    os.environ[_NO_KERNEL_WARMUP] = "1"
    try:
        mode = (
            FakeTensorMode(allow_non_fake_inputs=True)
            if fake
            else contextlib.nullcontext()
        )
        with mode:
            return conf._build_req_to_token_pool(max_num_reqs=max_num_reqs)
    finally:
        if saved is None:
            del os.environ[_NO_KERNEL_WARMUP]
        else:
            os.environ[_NO_KERNEL_WARMUP] = saved


def summarize(components: dict[str, int]) -> dict:
    every = {name: 0 for name in COMPONENT_ORDER}
    every.update(components)
    return {
        "components": dict(sorted(every.items())),
        "verify_only_bytes": sum(components.get(c, 0) for c in VERIFY_ONLY),
        "total_bytes": sum(components.values()),
    }


def _stage_layers(
    num_layers: int, pp: int, linear_layers: list[int]
) -> tuple[int, int]:
    """The pipeline stage holding the most linear-attention layers (it sets the peak)."""
    from sglang.srt.distributed.utils import get_pp_indices

    stages = [get_pp_indices(num_layers, rank, pp) for rank in range(pp)]
    return max(stages, key=lambda se: sum(se[0] <= i < se[1] for i in linear_layers))


def server_fields(
    inputs: Inputs,
    role: str,
    *,
    speculative: bool = True,
    sizing: bool = False,
    slots: int | None = None,
    requests: int | None = None,
) -> dict:
    """ServerArgs fields for one role. ``sizing``: leave the mamba slot count to
    upstream's budget code unless the operator set it; ``slots`` / ``requests``:
    the counts SGLang's sizing settled on, for building the pool."""
    if slots is None:
        slots = inputs.max_mamba_cache_size if sizing else inputs.mamba_slots
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


def prepare(inputs: Inputs):
    """Validate inputs and load the model: (SGLang ModelConfig, linear-state config)."""
    inputs.validate()
    data = read_config_dict(inputs)
    mc = model_config(data, context_length=inputs.context_length)
    with sglang_rejects("SGLang cannot read this config's linear-attention layers"):
        linear = linear_state_config(mc)
    if linear is None:
        import sglang

        hints = linear_hints(data)
        architecture = (mc.hf_config.architectures or [data["model_type"]])[0]
        if hints:
            raise CensusError(
                f"SGLang {sglang.__version__} gives {architecture} no mamba pool, "
                f"though its config describes linear-attention layers "
                f"({', '.join(hints[:4])}): this SGLang does not run it as a hybrid "
                f"model; nothing to count"
            )
        raise CensusError(
            f"model_type {data['model_type']!r} has no linear-attention (mamba/GDN/KDA) "
            f"layers: it has no mamba state and nothing for this plugin to gate"
        )
    return mc, linear


def size_budget(conf, available_gib: float, server_args) -> dict:
    """SGLang's start-up sizing from ``available_gib``, the ``total_rest_memory``
    that ``_handle_max_mamba_cache`` receives: mamba slots, then the KV budget,
    KV tokens and running requests as ``_resolve_memory_pool_config`` derives them.
    Where SGLang would stop the server: ``fits`` False and SGLang's reason."""
    from sglang.srt.model_executor.pool_configurator import (
        create_memory_pool_configurator,
    )

    try:
        kv_gib = conf._handle_max_mamba_cache(available_gib)
        slots = int(setting("get_schedule", "max_mamba_cache_size", server_args))
        if kv_gib <= 0:
            return {
                "fits": False,
                "reason": f"the mamba budget leaves {kv_gib:.2f} GiB for the KV "
                f"cache; SGLang stops: 'Loaded weights leave no GPU memory for the "
                f"KV cache'",
            }
        config = conf.config_from_budget(int(kv_gib * GIB))
        config.max_running_requests = conf.resolve_max_num_reqs(
            config.max_total_num_tokens
        )
        config = create_memory_pool_configurator(
            conf
        ).finalize_with_max_running_requests(config)
    except (RuntimeError, ValueError, AssertionError) as exc:
        return {
            "fits": False,
            "reason": f"SGLang stops: {type(exc).__name__}: {one_line(exc)}",
        }
    return {
        "fits": True,
        "kv_cache_gib": kv_gib,
        "kv_cache_bytes": int(kv_gib * GIB),
        "kv_tokens": int(config.max_total_num_tokens),
        "mamba_slots": slots,
        "max_running_requests": int(config.max_running_requests),
        "mamba_state_and_verify_gib": available_gib - kv_gib,
    }


def column_behaviour(column: str):
    """``upstream``: every gate steps aside; ``plugin``: the gates as registered."""
    return upstream_behaviour() if column == "upstream" else contextlib.nullcontext()


def _change(upstream: dict, plugin: dict) -> dict | None:
    if not (upstream["fits"] and plugin["fits"]):
        return None
    keys = ("kv_cache_bytes", "kv_tokens", "mamba_slots", "max_running_requests")
    return {key: plugin[key] - upstream[key] for key in keys}


def census_role(inputs: Inputs, mc, role: str, layers: tuple[int, int]) -> tuple:
    """One role, upstream and plugin: (pool summaries, sizing rows or None).
    With ``available_gib`` the pool is built with the slot and request counts
    SGLang's sizing settled on (what the server allocates), else with the inputs'."""
    pools, sizing = {}, {}
    for column in ("upstream", "plugin"):
        slots, requests = inputs.mamba_slots, inputs.max_running_requests
        with column_behaviour(column):
            if inputs.available_gib:
                fields = server_fields(inputs, role, sizing=True)
                with published(**fields) as server_args:
                    conf = configurator(
                        mc, server_args, is_draft_worker=False, layers=layers
                    )
                    with sglang_rejects("SGLang cannot size this model's pools"):
                        sized = size_budget(conf, inputs.available_gib, server_args)
                sizing[column] = sized
                if sized["fits"]:
                    slots, requests = (
                        sized["mamba_slots"],
                        sized["max_running_requests"],
                    )
                if slots > MAX_SLOTS:
                    raise CensusError(
                        f"--available-gib {inputs.available_gib:g} sizes {slots:,} "
                        f"mamba slots, more than the census builds ({MAX_SLOTS:,}); "
                        f"give --max-mamba-cache-size"
                    )
            fields = server_fields(inputs, role, slots=slots, requests=requests)
            with published(**fields) as server_args:
                conf = configurator(
                    mc, server_args, is_draft_worker=False, layers=layers
                )
                with sglang_rejects("SGLang cannot build this model's request pool"):
                    pool = build_request_pool(conf, requests)
        pools[column] = summarize(component_bytes(pool))
        pools[column].update(mamba_slots=slots, request_slots=requests)
    if not inputs.available_gib:
        return pools, None
    sizing["change"] = _change(sizing["upstream"], sizing["plugin"])
    return pools, sizing


def autotune_buffer_bytes(mc, server_args, inputs: Inputs) -> int:
    """Bytes of the warmup's FlashInfer-autotune dummy-decode buffers: upstream's
    ``EagerRunner._autotune_buffers`` and allocator, under FakeTensorMode, for a
    target whose eager batch holds ``max_running_requests`` requests. The model runner
    is a namespace with the fields that code reads (a real one needs a GPU)."""
    import torch
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from torch._subclasses.fake_tensor import FakeTensorMode

    runner = object.__new__(EagerRunner)
    runner._eager_max_bs = inputs.max_running_requests
    runner.model_runner = types.SimpleNamespace(
        server_args=server_args,
        is_draft_worker=False,
        device="cuda",
        spec_algorithm=SpeculativeAlgorithm.from_string(
            setting("get_spec", "speculative_algorithm", server_args)
        ),
        decode_num_tokens_per_req=lambda: inputs.speculative_num_draft_tokens,
        model_config=mc,
        attn_backend=types.SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1),
        ngram_embedding_manager=types.SimpleNamespace(enabled=False, table=None),
        get_pp_proxy_topk_size=lambda: None,
        get_pp_proxy_residual_num_blocks=lambda: None,
    )
    with FakeTensorMode(allow_non_fake_inputs=True):
        buffers, _ = runner._autotune_buffers()
    storages = {}
    for name in dir(buffers):
        value = getattr(buffers, name, None) if not name.startswith("__") else None
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            storages[storage._cdata] = storage.nbytes()
    return sum(storages.values())


def warmup(inputs: Inputs, mc) -> dict:
    """Per role: transient warmup buffers, upstream vs plugin."""
    rows = {}
    for role in ROLES:
        with published(**server_fields(inputs, role)) as server_args:
            with upstream_behaviour():
                upstream = autotune_buffer_bytes(mc, server_args, inputs)
            plugin = autotune_buffer_bytes(mc, server_args, inputs)
        rows[role] = {
            "upstream": {"autotune_buffers_bytes": upstream},
            "plugin": {"autotune_buffers_bytes": plugin},
        }
    return rows


@contextlib.contextmanager
def ssm_dtype(dtype: str | None) -> Iterator[None]:
    """``--mamba-ssm-dtype`` the way SGLang applies it: ServerArgs exports it as
    ``SGLANG_MAMBA_SSM_DTYPE``, which SGLang's cache parameters read first."""
    if dtype is None:
        yield
        return
    saved = os.environ.get(_SSM_DTYPE_ENV)
    os.environ[_SSM_DTYPE_ENV] = dtype
    try:
        yield
    finally:
        if saved is None:
            del os.environ[_SSM_DTYPE_ENV]
        else:
            os.environ[_SSM_DTYPE_ENV] = saved


def run(inputs: Inputs) -> dict:
    """The census: roles -> upstream/plugin -> components, verify-only and total bytes."""
    inputs.validate()
    with ssm_dtype(inputs.mamba_ssm_dtype):
        return _run(inputs)


def _run(inputs: Inputs) -> dict:
    import sglang

    mc, linear = prepare(inputs)
    check_tp_heads(linear, inputs.tp)
    with parallel(tp=inputs.tp):
        # 0.5.23 reads parallel config leaves from the published configuration too.
        with published(**server_fields(inputs, "null")):
            with sglang_rejects(
                f"SGLang cannot shape the mamba state at --tp {inputs.tp}"
            ):
                cache_params = linear.mamba2_cache_params
        linear_layers = list(cache_params.layers)
        if not linear_layers:
            raise CensusError(
                f"none of this config's {mc.num_hidden_layers} layers is a "
                f"linear-attention layer for SGLang: no mamba state to count"
            )
        if inputs.pp > mc.num_hidden_layers:
            raise CensusError(
                f"--pp {inputs.pp} is more than this model's "
                f"{mc.num_hidden_layers} layers"
            )
        layers = _stage_layers(mc.num_hidden_layers, inputs.pp, linear_layers)
        roles, capacity_rows = {}, {}
        for role in ROLES:
            roles[role], capacity_rows[role] = census_role(inputs, mc, role, layers)
        warmup_rows = warmup(inputs, mc)
    if roles["null"]["upstream"]["components"]["ssm state"] == 0:
        raise CensusError(
            f"SGLang gives this config's {len(linear_layers)} linear-attention layers "
            f"0 bytes of ssm state (0 value heads or a head dim of 0): nothing to count"
        )
    result = {
        "sglang_version": sglang.__version__,
        "model": inputs.model or os.path.abspath(inputs.config),
        "inputs": {
            "tp": inputs.tp,
            "pp": inputs.pp,
            "pp_stage_layers": list(layers),
            "max_running_requests": inputs.max_running_requests,
            "max_mamba_cache_size": inputs.mamba_slots,
            "speculative_num_draft_tokens": inputs.speculative_num_draft_tokens,
            "mamba_ssm_dtype": str(cache_params.dtype.temporal).replace("torch.", ""),
            "context_length": mc.context_len,
            "page_size": inputs.page_size,
            "mamba_radix_cache_strategy": inputs.mamba_radix_cache_strategy,
        },
        "roles": roles,
        "warmup": warmup_rows,
    }
    if inputs.available_gib:
        result["inputs"]["available_gib"] = inputs.available_gib
        result["inputs"]["mamba_sizing"] = (
            "explicit (--max-mamba-cache-size)"
            if inputs.max_mamba_cache_size
            else (
                "from running requests (radix cache off)"
                if inputs.disable_radix_cache
                else "automatic (ratio of the budget)"
            )
        )
        result["capacity"] = capacity_rows
    return result


def check_tp_heads(linear, tp: int) -> None:
    """A TP that does not divide the linear-attention heads gets one clear line."""
    heads = {
        name: getattr(linear, name, None)
        for name in (
            "linear_num_value_heads",
            "linear_num_key_heads",
            "mamba_num_heads",
            "n_groups",
        )
    }
    kda = getattr(linear, "linear_attn_config", None)
    if isinstance(kda, dict):
        heads["linear_attn_config.num_heads"] = kda.get("num_heads")
    for name, count in heads.items():
        if isinstance(count, int) and count % tp:
            raise CensusError(f"--tp {tp} does not divide {name}={count} of this model")
