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
Works on SGLang 0.5.16 to 0.5.23.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import types
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.role import setting, upstream_behaviour

ROLES = ("prefill", "decode", "null")
DEFAULT_MODEL = "qwen3-next-80b-a3b"
MODELS_DIR = os.path.join(os.path.dirname(__file__), "models")

# Tensors of the request pool, by the attribute upstream stores them under.
COMPONENTS = {
    "conv": "conv state",
    "temporal": "ssm state",
    "intermediate_ssm": "verify ssm snapshots",
    "intermediate_conv_window": "verify conv windows",
    "replayssm_d": "replayssm rings",
    "replayssm_k": "replayssm rings",
    "replayssm_g": "replayssm rings",
    "replayssm_rawv": "replayssm rings",
    "replayssm_rawk": "replayssm rings",
    "replayssm_beta": "replayssm rings",
    "req_to_token": "req_to_token map",
}
# Read only by TARGET_VERIFY (and the commit that follows it).
VERIFY_ONLY = ("verify ssm snapshots", "verify conv windows", "replayssm rings")


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
    available_gib: float | None = None  # capacity rows: GPU memory left for state + KV
    disable_radix_cache: bool = False

    def validate(self) -> None:
        for name in (
            "tp",
            "pp",
            "max_running_requests",
            "speculative_num_draft_tokens",
        ):
            if getattr(self, name) <= 0:
                raise CensusError(f"--{name.replace('_', '-')} must be positive")
        for name in ("max_mamba_cache_size", "context_length", "available_gib"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise CensusError(f"--{name.replace('_', '-')} must be positive")
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


def read_config_dict(inputs: Inputs) -> dict:
    if inputs.model is not None:
        path = os.path.join(MODELS_DIR, f"{inputs.model}.json")
        if not os.path.isfile(path):
            raise CensusError(
                f"unknown model {inputs.model!r}; bundled: {', '.join(bundled_models())}"
            )
    else:
        path = inputs.config
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise CensusError(f"cannot read config {path}: {exc}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise CensusError(f"{path} is not a Hugging Face config.json (no model_type)")
    return data


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
    try:
        return ModelConfig(model_folder(data), context_length=context_length)
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise CensusError(f"SGLang cannot load this config: {exc}") from None


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


def pool_tensors(pool) -> dict[str, Any]:
    """Every tensor of the request pool and its mamba state, by upstream's names."""
    import torch

    found: dict[str, Any] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    found[f"{name}[{i}]"] = item

    for name, value in vars(pool).items():
        add(name, value)
    mamba_pool = getattr(pool, "mamba_pool", None)
    if mamba_pool is not None:
        for name, value in vars(mamba_pool).items():
            if name != "mamba_cache":
                add(f"mamba_pool.{name}", value)
        cache = mamba_pool.mamba_cache
        for f in dataclasses.fields(cache):
            add(f.name, getattr(cache, f.name))
    return found


def component_bytes(pool) -> dict[str, int]:
    """Bytes per component, each physical storage counted once (views share it)."""
    seen: dict[int, str] = {}
    sizes: dict[int, int] = {}
    # Named state first, so a storage is filed under its upstream state name.
    tensors = sorted(
        pool_tensors(pool).items(), key=lambda kv: kv[0].split("[")[0] not in COMPONENTS
    )
    for name, tensor in tensors:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in seen:
            continue
        base = name.split("[")[0]
        seen[key] = COMPONENTS.get(base, base.replace("mamba_pool.", "other: "))
        sizes[key] = storage.nbytes()
    totals: dict[str, int] = {}
    for key, component in seen.items():
        totals[component] = totals.get(component, 0) + sizes[key]
    return totals


def summarize(components: dict[str, int]) -> dict:
    return {
        "components": dict(sorted(components.items())),
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
    inputs: Inputs, role: str, *, speculative: bool = True, sizing: bool = False
) -> dict:
    """ServerArgs fields for one role. ``sizing``: leave the mamba slot count to
    upstream's budget code unless the operator set it."""
    fields = dict(
        disaggregation_mode=role,
        max_running_requests=inputs.max_running_requests,
        max_mamba_cache_size=(
            inputs.max_mamba_cache_size if sizing else inputs.mamba_slots
        ),
        disable_radix_cache=inputs.disable_radix_cache,
        tp_size=inputs.tp,
        pp_size=inputs.pp,
    )
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


def prepare(inputs: Inputs):
    """Validate inputs and load the model: (SGLang ModelConfig, linear-state config)."""
    inputs.validate()
    data = read_config_dict(inputs)
    mc = model_config(data, context_length=inputs.context_length)
    linear = linear_state_config(mc)
    if linear is None:
        raise CensusError(
            f"model_type {data['model_type']!r} has no linear-attention (mamba/GDN/KDA) "
            f"layers: it has no mamba state and nothing for this plugin to gate"
        )
    return mc, linear


def size_budget(conf, available_gib: float, server_args) -> dict:
    """Upstream's mamba sizing (``_handle_max_mamba_cache``) and KV sizing
    (``config_from_budget``) for ``available_gib`` of memory after weights."""
    kv_gib = conf._handle_max_mamba_cache(available_gib)
    slots = setting("get_schedule", "max_mamba_cache_size", server_args)
    tokens = conf.config_from_budget(int(kv_gib * (1 << 30))).max_total_num_tokens
    return {
        "kv_cache_gib": kv_gib,
        "mamba_state_and_verify_gib": available_gib - kv_gib,
        "kv_tokens": int(tokens),
        "mamba_slots": int(slots),
    }


def capacity(inputs: Inputs, mc, layers: tuple[int, int]) -> dict:
    """Per role: what the budget leaves for the KV cache, upstream vs plugin."""
    roles: dict[str, dict] = {}
    for role in ROLES:
        sized = {}
        for column in ("upstream", "plugin"):
            fields = server_fields(inputs, role, sizing=True)
            with published(**fields) as server_args:
                conf = configurator(
                    mc, server_args, is_draft_worker=False, layers=layers
                )
                context = (
                    upstream_behaviour()
                    if column == "upstream"
                    else contextlib.nullcontext()
                )
                with context:
                    sized[column] = size_budget(conf, inputs.available_gib, server_args)
        up, lean = sized["upstream"], sized["plugin"]
        sized["regained"] = {
            "kv_cache_gib": lean["kv_cache_gib"] - up["kv_cache_gib"],
            "kv_tokens_ratio": lean["kv_tokens"] / up["kv_tokens"],
            "mamba_slots_ratio": lean["mamba_slots"] / up["mamba_slots"],
        }
        roles[role] = sized
    return roles


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
    with ssm_dtype(inputs.mamba_ssm_dtype):
        return _run(inputs)


def _run(inputs: Inputs) -> dict:
    import sglang

    mc, linear = prepare(inputs)
    roles: dict[str, dict] = {}
    check_tp_heads(linear, inputs.tp)
    with parallel(tp=inputs.tp):
        # 0.5.23 reads parallel config leaves from the published configuration too.
        with published(**server_fields(inputs, "null")):
            try:
                cache_params = linear.mamba2_cache_params
            except (AssertionError, ValueError, ZeroDivisionError) as exc:
                raise CensusError(
                    f"--tp {inputs.tp} does not fit this model: {exc}"
                ) from None
        layers = _stage_layers(
            mc.num_hidden_layers, inputs.pp, list(cache_params.layers)
        )
        for role in ROLES:
            with published(**server_fields(inputs, role)) as server_args:
                conf = configurator(
                    mc, server_args, is_draft_worker=False, layers=layers
                )
                with upstream_behaviour():
                    upstream = build_request_pool(conf, inputs.max_running_requests)
                plugin = build_request_pool(conf, inputs.max_running_requests)
            roles[role] = {
                "upstream": summarize(component_bytes(upstream)),
                "plugin": summarize(component_bytes(plugin)),
            }
        warmup_rows = warmup(inputs, mc)
        capacity_rows = capacity(inputs, mc, layers) if inputs.available_gib else None
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
        },
        "roles": roles,
        "warmup": warmup_rows,
    }
    if capacity_rows is not None:
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
