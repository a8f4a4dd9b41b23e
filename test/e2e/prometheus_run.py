"""A real Prometheus for the end-to-end tests: Debian 12's package, unpacked by
``scripts/ensure_venv.sh --server`` under the venvs folder. ``scraping`` starts it on
127.0.0.1 with a one-second scrape and rule interval, the repository's alert rules
loaded, and stops it at the end; ``Prometheus.query`` asks its HTTP API as Grafana
does."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

from harness import free_port, stop

VERSION = "2.42.0"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(REPO, "examples", "monitoring", "sglang-pd-lean.rules.yml")
DASHBOARD = os.path.join(
    REPO, "examples", "monitoring", "grafana", "sglang-pd-lean.json"
)


def binary(name: str) -> str:
    """``prometheus`` or ``promtool`` from the unpacked package; fails, saying how
    to install it, where it is missing."""
    venvs = os.environ.get(
        "SGLANG_PD_LEAN_VENVS", os.path.expanduser("~/.cache/sglang-pd-lean")
    )
    path = os.path.join(venvs, f"prometheus-{VERSION}", "usr", "bin", name)
    assert os.path.exists(path), (
        f"{path} is missing: scripts/ensure_venv.sh VERSION --server unpacks "
        f"Debian's Prometheus package there"
    )
    return path


@dataclass
class Prometheus:
    url: str
    log_path: str

    def get(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's result: [{"metric": {...}, "value": [t, "v"]}]."""
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return data["result"]

    def wait_for(self, expr: str, ready, timeout: float = 90.0) -> list[dict]:
        """``query(expr)`` once ``ready(result)`` holds; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if ready(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{expr} never got ready: {result}\nPrometheus log: {self.log_path}"
                )
            time.sleep(0.5)


@contextlib.contextmanager
def scraping(urls: list[str], workdir: str):
    """A Prometheus scraping ``urls`` (``http://host:port``: SGLang's ``/metrics``)
    every second, evaluating the repository's alert rules every second."""
    os.makedirs(workdir, exist_ok=True)
    config = os.path.join(workdir, "prometheus.yml")
    targets = [urllib.parse.urlsplit(url).netloc for url in urls]
    with open(config, "w") as out:  # JSON is YAML
        json.dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [RULES],
                "scrape_configs": [
                    {"job_name": "sglang", "static_configs": [{"targets": targets}]}
                ],
            },
            out,
        )
    port = free_port()
    command = [
        binary("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={os.path.join(workdir, 'data')}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    log_path = os.path.join(workdir, "prometheus.log")
    log = open(log_path, "w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    prometheus = Prometheus(f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"Prometheus exited: {log_path}"
            try:
                with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=2):
                    break
            except OSError:
                assert (
                    time.monotonic() < deadline
                ), f"Prometheus never ready: {log_path}"
                time.sleep(0.3)
        yield prometheus
    finally:
        stop(process)
        log.close()
