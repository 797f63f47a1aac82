"""The Kubernetes base (deploy/k8s/base), rendered with `kubectl kustomize` and run with
`podman kube play` on the image of deploy/Dockerfile, solves a Connect Four position and answers
an ingested query through the orchestrator's published port, with API keys on.

The manifests are the repository's; a kustomize overlay in a temporary folder changes only what a
test machine differs in: one replica each, Redis's image built here from Debian's redis-server, and
(no Qdrant image being obtainable without a registry) retrieval on its embedded store. What
podman 4.3's `kube play` cannot do is stated in UNPLAYABLE (kinds it skips) and done by the test:
- Services: each played pod joins the test's podman network under the names of the Services that
  select it (aardvark-dns answers them), as a cluster's DNS would;
- Secrets: created as podman secrets in the shapes podman reads (an env `secretKeyRef` reads a JSON
  object of base64 values; a secret volume writes a Secret's `data` values undecoded), as the
  operator's `kubectl create secret` does on a cluster.
podman publishes every containerPort on the host, so the test skips if one of them is taken.
The training kustomization's self-play actors are played too (its learner Job is not): each starts
with its pod's name as its actor id.

Runs where podman can start a container and the image `localhost/mcts-mesh:0.1.0` exists (built by
tests/e2e/test_image.py); otherwise it skips saying why. On the project's machines podman needs
`eval "$(bash scripts/podman_setup.sh)"` first (as .ci/run does).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

IMAGE = "localhost/mcts-mesh:0.1.0"
REDIS_IMAGE = "localhost/mesh-redis:bookworm"
BASE_IMAGE = os.environ.get("MESH_BASE_IMAGE", "python:3.11-slim-bookworm")
SERVICES = ("mcts", "neural", "retrieval", "llm", "orchestrator")
# podman 4.3's kube play plays Pods, Deployments, PersistentVolumeClaims and ConfigMaps; it skips
# every other kind. What each skipped kind means for the mesh:
UNPLAYABLE = {
    "Namespace": "every pod runs in podman's one namespace",
    "Service": "no Service addresses: the test names each pod after its Services on its network",
    "StatefulSet": "Qdrant does not run: retrieval uses its embedded store",
    "Job": "the training learner does not run (start it with `mcts-mesh train` instead)",
    "HorizontalPodAutoscaler": "one replica, no autoscaling",
    "PodDisruptionBudget": "no disruptions to budget",
    "NetworkPolicy": "no ingress rules: every pod reaches every other",
}
PLAYABLE = {"Deployment", "PersistentVolumeClaim", "ConfigMap"}
QDRANT_REASON = ("kube play does not play Qdrant's StatefulSet (nor can its image be had without "
                 "a registry): retrieval runs on its embedded store (RETRIEVAL_QDRANT_URL removed)")


def _run(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kwargs)


def _last_line(run: subprocess.CompletedProcess) -> str:
    lines = (run.stderr or run.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {run.returncode}"


def _render(path: Path) -> list[dict]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs Debian's kubernetes-client)")
    rendered = _run("kubectl", "kustomize", str(path))
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def _pod_template_images(doc: dict) -> set[str]:
    spec = doc["spec"]["template"]["spec"]
    return {c["image"] for c in spec.get("initContainers", []) + spec["containers"]}


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed (.ci/run installs Debian's podman)")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (.ci/run installs Debian's kubernetes-client)")
    if _run(podman, "image", "exists", IMAGE).returncode != 0:
        pytest.skip(f"no image {IMAGE}: tests/e2e/test_image.py builds it")
    tried = _run(podman, "run", "--rm", "--read-only", "--entrypoint", "true", IMAGE)
    if tried.returncode != 0:
        pytest.skip(f"podman cannot start a container on this machine: {_last_line(tried)}")
    if _run(podman, "image", "exists", REDIS_IMAGE).returncode != 0:
        built = _run(podman, "build", "-t", REDIS_IMAGE, "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
                     "-f", "-", str(tmp_path_factory.mktemp("redis")), input=(
                         "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN apt-get update && apt-get "
                         "install -y --no-install-recommends redis-server redis-tools && "
                         "rm -rf /var/lib/apt/lists/*\n"), timeout=600)
        if built.returncode != 0:
            pytest.skip(f"Redis's image (Debian's redis-server on {BASE_IMAGE}) cannot be built: "
                        f"{_last_line(built)}")
    return podman


def test_what_kube_play_cannot_run_is_stated(repo_root):
    """Every kind the base and the training kustomization render is played or has its reason."""
    for folder in ("deploy/k8s/base", "deploy/k8s/training"):
        kinds = {doc["kind"] for doc in _render(repo_root / folder)}
        assert kinds - PLAYABLE <= set(UNPLAYABLE), (folder, kinds - PLAYABLE - set(UNPLAYABLE))
    # The training run's learner is a Job: under kube play only its actors and volume would run.
    training = {doc["kind"] for doc in _render(repo_root / "deploy/k8s/training")}
    assert "Job" in training


def _overlay(folder: Path, repo_root: Path) -> Path:
    """A kustomization over the base with what a test machine differs in (module docstring)."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(repo_root / "deploy/k8s/base", folder)],
        "images": [{"name": "docker.io/library/redis", "newName": REDIS_IMAGE.split(":")[0],
                    "newTag": REDIS_IMAGE.split(":")[1]}],
        "replicas": [{"name": name, "count": 1} for name in SERVICES],
        # QDRANT_REASON: retrieval's store in its own writable /tmp instead of Qdrant's server.
        "patches": [{"patch": yaml.safe_dump({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "retrieval"},
            "spec": {"template": {"spec": {"containers": [{"name": "retrieval", "env": [
                {"name": "RETRIEVAL_QDRANT_URL", "$patch": "delete"},
                {"name": "RETRIEVAL_QDRANT_API_KEY", "$patch": "delete"},
                {"name": "RETRIEVAL_DATA_DIR", "value": "/tmp/retrieval"}]}]}}}})}],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _create_secrets(podman: str, folder: Path, repo_root: Path) -> tuple[list[str], str]:
    """The Secrets of deploy/k8s/README.md as podman secrets; returns their names and the API key.

    podman 4.3 reads an env `secretKeyRef` from a JSON object of base64 values, and writes a secret
    volume's `data` values as they are (undecoded): the key file goes in as text."""
    keys_file = folder / "keys.json"
    created = _run(str(repo_root / ".venv/bin/mcts-mesh"), "keys", "--file", str(keys_file),
                   "create", "kube-play", "--scope", "solve", "--scope", "query",
                   "--scope", "ingest", cwd=repo_root)
    assert created.returncode == 0, created.stderr
    password = secrets.token_urlsafe(24)
    values = {
        "mesh-token": {"token": _b64(secrets.token_urlsafe(32))},
        "redis-auth": {"password": _b64(password),
                       "url": _b64(f"redis://:{password}@redis:6379/0")},
        "orchestrator-api-keys": {"apiVersion": "v1", "kind": "Secret",
                                  "metadata": {"name": "orchestrator-api-keys"},
                                  "data": {"keys.json": keys_file.read_text()}},
    }
    for name, value in values.items():
        _run(podman, "secret", "rm", name)  # a previous run's, if it was killed
        path = folder / f"{name}.json"
        path.write_text(json.dumps(value))
        made = _run(podman, "secret", "create", name, str(path))
        assert made.returncode == 0, made.stderr
    return list(values), created.stdout.strip()


def _published_ports(docs: list[dict]) -> set[int]:
    return {port["containerPort"] for doc in docs if doc["kind"] == "Deployment"
            for container in doc["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])}


def _taken(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _name_pods_after_services(podman: str, network: str, docs: list[dict],
                              played: list[dict]) -> None:
    """Each played pod (`<deployment>-pod-0`) joins `network` again, under the names of the
    Services whose selector matches its labels (what a cluster's DNS gives a Service)."""
    services = [doc for doc in docs if doc["kind"] == "Service"]
    for deployment in played:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        names = [service["metadata"]["name"] for service in services
                 if service["spec"].get("selector", {}).items() <= labels.items()]
        pod = f"{deployment['metadata']['name']}-pod-0"
        infra = _run(podman, "pod", "inspect", pod, "--format", "{{.InfraContainerID}}")
        assert infra.returncode == 0, infra.stderr
        infra_id = infra.stdout.strip()
        for step in (["disconnect", network, infra_id],
                     ["connect", *[f"--alias={name}" for name in names], network, infra_id]):
            done = _run(podman, "network", *step)
            assert done.returncode == 0, done.stderr


def _until(deadline: float, attempt):
    """`attempt()`'s result once it returns without a gRPC error, polling until `deadline`."""
    while True:
        try:
            return attempt()
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def _playable(podman: str, docs: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """The Deployments and volume claims kube play can run here, and what is left out and why."""
    played, left_out = [], {}
    for doc in docs:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] not in PLAYABLE:
            left_out[name] = UNPLAYABLE[doc["kind"]]
        elif doc["kind"] == "Deployment" and (missing := sorted(
                image for image in _pod_template_images(doc)
                if _run(podman, "image", "exists", image).returncode != 0)):
            left_out[name] = f"no local image {', '.join(missing)} (no registry to pull from)"
        elif doc["kind"] != "ConfigMap":  # only Prometheus's, which is not played
            played.append(doc)
    return played, left_out


def _call(stub_method, request, key: str, timeout: float = 120):
    return stub_method(request, metadata=[("x-api-key", key)], timeout=timeout)


@pytest.mark.timeout(900)  # play (a minute), readiness (mcts's kernels), the calls, teardown
def test_the_base_runs_under_kube_play_and_answers(podman, repo_root, tmp_path):
    docs = _render(_overlay(tmp_path, repo_root))
    played, left_out = _playable(podman, docs)
    print("left out:", json.dumps(left_out, indent=1), "\nretrieval:", QDRANT_REASON)
    assert {f"Deployment/{name}" for name in SERVICES} <= {
        f"Deployment/{doc['metadata']['name']}" for doc in played}
    if taken := sorted(port for port in _published_ports(played) if _taken(port)):
        pytest.skip(f"host ports {taken} are in use (kube play publishes every containerPort)")
    manifest = tmp_path / "played.yaml"
    manifest.write_text(yaml.safe_dump_all(played))
    network = f"mesh-kube-play-{os.getpid()}"
    pods = [f"{doc['metadata']['name']}-pod-0" for doc in played if doc["kind"] == "Deployment"]
    names = []
    try:
        names, key = _create_secrets(podman, tmp_path, repo_root)
        made = _run(podman, "network", "create", network)
        assert made.returncode == 0, made.stderr
        play = _run(podman, "kube", "play", "--start=false", f"--network={network}",
                    str(manifest), timeout=600)
        assert play.returncode == 0, play.stderr[-3000:]
        _name_pods_after_services(podman, network, docs, played)
        for pod in pods:
            started = _run(podman, "pod", "start", pod)
            assert started.returncode == 0, started.stderr
        _solve_and_answer(key)
    finally:
        _run(podman, "kube", "down", str(manifest), timeout=300)
        for pod in pods:
            _run(podman, "pod", "rm", "--force", pod, timeout=300)
        _run(podman, "network", "rm", "--force", network)
        for name in names:  # a secret volume leaves a podman volume of the secret's name
            _run(podman, "secret", "rm", name)
            _run(podman, "volume", "rm", "--force", name)


def _solve_and_answer(key: str) -> None:
    deadline = time.monotonic() + 480
    with grpc.insecure_channel("127.0.0.1:50051") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = _until(deadline, lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5))
        while status.status != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "the orchestrator never became SERVING"
            time.sleep(2)
            status = _until(deadline, lambda: health.Check(health_pb2.HealthCheckRequest(),
                                                           timeout=5))
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        solve = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                                       simulations=2000)
        with pytest.raises(grpc.RpcError) as refused:  # API keys are on
            stub.SolveProblem(solve, timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = _until(deadline, lambda: _call(stub.SolveProblem, solve, key))
        assert 1 <= reply.connect_four.column <= 7
        assert pb.AGENT_MCTS in reply.agents
        # The orchestrator serves before the retrieval pod does (its readiness does not follow
        # its dependencies'): an ingest waits for retrieval, as the solve waited for mcts.
        ingest = pb.IngestDocumentsRequest(collection="kube", documents=[
            common_pb2.Document(id="heart", title="Hearts", source="test",
                                text="The human heart has four chambers that pump blood."),
            common_pb2.Document(id="moon", title="The Moon", source="test",
                                text="The Moon orbits the Earth about every 27 days.")])
        _until(deadline, lambda: _call(stub.IngestDocuments, ingest, key))
        answer = _call(stub.AnswerQuery, pb.AnswerQueryRequest(
            query="How many chambers does the human heart have?", collection="kube"), key)
    assert answer.sources[0].document_id == "heart"
    assert "four chambers" in answer.answer


@pytest.mark.timeout(600)  # play, the actor's start, teardown
def test_the_training_actors_run_under_kube_play_named_after_their_pod(podman, repo_root,
                                                                       tmp_path):
    """The training kustomization's self-play actors (its learner Job is not played: UNPLAYABLE)
    start on the image with their manifest as written: the actor id is the pod's host name (no
    `$(POD_NAME)`, which kube play leaves unexpanded), and the actor waits for the learner's run
    directory on the claimed volume."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(repo_root / "deploy/k8s/training", tmp_path)],
        "replicas": [{"name": "selfplay-actor", "count": 1}]}
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    played, left_out = _playable(podman, _render(tmp_path))
    assert left_out == {"Job/connect4-az-learner": UNPLAYABLE["Job"]}
    manifest = tmp_path / "played.yaml"
    manifest.write_text(yaml.safe_dump_all(played))
    container = "selfplay-actor-pod-0-actor"
    try:
        play = _run(podman, "kube", "play", str(manifest), timeout=300)
        assert play.returncode == 0, play.stderr[-3000:]
        hostname = _run(podman, "inspect", "--format", "{{.Config.Hostname}}", container)
        assert hostname.returncode == 0, hostname.stderr
        wanted = f"selfplay-actor {hostname.stdout.strip()}: run directory /runs/connect4-az"
        deadline = time.monotonic() + 240
        logs = _run(podman, "logs", container)
        while wanted not in logs.stdout + logs.stderr:
            assert time.monotonic() < deadline, f"no {wanted!r} in {logs.stdout + logs.stderr}"
            time.sleep(1)
            logs = _run(podman, "logs", container)
        state = _run(podman, "inspect", "--format", "{{.State.Status}}", container)
        assert state.stdout.strip() == "running", "the actor waits for the learner"
    finally:
        _run(podman, "kube", "down", str(manifest), timeout=300)
        _run(podman, "volume", "rm", "--force", "connect4-az-run")
