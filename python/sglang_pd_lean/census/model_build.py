"""SGLang's process groups for rank 0 of a resolved launch, and its models built in
them without memory: what the weights child (``census.weights``) runs.

    built = build(server_args)  # WeightsBuild: target and draft bytes, classes

From the launch as SGLang resolved it (``census.launch.resolve``): publish it as
SGLang's scheduler does for rank 0, build SGLang's own process groups for rank 0 of
the launch's TP x PP world over torch's ``fake`` process group (one process plays
rank 0; no collective runs), check their widths against the launch (``check_widths``:
TP, EP and attention DP read back from the groups built), and then SGLang's loader
builds the target model (``model_loader.loader._initialize_model``: the class
``get_model_architecture`` picks, with the quantization config the loader would
use) and, with speculative decoding, the draft model from the ``ModelConfig``
SGLang's draft worker builds (``is_draft_model=True``: the MTP class for NEXTN),
all under ``FakeTensorMode``: every parameter has its per-rank shape and dtype and
no memory. Bytes are ``numel x element_size`` over ``model.parameters()``, what
the e2e probe sums in a real server after ``ModelRunner.load_model``.

Not covered: ``process_weights_after_loading`` of quantized layers (a checkpoint
whose quantization re-lays weights after loading is counted as created), and
parameters SGLang frees or shares later (EAGLE/NEXTN draft workers take the
target's embedding and LM head after loading; the draft is counted as its
``ModelRunner`` holds it when it loads). The model code runs on this host, so
module-level choices SGLang makes from the host's device (CUDA or not) are this
host's. Releases 0.5.16 to 0.5.23 differ in how groups are built (widths passed
or published); both shapes are asked by signature.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

from sglang_pd_lean.census.results import WeightsBuild
from sglang_pd_lean.shims import (
    accepts,
    attention_split,
    has_draft_model,
    init_dp_attention,
    publish_rank0,
    published_spec,
    resolved_attention_dp,
    resolved_value,
)


def _kernels_a_cpu_lacks() -> None:
    """SGLang's rotary and RMSNorm layers import ``vllm._custom_ops`` as a fallback
    kernel on a host that is neither CUDA nor SGLang's CPU engine; the kernel is
    never called here. Without vllm installed, an empty module stands in."""
    try:
        import vllm._custom_ops  # noqa: F401
    except ImportError:
        vllm = types.ModuleType("vllm")
        vllm.__path__ = []
        ops = types.ModuleType("vllm._custom_ops")
        ops.__getattr__ = lambda name: None
        sys.modules.setdefault("vllm", vllm)
        sys.modules["vllm._custom_ops"] = ops


class WidthMismatch(RuntimeError):
    """SGLang's groups would not have, or do not have, the launch's widths."""


def _built_widths() -> dict[str, int]:
    """TP, EP and attention-DP widths of the groups SGLang built for rank 0: the
    attention DP as the TP group over its attention TP x CP groups (SGLang splits
    it so), not as the launch says it."""
    from sglang.srt.distributed import parallel_state as ps

    tp = ps.get_tensor_model_parallel_world_size()
    attention = (
        ps.get_attn_tensor_model_parallel_world_size()
        * ps.get_attn_context_model_parallel_world_size()
    )
    return {
        "TP": tp,
        "EP": ps.get_moe_expert_parallel_world_size(),
        "attention DP": tp // attention,
    }


def _resolved_widths(server_args) -> dict[str, int]:
    """The widths SGLang resolved for the launch: TP, EP, and attention DP."""

    def value(name: str, default: int = 1) -> int:
        got = resolved_value(server_args, name)
        return default if got is None else got

    return {
        "TP": value("tp_size"),
        "EP": value("ep_size"),
        "attention DP": resolved_attention_dp(server_args),
    }


def check_widths(server_args) -> dict[str, int]:
    """The built groups' widths, after checking them against the resolved launch;
    ``WidthMismatch`` naming each that differs (the weights per rank would be
    another launch's)."""
    built, resolved = _built_widths(), _resolved_widths(server_args)
    wrong = [
        f"{name} {built[name]} (the launch resolved {resolved[name]})"
        for name in resolved
        if built[name] != resolved[name]
    ]
    if wrong:
        raise WidthMismatch(f"SGLang's groups have {', '.join(wrong)}")
    return built


def _width_kwargs(server_args, ps) -> dict[str, int]:
    """``initialize_model_parallel``'s width arguments on releases that take them:
    the scheduler's, from the server args and SGLang's own DP-attention split, for
    rank 0. A width this SGLang no longer takes (value other than 1) raises
    ``WidthMismatch``: building without it would build the wrong groups."""
    tp = server_args.tp_size
    _, attn_dp = attention_split(
        server_args, tp=tp, attn_cp=getattr(server_args, "attn_cp_size", 1)
    )
    widths = {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": server_args.pp_size,
        "expert_model_parallel_size": "ep_size",
        "attention_data_parallel_size": attn_dp,
        "attention_context_model_parallel_size": "attn_cp_size",
        "moe_data_model_parallel_size": "moe_dp_size",
        "decode_context_parallel_size": "dcp_size",
    }
    accepted, refused = {}, []
    for arg, width in widths.items():
        if isinstance(width, str):
            if not hasattr(server_args, width):
                continue
            width = getattr(server_args, width)
        if accepts(ps.initialize_model_parallel, arg):
            accepted[arg] = width
        elif width != 1:
            refused.append(f"{arg}={width}")
    if refused:
        raise WidthMismatch(
            f"this SGLang's initialize_model_parallel takes no {', '.join(refused)}"
        )
    return accepted


def _groups(server_args, model_config) -> None:
    """SGLang's process groups for rank 0 of the launch, over torch's fake group."""
    import torch.distributed as dist
    from sglang.srt.distributed import parallel_state as ps
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world = server_args.tp_size * server_args.pp_size
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    new_group = dist.new_group
    # Every group SGLang asks for (its CPU groups ask for gloo) is a fake group.
    dist.new_group = lambda *a, **k: new_group(*a, **dict(k, backend="fake"))
    try:
        ps.set_custom_all_reduce(False)
        ps.init_distributed_environment(
            world_size=world, rank=0, local_rank=0, backend="fake"
        )
        widths = {}
        if accepts(ps.initialize_model_parallel, "tensor_model_parallel_size"):
            widths = _width_kwargs(server_args, ps)
        ps.initialize_model_parallel(backend="fake", **widths)
    finally:
        dist.new_group = new_group
    init_dp_attention(server_args, model_config)


@contextlib.contextmanager
def _device_module_is_cpu() -> Iterator[None]:
    """On a host without CUDA: ``torch.get_device_module()`` with no device (SGLang
    asks it for the current device's module while building some layers) answers
    torch.cpu, and the side streams some models take at construction (Kimi-Linear's
    ``alt`` stream) are CPU streams. A stream holds no parameter."""
    import torch

    if torch.cuda.is_available():
        yield
        return
    module, stream = torch.get_device_module, torch.cuda.Stream
    torch.get_device_module = lambda device=None: (
        torch.cpu
        if device is None or torch.device(device).type == "cuda"
        else module(device)
    )
    torch.cuda.Stream = torch.cpu.Stream
    try:
        yield
    finally:
        torch.get_device_module, torch.cuda.Stream = module, stream


def _built(model_config) -> Any:
    """The model SGLang's loader builds for ``model_config``, under FakeTensorMode."""
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader import loader
    from torch._subclasses.fake_tensor import FakeTensorMode

    load_config = LoadConfig(load_format="dummy")
    quant_config = loader._get_quantization_config(model_config, load_config)
    default = torch.get_default_dtype()
    torch.set_default_dtype(model_config.dtype)
    try:
        with _device_module_is_cpu(), FakeTensorMode(allow_non_fake_inputs=True):
            return loader._initialize_model(model_config, load_config, quant_config)
    finally:
        torch.set_default_dtype(default)


def _bytes_of(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _layers_of(model, model_config, server_args) -> list[int]:
    """[start, end) of the target's layers on rank 0, as SGLang's model runner
    resolves them on the built model (``resolve_layer_indices``: its pipeline
    stage; up to 0.5.22 it also takes the speculative algorithm; 0.5.14 to
    0.5.15.post1 resolve them inline: ``older.target_layers``)."""
    try:
        from sglang.srt.model_executor.model_runner_components.layer_setup import (
            resolve_layer_indices,
        )
    except ImportError:
        import sglang_pd_lean.census.older as older

        return older.target_layers(model, model_config)
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    kwargs = dict(model=model, model_config=model_config, is_draft_worker=False)
    if accepts(resolve_layer_indices, "spec_algorithm"):
        spec = published_spec()
        source = spec if spec is not None else server_args
        kwargs["spec_algorithm"] = SpeculativeAlgorithm.from_string(
            source.speculative_algorithm
        )
    info = resolve_layer_indices(**kwargs)
    return [info.start_layer, info.end_layer]


def _draft_config(server_args, model_config):
    """The draft ``ModelConfig`` SGLang's draft worker builds (the published draft
    path and revision; none given, SGLang's own default, the target's), or None
    where the algorithm has no draft model."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    # The published (resolved) values: 0.5.19 to 0.5.21 keep NEXTN in the raw field
    # and resolve it to EAGLE, and their from_string knows no NEXTN.
    spec = published_spec()
    source = spec if spec is not None else server_args
    algorithm = SpeculativeAlgorithm.from_string(source.speculative_algorithm)
    if not has_draft_model(algorithm):
        return None
    # 0.5.15+ give the draft the target's context length; 0.5.14's draft config
    # takes the launch's (its from_server_args has no such parameter).
    target = (
        dict(context_length=model_config.context_len)
        if accepts(ModelConfig.from_server_args, "context_length")
        else {}
    )
    return ModelConfig.from_server_args(
        server_args,
        model_path=getattr(source, "speculative_draft_model_path", None),
        model_revision=getattr(source, "speculative_draft_model_revision", None),
        is_draft_model=True,
        **target,
    )


def build(server_args: Any) -> WeightsBuild:
    """Target and draft parameter bytes of rank 0 for the resolved launch (in the
    child: it publishes the launch and builds process groups)."""
    import logging

    from sglang.srt.configs.model_config import ModelConfig

    logging.disable(logging.CRITICAL)  # SGLang's notes about kernels a CPU lacks
    _kernels_a_cpu_lacks()
    publish_rank0(server_args)
    model_config = ModelConfig.from_server_args(server_args)
    _groups(server_args, model_config)
    widths = check_widths(server_args)
    model = _built(model_config)
    target, target_class = _bytes_of(model), type(model).__name__
    layers = _layers_of(model, model_config, server_args)
    draft, draft_class = 0, None
    draft_config = _draft_config(server_args, model_config)
    if draft_config is not None:
        draft_model = _built(draft_config)
        draft, draft_class = _bytes_of(draft_model), type(draft_model).__name__
    return WeightsBuild(
        target_bytes=target,
        draft_bytes=draft,
        target_class=target_class,
        draft_class=draft_class,
        tp=widths["TP"],  # as SGLang's groups have them (checked)
        ep=widths["EP"],
        attn_tp=_built_attention_tp(),
        layers=layers,
    )


def _built_attention_tp() -> int:
    """The width of the attention-TP group SGLang built for rank 0."""
    from sglang.srt.distributed import parallel_state as ps

    return ps.get_attn_tensor_model_parallel_world_size()
