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
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from e2e_runs import FLEET
from harness import free_port, stop
from prometheus_run import DASHBOARD, scraping

from sglang_pd_lean.cli.check import NO_RECORD, list_workers

pytestmark = pytest.mark.e2e

CLI = os.path.join(os.path.dirname(sys.executable), "sglang-pd-lean")


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, "check", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def fleet(runs, device):
    """name -> URL of the three servers, up while the module's tests run, with
    SGLang's metrics on (the Prometheus tests below)."""
    with runs.fleet(tuple(FLEET), device, ("--enable-metrics",)) as servers:
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
        stop(process)
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


# --- The record on /metrics, scraped by a real Prometheus ----------------------------

# A Grafana template variable's query: label_values(SELECTOR, LABEL).
LABEL_VALUES = re.compile(r"label_values\((.*), (\w+)\)$")
# The plugin's own labels on its gauges (metrics.py); the others are SGLang's.
OURS = ("__name__", "gate", "state", "component")


def _server_info(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/server_info", timeout=30) as answer:
        return json.load(answer)


def _records(info: dict) -> list:
    """Each scheduler rank's ``pd_lean`` record in a server's own ``/server_info``
    (None where it has none)."""
    return [state.get("pd_lean") for state in info["internal_states"]]


def _rank(metric: dict) -> dict:
    return {key: value for key, value in metric.items() if key not in OURS}


def _instance(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def test_a_real_prometheus_scrape_gives_each_rank_its_record(fleet, tmp_path):
    """Prometheus scrapes SGLang's own ``/metrics`` of the whole fleet: each rank of
    a server with the plugin has one gauge per gate and per component, equal to its
    ``/server_info`` record and labelled as SGLang labels that rank's own gauges
    (``max_total_num_tokens``); the server without the plugin has none."""
    urls = list(fleet.values())
    with scraping(urls, str(tmp_path / "prometheus")) as prometheus:
        prometheus.wait_for('up{job="sglang"} == 1', lambda r: len(r) == len(urls))
        with_plugin = {_instance(fleet[name]) for name in ("prefill", "decode")}
        prometheus.wait_for(
            "count by (instance) (sglang_pd_lean_gate_state)",
            lambda r: {m["metric"]["instance"] for m in r} == with_plugin,
        )
        for name, url in fleet.items():
            instance = _instance(url)
            sglang = prometheus.query(
                f'{{__name__=~"sglang[:_]max_total_num_tokens", instance="{instance}"}}'
            )
            gates = prometheus.query(
                f'sglang_pd_lean_gate_state{{instance="{instance}"}}'
            )
            freed = prometheus.query(
                f'sglang_pd_lean_not_allocated_bytes{{instance="{instance}"}}'
            )
            records = _records(_server_info(url))
            if instance not in with_plugin:
                assert records == [None] * len(records) and gates == freed == [], name
                continue
            assert len(sglang) == len(records), (name, sglang)
            for rank, record in enumerate(records):
                labels = [
                    _rank(m["metric"])
                    for m in sglang
                    if m["metric"]["tp_rank"] == str(rank)
                ]
                mine = [m for m in gates if m["metric"]["tp_rank"] == str(rank)]
                assert {m["metric"]["gate"]: m["metric"]["state"] for m in mine} == (
                    record["gates"]
                ), name
                assert {m["value"][1] for m in mine} == {"1"}
                bytes_ = [m for m in freed if m["metric"]["tp_rank"] == str(rank)]
                measured = {
                    m["metric"]["component"]: int(float(m["value"][1])) for m in bytes_
                }
                assert measured == record["not_allocated_bytes"], name
                assert [_rank(m["metric"]) for m in mine + bytes_] == labels * len(
                    mine + bytes_
                ), name


def test_the_alert_and_the_dashboard_on_a_real_prometheus(fleet, tmp_path):
    """The repository's alert rule picks out the prefill server without the plugin
    and nothing else; every query of the Grafana dashboard runs, and its panels give
    the fleet's own figures."""
    urls = list(fleet.values())
    bare = _instance(fleet["prefill, allow-list without us"])
    lean = _instance(fleet["prefill"])
    info = _server_info(fleet["prefill"])
    record, model_name = _records(info)[0], info["served_model_name"]
    # The dashboard's variables: the prefill servers' model and addresses.
    expected_values = {"model_name": {model_name}, "instance": {lean, bare}}
    with scraping(urls, str(tmp_path / "prometheus")) as prometheus:
        prometheus.wait_for('up{job="sglang"} == 1', lambda r: len(r) == len(urls))
        prometheus.wait_for(
            "count by (instance) (sglang_pd_lean_gate_state)",
            lambda r: lean in {m["metric"]["instance"] for m in r},
        )
        alerts = prometheus.wait_for(
            'ALERTS{alertname="SGLangPrefillRankWithoutPdLean"}', lambda r: r != []
        )
        assert [
            (a["metric"]["instance"], a["metric"]["alertstate"]) for a in alerts
        ] == [(bare, "pending")]
        assert prometheus.query('ALERTS{alertname="SGLangPdLeanGateOff"}') == []

        dashboard = json.load(open(DASHBOARD))
        answers = {}
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$model_name", ".*")
                answers[(panel["title"], target["refId"])] = prometheus.query(
                    expr.replace("$instance", ".*")
                )
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            selector, label = LABEL_VALUES.match(variable["query"]["query"]).groups()
            found = prometheus.query(selector.replace("$model_name", ".*"))
            values = {m["metric"][label] for m in found}
            assert values == expected_values[label], variable["name"]

    def value(title: str, ref: str = "A") -> float:
        [answer] = answers[(title, ref)] or [{"value": [0, "0"]}]
        return float(answer["value"][1])

    assert value("Prefill ranks without the plugin") == 1
    assert value("Gates off on the prefill ranks") == 0
    assert value("Freed on the prefill ranks") == sum(
        record["not_allocated_bytes"].values()
    )
    states = answers[("Gate states per prefill rank", "A")]
    assert {(m["metric"]["gate"], m["metric"]["state"]) for m in states} == set(
        record["gates"].items()
    )
    assert {m["metric"]["instance"] for m in states} == {lean}
    by_component = answers[("Freed per prefill rank, by component", "A")]
    assert {m["metric"]["component"]: float(m["value"][1]) for m in by_component} == {
        component: float(b) for component, b in record["not_allocated_bytes"].items()
    }
    memory = "Memory per prefill rank: SGLang's own gauges beside what the plugin freed"
    for ref in "ABC":  # SGLang's own gauges: both prefill servers
        assert {m["metric"]["instance"] for m in answers[(memory, ref)]} == {lean, bare}
