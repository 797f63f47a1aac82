"""Starts the mesh on one machine: the five services as child processes on loopback.

Each service runs its own entry point (`mcts-mesh serve <service>`), exactly as a Kubernetes
Deployment would; the launcher only chooses ports, passes settings through the services'
environment variables (the same names compose and k8s use), and waits until each reports SERVING.
Port base 0 gives every service a free port (tests).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Start order: the orchestrator needs the others' addresses.
SERVICES = ("mcts", "neural", "retrieval", "llm_gateway", "orchestrator")
ENV_PREFIX = {
    "mcts": "MCTS_",
    "neural": "NEURAL_",
    "retrieval": "RETRIEVAL_",
    "llm_gateway": "LLM_",
    "orchestrator": "ORCHESTRATOR_",
}
# Offsets from the port base: orchestrator 50051, mcts 50052, neural 50053, retrieval 50054,
# llm_gateway 50055.
PORT_OFFSET = {"orchestrator": 0, "mcts": 1, "neural": 2, "retrieval": 3, "llm_gateway": 4}
METRICS_PORT_OFFSET = 10
"""Metrics ports follow the gRPC ports 10 higher: orchestrator 50061, mcts 50062, ... 50065."""
DEFAULT_PORT_BASE = 50051
DEFAULT_REST_PORT = 8080


class LaunchError(RuntimeError):
    """A service exited or did not become ready in time; the message names it and its log."""


@dataclass
class Mesh:
    """The running mesh: gRPC ports per service, the REST port, and the child processes."""

    ports: dict[str, int] = field(default_factory=dict)
    rest_port: int = 0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """Each service's Prometheus port (`http://127.0.0.1:PORT/metrics`)."""

    @property
    def target(self) -> str:
        """The orchestrator's gRPC address."""
        return f"127.0.0.1:{self.ports['orchestrator']}"

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM to every service (graceful drain), SIGKILL after `timeout_s`."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for_port_file(name: str, path: Path, process: subprocess.Popen, log: Path,
                        timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise LaunchError(f"{name} exited with code {process.returncode}; log {log}:\n{tail}")
        if path.exists() and path.stat().st_size > 0:
            return json.loads(path.read_text())
        time.sleep(0.1)
    raise LaunchError(f"{name} was not ready after {timeout_s:.0f} s; log {log}")


def _free_port() -> int:
    """A TCP port free on loopback now (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_mesh(port_base: int = DEFAULT_PORT_BASE, rest_port: int | None = DEFAULT_REST_PORT,
               env: dict[str, str] | None = None, log_dir: Path | None = None,
               ready_timeout_s: float = 300.0, metrics: bool = True,
               log_format: str | None = None) -> Mesh:
    """Starts all five services and returns once each reports SERVING.

    Args:
        port_base: the orchestrator's gRPC port; the others follow (+1..+4). 0 picks free ports.
        rest_port: the REST front's port (0 picks one); None leaves the REST front off.
        env: extra environment for every service (settings such as RETRIEVAL_DATA_DIR).
        log_dir: where each service's log goes; a temporary folder by default.
        ready_timeout_s: seconds each service gets to become ready (models load, kernels compile).
        metrics: give every service a metrics port (gRPC port + 10; free ports with port base 0).
        log_format: "json" or "text" for every service's log (their `*_LOG_FORMAT`); None keeps
            the services' setting.
    Raises:
        LaunchError: a service exited or was not ready in time (the mesh started so far is stopped).
    """
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="mcts-mesh-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="mcts-mesh-run-"))
    base_env = {**os.environ, **(env or {})}
    # mcts reaches neural for neural leaf evaluation (MCTS_NEURAL_TARGET), and starts beside it, so
    # neural's port is fixed before either starts (with port base 0, a free port picked here; it
    # stays the same if neural is started again).
    neural_port = port_base + PORT_OFFSET["neural"] if port_base else _free_port()
    mesh = Mesh()
    try:
        for name in SERVICES:
            prefix = ENV_PREFIX[name]
            child_env = dict(base_env)
            child_env[f"{prefix}PORT"] = str(port_base + PORT_OFFSET[name] if port_base else 0)
            if name == "neural":
                child_env["NEURAL_PORT"] = str(neural_port)
            if name == "mcts":
                child_env["MCTS_NEURAL_TARGET"] = f"127.0.0.1:{neural_port}"
            if metrics:
                child_env[f"{prefix}METRICS_PORT"] = str(
                    port_base + PORT_OFFSET[name] + METRICS_PORT_OFFSET if port_base else 0)
            if log_format is not None:
                child_env[f"{prefix}LOG_FORMAT"] = log_format
            if name == "orchestrator":
                child_env["ORCHESTRATOR_MCTS_TARGET"] = f"127.0.0.1:{mesh.ports['mcts']}"
                child_env["ORCHESTRATOR_NEURAL_TARGET"] = f"127.0.0.1:{mesh.ports['neural']}"
                child_env["ORCHESTRATOR_RETRIEVAL_TARGET"] = f"127.0.0.1:{mesh.ports['retrieval']}"
                child_env["ORCHESTRATOR_LLM_TARGET"] = f"127.0.0.1:{mesh.ports['llm_gateway']}"
                child_env["ORCHESTRATOR_REST_PORT"] = "-1" if rest_port is None else str(rest_port)
            port_file = run_dir / f"{name}.json"
            log = log_dir / f"{name}.log"
            with log.open("wb") as log_handle:
                process = subprocess.Popen(
                    [sys.executable, "-m", "mcts_mesh.cli", "serve", name,
                     "--port-file", str(port_file)],
                    env=child_env, stdout=log_handle, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            mesh.processes[name] = process
            mesh.logs[name] = log
            # Start the four backends together; wait for them before the orchestrator.
            if name == "llm_gateway" or name == "orchestrator":
                waiting = ["mcts", "neural", "retrieval", "llm_gateway"] if name == "llm_gateway" \
                    else ["orchestrator"]
                for waited in waiting:
                    info = _wait_for_port_file(waited, run_dir / f"{waited}.json",
                                               mesh.processes[waited], mesh.logs[waited],
                                               ready_timeout_s)
                    mesh.ports[waited] = int(info["grpc"])
                    if "metrics" in info:
                        mesh.metrics_ports[waited] = int(info["metrics"])
                    if waited == "orchestrator":
                        mesh.rest_port = int(info.get("rest", 0))
    except BaseException:
        mesh.stop()
        raise
    return mesh
