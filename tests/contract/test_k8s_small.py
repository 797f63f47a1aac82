"""deploy/k8s/overlays/small, rendered with `kubectl kustomize`: one replica of each service, its
requests fit a 4-CPU / 8 GiB cluster with room for the cluster's own pods, every pod's limits at
least its requests, node drains not blocked by a PodDisruptionBudget, and an Ingress for the
orchestrator's REST and gRPC ports."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

KUBECTL = shutil.which("kubectl")
SERVICES = ("mcts", "neural", "retrieval", "llm", "orchestrator")
CLUSTER_CPU, CLUSTER_MIB = 4.0, 8 * 1024
HEADROOM = 0.65
"""Share of the cluster the mesh's requests may take (the rest: kube-system, the ingress
controller, the nodes' reserved resources)."""


def _cpu(value) -> float:
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _mib(value: str) -> float:
    units = {"Mi": 1, "Gi": 1024}
    return float(value[:-2]) * units[value[-2:]]


@pytest.fixture(scope="module")
def small(repo_root) -> list[dict]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (.ci/run installs Debian's kubernetes-client)")
    built = subprocess.run([KUBECTL, "kustomize", str(repo_root / "deploy/k8s/overlays/small")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def _workloads(docs):
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def test_one_replica_each_and_requests_fit_a_small_cluster(small):
    cpu = memory = 0.0
    for workload in _workloads(small):
        replicas = workload["spec"].get("replicas", 1)
        assert replicas == 1, workload["metadata"]["name"]
        for container in workload["spec"]["template"]["spec"]["containers"]:
            requests, limits = container["resources"]["requests"], container["resources"]["limits"]
            cpu += _cpu(requests["cpu"])
            memory += _mib(requests["memory"])
            assert _cpu(limits["cpu"]) >= _cpu(requests["cpu"])
            assert _mib(limits["memory"]) >= _mib(requests["memory"])
    assert cpu <= HEADROOM * CLUSTER_CPU, cpu
    assert memory <= HEADROOM * CLUSTER_MIB, memory
    hpas = {d["metadata"]["name"]: d["spec"] for d in small
            if d["kind"] == "HorizontalPodAutoscaler"}
    assert set(hpas) == set(SERVICES)
    assert all(spec["minReplicas"] == 1 for spec in hpas.values())


def test_no_disruption_budget_blocks_a_drain(small):
    for budget in (d for d in small if d["kind"] == "PodDisruptionBudget"):
        assert "minAvailable" not in budget["spec"], budget["metadata"]["name"]
        assert budget["spec"]["maxUnavailable"] >= 1


def test_an_ingress_routes_rest_and_grpc_to_the_orchestrator(small):
    ports = set()
    for ingress in (d for d in small if d["kind"] == "Ingress"):
        assert ingress["metadata"]["namespace"] == "mcts-mesh"
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = path["backend"]["service"]
                assert service["name"] == "orchestrator"
                ports.add(service["port"]["name"])
        if ingress["metadata"]["annotations"].get(
                "nginx.ingress.kubernetes.io/backend-protocol") == "GRPC":
            assert ports >= {"grpc"}
    assert ports == {"grpc", "http"}
