"""The GPU check that runs from carried wheels, on a GPU host with no SGLang.

    bash scripts/gpu_wheels.sh --run          # on the GPU host (installs, then this)
    python3 scripts/gpu_lean_check.py         # the same, wheels already installed
    python3 scripts/gpu_lean_check.py --dry   # any host: every phase, no CUDA

Prints one table, each GPU figure beside the report's, and writes it to
``$OUT/gpu_lean_check.txt`` where ``OUT`` is set. Phases (SGLang 0.5.17, the release
``scripts/gpu_wheels.sh`` carries):

1. **pool**: for each bundled model (``helpers.LAYOUTS``) at the largest request
   count whose pools fit the GPU, ``report --json`` runs in this process. Around each
   of SGLang's own ``KVCacheConfigurator._build_req_to_token_pool`` calls the
   census makes under ``FakeTensorMode`` (prefill target upstream and with the
   plugin, decode target), the same configurator builds the pool again for real on
   CUDA: the allocator's ``requested_bytes`` must equal the report's bytes, and
   ``torch.cuda.memory_allocated()`` the report's storages each rounded up to the
   caching allocator's 512-byte block, to the byte.
2. **budget**: ``report --gpu local`` with SGLang's own probe in place of the
   budget: each sizing call goes through ``_profile_available_bytes`` (the GPU's real
   free memory from ``get_available_gpu_memory``, the slack for
   ``mem_fraction_static``, then ``_handle_max_mamba_cache`` with the budget gate);
   then ``report --gpu local --available-gib A`` for the budget ``A`` that probe
   handed the gate must give the same mamba slots, KV tokens and running requests.
3. **gates**: ``capture_decode_graph``, ``BaseRunner._dummy_run`` and
   ``EagleDraftWorker._capture_cuda_graphs`` on the CUDA device for a prefill
   target with the plugin, and the control without it (``upstream_behaviour()``):
   upstream probes the device and goes on to build its graph runner or warms up in
   ``TARGET_VERIFY``. Each stops at the boundary named in its row: a real
   ``ModelRunner`` needs model weights and attention kernels (sgl-kernel,
   FlashInfer) that these hosts cannot have.
4. **pytest**: the unit tests marked ``gpu`` (``-m gpu test --ignore=test/e2e``).

``--dry`` runs every phase on any host: each real build is a second build under
``FakeTensorMode`` and SGLang's memory probe answers a fixed 79 GiB (the row says
so); ``scripts/gpu_wheels.sh --check`` runs it in an environment built only from
torch and the carried wheels. Stand-ins come from test/ (``helpers``, the gate
tests' model runner and draft worker), never from the package.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = os.path.join(ROOT, "test")
sys.path.insert(0, TEST)  # helpers and the gate tests' stand-ins

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RELEASE = "0.5.17"  # the SGLang scripts/gpu_wheels.sh carries
BLOCK = 512  # the CUDA caching allocator's smallest block
MIB, GIB = 1 << 20, 1 << 30
COUNTS = (256, 128, 64, 32, 16, 8)  # request counts tried, largest first
DRY_FREE_GIB = 79.0  # SGLang's memory probe under --dry (an H100's free memory)
POOL_CASES = (("prefill", "upstream"), ("prefill", "plugin"), ("decode", "plugin"))
BUDGET_LAYOUT = ("qwen3-next-80b-a3b", 4)
SIZING_KEYS = ("fits", "mamba_slots", "kv_tokens", "max_running_requests")
DRAFT_TOKENS = 4


@dataclasses.dataclass
class Row:
    phase: str
    case: str
    report: str
    gpu: str
    ok: bool | None  # None: information, no verdict

    @property
    def verdict(self) -> str:
        return {True: "equal", False: "DIFFERS", None: ""}[self.ok]


@dataclasses.dataclass
class Check:
    """What the phases share: the device (None under --dry) and the rows so far."""

    device: str | None
    rows: list[Row] = dataclasses.field(default_factory=list)

    @property
    def dry(self) -> bool:
        return self.device is None

    def add(self, phase: str, case: str, report, gpu, ok: bool | None) -> None:
        self.rows.append(Row(phase, case, str(report), str(gpu), ok))


# --- the report, in this process --------------------------------------------------


def report_json(*flags: str) -> dict:
    """``sglang-pd-lean report ... --json``, run by the command's own ``main``."""
    from sglang_pd_lean.cli.commands import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", *flags, "--json"])
    if code:
        raise RuntimeError(f"report {' '.join(flags)}: exit {code}: {err.getvalue()}")
    return json.loads(out.getvalue())


@contextlib.contextmanager
def wrapped(owner, name: str, make: Callable) -> Iterator[None]:
    """``owner.name`` replaced by ``make(current)`` for the block (the plugin's
    hook, where SGLang applied one, stays inside)."""
    current = getattr(owner, name)
    setattr(owner, name, make(current))
    try:
        yield
    finally:
        setattr(owner, name, current)


def column_now() -> str:
    """The census column being built: ``upstream`` inside ``upstream_behaviour()``."""
    from sglang_pd_lean import role

    return "upstream" if role._upstream_only.get() else "plugin"


def role_of(conf) -> str:
    return str(getattr(conf.server_args, "disaggregation_mode", None) or "null")


# --- phase 1: the pool gate's real allocation ---------------------------------------


def storages(pool) -> dict[int, int]:
    """Each physical storage of the pool's tensors once: key -> bytes."""
    from sglang_pd_lean.accounting import pool_tensors

    found = {}
    for tensor in pool_tensors(pool).values():
        storage = tensor.untyped_storage()
        found[storage._cdata] = storage.nbytes()
    return found


def rounded(sizes: dict[int, int]) -> int:
    """What the caching allocator charges: each allocation up to its 512-B block."""
    return sum(-(-n // BLOCK) * BLOCK for n in sizes.values() if n)


def real_build(check: Check, build: Callable, expected: int) -> dict:
    """``build()`` outside FakeTensorMode, measured: on CUDA the allocator's
    requested bytes and ``memory_allocated()`` around it, and the bytes per
    component of what it built; under --dry a second fake build stands in (its
    storages give the figures). Not built where the GPU has not the room."""
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

    from sglang_pd_lean.accounting import component_bytes

    if check.dry:
        with unset_fake_temporarily(), FakeTensorMode(allow_non_fake_inputs=True):
            pool = build()
            sizes = storages(pool)
            return {
                "requested": sum(sizes.values()),
                "allocated": rounded(sizes),
                "components": component_bytes(pool),
            }
    import torch

    with unset_fake_temporarily():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        spare = expected + 256 * MIB
        if spare + 256 * MIB > free:
            return {
                "skipped": f"not built: {spare / GIB:.2f} GiB, {free / GIB:.2f} free"
            }
        # One cached segment larger than the pool: every allocation is split from
        # it, so each is charged its own rounded size (an unsplit block would be
        # charged whole).
        segment = torch.empty(spare, dtype=torch.uint8, device="cuda")
        del segment
        stats = torch.cuda.memory_stats()
        allocated = torch.cuda.memory_allocated()
        pool = build()
        torch.cuda.synchronize()
        measured = {
            "requested": torch.cuda.memory_stats()["requested_bytes.all.current"]
            - stats["requested_bytes.all.current"],
            "allocated": torch.cuda.memory_allocated() - allocated,
            "components": component_bytes(pool),
        }
        del pool
        torch.cuda.empty_cache()
    return measured


def recording_builds(check: Check, cases, records: list) -> Callable:
    """A wrapper for ``_build_req_to_token_pool``: the census's fake build as it
    was, then, for the ``cases`` asked, the same call built for real."""

    def make(original):
        def build(self, *args, **kwargs):
            pool = original(self, *args, **kwargs)
            case = (role_of(self), column_now())
            done = {(r["role"], r["column"]) for r in records}
            # The census's own build of each case comes first (the advice's
            # searches build again with other flags).
            if self.is_draft_worker or case not in cases or case in done:
                return pool
            from sglang_pd_lean.accounting import component_bytes

            fake = storages(pool)
            real = real_build(
                check, lambda: original(self, *args, **kwargs), sum(fake.values())
            )
            records.append(
                {
                    "role": case[0],
                    "column": case[1],
                    "fake": sum(fake.values()),
                    "rounded": rounded(fake),
                    "fake_components": component_bytes(pool),
                    **real,
                }
            )
            return pool

        return build

    return make


def pool_largest(report: dict) -> int:
    return max(report["roles"][r][c]["total_bytes"] for r, c in POOL_CASES)


def requests_that_fit(check: Check, model: str, tp: int) -> int:
    """The largest of ``COUNTS`` whose largest pool takes at most 40 % of the
    GPU's free memory (the report's own bytes, scaled down from 256 requests)."""
    if check.dry:
        return COUNTS[-1]
    import torch

    free, _ = torch.cuda.mem_get_info()
    at_most = pool_largest(report_json("--model", model, "--tp", str(tp)))
    for count in COUNTS:
        if at_most * count / COUNTS[0] <= 0.4 * free:
            return count
    return COUNTS[-1]


def pool_phase(check: Check) -> None:
    from helpers import LAYOUTS
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    for model, tp in LAYOUTS:
        count = requests_that_fit(check, model, tp)
        records: list = []
        make = recording_builds(check, POOL_CASES, records)
        with wrapped(KVCacheConfigurator, "_build_req_to_token_pool", make):
            report = report_json(
                "--model", model, "--tp", str(tp), "--max-running-requests", str(count)
            )
        pool_rows(check, f"{model} TP{tp} {count} req", report, records)


def pool_rows(
    check: Check, label: str, report: dict, records: list, cases=POOL_CASES
) -> None:
    seen = {(r["role"], r["column"]) for r in records}
    for role, column_ in cases:
        if (role, column_) not in seen:
            check.add(
                "pool", f"{label} {role} {column_}", "built", "not recorded", False
            )
    for r in records:
        printed = report["roles"][r["role"]][r["column"]]["total_bytes"]
        case = f"{label} {r['role']} {r['column']}"
        if "skipped" in r:
            check.add("pool", case, f"{printed:,} B", r["skipped"], None)
            continue
        same = r["components"] == r["fake_components"]
        check.add(
            "pool",
            f"{case}: requested",
            f"{printed:,} B",
            f"{r['requested']:,} B" + ("" if same else " (components differ)"),
            printed == r["fake"] == r["requested"] and same,
        )
        check.add(
            "pool",
            f"{case}: memory_allocated (512-B blocks)",
            f"{r['rounded']:,} B",
            f"{r['allocated']:,} B",
            r["allocated"] == r["rounded"],
        )


# --- phase 2: the budget gate with SGLang's own probe --------------------------------


@contextlib.contextmanager
def world_group() -> Iterator[None]:
    """A one-rank world group (gloo) for the block, as SGLang's probe reads its
    size; torn down afterwards (the gate stand-ins run without one, as in the
    unit tests)."""
    from sglang.srt.distributed import parallel_state

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parallel_state.init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        backend="gloo",
        distributed_init_method=f"tcp://127.0.0.1:{port}",
    )
    try:
        yield
    finally:
        parallel_state.destroy_distributed_environment()


def probing_budget(pre_gib: float, received: list) -> Callable:
    """A wrapper for ``_handle_max_mamba_cache``: the census's call (with the
    budget it was given) becomes SGLang's own ``_profile_available_bytes`` road
    (the real probe, then this same method with the budget gate); what the gate
    received is recorded, and the KV budget that road settled on is returned."""

    def make(original):
        inside = []

        def handle(self, total_rest_memory):
            if inside:
                received.append((role_of(self), column_now(), total_rest_memory))
                return original(self, total_rest_memory)
            inside.append(True)
            try:
                kv_bytes = self._profile_available_bytes(pre_gib)
            finally:
                inside.pop()
            return kv_bytes / GIB

        return handle

    return make


@contextlib.contextmanager
def memory_probe(check: Check) -> Iterator[None]:
    """SGLang's probe as it is on CUDA; under --dry it answers DRY_FREE_GIB."""
    if not check.dry:
        yield
        return
    from sglang.srt.mem_cache import kv_cache_configurator

    with mock.patch.object(
        kv_cache_configurator, "get_available_gpu_memory", lambda *a, **k: DRY_FREE_GIB
    ):
        yield


def budget_phase(check: Check) -> None:
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.utils import get_available_gpu_memory

    model, tp = BUDGET_LAYOUT
    # --dry: no GPU to probe for the resolution either; an H100's facts stand in.
    gpu = "h100" if check.dry else "local"
    flags = ("--model", model, "--tp", str(tp), "--gpu", gpu)
    label = f"{model} TP{tp}"
    pre = DRY_FREE_GIB if check.dry else get_available_gpu_memory("cuda", 0)
    source = "stand-in" if check.dry else "SGLang's get_available_gpu_memory"
    check.add(
        "budget", f"{label}: free GiB at start", "", f"{pre:.3f} ({source})", None
    )
    received: list = []
    probing = probing_budget(pre, received)
    with world_group(), memory_probe(check):
        with wrapped(KVCacheConfigurator, "_handle_max_mamba_cache", probing):
            probed = report_json(*flags, "--available-gib", "1")
    # The census's own sizing comes first; the advice's searches size again.
    first: dict = {}
    for role, column_, budget in received:
        if role != "null":  # a unified server sizes as the prefill's upstream
            first.setdefault((role, column_), budget)
    for budget in sorted(set(first.values())):
        cases = [case for case, a in first.items() if a == budget]
        records: list = []
        make = recording_builds(check, cases, records)
        with wrapped(KVCacheConfigurator, "_build_req_to_token_pool", make):
            given = report_json(*flags, "--available-gib", repr(budget))
        budget_rows(check, f"{label} A={budget:.4f} GiB", probed, given, cases)
        pool_rows(check, f"{label} sized at A", given, records, cases)


def budget_rows(check: Check, label: str, probed: dict, given: dict, cases) -> None:
    for role, column in cases:
        ours = given["capacity"][role][column]
        road = probed["capacity"][role][column]
        check.add(
            "budget",
            f"{label} {role} {column}",
            ", ".join(f"{k} {ours.get(k)}" for k in SIZING_KEYS),
            ", ".join(f"{k} {road.get(k)}" for k in SIZING_KEYS),
            all(ours.get(k) == road.get(k) for k in SIZING_KEYS),
        )


# --- phase 3: graph, warm-up and draft-graph gates on the device ---------------------


class ReachedBoundary(Exception):
    """Upstream reached the call that needs a real ModelRunner."""


@contextlib.contextmanager
def counted_probe(check: Check, module) -> Iterator[list]:
    """``module.get_available_gpu_memory`` counted (on CUDA it still probes)."""
    calls: list = []
    real = module.get_available_gpu_memory

    def probe(*args, **kwargs):
        free = DRY_FREE_GIB if check.dry else real(*args, **kwargs)
        calls.append(free)
        return free

    with mock.patch.object(module, "get_available_gpu_memory", probe):
        yield calls


def placeholder_inputs(**values):
    """The gate tests' model inputs without a launch (``test/placeholder.py``)."""
    try:
        from placeholder import Inputs
    except ImportError:  # a checkout from before the tests held them
        from sglang_pd_lean.census import Inputs
    return Inputs(**values)


def column(name: str):
    from sglang_pd_lean.role import upstream_behaviour

    return upstream_behaviour() if name == "upstream" else contextlib.nullcontext()


def graph_fields() -> dict:
    """A prefill target's fields with a decode graph backend named (upstream would
    capture the target-verify graph)."""
    from helpers import server_fields
    from sglang.srt.model_executor.cuda_graph_config import (
        Backend,
        CudaGraphConfig,
        PhaseConfig,
    )

    inputs = placeholder_inputs(
        model="qwen3-next-80b-a3b", speculative_num_draft_tokens=DRAFT_TOKENS
    )
    # SGLang's resolution fills in the batch sizes; these fields are not resolved.
    graphs = CudaGraphConfig(decode=PhaseConfig(backend=Backend.FULL, bs=[1, 2, 4, 8]))
    return dict(server_fields(inputs, "prefill"), cuda_graph_config=graphs)


def one_rank():
    """Rank 0 of one: the parallel layout upstream's capture reads."""
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().override(
        tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=0, attn_cp_size=1
    )


def graph_case(check: Check, name: str) -> str:
    from helpers import stand_in_model_runner
    from sglang.srt.model_executor.model_runner_components import cuda_graph_setup

    from sglang_pd_lean import census

    def runner_class():
        raise ReachedBoundary("DecodeCudaGraphRunner")

    fields = graph_fields()
    with census.published(**fields) as server_args, column(name), one_rank():
        runner = stand_in_model_runner(
            server_args,
            fields,
            is_draft_worker=False,
            device=check.device or "cuda",
            req_to_token_pool=types.SimpleNamespace(size=8),
            _decode_cuda_graph_runner_cls=runner_class,
        )
        with counted_probe(check, cuda_graph_setup) as probes:
            try:
                result = cuda_graph_setup.capture_decode_graph(model_runner=runner)
            except ReachedBoundary as stop:
                return (
                    f"probed the device ({probes[0]:.2f} GiB free), went on to {stop}"
                )
    return f"no graph runner ({result.memory_phase}), {len(probes)} device probes"


def warmup_case(check: Check, name: str) -> str:
    import test_warmup_gate as warm
    import torch
    from helpers import server_fields
    from sglang.srt.model_executor.runner.base_runner import BaseRunner

    from sglang_pd_lean import census

    class Probe(BaseRunner):
        can_run_graph = load_batch = execute = None

    inputs = placeholder_inputs(
        model="qwen3-next-80b-a3b", speculative_num_draft_tokens=DRAFT_TOKENS
    )
    fields = server_fields(inputs, "prefill")
    device = check.device or "cpu"
    with census.published(**fields) as server_args, column(name):
        runner = object.__new__(Probe)
        runner.model_runner = warm.model_runner(
            server_args, fields, is_draft_worker=False
        )
        runner.model_runner.device = device
        with torch.device(device):
            buffers = warm.buffers(warm.BATCH, warm.BATCH * DRAFT_TOKENS)
        try:
            runner._dummy_run(warm.BATCH, buffers=buffers)
        except warm.BatchBuilt as built:
            batch = built.forward_batch
    tokens = batch.input_ids.shape[0] // warm.BATCH
    return (
        f"{batch.forward_mode.name}, {tokens} token/request on {batch.input_ids.device}"
    )


def draft_case(check: Check, name: str) -> str:
    import test_newer_gates as newer
    from sglang.srt.speculative import eagle_worker_v2

    from sglang_pd_lean import census

    def runner_class(worker):
        raise ReachedBoundary("EAGLEDraftCudaGraphRunner")

    fields = newer.published_prefill_or("prefill")
    with contextlib.ExitStack() as stack:
        stack.enter_context(column(name))
        server_args = stack.enter_context(census.published(**fields))
        probes = stack.enter_context(counted_probe(check, eagle_worker_v2))
        # The capture batch sizes come from the draft's model runner: none here.
        for attr, value in (
            ("get_batch_sizes_to_capture", lambda *a, **k: ([1], None)),
            ("EAGLEDraftCudaGraphRunner", runner_class),
        ):
            stack.enter_context(mock.patch.object(eagle_worker_v2, attr, value))
        worker = newer.draft_worker(server_args)
        worker.device = worker.target_worker.device = check.device or "cuda"
        try:
            worker._capture_cuda_graphs()
        except ReachedBoundary as stop:
            return f"probed the device ({probes[0]:.2f} GiB free), went on to {stop}"
    graphs = (worker.cuda_graph_runner, worker.cuda_graph_runner_for_draft_extend)
    return f"no draft graphs ({sum(g is None for g in graphs)} of 2 None), {len(probes)} device probes"


GATE_CASES = {
    "graph (capture_decode_graph)": (
        graph_case,
        "no graph runner (target_verify), 0 device probes",
        "went on to DecodeCudaGraphRunner",
    ),
    "warmup (_dummy_run)": (warmup_case, "DECODE, 1 token/request", "TARGET_VERIFY, 4"),
    "draft_graph (_capture_cuda_graphs)": (
        draft_case,
        "no draft graphs (2 of 2 None), 0 device probes",
        "went on to EAGLEDraftCudaGraphRunner",
    ),
}
BOUNDARY = {
    "graph (capture_decode_graph)": "the graph runner needs a real ModelRunner: "
    "weights and an attention backend (FlashInfer/sgl-kernel)",
    "warmup (_dummy_run)": "the forward after the batch needs the model and its kernels",
    "draft_graph (_capture_cuda_graphs)": "the draft graph runner needs the draft "
    "ModelRunner and its attention backend (sgl-kernel)",
}


def attempt(case: Callable, check: Check, name: str) -> str:
    """What ``case`` found, or the error that stopped it (the other gates go on)."""
    try:
        return case(check, name)
    except Exception as exc:
        logging.getLogger("gpu_lean_check").exception("%s, %s", case.__name__, name)
        return f"raised {type(exc).__name__}: {exc}"[:200]


def gates_phase(check: Check) -> None:
    import gc

    import torch

    for gate, (case, plugin_expected, upstream_expected) in GATE_CASES.items():
        before = torch.cuda.memory_allocated() if not check.dry else 0
        plugin = attempt(case, check, "plugin")
        gc.collect()
        kept = torch.cuda.memory_allocated() - before if not check.dry else 0
        upstream = attempt(case, check, "upstream")
        check.add(
            "gates",
            f"{gate} prefill target, plugin",
            plugin_expected,
            plugin,
            plugin.startswith(plugin_expected),
        )
        check.add(
            "gates",
            f"{gate} control, no plugin",
            upstream_expected,
            upstream,
            upstream_expected in upstream,
        )
        check.add("gates", f"{gate} stops at", "", BOUNDARY[gate], None)
        if not check.dry:
            check.add("gates", f"{gate} plugin: CUDA bytes kept", "0", kept, kept == 0)


# --- phase 4: the unit tests marked gpu ---------------------------------------------


def pytest_phase(check: Check, limit_s: float) -> None:
    """The unit tests marked gpu (under --dry: collected, and skipped without CUDA)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-m", "gpu", "test", "--ignore=test/e2e"]
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=max(limit_s, 30)
        )
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        last, ok = (lines[-1] if lines else "no output"), done.returncode == 0
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        print("\n".join(lines[-40:]))
    except subprocess.TimeoutExpired:
        last, ok, failed = f"stopped after {limit_s:.0f} s", False, []
    expected = "skipped without CUDA" if check.dry else "passed"
    check.add("pytest", "-m gpu test (not e2e)", expected, last, ok)
    for line in failed[:10]:
        check.add("pytest", line[:60], "", "", False)


# --- the table -----------------------------------------------------------------------


def header(check: Check) -> list[str]:
    import sglang
    import torch

    from sglang_pd_lean import plugin

    device = torch.cuda.get_device_name(0) if not check.dry else "none (--dry)"
    gates = ", ".join(f"{g.name}: {g.state}" for g in plugin.decision().plans)
    try:
        import xgrammar

        stand_in = getattr(xgrammar, "STAND_IN", False)
        grammar = "stand-in (test/gpu_site)" if stand_in else "installed"
    except ImportError:
        grammar = "none"
    return [
        f"gpu_lean_check: SGLang {sglang.__version__}, torch {torch.__version__}, "
        f"Python {sys.version.split()[0]}, device {device}, xgrammar: {grammar}",
        f"plugin gates: {gates}",
    ]


def render(check: Check, head: list[str]) -> str:
    rows = [("phase", "case", "report", "GPU" if not check.dry else "GPU (dry)", "")]
    rows += [(r.phase, r.case, r.report, r.gpu, r.verdict) for r in check.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [*head, ""]
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(w) for cell, w in zip(row, widths, strict=True)
            ).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    failed = sum(r.ok is False for r in check.rows)
    checked = sum(r.ok is not None for r in check.rows)
    lines.append("")
    lines.append(f"{checked - failed} equal, {failed} differ")
    return "\n".join(lines)


def run_phase(check: Check, name: str, phase: Callable, *args) -> None:
    tic = time.monotonic()
    try:
        phase(check, *args)
    except Exception as exc:  # the table shows it; the other phases still run
        logging.getLogger("gpu_lean_check").exception("%s phase", name)
        check.add(name, "phase failed", "", f"{type(exc).__name__}: {exc}"[:200], False)
    print(f"gpu_lean_check: {name} phase {time.monotonic() - tic:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry", action="store_true", help="no CUDA: every phase's road"
    )
    parser.add_argument("--budget-s", type=float, default=450.0)
    args = parser.parse_args(argv)
    start = time.monotonic()
    logging.basicConfig(level=logging.WARNING)
    import torch

    if not args.dry and not torch.cuda.is_available():
        print("gpu_lean_check: torch sees no CUDA device (--dry runs without one)")
        return 2
    from sglang.srt.plugins import load_plugins

    load_plugins()
    check = Check(device=None if args.dry else "cuda")
    for name, phase in (
        ("budget", budget_phase),
        ("pool", pool_phase),
        ("gates", gates_phase),
    ):
        run_phase(check, name, phase)
    run_phase(check, "pytest", pytest_phase, args.budget_s - (time.monotonic() - start))
    table = render(check, header(check))
    print(table)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_lean_check.txt"), "w") as f:
            f.write(table + "\n")
    print(f"gpu_lean_check: {time.monotonic() - start:.0f} s")
    return 1 if any(r.ok is False for r in check.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
