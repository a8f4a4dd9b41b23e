"""Per-role, per-component byte census of a launch's request pool, with no GPU.

    from sglang_pd_lean import census
    launch = census.Launch(argv=("--tp-size", "4", ...), gpu=census.gpu_facts("h200"),
                           model="qwen3-next-80b-a3b", sized=False)
    census.report(launch).roles["prefill"].upstream.verify_only_bytes

One road: every report is a set of ``launch_server`` flags resolved by the installed
SGLang's own ``ServerArgs`` (``launch``), once per role shown; ``report``'s census
flags (``--tp``, ``--max-running-requests``, ...) are shorthand for the launch flags
they name. ``census.report`` returns one frozen, keyword-only ``Report``.

The census walks SGLang's own start-up road on a CPU: the model's config through
SGLang's config loader, SGLang's cache parameters, a real ``KVCacheConfigurator``
(built as the plain dataclass it is) and its ``_build_req_to_token_pool``, which
runs the real ``HybridReqToTokenPool`` / ``MambaPool`` constructors (for a model
without linear-attention layers, the plain ``ReqToTokenPool``). They run under
``FakeTensorMode``, so their CUDA allocations cost nothing and every byte is
counted from the tensors upstream asked for. Each role is built twice: inside
``role.upstream_behaviour()`` (every gate steps aside: upstream as released) and
without it (the gates this SGLang needs, as the plugin registered them).
Where the launch names the memory (a GPU, or ``available_gib``: the
``total_rest_memory`` SGLang's sizing receives) each column first runs SGLang's
sizing (``_handle_max_mamba_cache`` for a hybrid model, ``config_from_budget``,
``resolve_max_num_reqs``) and builds its pool with the slot and request counts that
settled on, as a server would; where SGLang would stop, the column says so with
SGLang's reason. Bad input, and any error SGLang raises on a config, is a one-line
``CensusError``. Works on SGLang 0.5.15 to 0.5.23 (0.5.15: ``older``).

Modules, one job each: ``report`` (the road, step by step), ``results`` (the typed
``Report`` and its parts; JSON only where the report prints it), ``inputs`` (what the
operator asks, checked before SGLang's import), ``flags`` (launch flags as SGLang's
parser reads them: shorthand, role, model), ``launch`` (flags -> each role's
``ServerArgs`` on a named GPU, once: ``ResolvedLaunch``), ``environment`` (SGLang
installed, quiet, its plugins loaded), ``gpus`` (the GPUs a report can name),
``gpu_probes`` (SGLang's platform probes answering for one), ``model`` (the model
on one rank: SGLang's config, linear state, layout and stage), ``rank`` (what the
target's ModelRunner derives before sizing), ``pools`` (the configurator and the request
pool under fake tensors), ``sizing`` (SGLang's budget code), ``warmup`` (transient
buffers), ``roles`` (one role's columns), ``memory`` (memory per rank), ``weights``
(the weights build's child) and ``model_build`` (what it builds: SGLang's groups and
models for rank 0), ``columns`` (the census of a resolved launch, column by
column, and one advice step), ``advice``, ``pieces`` (what the prefill target does
not build, per piece) and ``live`` (a live server's own arguments). The runtime plugin
never imports this package; bytes per component come from
``sglang_pd_lean.accounting``.
"""

from sglang_pd_lean.accounting import (
    COMPONENT_ORDER,
    COMPONENTS,
    VERIFY_ONLY,
    component_bytes,
    pool_tensors,
)
from sglang_pd_lean.census.flags import shorthand_argv
from sglang_pd_lean.census.gpus import gpu_facts
from sglang_pd_lean.census.inputs import (
    DEFAULT_MODEL,
    MAMBA_RADIX_CACHE_STRATEGIES,
    MAX_CONFIG_BYTES,
    MAX_SLOTS,
    MODELS_DIR,
    ROLES,
    SSM_DTYPES,
    CensusError,
    bundled_models,
    check_slots,
    config_path,
    one_line,
    read_config_dict,
    sglang_rejects,
)
from sglang_pd_lean.census.launch import Launch, ResolvedLaunch, resolve_launch
from sglang_pd_lean.census.pools import (
    build_request_pool,
    configurator,
    parallel,
    published,
    summarize,
)
from sglang_pd_lean.census.report import report
from sglang_pd_lean.census.results import Report, jsonable
from sglang_pd_lean.census.sizing import size_budget
from sglang_pd_lean.census.warmup import autotune_buffer_bytes

__all__ = [
    "COMPONENTS",
    "COMPONENT_ORDER",
    "DEFAULT_MODEL",
    "MAMBA_RADIX_CACHE_STRATEGIES",
    "MAX_CONFIG_BYTES",
    "MAX_SLOTS",
    "MODELS_DIR",
    "ROLES",
    "SSM_DTYPES",
    "VERIFY_ONLY",
    "CensusError",
    "Launch",
    "autotune_buffer_bytes",
    "build_request_pool",
    "bundled_models",
    "check_slots",
    "component_bytes",
    "config_path",
    "configurator",
    "gpu_facts",
    "one_line",
    "parallel",
    "pool_tensors",
    "published",
    "read_config_dict",
    "Report",
    "ResolvedLaunch",
    "jsonable",
    "report",
    "resolve_launch",
    "shorthand_argv",
    "sglang_rejects",
    "size_budget",
    "summarize",
]
