"""Monitoring as code: the alert rules and the scrape config pass promtool (check and the rules'
unit tests), and every metric an alert or a Grafana dashboard queries is one the mesh declares:
a dashboard only the metrics of its own service (services/<service>/metrics.py) and the shared
ones every server exports (libs/metrics.py, libs/health_metrics.py)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

SERVICES = ("mcts", "neural", "retrieval", "llm", "orchestrator")
GRPC_SERVICE = {"mcts": "mesh.mcts.v1.MctsService", "neural": "mesh.neural.v1.NeuralService",
                "retrieval": "mesh.retrieval.v1.RetrievalService",
                "llm": "mesh.llm.v1.LlmService",
                "orchestrator": "mesh.orchestrator.v1.OrchestratorService"}
PROMQL_WORDS = {"sum", "rate", "irate", "increase", "histogram_quantile", "max", "min", "avg",
                "count", "by", "without", "and", "or", "unless", "bool", "on", "ignoring"}
PROMTOOL = shutil.which("promtool")


def _series(module) -> set[str]:
    """The series names a module's instruments export (counter: _total; histogram: _bucket,
    _sum, _count; gauge: the name)."""
    names = set()
    for value in vars(module).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                names |= {"counter": {family.name + "_total"},
                          "histogram": {family.name + s for s in ("_bucket", "_sum", "_count")},
                          }.get(family.type, {family.name})
    return names


def _families(names: set[str]) -> set[str]:
    return {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in names}


def _shared() -> set[str]:
    names = _series(importlib.import_module("libs.metrics"))
    return names | {importlib.import_module("libs.health_metrics").NAME}


def _declared(service: str) -> set[str]:
    return _series(importlib.import_module(f"services.{service}.metrics"))


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text))
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"e\d*", w)}


def _prometheus_dir(repo_root):
    return repo_root / "deploy" / "k8s" / "base" / "prometheus"


def _dashboards(repo_root) -> dict[str, dict]:
    folder = repo_root / "deploy" / "grafana" / "dashboards"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def test_metric_name_parser():
    assert metric_names('histogram_quantile(0.99, sum by (le, x) (rate(a_bucket{y="b"}[5m])))') \
        == {"a_bucket"}
    assert metric_names("sum(rate(a_total[5m])) / sum(rate(b_total[5m])) > 0.05") == \
        {"a_total", "b_total"}


def test_one_dashboard_per_service_querying_only_its_declared_metrics(repo_root):
    dashboards = _dashboards(repo_root)
    assert set(dashboards) == set(SERVICES)
    shared = _shared()
    for service, dashboard in dashboards.items():
        own = _declared(service)
        used = set()
        for panel in dashboard["panels"]:
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                names = metric_names(target["expr"])
                assert names, target["expr"]
                unknown = names - own - shared
                assert not unknown, f"{service} / {panel['title']}: undeclared {sorted(unknown)}"
                for value in re.findall(r'grpc_service="([^"]+)"', target["expr"]):
                    assert value == GRPC_SERVICE[service], target["expr"]
                for value in re.findall(r'mesh_service="([^"]+)"', target["expr"]):
                    assert value == service, target["expr"]
                used |= names
        # Every metric the service declares has a panel, and the shared RPC metrics are shown.
        assert _families(own) <= _families(used), sorted(_families(own) - _families(used))
        assert {"grpc_server_handled_total", "grpc_server_handling_seconds_bucket",
                "mesh_health_serving"} <= used
        assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_alert_rules_query_declared_metrics_and_cover_the_promised_alerts(repo_root):
    rules = yaml.safe_load((_prometheus_dir(repo_root) / "alerts.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert {"MeshHighErrorRate", "MeshHighLatencyP99", "MeshCircuitBreakerOpen",
            "MeshServiceNotServing", "MeshRateLimitRejections"} <= set(alerts)
    declared = _shared() | {"up"}
    for service in SERVICES:
        declared |= _declared(service)
    for name, rule in alerts.items():
        unknown = metric_names(rule["expr"]) - declared
        assert not unknown, f"{name}: undeclared {sorted(unknown)}"


def test_scrape_config_covers_every_service_and_its_metrics_port(repo_root):
    config = yaml.safe_load((_prometheus_dir(repo_root) / "prometheus.yml").read_text())
    # One DNS-SD entry per service, each with its own metrics port (one port per pod).
    ports = {n.split(".")[0]: sd["port"]
             for sd in config["scrape_configs"][0]["dns_sd_configs"] for n in sd["names"]}
    k8s = {s.replace("_", "-") for s in SERVICES}
    assert set(ports) == {f"{s}-metrics" for s in k8s}
    assert len(set(ports.values())) == len(ports), ports
    docs = [d for p in (repo_root / "deploy" / "k8s" / "base").glob("*.yaml")
            for d in yaml.safe_load_all(p.read_text()) if d]
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for name in k8s:
        headless = services[f"{name}-metrics"]["spec"]
        assert headless["clusterIP"] == "None"
        assert [p["port"] for p in headless["ports"]] == [ports[f"{name}-metrics"]]
        env = {e["name"]: e.get("value") for e in
               deployments[name]["spec"]["template"]["spec"]["containers"][0]["env"]}
        port = str(ports[f"{name}-metrics"])
        assert [v for k, v in env.items() if k.endswith("_METRICS_PORT")] == [port]


@pytest.fixture
def promtool():
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (.ci/run installs Debian's prometheus)")
    return PROMTOOL


def test_promtool_checks_the_rules_their_tests_and_the_config(promtool, repo_root, tmp_path):
    folder = _prometheus_dir(repo_root)
    for command in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        run = subprocess.run([promtool, *command], cwd=folder, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
    # The config names the rules where the container mounts them; check it against this copy.
    config = (folder / "prometheus.yml").read_text().replace(
        "/etc/prometheus/alerts.yml", str(folder / "alerts.yml"))
    (tmp_path / "prometheus.yml").write_text(config)
    run = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
