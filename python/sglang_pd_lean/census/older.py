"""The census on SGLang 0.5.14 to 0.5.15.post1, whose start-up sizing and pool build
are methods of the ModelRunner (``ModelRunnerKVCacheMixin``,
``model_executor/model_runner_kv_cache_mixin.py``), not of a ``KVCacheConfigurator``
(0.5.16+, ``mem_cache/kv_cache_configurator.py``).

    conf = sizing_runner(mc, server_args, derived, is_draft_worker=False, spec_aux=aux)
    conf._handle_max_mamba_cache(80.0)      # the mixin's handle_max_mamba_cache

``SizingRunner`` is SGLang's own ``ModelRunner`` class, never initialised (its
``__init__`` loads a model and joins process groups). It holds the attributes its
sizing and pool methods read, each set from what the census derives for the rank
(``RUNNER_ATTRIBUTES``, beside ``rank.FIELD_SOURCES``), and answers the configurator
names the census calls with SGLang's own methods:

- ``_handle_max_mamba_cache``: ``handle_max_mamba_cache``;
- ``config_from_budget``: what ``_resolve_memory_pool_config`` does between its
  profiling and its request count (``calculate_pool_sizes``,
  ``_apply_token_constraints``, ``calculate_pool_sizes_from_max_tokens``);
- ``resolve_max_num_reqs``: ``_resolve_max_num_reqs``;
- ``_build_req_to_token_pool``: ``_init_pools``, which builds the request pool first;
  it is stopped at its next step (``_validate_prefill_only_disable_kv_cache_pool_family``),
  so the KV pool, which the census does not count, is not built;
- ``_calculate_mamba_ratio`` and ``mambaish_config``: the runner's own.

The plugin's gates hook these methods on the class, so they judge a
``SizingRunner`` as they judge the server's runner.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator, Mapping
from typing import Any

# Each ModelRunner attribute the sizing and pool methods read -> its source.
RUNNER_ATTRIBUTES: Mapping[str, str] = types.MappingProxyType(
    {
        "server_args": "the resolved ServerArgs, published",
        "model_config": "ModelConfig.from_server_args on the resolved launch",
        "device": "the report's GPU: 'cuda'",
        "gpu_id": "rank 0's device: 0",
        "is_draft_worker": "the target: False",
        "spec_algorithm": "SpeculativeAlgorithm.from_string of the launch",
        "kv_cache_dtype": "ModelRunner.configure_kv_cache_dtype (rank.kv_cache_dtype)",
        "dtype": "model_config.dtype",
        "page_size": "the resolved page_size",
        "use_mla_backend": "model_config.attention_arch == AttentionArch.MLA",
        "is_hybrid_swa": "model_config.is_hybrid_swa",
        "is_hybrid_swa_compress": "model_config.is_hybrid_swa_compress",
        "start_layer": "get_pp_indices of the stage, as make_layers gives the model",
        "end_layer": "the same",
        "num_effective_layers": "end_layer - start_layer",
        "tp_size": "the resolved tp_size",
        "dp_size": "the attention DP width (compute_dp_attention_world_info)",
        "pp_size": "the resolved pp_size",
        "pp_rank": "the stage",
        "dcp_size": "1: decode context parallelism is not a prefill launch's",
        "mem_fraction_static": "the resolved mem_fraction_static",
        "eagle_draft_num_layers": "the draft's layers, as ModelRunner.__init__ "
        "reads them (census.columns.spec_aux)",
        "dflash_draft_num_layers": "the same, for DFLASH",
        "req_to_token_pool": "None: a target builds its own",
        "token_to_kv_pool_allocator": "None: a target builds its own",
        "memory_pool_config": "None: a target resolves its own",
        "max_running_requests": "the request count the pool is built for",
        "sliding_window_size": "None: read only for sliding-window models (named "
        "in not_followed)",
        "enable_hisparse": "False: a decode-side sparse attention option",
    }
)


class RequestPoolBuilt(Exception):
    """``_init_pools`` reached the KV pool: the request pool is built."""


def has_configurator() -> bool:
    """The installed SGLang sizes with a ``KVCacheConfigurator`` (0.5.16+)."""
    try:
        from sglang.srt.mem_cache import kv_cache_configurator  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def published(context: Any, fields: dict[str, Any]) -> Iterator[Any]:
    """Publish a ServerArgs carrying ``fields`` for the block, through SGLang's own
    publish (``set_global_server_args_for_scheduler``), and put back what was
    published before (0.5.16+ do this with ``override_server_args``)."""
    from sglang.srt import server_args as module

    server_args = module.ServerArgs(model_path="dummy")  # SGLang's bare instance
    for name, value in fields.items():
        object.__setattr__(server_args, name, value)
    # The slot: the context's (0.5.15), else the module's global (0.5.14).
    holder, slot = (
        (context, "_server_args")
        if hasattr(type(context), "set_server_args")
        else (module, "_global_server_args")
    )
    saved = getattr(holder, slot)
    module.set_global_server_args_for_scheduler(server_args)
    try:
        yield server_args
    finally:
        if saved is None:
            setattr(holder, slot, None)
        else:
            module.set_global_server_args_for_scheduler(saved)


def _config_from_budget(runner, budget_bytes: int) -> Any:
    """KV tokens from a KV budget, as ``_resolve_memory_pool_config`` derives them
    once it has profiled: SGLang's pool configurator, then the token constraints."""
    from sglang.srt.model_executor.pool_configurator import (
        create_memory_pool_configurator,
    )

    page_size = runner.server_args.page_size
    sizes = create_memory_pool_configurator(runner)
    config = sizes.calculate_pool_sizes(budget_bytes, page_size)
    tokens = runner._apply_token_constraints(config.max_total_num_tokens)
    if tokens != config.max_total_num_tokens:
        config = sizes.calculate_pool_sizes_from_max_tokens(tokens, page_size)
    return config


@functools.cache
def _runner_class() -> type:
    from sglang.srt.model_executor.model_runner import ModelRunner

    class SizingRunner(ModelRunner):
        """SGLang's ModelRunner holding only what its sizing and pool methods read."""

        def __init__(self, **attributes: Any) -> None:  # no super(): no model
            from sglang.srt.model_executor import model_runner

            self._linear_attn_registry_cache = model_runner._UNSET
            self._whole = False
            for name, value in attributes.items():
                setattr(self, name, value)

        def _handle_max_mamba_cache(self, total_rest_memory: float) -> float:
            return self.handle_max_mamba_cache(total_rest_memory)

        def config_from_budget(self, budget_bytes: int) -> Any:
            return _config_from_budget(self, budget_bytes)

        def resolve_max_num_reqs(self, token_capacity: int) -> int:
            return self._resolve_max_num_reqs(token_capacity)

        def _build_req_to_token_pool(self, max_num_reqs: int) -> Any:
            self.max_running_requests = max_num_reqs
            self.req_to_token_pool = None
            try:
                self._init_pools()
            except RequestPoolBuilt:
                pass
            return self.req_to_token_pool

        def _validate_prefill_only_disable_kv_cache_pool_family(
            self, *args: Any
        ) -> None:
            if not self._whole:
                raise RequestPoolBuilt
            super()._validate_prefill_only_disable_kv_cache_pool_family(*args)

        def build_pools(self, max_num_reqs: int, max_total_num_tokens: int) -> Any:
            self.max_running_requests = max_num_reqs
            self.max_total_num_tokens = max_total_num_tokens
            self.req_to_token_pool = None
            self.token_to_kv_pool_allocator = None
            self._whole = True
            try:
                self._init_pools()
            finally:
                self._whole = False
            return self.req_to_token_pool, self.token_to_kv_pool

    return SizingRunner


@contextlib.contextmanager
def attention_tp_group(size: int) -> Iterator[None]:
    """The attention TP group's width for the block: these releases' sizing and
    cache parameters read ``get_attention_tp_size()`` from the group, not from the
    runtime context's parallel widths. Where a group exists it is left alone."""
    from sglang.srt.distributed import parallel_state

    saved = parallel_state._ATTN_TP
    if saved is None:
        parallel_state._ATTN_TP = types.SimpleNamespace(
            world_size=size, rank_in_group=0
        )
    try:
        yield
    finally:
        parallel_state._ATTN_TP = saved


def spec_aux(server_args, mc, algorithm) -> Any:
    """The draft's layers the target's KV sizing counts, as these releases'
    ``ModelRunner.__init__`` reads them inline (0.5.16+ have a function for it,
    ``resolve_spec_aux_hidden_state_config``): an EAGLE-family or STANDALONE target
    given a draft model path counts the draft config's ``num_nextn_predict_layers``
    (else the larger of its hidden and attention layers); a DFLASH target the
    layers SGLang's ``parse_dflash_draft_config`` requires."""
    runner = _runner_class()(model_config=mc, is_draft_worker=False)
    path = server_args.speculative_draft_model_path
    eagle = dflash = None

    def draft_config():
        return runner._build_model_config(
            server_args,
            model_path=path,
            model_revision=server_args.speculative_draft_model_revision,
            is_draft_model=True,
        )

    if (algorithm.is_eagle() or algorithm.is_standalone()) and path:
        draft = draft_config()
        eagle = draft.num_nextn_predict_layers
        if eagle is None:
            eagle = max(draft.num_hidden_layers, draft.num_attention_layers)
    if algorithm.is_dflash():
        from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

        parsed = parse_dflash_draft_config(draft_hf_config=draft_config().hf_config)
        dflash = parsed.require_num_layers()
    return types.SimpleNamespace(
        eagle_draft_num_layers=None if eagle is None else int(eagle),
        dflash_draft_num_layers=None if dflash is None else int(dflash),
    )


def target_layers(model, mc) -> list[int]:
    """[start, end) of a target's layers as these releases' ``ModelRunner.initialize``
    reads them inline from the built model: its own ``start_layer`` and
    ``end_layer`` (``make_layers`` sets them for its pipeline stage), else every
    layer, the larger of the config's hidden and attention layers."""
    every = max(mc.num_hidden_layers, mc.num_attention_layers)
    return [getattr(model, "start_layer", 0), getattr(model, "end_layer", every)]


def target_linear_config(mc) -> Any:
    """The target ModelRunner's ``mambaish_config`` for the model."""
    return _runner_class()(model_config=mc, is_draft_worker=False).mambaish_config


def sizing_runner(
    mc, server_args, derived, *, is_draft_worker: bool, page_size: int, spec_aux: Any
) -> Any:
    """A ``SizingRunner`` for TP rank 0 of ``derived``'s stage (``rank.derive``);
    its ``build_pools`` runs ``_init_pools`` whole: the request and KV pools."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_pd_lean.shims import setting

    start, end = derived.layers
    widths = derived.widths
    return _runner_class()(
        server_args=server_args,
        model_config=mc,
        device="cuda",
        gpu_id=0,
        is_draft_worker=is_draft_worker,
        spec_algorithm=SpeculativeAlgorithm.from_string(
            setting("get_spec", "speculative_algorithm", server_args)
        ),
        kv_cache_dtype=derived.kv_cache_dtype,
        dtype=derived.model_dtype,
        page_size=page_size,
        use_mla_backend=derived.use_mla_backend,
        is_hybrid_swa=derived.is_hybrid_swa,
        is_hybrid_swa_compress=derived.is_hybrid_swa_compress,
        start_layer=start,
        end_layer=end,
        num_effective_layers=end - start,
        tp_size=widths.tp_size,
        dp_size=widths.attn_dp_size,
        pp_size=widths.pp_size,
        pp_rank=derived.pp_rank,
        dcp_size=1,
        mem_fraction_static=server_args.mem_fraction_static,
        eagle_draft_num_layers=getattr(spec_aux, "eagle_draft_num_layers", None),
        dflash_draft_num_layers=getattr(spec_aux, "dflash_draft_num_layers", None),
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        memory_pool_config=None,
        max_running_requests=None,
        sliding_window_size=None,
        enable_hisparse=False,
    )
