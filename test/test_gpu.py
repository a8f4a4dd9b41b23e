"""On a real GPU: the census's FakeTensorMode byte counts are what CUDA allocates.

Skipped without CUDA (CI has none); run where a GPU is lent:
``python -m pytest -m gpu test/test_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from helpers import server_fields
from placeholder import Inputs, prepare

from sglang_pd_lean import census
from sglang_pd_lean.role import upstream_behaviour

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("column", ["upstream", "plugin"])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_real_cuda_allocation_matches_the_fake_census(role, column):
    import contextlib

    inputs = Inputs(
        model="qwen3-next-80b-a3b", tp=8, max_running_requests=16, context_length=1024
    )
    mc, _ = prepare(inputs)
    step = upstream_behaviour() if column == "upstream" else contextlib.nullcontext()
    with (
        census.parallel(tp=8),
        census.published(**server_fields(inputs, role)) as sa,
    ):
        conf = census.configurator(mc, sa, is_draft_worker=False)
        with step:
            counted = sum(
                census.component_bytes(census.build_request_pool(conf, 16)).values()
            )
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            pool = census.build_request_pool(conf, 16, fake=False)
            torch.cuda.synchronize()
            allocated = torch.cuda.memory_allocated() - before
    del pool
    # The caching allocator rounds each block up to 512 bytes.
    assert counted <= allocated <= counted + 512 * 64
