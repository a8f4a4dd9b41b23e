"""Real ``python -m sglang.launch_server`` processes for the end-to-end tests.

    with Server(model_dir, ["--disaggregation-mode", "prefill"], device="cpu") as s:
        ready = s.wait()        # True: ready; False: exited first
        s.server_info()["internal_states"][0]
        s.log                   # everything the server and its ranks printed

Each server listens on 127.0.0.1 with free ports (HTTP, NCCL, PD bootstrap), runs in
its own process group, writes one log file, and is stopped by PID: SIGTERM to the
group, then SIGKILL to the group and to every descendant seen while it ran. Every
wait has a deadline, so a test never hangs. Every server process gets ``site/`` first
on its PYTHONPATH (``site/sitecustomize.py``): the budget probe always, the stand-ins
for GPU-only start-up calls only with ``device="cpu"``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.path.join(HERE, "site")
READY_LINE = "The server is fired up and ready to roll!"
LEDGER_ENV = "SGLANG_PD_LEAN_E2E_LEDGER"

# The CPU recipe: a speculative (NEXTN) server on a tiny hybrid model with
# dummy weights, no warmup request and no overlap scheduler. The memory share: on a
# CPU, SGLang's budget is (free RAM now) - (1 - share) x (free RAM before loading),
# so the share must leave room for what other processes take meanwhile (~2 GiB of
# 20 free here), and the pools it buys are allocated (touched) in RAM.
COMMON_ARGS = [
    "--load-format", "dummy",
    "--attention-backend", "triton",
    "--mamba-radix-cache-strategy", "no_buffer",
    "--disable-overlap-schedule",
    "--page-size", "1",
    "--skip-server-warmup",
    "--mem-fraction-static", "0.1",
    "--context-length", "2048",
    "--max-running-requests", "8",
]  # fmt: skip
SPEC_ARGS = [
    "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "1",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "2",
]  # fmt: skip
# SGLang refuses the `fake` transfer backend on a prefill server; Mooncake over TCP
# needs no RDMA device.
PD_TRANSFER_ARGS = ["--disaggregation-transfer-backend", "mooncake_tcp"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_port() -> int:
    """A free port for a server: 0.5.15 derives its gRPC port as this one plus
    10,000 and refuses a launch where that passes 65,535."""
    while True:
        port = free_port()
        if port + 10000 <= 65535:
            return port


def stop(process: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGTERM ``process`` (a helper the test started: a router, Prometheus), then
    SIGKILL after ``grace`` seconds; returns once it has exited."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ServerError(AssertionError):
    """The server did not do what the test waited for; the message carries its log."""


class Server:
    def __init__(
        self,
        model_dir: str,
        args: list[str],
        *,
        device: str,
        workdir: str,
        env: dict[str, str] | None = None,
        startup_timeout: float = 240.0,
    ) -> None:
        self.port = server_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout = startup_timeout
        self.log_path = os.path.join(workdir, f"server-{self.port}.log")
        tmp = os.path.join(workdir, f"tmp-{self.port}")  # SGLang's IPC socket files
        os.makedirs(tmp, exist_ok=True)
        self.command = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path", model_dir,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--nccl-port", str(free_port()),
            "--disaggregation-bootstrap-port", str(free_port()),
            "--device", device,
            *args,
        ]  # fmt: skip
        full_env = dict(os.environ)
        for name in ("SGLANG_PLUGINS", "SGLANG_PD_LEAN", LEDGER_ENV):
            full_env.pop(name, None)
        paths = [SITE] + (
            [full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else []
        )
        full_env.update(
            PYTHONPATH=os.pathsep.join(paths),
            SGLANG_PD_LEAN_E2E_STANDINS="1" if device == "cpu" else "0",
            # SGLang's /health answers without a one-token generation, which a CPU
            # server cannot run (routers probe /health: test_e2e_check.py).
            SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION="0" if device == "cpu" else "1",
            SGLANG_HOST_IP="127.0.0.1",
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            TMPDIR=tmp,
        )
        full_env.update(env or {})
        # The start-up allocation ledger (site/e2e_ledger.py), asked for with "1":
        # written beside the log.
        self.ledger_path = None
        if full_env.get(LEDGER_ENV) == "1":
            self.ledger_path = os.path.join(workdir, f"ledger-{self.port}.jsonl")
            full_env[LEDGER_ENV] = self.ledger_path
        self.env = full_env
        self.process: subprocess.Popen | None = None
        self._family: dict[int, psutil.Process] = {}

    # -- life cycle -------------------------------------------------------------

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )

    def _remember_family(self) -> None:
        try:
            root = psutil.Process(self.process.pid)
            for proc in [root, *root.children(recursive=True)]:
                self._family.setdefault(proc.pid, proc)
        except psutil.Error:
            pass

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the process group, SIGKILL to what is left; never raises."""
        if self.process is None:
            return
        self._remember_family()
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.process.pid, signal.SIGKILL)
        for proc in self._family.values():
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(list(self._family.values()), timeout=10)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    # -- waiting ----------------------------------------------------------------

    @property
    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def fail(self, message: str) -> ServerError:
        return ServerError(
            f"{message}\ncommand: {' '.join(self.command)}\n"
            f"----- server log ({self.log_path}) -----\n{self.log}"
        )

    def wait(self) -> bool:
        """Until the server is ready (True: it logged its ready line and answers
        /model_info) or its main process exited (False); raises with the log when
        the deadline passes first. (Not /health: SGLang answers it with a
        one-token generation, which a CPU server cannot run.)"""
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._remember_family()
            if self.process.poll() is not None:
                return False
            if READY_LINE in self.log and self._get("/model_info") is not None:
                return True
            time.sleep(1.0)
        raise self.fail(
            f"server neither ready nor exited after {self.startup_timeout:.0f} s"
        )

    # -- asking -----------------------------------------------------------------

    def _get(self, path: str, timeout: float = 10.0) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as reply:
                return reply.read()
        except (urllib.error.URLError, OSError):
            return None

    def server_info(self) -> dict:
        body = self._get("/server_info", timeout=60.0)
        if body is None:
            raise self.fail("GET /server_info failed")
        return json.loads(body)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
