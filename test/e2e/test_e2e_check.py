"""``sglang-pd-lean check`` on a real fleet: the prefill server with the plugin,
one with the plugin left out of ``SGLANG_PLUGINS`` and a decode server, all up at
once (``e2e_runs.FLEET``), plus a URL where nothing listens; and the same fleet
behind SGLang's real routers from PyPI (smg 1.13.0, sglang-router 0.3.2), found
with ``check --router``. The real CLI runs in
its own process, as an operator runs it; its prediction resolves each server's own
``/server_info`` arguments with the installed SGLang and sizes them at the budget
the plugin recorded there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest
from e2e_runs import FLEET
from harness import free_port

from sglang_pd_lean.cli.check import NO_RECORD, list_workers

pytestmark = pytest.mark.e2e

CLI = os.path.join(os.path.dirname(sys.executable), "sglang-pd-lean")


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, "check", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def fleet(runs, device):
    """name -> URL of the three servers, up while the module's tests run."""
    with runs.fleet(tuple(FLEET), device) as servers:
        yield {name: server.url for name, server in servers.items()}


def test_check_over_the_fleet_and_a_dead_url(fleet, runs, device):
    dead = f"http://127.0.0.1:{free_port()}"
    urls = [fleet[name] for name in FLEET] + [dead]
    gpu = ["--gpu", "local"] if device == "cuda" else []
    done = run_check("--json", "--config", runs.model_dir, *gpu, *urls)
    assert not done.stderr.strip() or "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    assert done.returncode == 2 == result["exit_code"], done.stderr[-3000:]
    by_url = {server["url"]: server for server in result["servers"]}
    assert list(by_url) == urls

    # The URL where nothing listens: one entry, and every other server checked.
    assert by_url[dead]["ok"] is False
    assert "Connection refused" in by_url[dead]["error"]

    # The prefill server with the plugin: active on every rank, nothing to flag,
    # and the report on its own arguments gives every figure it measured.
    lean = by_url[fleet["prefill"]]
    assert lean["role"] == "prefill" and lean["prefill_target"] is True
    assert lean["problems"] == []
    assert {rank["plugin"] for rank in lean["ranks"]} == {"active"}
    assert_prediction_agrees(lean, must=("mamba slots", "KV tokens"))
    assert lean["prediction"]["advice"]

    # The prefill server without the plugin: flagged, with the reason.
    bare = by_url[fleet["prefill, allow-list without us"]]
    assert bare["prefill_target"] is True
    assert bare["problems"] == [f"rank {r['rank']}: {NO_RECORD}" for r in bare["ranks"]]
    assert {rank["plugin"] for rank in bare["ranks"]} == {"absent"}

    # The decode server: listed, never counted, and predicted exactly.
    decode = by_url[fleet["decode"]]
    assert decode["role"] == "decode" and decode["prefill_target"] is False
    assert decode["problems"] == []
    assert_prediction_agrees(decode, must=("mamba slots", "KV tokens"))

    # Without the dead URL, the server without the plugin alone sets the exit code.
    again = run_check("--no-predict", *urls[:-1])
    assert again.returncode == 1, again.stdout + again.stderr
    flagged = [line for line in again.stdout.splitlines() if ": rank " in line]
    assert flagged == [f"{bare['url']}: rank 0: {NO_RECORD}"], again.stdout
    assert again.stdout.splitlines()[-1].startswith("exit 1: 1 prefill server(s)")


def assert_prediction_agrees(server: dict, must: tuple[str, ...]) -> None:
    """Every figure the report predicts equals the server's own, and ``must`` and
    the bytes not allocated are among those compared."""
    figures = server["prediction"]["figures"]
    compared = {f["name"]: f for f in figures if f["agrees"] is not None}
    assert {"bytes not allocated", *must} <= set(compared), figures
    wrong = [f for f in figures if f["agrees"] is False]
    assert wrong == [], f"{server['url']}: prediction differs: {wrong}"
    measured = sum(server["ranks"][0]["not_allocated_bytes"].values())
    assert compared["bytes not allocated"]["measured"] == measured


# SGLang's routers from PyPI, each in its own venv (scripts/ensure_venv.sh --server):
# name -> the command that starts it, before its flags.
ROUTERS = {
    "smg-1.13.0": ["bin/smg", "launch"],
    "sglang-router-0.3.2": ["bin/python", "-m", "sglang_router.launch_router"],
}


@contextlib.contextmanager
def router_in_front(name: str, prefill: list[str], decode: list[str], workdir):
    """The router ``name`` on 127.0.0.1 in PD mode in front of the servers, probing
    their ``/health`` (on a CPU, SGLang's answers without a generation:
    ``harness``); yields its URL once it lists them all, healthy; stops it at the
    end."""
    venvs = os.environ.get(
        "SGLANG_PD_LEAN_VENVS", os.path.expanduser("~/.cache/sglang-pd-lean")
    )
    venv = os.path.join(venvs, "routers", name)
    command = [os.path.join(venv, ROUTERS[name][0]), *ROUTERS[name][1:]]
    assert os.path.exists(command[0]), (
        f"{command[0]} is missing: scripts/ensure_venv.sh VERSION --server installs "
        f"SGLang's routers"
    )
    port = free_port()
    command += [
        "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
        "--pd-disaggregation",
        *[arg for url in prefill for arg in ("--prefill", url)],
        *[arg for url in decode for arg in ("--decode", url)],
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log = open(os.path.join(workdir, f"router-{name}.log"), "w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, f"{name} exited: {workdir}/router-{name}.log"
            listed = _listed(url)
            if listed == {*prefill, *decode}:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"{name} never listed the fleet: {listed}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _listed(router: str) -> set[str]:
    """The healthy workers' URLs ``router`` lists now (check's own reading)."""
    listing = list_workers(router, timeout=5, key=None)
    return {w.url for w in listing.workers if w.healthy}


@pytest.mark.parametrize("name", list(ROUTERS))
def test_check_through_a_real_router_gives_the_urls_rows(fleet, name, tmp_path):
    """The real router in front of the fleet: ``check --router`` asks the workers it
    lists and gives the same servers and exit code as ``check URL...``."""
    prefill = [fleet["prefill"], fleet["prefill, allow-list without us"]]
    decode = [fleet["decode"]]
    direct = run_check("--no-predict", "--json", *prefill, *decode)
    with router_in_front(name, prefill, decode, tmp_path) as router:
        routed = run_check("--no-predict", "--json", "--router", router)
        text = run_check("--no-predict", "--router", router)
    assert routed.returncode == direct.returncode == 1, routed.stdout + routed.stderr
    result, expected = json.loads(routed.stdout), json.loads(direct.stdout)
    by_url = {server["url"]: server for server in result["servers"]}
    assert by_url == {server["url"]: server for server in expected["servers"]}
    [listing] = result["routers"]
    assert listing["endpoint"] == "/workers" and listing["error"] is None
    roles = {w["url"]: (w["role"], w["healthy"]) for w in listing["workers"]}
    assert roles == {
        **{url: ("prefill", True) for url in prefill},
        **{url: ("decode", True) for url in decode},
    }
    assert "2 prefill (2 healthy), 1 decode (1 healthy)" in text.stdout
