"""The SGLang API shims (sglang_pd_lean.shims), called in-process on the installed
release, against what that release's own code answers.

The weights-build shims (``publish_rank0``, ``init_dp_attention``,
``published_spec``) run in the report's forked build child
(``census.weights``); here they run in the test process on the launch SGLang
resolved, and what they change in SGLang (the published launch, the MoE and
attention-DP flags, the parallel layout, torch's process groups) is put back after
each test (``sglang_state``)."""

from __future__ import annotations

import copy
import inspect
import types

import pytest
from helpers import NEXTN, sglang_minor, tiny_model_folder

from sglang_pd_lean import shims
from sglang_pd_lean.census import launch, model_build, weights

# The launch the weights-build tests resolve: rank 0 of TP 2 with DP attention over
# 2 attention-DP ranks, a NEXTN draft, and a MoE runner other than SGLang's default.
TP, DP = 2, 2
ARGV = [
    *("--tp", str(TP), "--dp", str(DP), "--enable-dp-attention"),
    *("--moe-runner-backend", "triton"),
    *NEXTN,
]


@pytest.fixture(scope="module")
def server_args(tmp_path_factory):
    """SGLang's own resolution of ``ARGV`` for the e2e tests' tiny Qwen3-Next on an
    H200, as the report resolves a launch before it forks the weights build."""
    folder = tiny_model_folder(tmp_path_factory.mktemp("shims") / "tiny")
    argv = ["--model-path", folder, *ARGV]
    return launch.resolve(argv, launch.gpu_facts("h200")).server_args


_UNSET = object()


def _restore_vars(target, saved: dict) -> None:
    """``target``'s attributes as ``saved`` holds them (added ones removed)."""
    for name in set(vars(target)) - set(saved):
        delattr(target, name)
    for name, value in saved.items():
        if vars(target).get(name, _UNSET) is not value:
            setattr(target, name, value)


@pytest.fixture
def sglang_state():
    """SGLang's process-wide state as it was before the test: the runtime context
    (published launch, role, flags, parallel layout), the attention-DP and
    parallel-state module globals, and torch's default process group."""
    import torch.distributed as dist
    from sglang.srt import runtime_context as rc
    from sglang.srt import server_args as server_args_module
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers import dp_attention

    context = rc.get_context()
    slots = {n: getattr(context, n, _UNSET) for n in type(context).__slots__}
    slots.pop("parallel")
    # The test writes into a copy of the flags; the session's own come back.
    # (0.5.14's context holds no flags: its launch is the module's global.)
    if "flags" in slots:
        context.flags = copy.deepcopy(context.flags)
    parallel = context.parallel
    layout = {
        n: copy.copy(getattr(parallel, n, _UNSET)) for n in type(parallel).__slots__
    }
    wrapper = dp_attention._DpGatheredBufferWrapper
    saved = {m: dict(vars(m)) for m in (ps, dp_attention, wrapper)}
    launch = vars(server_args_module).get("_global_server_args", _UNSET)
    try:
        yield
    finally:
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()  # torch's default group too
        if dist.is_initialized():
            dist.destroy_process_group()
        for target, values in saved.items():
            _restore_vars(target, values)
        for name, value in slots.items():
            if value is not _UNSET:
                setattr(context, name, value)
        if launch is not _UNSET:  # 0.5.14 and 0.5.15's published launch
            server_args_module._global_server_args = launch
        for name, value in layout.items():
            if value is not _UNSET:
                object.__setattr__(parallel, name, value)


@pytest.fixture
def rank0_groups(server_args, sglang_state, monkeypatch):
    """The launch published for rank 0 and SGLang's process groups for rank 0 of
    its TP world over torch's fake process group, as the weights build sets them
    up (``census.weights``) before it sets up attention DP."""
    import torch.distributed as dist
    from sglang.srt.distributed import parallel_state as ps
    from torch.testing._internal.distributed.fake_pg import FakeStore

    for name, value in weights.CHILD_ENV.items():
        monkeypatch.setenv(name, value)
    shims.publish_rank0(server_args)
    world = server_args.tp_size * server_args.pp_size
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    new_group = dist.new_group
    monkeypatch.setattr(
        dist, "new_group", lambda *a, **k: new_group(*a, **dict(k, backend="fake"))
    )
    ps.set_custom_all_reduce(False)
    ps.init_distributed_environment(
        world_size=world, rank=0, local_rank=0, backend="fake"
    )
    widths = {}
    if (
        "tensor_model_parallel_size"
        in inspect.signature(ps.initialize_model_parallel).parameters
    ):  # up to 0.5.20 the widths are passed, later they are published
        widths = model_build._width_kwargs(server_args, ps)
    ps.initialize_model_parallel(backend="fake", **widths)
    return server_args


# ------------------------------------------------------------------ the weights build


def test_the_weights_build_publishes_the_launch_as_rank_0s_scheduler(
    server_args, sglang_state
):
    from sglang.srt import runtime_context as rc
    from sglang.srt import server_args as server_args_module

    shims.publish_rank0(server_args)
    # What every SGLang reader of the launch gets from now on: this launch (0.5.14
    # has no context reader: its readers ask the server_args module's).
    read = getattr(rc, "get_server_args", None) or (
        server_args_module.get_global_server_args
    )
    assert read() is server_args
    if sglang_minor() >= 17:  # 0.5.17+ record the publishing process's role
        assert rc.publish_role() == "scheduler"
    if sglang_minor() >= 21:  # 0.5.21+ derive the ranks from the launcher's placement
        parallel = rc.get_parallel()
        assert (parallel.tp_rank, parallel.pp_rank, parallel.attn_dp_rank) == (0, 0, 0)


def test_the_launchs_moe_runner_is_the_one_sglangs_moe_layers_read(
    server_args, sglang_state
):
    from sglang.srt.layers.moe.utils import MoeRunnerBackend, get_moe_runner_backend

    shims.publish_rank0(server_args)
    # --moe-runner-backend triton, where SGLang's own MoE layers look it up.
    assert get_moe_runner_backend() == MoeRunnerBackend.TRITON


def test_rank_0s_attention_dp_has_the_launchs_width(rank0_groups):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers import dp_attention
    from sglang.srt.runtime_context import get_parallel

    model_config = ModelConfig.from_server_args(rank0_groups)
    shims.init_dp_attention(rank0_groups, model_config)
    # SGLang's rule: with DP attention on, the attention-DP width is --dp; rank 0
    # is attention-DP rank 0.
    assert dp_attention.is_dp_attention_enabled()
    assert get_parallel().attn_dp_rank == 0
    assert get_parallel().attn_dp_size == DP
    assert model_build._built_widths()["attention DP"] == DP


def test_a_nextn_draft_is_built_as_the_eagle_draft_sglang_resolved(
    server_args, sglang_state
):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    # NEXTN is SGLang's name for an EAGLE draft from the model's own MTP layers.
    assert shims.resolved_value(server_args, "speculative_algorithm") == "EAGLE"
    shims.publish_rank0(server_args)
    spec = shims.published_spec()
    # 0.5.14 to 0.5.16 publish no config namespace: the field already holds EAGLE.
    assert (spec is None) == (sglang_minor() <= 16)
    source = server_args if spec is None else spec
    assert source.speculative_algorithm == "EAGLE"
    algorithm = SpeculativeAlgorithm.from_string(source.speculative_algorithm)
    assert algorithm is SpeculativeAlgorithm.EAGLE


@pytest.mark.parametrize(
    "name, drafts",
    [
        (None, False),  # no speculative decoding
        ("NGRAM", False),  # drafts from a lookup of earlier tokens, no model
        ("EAGLE", True),
        ("EAGLE3", True),
        ("STANDALONE", True),  # a separate small model
    ],
)
def test_only_an_algorithm_with_a_draft_model_gets_a_draft_built(name, drafts):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    assert shims.has_draft_model(SpeculativeAlgorithm.from_string(name)) is drafts


def test_a_signature_is_read_from_the_installed_function():
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers import dp_attention

    init = dp_attention.initialize_dp_attention
    assert shims.accepts(init)
    assert shims.accepts(init, "server_args")
    assert not shims.accepts(init, "server_args", "no_such_parameter")
    # Upstream's sources: 0.5.21 moved the model config to init_dp_gathered_buffer
    # and the group widths of initialize_model_parallel to the published launch.
    grew = sglang_minor() <= 20
    assert shims.accepts(init, "server_args", "model_config") is grew
    widths = ("tensor_model_parallel_size", "expert_model_parallel_size")
    assert shims.accepts(ps.initialize_model_parallel, *widths) is grew


# ------------------------------------------------------------------ the rest


def test_the_launch_flags_name_fields_of_sglangs_server_args(server_args):
    # The fields SGLang's own launch_server parser set for ARGV (their dest names).
    given = {"tp_size", "dp_size", "enable_dp_attention", "moe_runner_backend"}
    given |= {"speculative_algorithm", "speculative_num_steps", "model_path"}
    names = shims.field_names(server_args)
    assert given <= set(names)
    assert all(hasattr(server_args, name) for name in names)


def test_a_namespace_sglang_does_not_publish_reads_the_server_args_field():
    server_args = types.SimpleNamespace(speculative_algorithm="EAGLE")
    value = shims.setting("get_no_such_namespace", "speculative_algorithm", server_args)
    assert value == "EAGLE"


def test_the_npu_probe_is_sglangs_own(monkeypatch):
    import sglang.srt.utils as utils

    assert shims.is_npu() is bool(utils.is_npu())  # this host's answer
    monkeypatch.setattr(utils, "is_npu", lambda: True)  # an NPU host
    assert shims.is_npu() is True


def test_the_platform_table_is_sglangs_probes_and_values():
    from sglang.srt import runtime_context as rc

    table = shims.platform_table()
    if sglang_minor() < 19:  # upstream's platform table arrived in 0.5.19
        assert table is None
        return
    facts = {**rc._PLATFORM_PROBES, **rc._PLATFORM_VALUES}
    assert table == facts
    # One yes/no fact and one value fact, by name, as upstream's sources have them.
    assert table["is_npu"] == "is_npu"
    assert table["device_capability"] == "get_device_capability"


@pytest.mark.parametrize("start, end", [(0, 48), (12, 24)])
def test_a_pipeline_stage_counts_its_own_layers(start, end):
    info = shims.layer_info(start, end)
    assert (info.start_layer, info.end_layer) == (start, end)
    # SGLang's resolve_layer_indices: end_layer - start_layer effective layers.
    assert info.num_effective_layers == end - start


@pytest.mark.parametrize(
    "flags, width",
    [
        ((), 1),
        (("--dp", str(DP)), 1),  # plain DP: each replica's attention is whole
        (("--dp", str(DP), "--enable-dp-attention"), DP),
    ],
)
def test_the_attention_dp_width_is_the_one_the_launch_asked_for(
    tmp_path_factory, flags, width
):
    """The weights build checks SGLang's groups against the attention-DP width the
    launch resolved: the DP width with ``--enable-dp-attention`` (from 0.5.22 SGLang
    resolves that deprecated flag to its own ``attn_dp_size`` and leaves the flag
    false), else 1."""
    folder = tiny_model_folder(tmp_path_factory.mktemp("attn-dp") / "tiny")
    argv = ["--model-path", folder, "--tp", str(TP), *flags]
    resolved = launch.resolve(argv, launch.gpu_facts("h200")).server_args
    assert shims.resolved_attention_dp(resolved) == width


# ------------------------------------------------------------------ the build, in-process
# ``census.model_build.build`` is what the report's forked child runs; here it runs in the
# test process (``sglang_state`` puts SGLang back), so that each of its steps is
# checked where a test can see it, against the same model built by transformers.


@pytest.fixture
def built_in_process(sglang_state, monkeypatch):
    """``model_build.build`` on a resolved launch, in this process: the child's
    environment set, and what the build changes beyond SGLang (logging switched
    off, the stand-in kernel module) put back."""
    import logging
    import sys

    for name, value in weights.CHILD_ENV.items():
        monkeypatch.setenv(name, value)
    stand_ins = {n: sys.modules.get(n) for n in ("vllm", "vllm._custom_ops")}
    try:
        yield model_build.build
    finally:
        logging.disable(logging.NOTSET)
        for name, module in stand_ins.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def transformers_tiny():
    """The e2e tests' tiny Qwen3-Next built by transformers on the meta device:
    an implementation of the model that is not SGLang's."""
    import sys

    import torch

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "e2e"))
    try:
        from tiny_model import CONFIG
    finally:
        sys.path.pop(0)
    from transformers.models.qwen3_next import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(
        **{k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")}
    )
    with torch.device("meta"):
        return config, Qwen3NextForCausalLM(config)


def numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module")
def tp1_nextn(tmp_path_factory):
    folder = tiny_model_folder(tmp_path_factory.mktemp("tp1") / "tiny")
    argv = ["--model-path", folder, *NEXTN]
    return launch.resolve(argv, launch.gpu_facts("h200")).server_args


def test_rank_0_holds_the_models_parameters_in_sglangs_dtypes(
    tp1_nextn, built_in_process
):
    """TP 1 with NEXTN: the target is every parameter transformers' class has, in
    bfloat16 except each GDN layer's ``A_log`` (SGLang keeps it in float32); the
    draft is SGLang's MTP module: embedding, LM head, one full-attention MoE
    decoder layer (the model's layer 3), the ``fc`` over [embedding, hidden] and
    its three norms."""
    config, model = transformers_tiny()
    answer = built_in_process(tp1_nextn)
    assert answer.error is None
    linear = [layer for layer in model.model.layers if hasattr(layer, "linear_attn")]
    a_log = sum(layer.linear_attn.A_log.numel() for layer in linear)
    assert answer.target_bytes == 2 * numel(model) + (4 - 2) * a_log
    h = config.hidden_size
    draft = (
        numel(model.model.embed_tokens)
        + numel(model.lm_head)
        + numel(model.model.layers[3])
        + 2 * h * h
        + 3 * h
    )
    assert answer.draft_bytes == 2 * draft
    assert (answer.target_class, answer.draft_class) == (
        "Qwen3NextForCausalLM",
        "Qwen3NextForCausalLMMTP",
    )
    assert (answer.tp, answer.ep) == (1, 1)


def test_rank_0_of_tp_2_with_attention_dp_shards_all_but_attention(
    server_args, tp1_nextn, built_in_process, sglang_state
):
    """TP 2 with attention DP 2 (``ARGV``): the groups have the launch's widths, the
    MoE and embedding shards halve, the attention stays whole on the rank."""
    whole = built_in_process(tp1_nextn)
    _restart(sglang_state)
    answer = built_in_process(server_args)
    assert answer.error is None, answer.error
    assert (answer.tp, answer.ep) == (TP, 1)
    assert whole.target_bytes / 2 < answer.target_bytes < whole.target_bytes
    assert whole.draft_bytes / 2 < answer.draft_bytes < whole.draft_bytes


def _restart(state) -> None:
    """SGLang's process groups torn down between two builds in one test."""
    import torch.distributed as dist
    from sglang.srt.distributed import parallel_state as ps

    ps.destroy_model_parallel()
    ps.destroy_distributed_environment()
    if dist.is_initialized():
        dist.destroy_process_group()


def test_groups_of_another_ep_width_than_the_launchs_are_refused(
    rank0_groups, monkeypatch
):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps

    shims.init_dp_attention(rank0_groups, ModelConfig.from_server_args(rank0_groups))
    assert model_build.check_widths(rank0_groups) == {
        "TP": TP,
        "EP": 1,
        "attention DP": DP,
    }
    monkeypatch.setattr(ps, "get_moe_expert_parallel_world_size", lambda: 4)
    monkeypatch.setattr(ps, "get_tensor_model_parallel_world_size", lambda: 8)
    with pytest.raises(model_build.WidthMismatch) as raised:
        model_build.check_widths(rank0_groups)
    # TP 8 over the same attention TP 1: 8 attention-DP ranks.
    assert str(raised.value) == (
        "SGLang's groups have TP 8 (the launch resolved 2), "
        "EP 4 (the launch resolved 1), attention DP 8 (the launch resolved 2)"
    )


def test_groups_of_another_attention_dp_width_than_the_launchs_are_refused(
    rank0_groups, monkeypatch
):
    """The attention-DP width is read from the groups SGLang built (TP over
    attention TP x CP), as TP and EP are: groups whose attention is whole on TP 2
    (attention DP 1, e.g. built without DP attention) are not the launch's DP 2,
    whatever SGLang's own attention-DP records say."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps

    shims.init_dp_attention(rank0_groups, ModelConfig.from_server_args(rank0_groups))
    monkeypatch.setattr(ps, "get_attn_tensor_model_parallel_world_size", lambda: TP)
    with pytest.raises(model_build.WidthMismatch) as raised:
        model_build.check_widths(rank0_groups)
    assert str(raised.value) == (
        f"SGLang's groups have attention DP 1 (the launch resolved {DP})"
    )


def test_a_release_that_takes_widths_gets_the_launchs_and_no_other(
    server_args, monkeypatch
):
    """Up to 0.5.20 ``initialize_model_parallel`` takes the widths: the launch's
    TP, PP and attention-DP split (TP 2 over 2 attention-DP ranks: attention TP 1)
    go in; a width it no longer takes is refused unless it is 1."""
    from sglang.srt.distributed import parallel_state as ps

    if not shims.accepts(ps.initialize_model_parallel, "tensor_model_parallel_size"):
        pytest.skip("this SGLang reads the widths from the published launch")
    got = model_build._width_kwargs(server_args, ps)
    assert got["tensor_model_parallel_size"] == TP
    assert got["pipeline_model_parallel_size"] == 1
    assert got["expert_model_parallel_size"] == 1
    if "attention_data_parallel_size" in got:
        assert got["attention_data_parallel_size"] == DP

    def narrowed(pipeline_model_parallel_size=1, backend=None):
        raise AssertionError("not called")

    bare = types.SimpleNamespace(initialize_model_parallel=narrowed)
    with pytest.raises(model_build.WidthMismatch) as raised:
        model_build._width_kwargs(server_args, bare)
    # Every width it no longer takes that is not 1, in one line; EP 1 is not one.
    assert str(raised.value) == (
        "this SGLang's initialize_model_parallel takes no "
        f"tensor_model_parallel_size={TP}, attention_data_parallel_size={DP}"
    )


def test_a_loader_seam_sglang_lacks_is_the_builds_answer(monkeypatch):
    from sglang.srt.model_loader import loader

    assert weights._lacking() is None
    monkeypatch.delattr(loader, "_initialize_model")
    answer = weights._lacking()
    assert "sglang.srt.model_loader.loader._initialize_model" in answer.error
    assert answer.error.endswith("`sglang-pd-lean doctor` lists what is missing")
    assert answer.target_bytes == 0


def resolved(tmp_path, *flags: str, vocab: int | None = None, kind="qwen3-next"):
    folder = tiny_model_folder(tmp_path / "tiny", kind)
    argv = ["--model-path", folder, *flags]
    if vocab is not None:  # a draft checkpoint of its own: another vocabulary
        import json

        other = tmp_path / "draft"
        other.mkdir()
        config = json.loads((tmp_path / "tiny" / "config.json").read_text())
        (other / "config.json").write_text(json.dumps(dict(config, vocab_size=vocab)))
        argv += ["--speculative-draft-model-path", str(other)]
    return launch.resolve(argv, launch.gpu_facts("h200")).server_args


def test_a_launch_without_speculation_builds_no_draft(tmp_path, built_in_process):
    answer = built_in_process(resolved(tmp_path))
    assert answer.error is None
    assert (answer.draft_bytes, answer.draft_class) == (0, None)
    assert answer.target_bytes > 0


def test_the_draft_is_built_from_its_own_checkpoint_where_one_is_given(
    tmp_path, built_in_process
):
    """NEXTN with ``--speculative-draft-model-path``: the MTP module of that
    checkpoint (twice the vocabulary: its embedding and LM head double), the target
    as before."""
    config, model = transformers_tiny()
    answer = built_in_process(resolved(tmp_path, *NEXTN, vocab=2 * config.vocab_size))
    assert answer.error is None, answer.error
    h = config.hidden_size
    draft = (
        2 * numel(model.model.embed_tokens)
        + 2 * numel(model.lm_head)
        + numel(model.model.layers[3])
        + 2 * h * h
        + 3 * h
    )
    assert answer.draft_bytes == 2 * draft


def test_expert_parallelism_is_in_the_groups_the_model_is_built_in(
    tmp_path, built_in_process
):
    answer = built_in_process(resolved(tmp_path, "--tp", "2", "--ep", "2"))
    assert answer.error is None, answer.error
    assert (answer.tp, answer.ep) == (2, 2)


def test_the_childs_answer_is_its_build_as_json(tp1_nextn, built_in_process):
    """What the forked child writes back (``weights.answer``), read as the parent
    reads it: the build's figures, with the child's environment set."""
    import json
    import os

    from sglang_pd_lean.census.results import WeightsBuild

    config, model = transformers_tiny()
    got = WeightsBuild(**json.loads(weights.answer(tp1_nextn)))
    assert got.error is None, got.error
    linear = [layer for layer in model.model.layers if hasattr(layer, "linear_attn")]
    a_log = sum(layer.linear_attn.A_log.numel() for layer in linear)
    assert got.target_bytes == 2 * numel(model) + 2 * a_log
    assert (got.target_class, got.draft_class, got.tp) == (
        "Qwen3NextForCausalLM",
        "Qwen3NextForCausalLMMTP",
        1,
    )
    for name, value in weights.CHILD_ENV.items():
        assert os.environ[name] == value


def test_a_build_that_fails_answers_its_error_in_one_line(monkeypatch):
    import json

    def fails(server_args):
        raise RuntimeError("no room\n  for the experts")

    for name in weights.CHILD_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(weights, "build", fails)
    got = json.loads(weights.answer(None))
    assert got == {
        "error": "RuntimeError: no room for the experts",
        "target_bytes": 0,
        "draft_bytes": 0,
        "target_class": None,
        "draft_class": None,
        "tp": 1,
        "ep": 1,
        "attn_tp": 1,
        "layers": None,
    }
    from sglang.srt.model_loader import loader

    monkeypatch.delattr(loader, "_initialize_model")
    got = json.loads(weights.answer(None))  # a seam it lacks: no build is tried
    assert "_initialize_model" in got["error"] and "RuntimeError" not in got["error"]


@pytest.mark.parametrize(
    "kind, flags",
    [
        ("qwen3-next", ("--tp", "2")),
        ("qwen3-next", ("--tp", "2", "--dp", "2", "--enable-dp-attention")),
        ("qwen3-next", ("--tp", "4", "--dp", "2", "--enable-dp-attention")),
    ],
    ids=["tp2", "tp2-dp2-attention", "tp4-dp2-attention"],
)
def test_the_census_rank_layout_is_sglangs_groups_and_model_for_rank_0(
    tmp_path, built_in_process, kind, flags
):
    """The layout the census publishes for SGLang's sizing (``census.rank``:
    attention TP from SGLang's DP-attention split, the stage's layers from its PP
    split) equals what SGLang builds for rank 0 of the launch: the attention-TP
    group over the launch's world, and the target's layers as SGLang's model
    runner resolves them on the model built under FakeTensorMode. (No PP case:
    Qwen3-Next's class takes no PP, and a PP-capable tiny DeepSeek V3 does not
    build on a CPU host: ``SRTPlatform.get_device`` raises NotImplementedError.)"""
    from sglang.srt.configs.model_config import ModelConfig

    from sglang_pd_lean import census
    from sglang_pd_lean.census import rank
    from sglang_pd_lean.census.launch import resolved_fields

    server_args = resolved(tmp_path, *flags, kind=kind)
    with census.published(**resolved_fields(server_args)) as published:
        widths = rank.rank_widths(published)
        mc = ModelConfig.from_server_args(published)
        derived = rank.derive(mc, published, widths, pp_rank=0)
    answer = built_in_process(server_args)
    assert answer.error is None, answer.error
    assert answer.attn_tp == widths.attn_tp_size
    assert tuple(answer.layers) == derived.layers
