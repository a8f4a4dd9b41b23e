"""SGLang's API where the supported releases (0.5.15 to 0.5.23) differ: one function
per difference, each saying which releases take which road.

    from sglang_pd_lean import shims
    shims.setting("get_spec", "speculative_algorithm", server_args)
    shims.resolved_value(server_args, "page_size")

The rest of the package asks here instead of testing SGLang's names itself;
``seams`` lists each name a road needs, with the releases that have it. The road is
picked by what the installed SGLang has (a name, a parameter), never by its release
number. Nothing from SGLang is imported at this module's import.
"""

from __future__ import annotations

import inspect
import logging
import types
from typing import Any

logger = logging.getLogger(__name__)


def runtime_context() -> types.ModuleType | None:
    """SGLang's ``runtime_context`` module; None on a release without it."""
    try:
        from sglang.srt import runtime_context as module
    except ImportError:
        return None
    return module


def setting(getter_name: str, field: str, server_args: Any) -> Any:
    """A leaf of SGLang's published config namespace (0.5.17+: ``get_spec()``,
    ``get_disagg()``, ...), else the ServerArgs field (0.5.16, or a namespace not
    published in this process yet)."""
    getter = getattr(runtime_context(), getter_name, None)
    if getter is not None:
        try:
            return getattr(getter(), field)
        except (AttributeError, KeyError, ValueError, RuntimeError) as exc:
            # Not published in this process (yet): fall back to server_args.
            logger.debug(
                "pd_lean: %s().%s not published (%s); reading server_args",
                getter_name,
                field,
                type(exc).__name__,
            )
    return getattr(server_args, field, None)


def is_npu() -> bool:
    """SGLang's own NPU probe; False where the installed SGLang has none."""
    try:
        from sglang.srt.utils import is_npu as probe
    except ImportError:
        return False
    return bool(probe())


# ------------------------------------------------------------------ resolution


def resolve_once(server_args: Any) -> None:
    """0.5.19+ resolve the launch on ``ServerArgs.resolve_once()``; older releases
    resolved it in ``prepare_server_args`` already."""
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()


def resolved_value(server_args: Any, name: str) -> Any:
    """What SGLang's resolution decided for ``name`` (0.5.19+ keep the decisions
    beside the raw fields; older releases write them onto the fields)."""
    if hasattr(server_args, "resolve_once"):
        from sglang.srt.arg_groups.overrides import resolution_result

        return resolution_result(server_args, name)
    return getattr(server_args, name, None)


def resolved_attention_dp(server_args: Any) -> int:
    """The attention-DP width SGLang resolved for the launch: its own
    ``attn_dp_size`` field from 0.5.22 (``--enable-dp-attention`` is deprecated
    there, and resolution leaves the flag false); up to 0.5.21 the DP width where
    ``enable_dp_attention`` is on, else 1."""
    if "attn_dp_size" in field_names(server_args):
        return resolved_value(server_args, "attn_dp_size")
    if resolved_value(server_args, "enable_dp_attention"):
        return resolved_value(server_args, "dp_size")
    return 1


def attention_split(server_args: Any, *, tp: int, attn_cp: int) -> tuple[int, int]:
    """(attention TP, attention DP) of TP rank 0, from SGLang's own
    ``compute_dp_attention_world_info``: up to 0.5.21 it takes the DP flag and
    width, from 0.5.22 the resolved attention-DP width."""
    from sglang.srt.layers import dp_attention

    split = dp_attention.compute_dp_attention_world_info
    if accepts(split, "enable_dp_attention"):
        _, attn_tp, _, attn_dp = split(
            bool(resolved_value(server_args, "enable_dp_attention")),
            0,
            tp,
            resolved_value(server_args, "dp_size") or 1,
            attn_cp,
        )
    else:
        _, attn_tp, _, attn_dp = split(
            0, tp, resolved_attention_dp(server_args), attn_cp
        )
    return attn_tp, attn_dp


def field_names(server_args: Any) -> list[str]:
    """ServerArgs' field names: a dataclass up to 0.5.20, SGLang's own record
    fields from 0.5.21."""
    import dataclasses

    cls = type(server_args)
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    from sglang.srt.arg_groups.arg_utils import record_fields

    return [f.name for f in record_fields(cls)]


def platform_table() -> dict[str, str] | None:
    """SGLang's platform table, fact -> probe name (0.5.19+: ``_PLATFORM_PROBES``
    and ``_PLATFORM_VALUES`` beside ``override_platform``); None before."""
    module = runtime_context()
    table = {
        **getattr(module, "_PLATFORM_PROBES", {}),
        **getattr(module, "_PLATFORM_VALUES", {}),
    }
    if not hasattr(module, "override_platform") or not table:
        return None
    return table


# ------------------------------------------------------------------ the model's rank


def accepts(function: Any, *names: str) -> bool:
    """``function`` takes every parameter in ``names`` (signatures that grew)."""
    return all(n in inspect.signature(function).parameters for n in names)


def publish_rank0(server_args: Any) -> None:
    """Publish the launch as SGLang's scheduler does for rank 0 (0.5.21+:
    ``publish(ranks=SpawnRanks)``; 0.5.17 to 0.5.20: ``publish``; 0.5.14 to 0.5.16:
    the legacy ``set_global_server_args_for_scheduler``), then SGLang's MoE config (0.5.19+ read it from the
    published launch, older releases from their argument). Every supported release
    has both; ``seams`` lists them for the weights build, which does not start
    without them."""
    module = runtime_context()
    if hasattr(module, "SpawnRanks"):
        module.publish(
            server_args, role="scheduler", ranks=module.SpawnRanks(world_rank=0)
        )
    elif hasattr(module, "publish"):
        module.publish(server_args, role="scheduler")
    else:  # 0.5.14 to 0.5.16: the legacy publish (0.5.15+: into the context)
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
    from sglang.srt.layers.moe import initialize_moe_config

    if not inspect.signature(initialize_moe_config).parameters:
        initialize_moe_config()
    else:
        initialize_moe_config(server_args)


def init_dp_attention(server_args: Any, model_config: Any) -> None:
    """SGLang's attention-DP set-up (later releases also take the model config)."""
    from sglang.srt.layers import dp_attention

    if accepts(dp_attention.initialize_dp_attention, "model_config"):
        dp_attention.initialize_dp_attention(server_args, model_config)
    else:
        dp_attention.initialize_dp_attention(server_args)


def published_spec() -> Any:
    """The published speculative configuration (0.5.17+), or None: 0.5.19 to
    0.5.21 keep NEXTN in the raw field and resolve it only there."""
    module = runtime_context()
    return module.get_spec() if hasattr(module, "get_spec") else None


def has_draft_model(algorithm: Any) -> bool:
    """A ``SpeculativeAlgorithm`` with a draft model (NGRAM, where a release has
    it, has none)."""
    if algorithm.is_none():
        return False
    return not (hasattr(algorithm, "is_ngram") and algorithm.is_ngram())


def layer_info(start: int, end: int) -> Any:
    """SGLang's ModelLayerInfo for a [start, end) stage (0.5.16+; 0.5.14 to
    0.5.15.post1 keep the same three values on the ModelRunner: a namespace)."""
    try:
        from sglang.srt.model_executor.model_runner_components.layer_setup import (
            ModelLayerInfo,
        )
    except ImportError:
        ModelLayerInfo = types.SimpleNamespace

    return ModelLayerInfo(
        start_layer=start, end_layer=end, num_effective_layers=end - start
    )
