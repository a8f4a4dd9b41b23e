"""What SGLang's ``ModelRunner`` derives for one rank before it sizes, derived by
SGLang's own code on the resolved launch, never filled in by hand.

    widths = rank_widths(server_args)            # SGLang's DP-attention split
    with parallel_layout(widths, pp_rank=1):     # the rank's topology, published
        derived = derive(mc, server_args, widths, pp_rank=1)
        derived.use_mla_backend, derived.kv_cache_dtype, derived.layers

``FIELD_SOURCES`` names each ``KVCacheConfigurator`` field the census sets and where
its value comes from; ``test_report_shapes`` walks the installed release's fields
against it, so a field SGLang adds fails there until someone says where it comes
from. ``not_followed`` names what the census cannot follow exactly (another pool
configurator, a sliding-window model), for the report to say, never to guess.
Works on SGLang 0.5.16 to 0.5.23 (the DP-attention split's signature differs:
``shims.attention_split``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Iterator, Mapping
from typing import Any

from sglang_pd_lean.census.inputs import sglang_rejects
from sglang_pd_lean.shims import attention_split, resolved_value

# Each configurator field the census sets -> where its value comes from.
FIELD_SOURCES: Mapping[str, str] = types.MappingProxyType(
    {
        "device": "the report's GPU: 'cuda'",
        "gpu_id": "rank 0's device: 0",
        "model_config": "ModelConfig.from_server_args on the resolved launch",
        "server_args": "the resolved ServerArgs, published",
        "kv_cache_dtype": "ModelRunner.configure_kv_cache_dtype's function "
        "(mem_cache.kv_cache_dtype.configure_kv_cache_dtype)",
        "kv_cache_dtype_str": "the same call: its resolved string, else the flag",
        "model_dtype": "ModelRunner: model_config.dtype",
        "page_size": "the resolved page_size",
        "spec_algorithm": "SpeculativeAlgorithm.from_string(get_spec())",
        "is_draft_worker": "the target: False",
        "post_capture_kv_active": "False: SGLang's post-capture KV resize runs "
        "after graph capture, past the start-up sizing the report follows",
        "spec_aux_config": "resolve_spec_aux_hidden_state_config",
        "is_hybrid_swa": "ModelRunner: model_config.is_hybrid_swa",
        "is_hybrid_swa_compress": "ModelRunner: model_config.is_hybrid_swa_compress",
        "use_mla_backend": "ModelRunner: model_config.attention_arch == "
        "AttentionArch.MLA",
        "layer_info": "ModelLayerInfo of the stage's layers: get_pp_indices, as "
        "make_layers gives the model",
        "ps": "the rank's ParallelState widths: pp_size, pp_rank, attn_dp_size, "
        "attn_cp_size from compute_dp_attention_world_info",
        "attn_dp_size": "ModelRunner: get_parallel().attn_dp_size "
        "(compute_dp_attention_world_info)",
        "pp_size": "ModelRunner: pp_group.world_size (the resolved pp_size)",
        "sliding_window_size": "None: read only for sliding-window models (named "
        "in not_followed)",
        "pp_group": "None: read by no sizing or request-pool code",
        "model": "None: read only to load a quantized KV cache's scales (values, "
        "not bytes)",
        "forward_stream": "None: read only by the KV pool's constructors",
        "req_to_token_pool": "None: a target builds its own",
        "token_to_kv_pool_allocator": "None: a target builds its own",
        "memory_pool_config": "None: a target resolves its own",
    }
)
# Fields left at the configurator's own default (what the target's ModelRunner
# passes, or passes nothing for).
DEFAULTED: frozenset[str] = frozenset(
    {
        "draft_model_idx",
        "draft_parallel_layout",
        "extra_mamba_cache_bytes_per_req",
    }
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Widths:
    """One rank's parallel layout, as SGLang derives it for TP rank 0."""

    tp_size: int
    attn_tp_size: int
    attn_dp_size: int
    attn_cp_size: int
    pp_size: int

    def published(self, pp_rank: int = 0) -> dict[str, int]:
        """The ``get_parallel().override`` fields of TP rank 0 at ``pp_rank``."""
        return dict(
            tp_size=self.tp_size,
            tp_rank=0,
            attn_tp_size=self.attn_tp_size,
            attn_tp_rank=0,
            attn_dp_size=self.attn_dp_size,
            attn_dp_rank=0,
            attn_cp_size=self.attn_cp_size,
            attn_cp_rank=0,
            pp_size=self.pp_size,
            pp_rank=pp_rank,
        )


def rank_widths(server_args: Any) -> Widths:
    """TP rank 0's widths for the resolved launch: SGLang's own DP-attention split
    (``compute_dp_attention_world_info``) and the resolved PP."""

    def value(name: str) -> int:
        got = resolved_value(server_args, name)
        return 1 if got is None else int(got)

    tp, cp = value("tp_size"), value("attn_cp_size")
    attn_tp, attn_dp = attention_split(server_args, tp=tp, attn_cp=cp)
    return Widths(
        tp_size=tp,
        attn_tp_size=attn_tp,
        attn_dp_size=attn_dp,
        attn_cp_size=cp,
        pp_size=value("pp_size"),
    )


@contextlib.contextmanager
def parallel_layout(widths: Widths, pp_rank: int = 0) -> Iterator[None]:
    """The rank's layout published through SGLang's runtime context for the block
    (the cache-parameter, sizing and pool code read it there)."""
    from sglang.srt.runtime_context import get_parallel

    import sglang_pd_lean.census.older as older

    with get_parallel().override(**widths.published(pp_rank)):
        if older.has_configurator():
            yield
            return
        with older.attention_tp_group(widths.attn_tp_size):
            yield


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived:
    """What the target's ModelRunner derives before sizing, for one stage."""

    use_mla_backend: bool
    kv_cache_dtype: Any  # torch.dtype
    kv_cache_dtype_str: str | None
    model_dtype: Any
    is_hybrid_swa: bool
    is_hybrid_swa_compress: bool
    widths: Widths
    pp_rank: int
    layers: tuple[int, int]

    def configurator_fields(self) -> dict[str, Any]:
        """This rank's part of a KVCacheConfigurator's fields (FIELD_SOURCES)."""
        from sglang_pd_lean.shims import layer_info

        w = self.widths
        return dict(
            kv_cache_dtype=self.kv_cache_dtype,
            kv_cache_dtype_str=self.kv_cache_dtype_str,
            model_dtype=self.model_dtype,
            is_hybrid_swa=self.is_hybrid_swa,
            is_hybrid_swa_compress=self.is_hybrid_swa_compress,
            use_mla_backend=self.use_mla_backend,
            layer_info=layer_info(*self.layers),
            ps=types.SimpleNamespace(
                pp_size=w.pp_size,
                pp_rank=self.pp_rank,
                tp_size=w.tp_size,
                tp_rank=0,
                attn_dp_size=w.attn_dp_size,
                attn_dp_rank=0,
                attn_cp_size=w.attn_cp_size,
                attn_tp_size=w.attn_tp_size,
            ),
            pp_size=w.pp_size,
            attn_dp_size=w.attn_dp_size,
        )


def derive(mc, server_args, widths: Widths, pp_rank: int = 0) -> Derived:
    """The target's derivations for the stage ``pp_rank`` (call with the launch
    published)."""
    from sglang.srt.distributed.utils import get_pp_indices

    with sglang_rejects("SGLang's model runner cannot derive this launch's KV cache"):
        dtype, dtype_str = kv_cache_dtype(mc, server_args)
        start, end = get_pp_indices(mc.num_hidden_layers, pp_rank, widths.pp_size)
    return Derived(
        use_mla_backend=use_mla_backend(mc),
        kv_cache_dtype=dtype,
        kv_cache_dtype_str=dtype_str,
        model_dtype=mc.dtype,
        is_hybrid_swa=bool(getattr(mc, "is_hybrid_swa", False)),
        is_hybrid_swa_compress=bool(getattr(mc, "is_hybrid_swa_compress", False)),
        widths=widths,
        pp_rank=pp_rank,
        layers=(start, end),
    )


def use_mla_backend(mc) -> bool:
    """``ModelRunner.use_mla_backend``: the attention arch SGLang's ModelConfig
    derived for the model."""
    from sglang.srt.configs.model_config import AttentionArch

    return mc.attention_arch == AttentionArch.MLA


def kv_cache_dtype(mc, server_args) -> tuple[Any, str | None]:
    """(dtype, string) of the target's KV cache: ``ModelRunner.configure_kv_cache_dtype``
    run on a stand-in runner holding what it reads (the launch, the model's dtype
    and, for ``--kv-cache-dtype auto``, the quantization config SGLang's loader
    gives the model, whose ``kv_cache_quant_algo`` picks fp8)."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean.shims import setting

    flag = setting("get_model", "kv_cache_dtype", server_args) or "auto"
    runner = types.SimpleNamespace(
        server_args=server_args,
        model=_model_quantization(mc) if flag == "auto" else None,
        dtype=mc.dtype,
        is_draft_worker=False,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            setting("get_spec", "speculative_algorithm", server_args)
        ),
        draft_attention_backend=setting(
            "get_spec", "speculative_draft_attention_backend", server_args
        ),
        _record_kv_cache_dtype=lambda resolved: None,  # 0.5.16: a log of it
    )
    ModelRunner.configure_kv_cache_dtype(runner)
    return runner.kv_cache_dtype, getattr(runner, "kv_cache_dtype_str", flag)


def _model_quantization(mc) -> Any:
    """A stand-in model holding the quantization config SGLang's loader would give
    it (``loader._get_quantization_config``); None for an unquantized model."""
    if not getattr(mc, "quantization", None):
        return None
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader import loader

    quant = loader._get_quantization_config(mc, LoadConfig(load_format="dummy"))
    return types.SimpleNamespace(quant_config=quant)


def not_followed(mc, conf) -> tuple[str, ...]:
    """What the census does not follow exactly for this rank, one phrase each."""
    from sglang.srt.model_executor import pool_configurator

    said = []
    with sglang_rejects("SGLang cannot pick this model's KV sizing"):
        chosen = type(pool_configurator.create_memory_pool_configurator(conf))
    if chosen.__name__ != "DefaultPoolConfigurator":
        said.append(
            f"SGLang sizes this model's KV with {chosen.__name__}, not followed"
        )
    if getattr(mc, "is_hybrid_swa", False) or getattr(mc, "sliding_window_size", None):
        said.append("sliding-window attention layers (sizes not followed)")
    return tuple(said)
