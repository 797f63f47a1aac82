"""The image of deploy/Dockerfile, built with podman, brings the mesh up with podman-compose
(deploy/compose.yaml) and answers one solve through the published gRPC port.

Runs where podman can start a container and the base image can be had; otherwise it skips and the
reason says which step failed. On the project's machines podman needs `scripts/podman_setup.sh`
(ulimits podman may set, the hugetlb cgroup off the unified hierarchy, a Debian base image made
with debootstrap since no container registry is reachable); that script prints the variables to
export: MESH_BASE_IMAGE (the base image) and MESH_IMAGE_BUILD_OPTIONS (extra `podman build`
options, e.g. the local wheelhouse and CA bundle).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import time

import grpc
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

BASE_IMAGE = os.environ.get("MESH_BASE_IMAGE", "python:3.11-slim-bookworm")
BUILD_OPTIONS = shlex.split(os.environ.get("MESH_IMAGE_BUILD_OPTIONS", ""))
IMAGE = "mcts-mesh:0.1.0"


def _run(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kwargs)


def _last_line(run: subprocess.CompletedProcess) -> str:
    lines = (run.stderr or run.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {run.returncode}"


def _minimal_rootfs(folder) -> str:
    """A root file system holding /bin/true and the libraries it links, to try a container."""
    true = shutil.which("true")
    libraries = [line.split("=>")[-1].split("(")[0].strip()
                 for line in _run("ldd", true).stdout.splitlines() if "/" in line]
    for path in [true, *libraries]:
        target = folder / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return true


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed (.ci/run installs Debian's podman)")
    rootfs = tmp_path_factory.mktemp("rootfs")
    true = _minimal_rootfs(rootfs)
    tried = _run(podman, "run", "--rm", "--rootfs", str(rootfs), true)
    if tried.returncode != 0:
        pytest.skip(f"podman cannot start a container on this machine: {_last_line(tried)}")
    if _run(podman, "image", "exists", BASE_IMAGE).returncode != 0:
        pulled = _run(podman, "pull", BASE_IMAGE, timeout=600)
        if pulled.returncode != 0:
            pytest.skip(f"the base image {BASE_IMAGE} cannot be pulled: {_last_line(pulled)}")
    return podman


@pytest.mark.timeout(6000)  # its steps' own limits added up: pull, build, compose, solve, down
def test_image_builds_and_the_composed_mesh_solves(podman, repo_root):
    built = _run(podman, "build", "-f", "deploy/Dockerfile", "-t", IMAGE,
                 "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", *BUILD_OPTIONS, ".", cwd=repo_root,
                 timeout=3000)
    assert built.returncode == 0, built.stderr[-3000:]
    # Runs as uid 10001 with nothing but the run-time packages.
    whoami = _run(podman, "run", "--rm", "--read-only", "--entrypoint", "id", IMAGE, "-u")
    assert whoami.stdout.strip() == "10001"
    tools = _run(podman, "run", "--rm", "--entrypoint", "python", IMAGE, "-c",
                 "import importlib.util as u; print([m for m in ('pytest', 'ruff', 'grpc_tools')"
                 " if u.find_spec(m)])")
    assert tools.stdout.strip() == "[]", tools.stdout
    # Retrieval's int8 ONNX encoder is baked in where its settings look (no torch fallback).
    encoder = _run(podman, "run", "--rm", "--read-only", "--entrypoint", "python", IMAGE, "-c",
                   "from services.retrieval.settings import RetrievalSettings as S;"
                   "from services.retrieval.onnx_export import check_manifest;"
                   "check_manifest(S().onnx_path); print('ok')")
    assert encoder.stdout.strip() == "ok", encoder.stderr[-2000:]
    size = _run(podman, "image", "inspect", "--format", "{{.Size}}", IMAGE)
    print(f"image {IMAGE}: {int(size.stdout.strip()) / 1e9:.2f} GB")

    grpc_port = _free_port()
    env = {**os.environ, "MESH_GRPC_PORT": str(grpc_port), "MESH_REST_PORT": str(_free_port())}
    compose = ["podman-compose", "-f", "deploy/compose.yaml", "-p", f"mesh{grpc_port}"]
    # The five services (Jaeger's image may not be reachable; the services export to it when it is).
    up = _run(*compose, "up", "-d", "--no-build", "mcts", "neural", "retrieval", "llm",
              "orchestrator", cwd=repo_root, env=env, timeout=600)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        deadline = time.monotonic() + 600
        while True:
            try:
                with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                    reply = orchestrator_service_pb2_grpc.OrchestratorServiceStub(
                        channel).SolveProblem(pb.SolveProblemRequest(
                            connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                            simulations=2000), timeout=60)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(5)
        assert 1 <= reply.connect_four.column <= 7
        assert pb.AGENT_MCTS in reply.agents
    finally:
        _run(*compose, "down", "-v", cwd=repo_root, env=env, timeout=300)
