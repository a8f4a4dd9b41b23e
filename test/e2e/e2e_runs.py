"""Fixtures of the end-to-end tests: one real server per kind, started once per
session, and ``sglang-pd-lean report`` for the budget each server sized with.

A test asks ``runs.get(name)`` for a finished run: the server is started the first
time (``harness.Server``), waited on until it is ready or has exited, asked for
``/server_info`` if ready, stopped, and its log and answers are kept. So servers run
one at a time (their memory budgets come from the host's free memory) and no server
outlives the test that needed it.

Devices: every test runs with ``device="cpu"`` (stand-ins for GPU-only start-up
calls) and again with ``device="cuda"`` (no stand-ins; marker ``gpu``), which is
skipped without a CUDA device: ``python -m pytest -m gpu test/e2e`` on a GPU host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
from e2e_algos import ALGO_RUNS, NOT_OUR_PLUGIN, algo_args
from e2e_ledger_runs import LEDGER_RUNS
from e2e_shapes import SHAPE_RUNS, shape_args
from harness import (
    COMMON_ARGS,
    PD_TRANSFER_ARGS,
    SPEC_ARGS,
    Server,
)
from tiny_model import write_model

GIB = 1 << 30
PLUGIN_PREFIX = "[sglang-pd-lean]"

# name -> (extra server arguments, extra environment)
RUNS = {
    "prefill": (["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS], {}),
    "prefill, allow-list without us": (
        ["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS],
        {"SGLANG_PLUGINS": NOT_OUR_PLUGIN},
    ),
    "prefill, kill switch": (
        ["--disaggregation-mode", "prefill", *PD_TRANSFER_ARGS],
        {"SGLANG_PD_LEAN": "0"},
    ),
    "decode": (["--disaggregation-mode", "decode", *PD_TRANSFER_ARGS], {}),
    "decode, allow-list without us": (
        ["--disaggregation-mode", "decode", *PD_TRANSFER_ARGS],
        {"SGLANG_PLUGINS": NOT_OUR_PLUGIN},
    ),
    # --speculative-adaptive (NEXTN resolves to EAGLE, topk 1): the adaptive gate.
    "prefill, adaptive": (
        [
            "--disaggregation-mode",
            "prefill",
            *PD_TRANSFER_ARGS,
            "--speculative-adaptive",
        ],
        {},
    ),
    "prefill, adaptive, allow-list without us": (
        [
            "--disaggregation-mode",
            "prefill",
            *PD_TRANSFER_ARGS,
            "--speculative-adaptive",
        ],
        {"SGLANG_PLUGINS": NOT_OUR_PLUGIN},
    ),
    "null": ([], {}),
    "null, allow-list without us": ([], {"SGLANG_PLUGINS": NOT_OUR_PLUGIN}),
    **LEDGER_RUNS,  # the start-up allocation ledger's (e2e_ledger_runs.py)
}
# The servers `check` is tried on, all up at once: run name -> file stem of its
# recorded /server_info (test/data/server_info/<release>/).
FLEET = {
    "prefill": "prefill",
    "prefill, allow-list without us": "prefill-no-plugin",
    "decode": "decode",
}
# Every run: the CPU recipe, speculative decoding, and an explicit decode graph
# backend (a prefill server disables it by default; set, upstream's draft worker
# reaches its graph-capture step, where the draft_graph gate sits).
BASE_ARGS = [*COMMON_ARGS, *SPEC_ARGS, "--cuda-graph-backend-decode", "full"]
# What ``report`` needs to size like these servers (the same values as BASE_ARGS).
REPORT_ARGS = [
    "--max-running-requests", "8",
    "--speculative-num-draft-tokens", "2",
    "--context-length", "2048",
    "--page-size", "1",
    "--mamba-radix-cache-strategy", "no_buffer",
]  # fmt: skip
# ... and the servers' launch flags the census flags do not name (no_buffer needs the
# overlap schedule off; the speculative algorithm as the servers run it).
REPORT_LAUNCH_ARGS = ["--disable-overlap-schedule", *SPEC_ARGS]

MAMBA_LINE = (
    r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), "
    r"conv_state size: (?P<conv>[\d.]+)GB, ssm_state size: (?P<ssm>[\d.]+)GB"
    r"(?: intermediate_ssm_state_cache size: (?P<verify_ssm>[\d.]+)GB"
    r" intermediate_conv_window_cache size: (?P<verify_conv>[\d.]+)GB)?"
)
KV_LINE = r"KV Cache is allocated\. dtype: \S+, #tokens: (?P<tokens>\d+), "
PROBE_LINE = (
    r"\[e2e-probe\] _handle_max_mamba_cache total_rest_memory=(?P<gib>\S+) "
    r"is_draft_worker=False"
)

# A model without linear-attention layers: its KV budget in bytes (the probe).
KV_BUDGET_LINE = (
    r"\[e2e-probe\] config_from_budget budget_bytes=(?P<bytes>\d+) "
    r"is_draft_worker=False"
)

WEIGHTS_LINE = (
    r"\[e2e-probe\] load_model parameter_bytes=(?P<bytes>\d+) "
    r"is_draft_worker=(?P<draft>True|False)"
)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device"),
        ],
    ),
]


@dataclasses.dataclass
class Run:
    """A finished server run: what it logged and answered."""

    name: str
    device: str
    ready: bool
    exit_code: int | None
    log: str
    server_info: dict | None
    log_path: str
    # The server's own launch_server flags (everything after ``-m
    # sglang.launch_server`` in the command the harness ran, ports included).
    argv: list[str] = dataclasses.field(default_factory=list)
    # Its start-up allocation ledger (site/e2e_ledger.py), if it kept one.
    ledger_path: str | None = None

    def lines(self, pattern: str) -> list[re.Match]:
        regex = re.compile(pattern)
        return [m for m in map(regex.search, self.log.splitlines()) if m]

    def one(self, pattern: str) -> re.Match:
        """The first line matching ``pattern``; fails with the log if none does."""
        found = self.lines(pattern)
        assert found, self.explain(f"no log line matches {pattern!r}")
        return found[0]

    def budget_gib(self) -> float:
        """``total_rest_memory`` the target's sizing received (logged by the probe);
        for a model without linear-attention layers, its KV budget."""
        if not self.lines(PROBE_LINE) and self.lines(KV_BUDGET_LINE):
            return int(self.one(KV_BUDGET_LINE)["bytes"]) / GIB
        return float(self.one(PROBE_LINE)["gib"])

    def parameter_bytes(self, *, draft: bool = False) -> int:
        """Bytes of the target's (or draft's) parameters once loaded (the probe's
        line after ``ModelRunner.load_model``)."""
        found = [m for m in self.lines(WEIGHTS_LINE) if (m["draft"] == "True") == draft]
        assert found, self.explain(f"no weights probe line (draft={draft})")
        return int(found[0]["bytes"])

    def internal_states(self) -> list[dict]:
        assert self.server_info is not None, self.explain("no /server_info")
        return self.server_info["internal_states"]

    def explain(self, message: str) -> str:
        return f"{message}\n----- {self.name} ({self.device}) log: {self.log_path} -----\n{self.log}"


class Runs:
    def __init__(self, model_dir: str, workdir: str) -> None:
        self.model_dir = model_dir
        self.workdir = workdir
        self._runs: dict[tuple[str, str], Run] = {}
        self._reports: dict[float, dict] = {}

    def get(self, name: str, device: str, added: tuple[str, ...] = ()) -> Run:
        """The run ``name`` of ``RUNS``, started once per session; ``added``: more
        launch flags appended to its own (a separate run)."""
        key = (name, device, added)
        if key not in self._runs:
            self._runs[key] = self._run(name, device, added)
        return self._runs[key]

    def _run(self, name: str, device: str, added: tuple[str, ...] = ()) -> Run:
        server = self.server(name, device, added)
        with server:
            ready = server.wait()
            info = server.server_info() if ready else None
        return Run(
            name=name,
            device=device,
            ready=ready,
            exit_code=server.process.returncode,
            log=server.log,
            server_info=info,
            log_path=server.log_path,
            argv=server.command[server.command.index("sglang.launch_server") + 1 :],
            ledger_path=server.ledger_path,
        )

    @contextlib.contextmanager
    def fleet(self, names: tuple[str, ...], device: str, added: tuple[str, ...] = ()):
        """The servers ``names`` of ``RUNS``, all up at once: started one after
        another (each waits until ready, so each budget is measured while the
        others idle), yielded as name -> ``Server``, stopped at the end; ``added``:
        more launch flags for each."""
        with contextlib.ExitStack() as stack:
            servers = {}
            for name in names:
                server = stack.enter_context(self.server(name, device, added))
                if not server.wait():
                    raise server.fail(f"the {name} server exited before ready")
                servers[name] = server
            yield servers

    def server(self, name: str, device: str, added: tuple[str, ...] = ()) -> Server:
        """A not yet started ``Server`` for the run ``name`` of ``RUNS`` (or of
        ``e2e_algos.ALGO_RUNS``: another speculative algorithm)."""
        if name in SHAPE_RUNS:
            folder, args, env = shape_args(name, self.workdir)
            return Server(
                folder, [*args, *added], device=device, workdir=self.workdir, env=env
            )
        if name in ALGO_RUNS:
            folder, args, env = algo_args(name, self.workdir, self.model_dir)
            return Server(
                folder,
                [*args, *added],
                device=device,
                workdir=self.workdir,
                env=env,
            )
        extra, env = RUNS[name]
        args = [
            *BASE_ARGS,
            # The MTP layer counted in the KV budget as `report` counts it (SGLang
            # counts a draft's layers only when given a draft model path).
            "--speculative-draft-model-path", self.model_dir,
            *extra,
            *added,
        ]  # fmt: skip
        return Server(
            self.model_dir, args, device=device, workdir=self.workdir, env=env
        )

    def report(
        self, available_gib: float, *, disable_radix_cache: bool = False
    ) -> dict:
        """``sglang-pd-lean report --json`` (the real CLI, in its own process) for
        the tiny model, the servers' flags and ``available_gib``."""
        key = (available_gib, disable_radix_cache)
        if key not in self._reports:
            cli = os.path.join(os.path.dirname(sys.executable), "sglang-pd-lean")
            command = [
                cli, "report", "--config", self.model_dir, *REPORT_ARGS,
                "--available-gib", repr(available_gib), "--json",
            ]  # fmt: skip
            if disable_radix_cache:
                command.append("--disable-radix-cache")
            # The launch flags the census flags do not name; the draft's layers
            # counted in the KV budget as the servers count them.
            command += ["--", *REPORT_LAUNCH_ARGS]
            command += ["--speculative-draft-model-path", self.model_dir]
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            assert (
                done.returncode == 0
            ), f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}"
            self._reports[key] = json.loads(done.stdout)
        return self._reports[key]

    def report_for(self, run: Run) -> dict:
        """``report`` for the budget ``run`` sized with and its effective radix-cache
        setting (SGLang turns the radix cache off on a PD decode server itself)."""
        return self.report(
            run.budget_gib(),
            disable_radix_cache=bool(run.server_info["disable_radix_cache"]),
        )


def launch_report(
    argv: list[str], available_gib: float | None, gpu: str = "local"
) -> dict:
    """``sglang-pd-lean report --gpu GPU [--available-gib B] --json -- ARGV``: the real
    CLI in its own process (``local``: SGLang resolving ``argv`` on this machine;
    without B the report works out the memory per rank itself)."""
    cli = os.path.join(os.path.dirname(sys.executable), "sglang-pd-lean")
    budget = [] if available_gib is None else ["--available-gib", repr(available_gib)]
    command = [cli, "report", "--gpu", gpu, *budget, "--json", "--", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    model_dir = write_model(str(tmp_path_factory.mktemp("tiny-qwen3-next")))
    return Runs(model_dir, str(tmp_path_factory.mktemp("servers")))


@pytest.fixture(scope="session", params=DEVICES)
def device(request) -> str:
    return request.param


def logged_sizes(run: Run) -> dict:
    """SGLang's own start-up figures: the target's mamba pool and KV cache."""
    mamba = run.one(MAMBA_LINE)
    kv = run.lines(KV_LINE)
    assert kv, run.explain("no KV Cache line")
    sizes = {
        "mamba_slots": int(mamba["slots"]),
        "conv state": mamba["conv"],
        "ssm state": mamba["ssm"],
        "kv_tokens": int(kv[0]["tokens"]),
    }
    if mamba["verify_ssm"] is not None:
        sizes["verify ssm snapshots"] = mamba["verify_ssm"]
        sizes["verify conv windows"] = mamba["verify_conv"]
    return sizes


def reported_sizes(report: dict, role: str, column: str, *, run: Run) -> dict:
    """``report``'s figures for ``run``'s role, written as SGLang's lines write them
    (GB with two decimals); verify components only where the server logged them.
    A decode pool holds ``disaggregation_decode_extra_slots`` more mamba slots than
    it schedules (SGLang logs the pool's size; ``report`` the scheduled one)."""
    logged = logged_sizes(run)
    pool = report["roles"][role][column]
    capacity = report["capacity"][role][column]
    extra = (
        run.server_info["disaggregation_decode_extra_slots"] if role == "decode" else 0
    )
    sizes = {
        "mamba_slots": pool["mamba_slots"] + extra,
        "kv_tokens": capacity["kv_tokens"],
    }
    components = ["conv state", "ssm state"]
    if "verify ssm snapshots" in logged:
        components += ["verify ssm snapshots", "verify conv windows"]
    for component in components:
        sizes[component] = f"{pool['components'].get(component, 0) / GIB:.2f}"
    return sizes


def gate_lines(run: Run) -> dict[str, str]:
    """gate name -> its INFO line, for every gate that logged one."""
    return {
        m["gate"]: m.group(0)
        for m in run.lines(rf"{re.escape(PLUGIN_PREFIX)} (?P<gate>\w+) gate: .*")
    }


NO_DRIVER = "RuntimeError: Found no NVIDIA driver on your system"
SNAPSHOT_FRAME = (
    r'File "(?P<file>[^"]*sglang/srt/mem_cache/memory_pool\.py)", '
    r"line (?P<line>\d+), in __init__"
)
SNAPSHOT_CALL = "intermediate_ssm_state_cache = torch.zeros("


STANDIN_LINE = (
    r"\[e2e-standin\] MambaPool: torch\.zeros\(device='cuda'\) allocated on cpu"
)


def cuda_allocations_redirected(run: Run) -> int:
    """How many of MambaPool's ``device="cuda"`` allocations the CPU stand-in moved
    to the CPU (test/e2e/site/e2e_standins.py, item 5)."""
    return len(run.lines(STANDIN_LINE))


def cuda_snapshot_failure(run: Run) -> str | None:
    """Where a CPU start-up died allocating MambaPool's verify ssm snapshots on CUDA
    (``device="cuda"`` written in upstream's source), quoted from the installed
    source; None if the run did not die there."""
    log = run.log.splitlines()
    if run.ready or not any(NO_DRIVER in line for line in log):
        return None
    for i, line in enumerate(log[:-1]):
        frame = re.search(SNAPSHOT_FRAME, line)
        if frame and log[i + 1].strip() == SNAPSHOT_CALL:
            with open(frame["file"]) as f:
                source = f.read().splitlines()
            start = int(frame["line"]) - 1
            device = next(
                (s.strip() for s in source[start : start + 15] if "device=" in s),
                "?",
            )
            path = frame["file"][frame["file"].index("sglang/srt/") :]
            return (
                f"{path}:{frame['line']} (MambaPool.__init__): {SNAPSHOT_CALL}..., "
                f"{device.rstrip(',')}) -> {NO_DRIVER}"
            )
    return None
