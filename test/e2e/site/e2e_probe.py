"""Test-only probes: the memory budget each worker's KV sizing received, and the
bytes of the weights each worker loaded.

SGLang sizes mamba slots and the KV cache from ``total_rest_memory`` (GiB), the
argument of ``KVCacheConfigurator._handle_max_mamba_cache`` in
``sglang/srt/mem_cache/kv_cache_configurator.py``, which it computes from the free
device memory at start-up and does not log. On a CPU that is the host's free memory,
so it differs from one server to the next. The probe logs it (``repr``, exact) so a
test can give ``sglang-pd-lean report --available-gib`` the very budget a server
sized with, with the plugin on or off, on any role. It changes nothing.

A model without linear-attention layers never reaches that function: its KV budget
(bytes) is the argument of ``KVCacheConfigurator.config_from_budget``, which the
probe logs for such a target (the same figure ``report --available-gib`` names).

After ``ModelRunner.load_model`` (``sglang/srt/model_executor/model_runner.py``) the
second probe logs the bytes of the worker's model parameters as loaded (``numel x
element_size`` over ``model.parameters()``, each storage once), for the target and
for the draft worker, so a test can compare ``report``'s weights per rank with what
the server holds. It changes nothing.

With ``SGLANG_PD_LEAN_E2E_MODULES=<file>``, a third probe writes, when
``Scheduler.__init__`` returns, every module the rank has imported to
``<file>.<pid>``, one per line (``benchmark/startup.py`` pre-imports that list to
time ``load_plugins()`` in a process that has what a real rank serves with).
"""

from __future__ import annotations

import functools
import os
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


def _log_kv_budget(original):
    @functools.wraps(original)
    def config_from_budget(configurator, budget_bytes, *args, **kwargs):
        if configurator.mambaish_config is None and not configurator.is_draft_worker:
            print(
                f"{PREFIX} config_from_budget budget_bytes={budget_bytes!r} "
                f"is_draft_worker=False",
                file=sys.stderr,
                flush=True,
            )
        return original(configurator, budget_bytes, *args, **kwargs)

    return config_from_budget


def _log_weights(original):
    @functools.wraps(original)
    def load_model(runner, *args, **kwargs):
        result = original(runner, *args, **kwargs)
        seen, total = set(), 0
        for param in runner.model.parameters():
            key = (param.device, param.data_ptr())
            if key not in seen:
                seen.add(key)
                total += param.numel() * param.element_size()
        print(
            f"{PREFIX} load_model parameter_bytes={total} "
            f"is_draft_worker={bool(getattr(runner, 'is_draft_worker', False))}",
            file=sys.stderr,
            flush=True,
        )
        return result

    return load_model


def _write_modules(original):
    @functools.wraps(original)
    def init(scheduler, *args, **kwargs):
        original(scheduler, *args, **kwargs)
        path = f"{os.environ['SGLANG_PD_LEAN_E2E_MODULES']}.{os.getpid()}"
        with open(path, "w") as out:
            out.write("".join(f"{name}\n" for name in sorted(sys.modules)))

    return init


PATCHES = {
    "sglang.srt.model_executor.model_runner": [
        ("ModelRunner", "load_model", _log_weights),
    ],
    "sglang.srt.mem_cache.kv_cache_configurator": [
        ("KVCacheConfigurator", "_handle_max_mamba_cache", _log_budget),
        ("KVCacheConfigurator", "config_from_budget", _log_kv_budget),
    ],
    # 0.5.14 and 0.5.15 size in the model runner's pool mixin.
    "sglang.srt.model_executor.model_runner_kv_cache_mixin": [
        ("ModelRunnerKVCacheMixin", "handle_max_mamba_cache", _log_budget),
    ],
}
if os.environ.get("SGLANG_PD_LEAN_E2E_MODULES"):
    PATCHES["sglang.srt.managers.scheduler"] = [
        ("Scheduler", "__init__", _write_modules)
    ]
