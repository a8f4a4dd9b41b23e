"""examples/monitoring/ on the installed release, without a Prometheus: the Grafana
dashboard's JSON loads; every metric name it and the alert rules query is the
plugin's own (``metrics.py``) or one the installed SGLang's scheduler collector
creates (read from its source). With the real Prometheus and ``promtool``:
test/e2e/test_e2e_check.py and test/e2e/test_e2e_monitoring_files.py."""

from __future__ import annotations

import inspect
import json
import pathlib
import re

import yaml
from helpers import sglang_minor

from sglang_pd_lean import metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]
MONITORING = ROOT / "examples" / "monitoring"
# SGLang's gauges, matched in either spelling: {__name__=~"sglang[:_]NAME", ...}
SGLANG_NAME = re.compile(r'__name__=~"sglang\[:_\](\w+)"')
OURS = re.compile(rf"\b({metrics.PREFIX}\w+)")
# SGLang's memory gauges arrived in 0.5.17; 0.5.16 has max_total_num_tokens only.
SINCE_17 = {
    "weight_memory_usage_gb",
    "kv_cache_memory_usage_gb",
    "graph_memory_usage_gb",
}


def dashboard() -> dict:
    return json.loads((MONITORING / "grafana" / "sglang-pd-lean.json").read_text())


def dashboard_queries() -> list[str]:
    board = dashboard()
    queries = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    queries += [
        v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"
    ]
    return queries


def rule_queries() -> list[str]:
    rules = yaml.safe_load((MONITORING / "sglang-pd-lean.rules.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def sglang_gauges() -> set[str]:
    """The ``sglang:`` names the installed SGLang's scheduler collector creates."""
    from sglang.srt.observability import metrics_collector

    source = inspect.getsource(metrics_collector.SchedulerMetricsCollector)
    return set(re.findall(r'name="sglang:(\w+)"', source))


def test_the_dashboard_loads_with_unique_panels_and_every_panel_queries():
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    titles = [panel["title"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids) and len(set(titles)) == len(titles)
    assert all(panel["targets"] for panel in board["panels"])
    assert {v["name"] for v in board["templating"]["list"]} == {
        "datasource",
        "model_name",
        "instance",
    }


def test_every_name_queried_exists_on_this_release():
    ours = {metrics.NOT_ALLOCATED, metrics.GATE_STATE}
    theirs = sglang_gauges()
    for queries, where in (
        (dashboard_queries(), "dashboard"),
        (rule_queries(), "rules"),
    ):
        named = {name for query in queries for name in OURS.findall(query)}
        assert named and named <= ours, (where, named - ours)
        wanted = {name for query in queries for name in SGLANG_NAME.findall(query)}
        assert wanted, where
        if sglang_minor() < 17:
            wanted -= SINCE_17
        assert wanted <= theirs, (where, wanted - theirs)
        # Every SGLang name in either spelling, never one alone.
        bare = re.findall(r"\bsglang[:_](?!pd_lean_)\w+", " ".join(queries))
        spelled = {f"sglang_{name}" for name in wanted} | {
            f"sglang:{name}" for name in wanted
        }
        assert not set(bare) & spelled, (where, bare)


def test_the_alert_rules_join_on_the_labels_sglang_gives_its_scheduler_gauges():
    """The rank labels the rules join on are the ones SGLang puts on its scheduler
    gauges (``init_new``'s labels), plus the scrape's instance."""
    from sglang.srt.observability import metrics_collector

    source = inspect.getsource(metrics_collector.SchedulerMetricsCollector.init_new)
    sglang = set(re.findall(r'"(\w+)":', source)) | set(
        re.findall(r'labels\["(\w+)"\]', source)
    )
    for query in rule_queries():
        for joined in re.findall(r"(?:by|on) \(([^)]*)\)", query):
            labels = {label.strip() for label in joined.split(",")}
            assert labels - {"instance"} <= sglang, labels - sglang
