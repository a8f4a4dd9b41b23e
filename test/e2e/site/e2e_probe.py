"""Test-only probe: the memory budget each worker's KV sizing received.

SGLang sizes mamba slots and the KV cache from ``total_rest_memory`` (GiB), the
argument of ``KVCacheConfigurator._handle_max_mamba_cache`` in
``sglang/srt/mem_cache/kv_cache_configurator.py``, which it computes from the free
device memory at start-up and does not log. On a CPU that is the host's free memory,
so it differs from one server to the next. The probe logs it (``repr``, exact) so a
test can give ``sglang-pd-lean report --available-gib`` the very budget a server
sized with, with the plugin on or off, on any role. It changes nothing.
"""

from __future__ import annotations

import functools
import sys

PREFIX = "[e2e-probe]"


def _log_budget(original):
    @functools.wraps(original)
    def handle_max_mamba_cache(configurator, total_rest_memory, *args, **kwargs):
        print(
            f"{PREFIX} _handle_max_mamba_cache total_rest_memory="
            f"{total_rest_memory!r} is_draft_worker={configurator.is_draft_worker}",
            file=sys.stderr,
            flush=True,
        )
        return original(configurator, total_rest_memory, *args, **kwargs)

    return handle_max_mamba_cache


PATCHES = {
    "sglang.srt.mem_cache.kv_cache_configurator": [
        ("KVCacheConfigurator", "_handle_max_mamba_cache", _log_budget),
    ],
}
