"""Every SGLang (and torch-internal) name the plugin and the report touch, in one table.

    from sglang_pd_lean import seams, survey
    for missing in survey.missing(seams.Part.REPORT):
        print(missing.seam.label, missing.seam.why, missing.error)

A seam is a dotted path ``HookRegistry`` would resolve (``module.attr`` or
``module.Class.method``), or several candidates of which the first that resolves
wins (today's name, then a new release's). ``since`` / ``until`` bound the releases
that have it where the code asks for it only on some (it checks ``hasattr`` and takes
an older or newer road elsewhere). Each seam names the part that needs it:

- ``plugin``: the gates' hook targets and what the gates and the role read at run time;
- ``record``: the scheduler hooks behind ``/server_info``;
- ``report``: the census and the launch resolution (``sglang-pd-lean report``);
- ``weights``: the report's build of SGLang's model classes;
- ``audit``: ``doctor``'s speculative audit (``audit.py``).

``test/test_seams.py`` resolves every entry on the installed release (CI runs it on
every supported release); ``doctor`` lists what is missing and whether ``report`` can
run; the report refuses, naming the seam, before it starts (``survey`` resolves
them). This module imports nothing heavy: seams are resolved only when asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Part(str, Enum):
    """Who needs a seam (the value is what doctor shows)."""

    PLUGIN = "plugin"  # a gate's hook target, or what a gate or the role reads
    RECORD = "record"  # the plugin's /server_info record
    REPORT = "report"  # sglang-pd-lean report: census and launch resolution
    WEIGHTS = "weights"  # report: the weights build from SGLang's model classes
    AUDIT = "audit"  # doctor: what each speculative algorithm builds (audit.py)

    def __str__(self) -> str:
        return self.value


def _minor(version: str | None) -> int | None:
    match = re.match(r"0\.5\.(\d+)", version or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Seam:
    candidates: tuple[str, ...]  # dotted paths; the first that resolves wins
    part: Part
    why: str  # what needs it, in a few words
    since: int | None = None  # first 0.5.x release that has it (None: all supported)
    until: int | None = None  # last 0.5.x release that has it (None: all since)

    @property
    def label(self) -> str:
        return " | ".join(self.candidates)

    def expected_on(self, version: str | None) -> bool:
        """Whether a supported ``version`` must have this seam."""
        minor = _minor(version)
        if minor is None:
            return True
        return (self.since is None or minor >= self.since) and (
            self.until is None or minor <= self.until
        )


def _s(path: str | tuple[str, ...], part: Part, why: str, **bounds: int) -> Seam:
    return Seam((path,) if isinstance(path, str) else tuple(path), part, why, **bounds)


_KVC = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
_RC = "sglang.srt.runtime_context"
_PS = "sglang.srt.distributed.parallel_state"
_MR = "sglang.srt.model_executor.model_runner"
_ML = "sglang.srt.model_loader"
_LS = "sglang.srt.model_executor.model_runner_components.layer_setup"
_DPA = "sglang.srt.layers.dp_attention"
_COMMON = "sglang.srt.utils.common"
_SPEC = "sglang.srt.speculative"
_CFG = "sglang.srt.configs"
_MP = "sglang.srt.mem_cache.memory_pool.MambaPool"
_SAH = "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"

# The model runner's pool mixin, where 0.5.14 and 0.5.15 build and size the pools.
MIXIN = "sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin"

# Each gate's hook target candidates, by gate name (gates read theirs from here):
# today's first, then where 0.5.14 and 0.5.15 do the same.
HOOK_TARGETS: dict[str, tuple[str, ...]] = {
    "pool": (f"{_KVC}._build_hybrid_req_pool", f"{MIXIN}._init_pools"),
    "graph": (
        "sglang.srt.model_executor.model_runner_components.cuda_graph_setup."
        "capture_decode_graph",
        f"{_MR}.ModelRunner.init_decode_cuda_graph",
    ),
    "warmup": ("sglang.srt.model_executor.runner.base_runner.BaseRunner._dummy_run",),
    "budget": (f"{_KVC}._handle_max_mamba_cache", f"{MIXIN}.handle_max_mamba_cache"),
    "draft_graph": (
        "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs",
    ),
    "autotune": (
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._autotune_buffers",
    ),
    "frozen_kv_graph": (
        f"{_SPEC}.frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker._capture_cuda_graphs",
    ),
    "multi_layer_graph": (
        f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker."
        "_capture_cuda_graphs",
    ),
    "dflash_graph": (f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2.init_cuda_graphs",),
    "adaptive": (f"{_SPEC}.adaptive_runtime_state.AdaptiveController.init_states",),
}

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"

# A gate hooking code in this package is used only by a launch whose worker
# imports that module (``plugin.launch``).
SPECULATIVE_PACKAGE = f"{_SPEC}."

# Entry points that build a scheduler or model runner in a process of their own:
# candidate modules (the first there is read), and the name an operator knows.
# doctor names those whose code never calls load_plugins(): no gate applies there.
MODEL_ENTRIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("sglang.srt.ray.scheduler_actor",), "Ray scheduler actors (--use-ray)"),
    (
        ("sglang.benchmark.one_batch", "sglang.bench_one_batch"),
        "python -m sglang.bench_one_batch",
    ),
)

SEAMS: tuple[Seam, ...] = (
    *(
        _s(targets, Part.PLUGIN, f"{gate} gate: hook target")
        for gate, targets in HOOK_TARGETS.items()
    ),
    *(
        _s(f"sglang.srt.plugins.hook_registry.{name}", Part.PLUGIN, "registers hooks")
        for name in ("HookRegistry", "HookType")
    ),
    _s("sglang.srt.plugins.load_plugins", Part.PLUGIN, "loads the plugin"),
    _s(f"{_MP}.get_contiguous_buf_infos", Part.PLUGIN, "pool gate: what SGLang sends"),
    _s(f"{_MP}._NON_TRANSFER_STATE_FIELDS", Part.PLUGIN, "pool gate: kept", since=17),
    _s(
        "sglang.srt.speculative.spec_info.SpeculativeAlgorithm",
        Part.PLUGIN,
        "budget, warmup and autotune gates: speculation off for one call",
    ),
    _s(
        f"{_RC}.RuntimeContext.preserve_config",
        Part.PLUGIN,
        "budget gate: upstream's own sizing, for the log line",
        since=17,
        until=17,
    ),
    _s(f"{_RC}.get_disagg", Part.PLUGIN, "role: disaggregation mode", since=17),
    _s(f"{_RC}.get_spec", Part.PLUGIN, "role: speculative algorithm", since=17),
    _s(f"{_RC}.get_memory", Part.PLUGIN, "role: unified memory", since=17),
    _s(f"{_RC}.get_schedule", Part.PLUGIN, "budget gate: mamba slots", since=17),
    _s("sglang.srt.utils.is_npu", Part.PLUGIN, "role: NPU pool layout"),
    _s(
        (
            "sglang.srt.arg_groups.attention_hook.handle_linear_attn_backend",
            "sglang.srt.server_args.ServerArgs",
        ),
        Part.PLUGIN,
        "replayssm gate: SGLang's refusal on a prefill server",
    ),
    # plugin.LOAD_PLUGINS_CALLERS (a module's own code: a function of it).
    _s(
        "sglang.srt.managers.scheduler.run_scheduler_process",
        Part.PLUGIN,
        "plugin: a scheduler rank loads plugins here",
    ),
    *(
        _s(
            path,
            Part.PLUGIN,
            "plugin: a process that builds no model loads plugins here",
        )
        for path in (
            "sglang.launch_server.run_server",
            "sglang.cli.serve.serve",
            "sglang.srt.entrypoints.engine.Engine.__init__",
            "sglang.srt.entrypoints.engine.Engine._launch_subprocesses",
            "sglang.srt.managers.detokenizer_manager.run_detokenizer_process",
            "sglang.srt.managers.data_parallel_controller."
            "run_data_parallel_controller_process",
        )
    ),
    _s(
        f"{SCHEDULER}.__init__",
        Part.PLUGIN,
        "the launch hook: registers the gates the scheduler's launch uses",
    ),
    # The speculative audit (doctor; and its start-up WARNING, after Scheduler.__init__).
    *(
        _s(f"sglang.srt.layers.attention.linear.{b}", Part.AUDIT, "verify index table")
        for b in ("gdn_backend.GDNAttnBackend", "kda_backend.KDAAttnBackend")
    ),
    _s(
        f"{_SPEC}.spec_info.SpeculativeAlgorithm.create_worker",
        Part.PLUGIN,
        "the worker class a launch (the launch hook) or an algorithm (audit) builds",
    ),
    _s(f"{_SPEC}.spec_registry._REGISTRY", Part.AUDIT, "algorithms plugins registered"),
    _s(f"{_SPEC}.spec_registry._RESERVED_ALIASES", Part.AUDIT, "NEXTN's spellings"),
    _s(
        "sglang.srt.arg_groups.speculative_hook._resolve_speculative_algorithm_alias",
        Part.AUDIT,
        "what a reserved spelling resolves to",
    ),
    _s(f"{SCHEDULER}.get_internal_state", Part.RECORD, "the record in /server_info"),
    _s(
        "sglang.srt.observability.metrics_collector.SchedulerMetricsCollector",
        Part.RECORD,
        "the /metrics gauges take its labels",
    ),
    # The report: launch resolution.
    _s(
        "sglang.srt.server_args.prepare_server_args",
        Part.REPORT,
        "resolves the launch flags",
    ),
    _s(
        "sglang.srt.server_args.ServerArgs.resolve_once",
        Part.REPORT,
        "runs the resolution",
        since=19,
    ),
    _s(
        "sglang.srt.arg_groups.overrides.resolution_result",
        Part.REPORT,
        "reads what the resolution decided",
        since=19,
    ),
    _s(
        "sglang.srt.arg_groups.arg_utils.record_fields",
        Part.REPORT,
        "the fields of ServerArgs",
        since=20,
    ),
    _s("sglang.srt.arg_groups", Part.REPORT, "imported before the GPU answers"),
    _s(_COMMON, Part.REPORT, "the platform probes answered for the named GPU"),
    _s(
        f"{_RC}.override_platform",
        Part.REPORT,
        "answers the platform facts for the named GPU",
        since=19,
    ),
    _s(f"{_RC}._PLATFORM_PROBES", Part.REPORT, "the platform facts", since=19),
    _s(f"{_RC}._PLATFORM_VALUES", Part.REPORT, "the platform values", since=19),
    # The report: census on SGLang's pools and sizing.
    _s(
        f"{_CFG}.model_config.ModelConfig.from_server_args", Part.REPORT, "model config"
    ),
    _s(
        (f"{_CFG}.hybrid_arch.mambaish_config", f"{_MR}.ModelRunner.mambaish_config"),
        Part.REPORT,
        "linear-attention config",
    ),
    _s("sglang.srt.distributed.utils.get_pp_indices", Part.REPORT, "a stage's layers"),
    # What a target's ModelRunner derives before sizing (census/rank.py).
    _s(f"{_MR}.ModelRunner.configure_kv_cache_dtype", Part.REPORT, "KV cache dtype"),
    _s("sglang.srt.configs.model_config.AttentionArch", Part.REPORT, "MLA backend"),
    _s(f"{_DPA}.compute_dp_attention_world_info", Part.REPORT, "attention TP, DP"),
    _s(f"{_PS}._WORLD", Part.REPORT, "the world group PP sizing all-reduces over"),
    _s(f"{_ML}.utils.get_model_architecture", Part.REPORT, "the model class: PP?"),
    _s(
        (
            f"{_RC}.RuntimeContext.override_server_args",
            "sglang.srt.server_args.set_global_server_args_for_scheduler",
        ),
        Part.REPORT,
        "publishes a role",
    ),
    _s(f"{_RC}.get_context", Part.REPORT, "publishes a role"),
    _s(f"{_RC}.get_parallel", Part.REPORT, "the attention-TP layout of rank 0"),
    _s(f"{_RC}.ParallelContext.override", Part.REPORT, "the TP layout of rank 0"),
    _s(f"{_PS}._ATTN_TP", Part.REPORT, "the attention-TP width (census/older.py)"),
    _s(f"{_SPEC}.dflash_utils.parse_dflash_draft_config", Part.REPORT, "DFLASH"),
    # Sizing and the request pool: the configurator's, else the model runner's.
    *(
        _s((f"{_KVC}{kvc}", f"{MIXIN}{mixin}"), Part.REPORT, why)
        for kvc, mixin, why in (
            ("", "", "builds and sizes the pools"),
            ("._build_req_to_token_pool", "._init_pools", "builds the request pool"),
            ("._handle_max_mamba_cache", ".handle_max_mamba_cache", "mamba sizing"),
            ("._calculate_mamba_ratio", "._calculate_mamba_ratio", "advice: the split"),
            (".config_from_budget", "._apply_token_constraints", "KV tokens"),
            (".resolve_max_num_reqs", "._resolve_max_num_reqs", "running requests"),
        )
    ),
    _s(
        (
            "sglang.srt.mem_cache.kv_cache_configurator."
            "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO",
            f"{MIXIN.rsplit('.', 1)[0]}.MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO",
        ),
        Part.REPORT,
        "mamba slots per running request",
    ),
    _s(
        "sglang.srt.model_executor.pool_configurator.create_memory_pool_configurator",
        Part.REPORT,
        "finalises running requests",
    ),
    _s(
        (
            f"{_SAH}.resolve_spec_aux_hidden_state_config",
            f"{_MR}.ModelRunner._build_model_config",
        ),
        Part.REPORT,
        "the draft model's share of the KV budget",
    ),
    _s(f"{_SAH}.SpecAuxHiddenStateConfig", Part.REPORT, "the draft's KV", since=16),
    _s(f"{_LS}.ModelLayerInfo", Part.REPORT, "a pipeline stage's layers", since=16),
    _s(
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._autotune_buffers",
        Part.REPORT,
        "warmup autotune buffers",
    ),
    _s(f"{_MP}.SpeculativeState", Part.REPORT, "verify-only state components"),
    _s(
        "torch._subclasses.fake_tensor.FakeTensorMode",
        Part.REPORT,
        "builds pools and models without memory",
    ),
    _s(
        "sglang.srt.environ.EnvBool",
        Part.REPORT,
        "reads SGLANG_PD_LEAN_BUILD_WEIGHTS as SGLang reads a boolean",
    ),
    # The report: the weights build.
    _s(f"{_RC}.SpawnRanks", Part.WEIGHTS, "publishes the launch for rank 0", since=21),
    _s(f"{_RC}.publish", Part.WEIGHTS, "publishes the launch for rank 0", since=17),
    _s(
        "sglang.srt.server_args.set_global_server_args_for_scheduler",
        Part.WEIGHTS,
        "publishes the launch for rank 0 (0.5.14 to 0.5.16)",
    ),
    _s(
        "sglang.srt.layers.moe.initialize_moe_config",
        Part.WEIGHTS,
        "MoE config, as the scheduler sets it",
    ),
    _s(f"{_PS}.init_distributed_environment", Part.WEIGHTS, "SGLang's groups"),
    _s(f"{_PS}.initialize_model_parallel", Part.WEIGHTS, "SGLang's groups"),
    _s(f"{_PS}.set_custom_all_reduce", Part.WEIGHTS, "custom all-reduce off"),
    _s(f"{_PS}.get_tensor_model_parallel_world_size", Part.WEIGHTS, "TP width"),
    _s(f"{_PS}.get_moe_expert_parallel_world_size", Part.WEIGHTS, "EP width"),
    _s(f"{_DPA}.compute_dp_attention_world_info", Part.WEIGHTS, "attention-DP width"),
    _s(f"{_DPA}.initialize_dp_attention", Part.WEIGHTS, "attention-DP groups"),
    _s(
        f"{_PS}.get_attn_tensor_model_parallel_world_size",
        Part.WEIGHTS,
        "attention-TP width built (with CP: the attention-DP width)",
    ),
    _s(
        f"{_PS}.get_attn_context_model_parallel_world_size",
        Part.WEIGHTS,
        "attention-CP width built (with TP: the attention-DP width)",
    ),
    _s("sglang.srt.configs.load_config.LoadConfig", Part.WEIGHTS, "dummy load"),
    _s(f"{_LS}.resolve_layer_indices", Part.WEIGHTS, "the layers", since=16),
    _s(
        "sglang.srt.model_loader.loader._initialize_model",
        Part.WEIGHTS,
        "builds the model class",
    ),
    _s(
        "sglang.srt.model_loader.loader._get_quantization_config",
        Part.WEIGHTS,
        "the quantization config",
    ),
    _s(
        "torch.testing._internal.distributed.fake_pg.FakeStore",
        Part.WEIGHTS,
        "torch's fake process group",
    ),
)
