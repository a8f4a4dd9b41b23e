"""Transient warmup buffers per role: the FlashInfer-autotune dummy-decode batch.

    rows = warmup_rows(mc, {"prefill": (fields, pools, 4)})  # pools: a Pair
    rows["prefill"]["plugin"]["autotune_buffers_bytes"]

Upstream's ``EagerRunner._autotune_buffers`` runs under ``FakeTensorMode`` on a model
runner namespace holding the fields that code reads (a real one needs a GPU).
"""

from __future__ import annotations

import types

from sglang_pd_lean.census.pools import published
from sglang_pd_lean.census.results import Pair, Warmup
from sglang_pd_lean.role import upstream_behaviour
from sglang_pd_lean.shims import setting


def autotune_buffer_bytes(mc, server_args, max_bs: int, draft_tokens: int) -> int:
    """Bytes of the warmup's FlashInfer-autotune dummy-decode buffers: upstream's
    ``EagerRunner._autotune_buffers`` and allocator, under FakeTensorMode, for a
    target whose eager batch holds ``max_running_requests`` requests. The model runner
    is a namespace with the fields that code reads (a real one needs a GPU)."""
    import torch
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from torch._subclasses.fake_tensor import FakeTensorMode

    runner = object.__new__(EagerRunner)
    runner._eager_max_bs = max_bs
    runner.model_runner = types.SimpleNamespace(
        server_args=server_args,
        is_draft_worker=False,
        device="cuda",
        spec_algorithm=SpeculativeAlgorithm.from_string(
            setting("get_spec", "speculative_algorithm", server_args)
        ),
        decode_num_tokens_per_req=lambda: draft_tokens,
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


def warmup_rows(mc, plans: dict[str, tuple[dict, Pair, int]]) -> dict[str, Pair]:
    """Per role: transient warmup buffers, upstream vs plugin. ``plans``: per role,
    (ServerArgs fields, the role's pool summaries, draft tokens per request); each
    column's eager batch is that column's own server's request slots (SGLang's
    eager runner sizes it by the running requests the server settled on)."""
    rows = {}
    for role, (fields, pools, draft_tokens) in plans.items():
        with published(**fields) as server_args:
            with upstream_behaviour():
                upstream = autotune_buffer_bytes(
                    mc, server_args, pools.upstream.request_slots, draft_tokens
                )
            plugin = autotune_buffer_bytes(
                mc, server_args, pools.plugin.request_slots, draft_tokens
            )
        rows[role] = Pair(
            upstream=Warmup(autotune_buffers_bytes=upstream),
            plugin=Warmup(autotune_buffers_bytes=plugin),
        )
    return rows
