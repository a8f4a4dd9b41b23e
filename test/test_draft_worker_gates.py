"""Every speculative draft worker on a PD prefill server: its draft decode and
draft-extend CUDA graphs are not captured (issue 36), whatever the algorithm.

Each case runs a draft worker class of the installed SGLang, upstream's own capture
method on it, with only the CUDA calls stood in for (the free-memory reading and the
graph runner's construction raise ``ReachedCapture``: upstream got to the capture;
DFLASH hands its decision to the draft model runner's ``init_cuda_graphs``, which a
recorder stands in for). Per algorithm, per role (prefill, decode, unified ``null``,
and a prefill server with a unified memory pool), each with its control: the same
call without the plugin (upstream's function unwrapped) captures there.

Through SGLang's own call (the installed method, hooked by the plugin where the
release needs the gate, or carrying the fix on a patched release) a prefill server
captures nothing and the other roles capture as upstream does.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import types
from dataclasses import dataclass

import pytest
from helpers import server_fields, upstream_has
from placeholder import Inputs

from sglang_pd_lean import census, record
from sglang_pd_lean.gates import (
    dflash_graph,
    draft_graph,
    frozen_kv_graph,
    multi_layer_graph,
)
from sglang_pd_lean.upstream import resolve

DRAFT_TOKENS = 4
MODEL = "qwen3-next-80b-a3b"


class ReachedCapture(Exception):
    """A stood-in CUDA call right before (or at) a graph capture was reached."""


@dataclass(frozen=True)
class Case:
    """One draft worker class and the server flags under which upstream captures."""

    id: str
    gate: types.ModuleType
    worker: str  # dotted path of the class whose method is called
    algorithm: str  # --speculative-algorithm
    graphs: str  # which CUDA graph settings make upstream capture: see cuda_graphs()
    extra: tuple = ()  # more ServerArgs fields, as (name, value) pairs

    @property
    def method(self) -> str:
        return self.gate.GATE.targets[0].rsplit(".", 1)[1]


_SPEC = "sglang.srt.speculative"
CASES = [
    # EAGLE / EAGLE3 (NEXTN resolves to EAGLE): the decode graph backend set.
    Case(
        "eagle",
        draft_graph,
        f"{_SPEC}.eagle_worker_v2.EagleDraftWorker",
        "EAGLE",
        "decode",
    ),
    Case(
        "eagle3",
        draft_graph,
        f"{_SPEC}.eagle_worker_v2.EagleDraftWorker",
        "EAGLE3",
        "decode",
    ),
    Case(
        "standalone",
        draft_graph,
        f"{_SPEC}.standalone_worker_v2.StandaloneDraftWorker",
        "STANDALONE",
        "decode",
    ),
    # FROZEN_KV_MTP: the prefill server's default graphs (decode off, prefill on).
    Case(
        "frozen_kv_mtp",
        frozen_kv_graph,
        f"{_SPEC}.frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker",
        "FROZEN_KV_MTP",
        "default",
    ),
    Case(
        "frozen_kv_mtp_decode_backend",
        frozen_kv_graph,
        f"{_SPEC}.frozen_kv_mtp_worker_v2.FrozenKVMTPDraftWorker",
        "FROZEN_KV_MTP",
        "decode",
    ),
    Case(
        "multi_layer_eagle",
        multi_layer_graph,
        f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker",
        "EAGLE",
        "decode",
        (("enable_multi_layer_eagle", True),),
    ),
    Case(
        "multi_layer_eagle3",
        multi_layer_graph,
        f"{_SPEC}.multi_layer_eagle_worker_v2.MultiLayerEagleDraftWorker",
        "EAGLE3",
        "decode",
        (("enable_multi_layer_eagle", True),),
    ),
    Case(
        "dflash",
        dflash_graph,
        f"{_SPEC}.dflash_worker_v2.DFlashWorkerV2",
        "DFLASH",
        "decode",
    ),
]
ROLES = ["prefill", "decode", "null"]


def cuda_graphs(setting: str):
    """SGLang's CUDA graph config: "default" is a prefill server's (decode off,
    prefill ``breakable`` as on CUDA), "decode" the operator's explicit decode
    backend, "off" every phase off."""
    from sglang.srt.model_executor.cuda_graph_config import (
        Backend,
        CudaGraphConfig,
        PhaseConfig,
    )

    decode = {"default": Backend.DISABLED, "decode": Backend.FULL}.get(
        setting, Backend.DISABLED
    )
    prefill = Backend.DISABLED if setting == "off" else Backend.BREAKABLE
    return CudaGraphConfig(
        decode=PhaseConfig(backend=decode), prefill=PhaseConfig(backend=prefill)
    )


def fields_for(case: Case, role: str, graphs: str | None = None, **extra) -> dict:
    fields = server_fields(Inputs(model=MODEL), role)
    fields.update(
        speculative_algorithm=case.algorithm,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        speculative_num_steps=DRAFT_TOKENS - 1,
        cuda_graph_config=cuda_graphs(graphs or case.graphs),
        # The legacy flag of every phase off, which SGLang resolves into the config
        # above (0.5.15's DFLASH worker reads the flag itself).
        disable_cuda_graph=(graphs or case.graphs) == "off",
        **dict(case.extra),
        **extra,
    )
    return fields


class DraftModelWorker:
    """Stands in for DFLASH's draft ``TpModelWorker``: its ``init_cuda_graphs`` is
    the capture (CUDA); it records whether the decode graph was asked for."""

    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.model_runner = types.SimpleNamespace(tp_group=None, capture_tail_hooks=[])

    def init_cuda_graphs(self, capture_decode_cuda_graph: bool = True) -> None:
        self.asked.append(capture_decode_cuda_graph)
        if capture_decode_cuda_graph:
            raise ReachedCapture


def frozen_kv_runner(worker):
    """Stands in for ``FrozenKVMTPCudaGraphRunner(worker)``, which captures: like
    upstream's constructor it first reads the worker's draft model runner
    (``test_the_frozen_kv_graph_runner_reads_the_draft_model_runner_first``)."""
    _ = worker.draft_model_runner
    raise ReachedCapture


def null_context(*args, **kwargs):
    return contextlib.nullcontext()


def stand_ins(monkeypatch, case: Case) -> None:
    """The CUDA calls of each worker's capture, raising ``ReachedCapture``; for
    DFLASH, its draft-TP/PP group switches (process groups a CPU test has not set
    up) as no-ops."""
    module = importlib.import_module(case.worker.rsplit(".", 1)[0])

    def reached(*args, **kwargs):
        raise ReachedCapture

    for name in ("get_available_gpu_memory",):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, reached)
    if case.gate is draft_graph:
        eagle = importlib.import_module(f"{_SPEC}.eagle_worker_v2")
        monkeypatch.setattr(eagle, "get_available_gpu_memory", reached)
        monkeypatch.setattr(
            eagle, "get_batch_sizes_to_capture", lambda *a, **k: ([1], None)
        )
    if case.gate is frozen_kv_graph:
        runners = importlib.import_module(f"{_SPEC}.frozen_kv_mtp_cuda_graph_runner")
        monkeypatch.setattr(runners, "FrozenKVMTPCudaGraphRunner", frozen_kv_runner)
    if case.gate is multi_layer_graph:
        multi_layer_runners(monkeypatch, module, reached)
    if case.gate is dflash_graph:
        for name in ("draft_pp_context", "draft_tp_context"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, null_context)


def multi_layer_runners(monkeypatch, module, reached) -> None:
    """The multi-layer draft-extend runners upstream's worker builds: where a runner
    captures in ``_init_and_capture``, only that is stood in for, so its own
    constructor reads the worker first, as upstream's does (0.5.14 and 0.5.15 read
    ``gpu_id`` there, not in the worker's method); any other runner, whole."""
    for name in dir(module):
        if not name.startswith(("MultiLayerEagle", "OneGraphMultiLayerEagle")):
            continue
        runner = getattr(module, name)
        if not name.endswith("GraphRunner"):
            continue
        if isinstance(runner, type) and hasattr(runner, "_init_and_capture"):
            monkeypatch.setattr(runner, "_init_and_capture", reached)
        else:
            monkeypatch.setattr(module, name, reached)


def worker_for(case: Case, server_args):
    """The real draft worker class, with the fields its capture reads."""
    cls = resolve(case.worker)
    worker = object.__new__(cls)
    values = dict(
        server_args=server_args,
        device="cuda",
        gpu_id=0,
        topk=1,
        speculative_num_steps=DRAFT_TOKENS - 1,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        target_worker=types.SimpleNamespace(device="cuda"),
        cuda_graph_runner=None,
        cuda_graph_runner_for_draft_extend=None,
        _specialized_graph_memory_usage={},
        _specialized_graph_time_usage={},
    )
    if case.gate is draft_graph:
        values["draft_runner"] = types.SimpleNamespace()
    if case.gate is frozen_kv_graph:
        # Its draft_model_runner (a property over these on some releases).
        values["model_runner"] = values["_model_runner"] = types.SimpleNamespace()
    if case.gate is multi_layer_graph:
        backend = types.SimpleNamespace(
            draft_extend_metadata_captured_in_graph=lambda: False,
            supports_draft_extend_metadata_staging=False,
        )
        values["draft_runner_list"] = [types.SimpleNamespace(attn_backend=backend)]
        values["draft_extend_attn_backend_list"] = [backend]
    if case.gate is dflash_graph:
        draft = DraftModelWorker()
        values.update(
            _draft_worker=draft,
            draft_model_runner=draft.model_runner,
            _draft_sampler=None,
            # Builds the sampling head folded into the decode graph (GPU buffers).
            _maybe_build_draft_sampler=lambda *a, **k: None,
            draft_tp_context=null_context,
            draft_owns_attention=False,
            draft_parallel_layout=None,
            _target_tp_rank=0,
            ps=types.SimpleNamespace(tp_rank=0),
            selector=None,
        )
    for name, value in values.items():
        if not isinstance(inspect.getattr_static(cls, name, None), property):
            object.__setattr__(worker, name, value)  # a property reads the others
    return worker


def upstream_method(case: Case):
    """Upstream's own method, without any hook."""
    return inspect.unwrap(getattr(resolve(case.worker), case.method))


def captures(call, worker) -> bool:
    """Whether ``call(worker)`` got to a graph capture."""
    try:
        call(worker)
    except ReachedCapture:
        return True
    return False


def run(case: Case, role: str, how: str, graphs: str | None = None, **extra):
    """(captured, worker, record) for ``case`` on ``role``: ``how`` is "upstream"
    (the unwrapped method: no plugin), "gate" (the gate's hook around it) or
    "installed" (the method as SGLang calls it)."""
    original = upstream_method(case)
    calls = {
        "upstream": original,
        "gate": lambda w: case.gate.GATE.around(original, w),
        "installed": lambda w: getattr(w, case.method)(),
    }
    with census.published(**fields_for(case, role, graphs, **extra)) as server_args:
        worker = worker_for(case, server_args)
        captured = captures(calls[how], worker)
    return captured, worker, record.snapshot()


def has(case: Case) -> bool:
    try:
        getattr(resolve(case.worker), case.method)
    except (ImportError, AttributeError):
        return False
    return True


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request, monkeypatch):
    case = request.param
    if not has(case):
        pytest.skip(f"SGLang has no {case.worker}.{case.method} on this release")
    stand_ins(monkeypatch, case)
    return case


# --- the control: upstream captures on every role without the plugin ------------


@pytest.mark.parametrize("role", ROLES)
def test_upstream_captures_on_every_role(case, role):
    if role == "prefill" and upstream_has(case.gate.GATE.name):
        pytest.skip("this SGLang skips it on a prefill server itself")
    captured, _, _ = run(case, role, "upstream")
    assert captured


# --- the gate's hook -------------------------------------------------------------


def skip_where_native(case: Case) -> None:
    """A patched SGLang skips the capture itself: no gate acts, no line."""
    if upstream_has(case.gate.GATE.name):
        pytest.skip("this SGLang skips it on a prefill server itself")


def test_gate_skips_the_capture_on_a_prefill_server(case):
    skip_where_native(case)
    captured, worker, snapshot = run(case, "prefill", "gate")
    assert not captured
    assert worker.cuda_graph_runner is None
    assert worker.cuda_graph_runner_for_draft_extend is None
    if case.gate is dflash_graph:  # the draft model runner: its own no-capture call
        assert worker._draft_worker.asked == [False]
        assert worker._draft_sampler is None
    assert snapshot["gates"][case.gate.GATE.name] == record.Outcome.ACTED


@pytest.mark.parametrize("role", ["decode", "null"])
def test_gate_leaves_decode_and_unified_servers_to_upstream(case, role):
    captured, _, snapshot = run(case, role, "gate")
    assert captured
    assert snapshot["gates"][case.gate.GATE.name] == record.Outcome.STEPPED_ASIDE
    assert (
        "can run TARGET_VERIFY"
        in snapshot["stepped_aside_because"][case.gate.GATE.name]
    )


def test_gate_leaves_a_unified_memory_prefill_server_to_upstream(case):
    captured, _, snapshot = run(case, "prefill", "gate", enable_unified_memory=True)
    assert captured
    because = snapshot["stepped_aside_because"][case.gate.GATE.name]
    assert "unified memory pool" in because


def test_gate_steps_aside_where_upstream_captures_nothing(case):
    """Every CUDA graph off: upstream's own early return, the gate's result."""
    upstream, up_worker, _ = run(case, "prefill", "upstream", graphs="off")
    captured, worker, snapshot = run(case, "prefill", "gate", graphs="off")
    assert upstream is captured is False
    assert worker.cuda_graph_runner is up_worker.cuda_graph_runner is None
    assert snapshot["gates"][case.gate.GATE.name] == record.Outcome.STEPPED_ASIDE
    assert snapshot["stepped_aside_because"][case.gate.GATE.name].startswith(
        "upstream captures no draft graph"
    )
    if case.gate is dflash_graph:
        assert worker._draft_worker.asked == up_worker._draft_worker.asked == [False]


def logging_at_info(caplog, case: Case):
    """INFO from the plugin and from upstream's module, whatever an earlier test
    (doctor quiets SGLang's loggers) left their levels at."""
    stack = contextlib.ExitStack()
    for name in ("sglang_pd_lean", case.worker.rsplit(".", 1)[0]):
        stack.enter_context(caplog.at_level(logging.INFO, logger=name))
    return stack


def test_gate_says_what_it_skipped_once(case, caplog):
    skip_where_native(case)
    with logging_at_info(caplog, case):
        run(case, "prefill", "gate")
        run(case, "prefill", "gate")
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("sglang_pd")]
    assert len(ours) == 1
    assert ours[0].startswith(
        f"[sglang-pd-lean] {case.gate.GATE.name} gate: prefill target "
        f"({case.algorithm}) cannot run TARGET_VERIFY; skipped the "
    )
    # Upstream's own "capture begin" line is not left without a capture.
    assert not [r for r in caplog.records if "begin" in r.getMessage()]


def test_upstream_says_it_begins_a_frozen_kv_capture_it_then_makes(caplog):
    """The line the frozen-KV gate holds back: upstream logs it before the wire."""
    (case,) = [c for c in CASES if c.id == "frozen_kv_mtp"]
    skip_where_native(case)
    with pytest.MonkeyPatch.context() as monkeypatch:
        stand_ins(monkeypatch, case)
        with logging_at_info(caplog, case):
            assert run(case, "prefill", "upstream")[0]
    assert [r for r in caplog.records if "draft cuda graph begin" in r.getMessage()]


def test_a_prefill_server_of_a_model_without_linear_attention_captures_no_draft_graph(
    case,
):
    """SGLang resolves NEXTN / EAGLE to FROZEN_KV_MTP for a Gemma 4 assistant draft,
    a model with no mamba pool: the gates read the role and upstream's own early
    returns, nothing of a pool (no mamba field is published here)."""
    skip_where_native(case)
    fields = dict(
        disaggregation_mode="prefill",
        speculative_algorithm=case.algorithm,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        speculative_num_steps=DRAFT_TOKENS - 1,
        speculative_eagle_topk=1,
        cuda_graph_config=cuda_graphs(case.graphs),
        **dict(case.extra),
    )
    original = upstream_method(case)
    with census.published(**fields) as server_args:
        worker = worker_for(case, server_args)
        assert captures(original, worker)
        worker = worker_for(case, server_args)
        assert not captures(lambda w: case.gate.GATE.around(original, w), worker)
    assert record.snapshot()["gates"][case.gate.GATE.name] == record.Outcome.ACTED


# --- as SGLang calls it: the plugin's hook, or a patched release's own check ------


@pytest.mark.parametrize("role", ROLES)
def test_installed_sglang_captures_only_off_a_prefill_server(case, role):
    captured, _, _ = run(case, role, "installed")
    assert captured is (role != "prefill")


# --- what the tripwires rely on, in upstream's code -------------------------------


def first_read_of_argument(function, argument: int = 1) -> str:
    """The first attribute ``function`` reads of its ``argument``-th parameter."""
    import ast
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    parameter = tree.body[0].args.args[argument].arg
    reads = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == parameter
        and isinstance(node.ctx, ast.Load)
    ]
    return min(reads, key=lambda n: (n.lineno, n.col_offset)).attr


def test_the_frozen_kv_graph_runner_reads_the_draft_model_runner_first():
    """0.5.16 measures no memory before the capture: the frozen-KV gate's second
    tripwire is the first thing the graph runner reads of its worker."""
    runners = importlib.import_module(f"{_SPEC}.frozen_kv_mtp_cuda_graph_runner")
    init = runners.FrozenKVMTPCudaGraphRunner.__init__
    assert first_read_of_argument(init) == "draft_model_runner"


def test_the_gate_passes_on_upstreams_own_lines_where_it_steps_aside(caplog):
    """A frozen-KV draft off CUDA: upstream's early return and its own INFO line,
    held during the probe, reach the log as upstream wrote them."""
    (case,) = [c for c in CASES if c.id == "frozen_kv_mtp"]
    skip_where_native(case)
    with pytest.MonkeyPatch.context() as monkeypatch:
        stand_ins(monkeypatch, case)
        original = upstream_method(case)
        with census.published(**fields_for(case, "prefill")) as server_args:
            worker = worker_for(case, server_args)
            worker.target_worker = types.SimpleNamespace(device="xpu")
            with logging_at_info(caplog, case):
                assert case.gate.GATE.around(original, worker) is None
    lines = [r.getMessage() for r in caplog.records]
    assert any("only supported on CUDA" in line for line in lines), lines
    assert record.snapshot()["gates"][case.gate.GATE.name] == "stepped aside"


# --- SGLang's own plugin loader, in a fresh interpreter ---------------------------

FRESH = """
import json, logging, os, sys
sys.path.insert(0, {test_dir!r})
from sglang.srt.plugins import load_plugins
load_plugins()
import pytest
import test_draft_worker_gates as t
out = {{}}
for case in t.CASES:
    if not t.has(case):
        continue
    method = getattr(t.resolve(case.worker), case.method)
    out[case.id] = {{"wrapped": hasattr(method, "__wrapped__")}}
    with pytest.MonkeyPatch.context() as monkeypatch:
        t.stand_ins(monkeypatch, case)
        for role in ("prefill", "null"):
            out[case.id][role] = t.run(case, role, "installed")[0]
print("RESULT" + json.dumps(out))
"""


def test_load_plugins_makes_every_draft_worker_skip_its_capture_on_prefill_only():
    import json
    import os

    from helpers import run_python

    proc = run_python(FRESH.format(test_dir=os.path.dirname(__file__)))
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT") :])
    assert set(result) == {case.id for case in CASES if has(case)}
    for case_id, seen in result.items():
        (case,) = [c for c in CASES if c.id == case_id]
        # Hooked where the release needs the gate; natively skipped elsewhere.
        assert seen["wrapped"] is not upstream_has(case.gate.GATE.name), case_id
        assert (seen["prefill"], seen["null"]) == (False, True), case_id


# --- a caller upstream refuses: the hook fails as upstream fails -------------------


def outcome_of(call) -> tuple:
    try:
        return ("returned", repr(call()))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


@pytest.mark.parametrize("role", ["prefill", "null"])
def test_a_call_upstream_refuses_fails_as_upstream_fails(case, role):
    """An owner with none of the fields upstream reads, and one argument too many:
    whatever upstream does with them, the hook does the same."""
    original = upstream_method(case)
    with census.published(**fields_for(case, role)) as server_args:
        bare = types.SimpleNamespace()
        assert outcome_of(lambda: case.gate.GATE.around(original, bare)) == outcome_of(
            lambda: original(bare)
        )
        extra = outcome_of(lambda: original(worker_for(case, server_args), None))
        hooked = outcome_of(
            lambda: case.gate.GATE.around(original, worker_for(case, server_args), None)
        )
    assert extra[:2] == ("raised", "TypeError")
    assert hooked == extra
