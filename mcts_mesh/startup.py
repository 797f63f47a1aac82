"""Waiting for the services of a mesh that `mcts_mesh.launcher` started: each one's port file
(written once it is SERVING, or with its start-up error), then the orchestrator's view of its
backends (its health service reports each under the backend's service name)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.channels import channel_options
from libs.services import BACKENDS, ORCHESTRATOR


class Mesh(Protocol):
    """What these waits read and fill of `mcts_mesh.launcher.Mesh` (which imports this module)."""

    ports: dict[str, int]
    metrics_ports: dict[str, int]
    rest_port: int
    processes: dict[str, subprocess.Popen]
    logs: dict[str, Path]

    @property
    def target(self) -> str: ...

    def port_file(self, name: str) -> Path: ...


class LaunchError(RuntimeError):
    """A service exited or did not become ready in time; the message names it and says why (its
    own one-line start-up error, e.g. "mcts: cannot bind 127.0.0.1:50052: address already in use",
    or the tail of its log)."""


def read_port_file(path: Path) -> dict | None:
    """The ports a service wrote once SERVING, or {"error": ...} if its start-up failed; None
    while it has written nothing."""
    if path.exists() and path.stat().st_size > 0:
        return json.loads(path.read_text())
    return None


def exit_reason(name: str, process: subprocess.Popen, port_file: Path, log: Path) -> str:
    """Why a service that exited during start-up did: its own one-line error when it wrote one,
    else its exit code and the tail of its log."""
    info = read_port_file(port_file)
    if info and "error" in info:
        return str(info["error"])
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    return f"{name} exited with code {process.returncode}; log {log}:\n{tail}"


def wait_for_port_file(name: str, path: Path, process: subprocess.Popen, log: Path,
                        timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LaunchError(exit_reason(name, process, path, log))
        info = read_port_file(path)
        if info is not None:
            if "error" in info:  # it wrote its error and is exiting
                process.wait()
                raise LaunchError(str(info["error"]))
            return info
        time.sleep(0.1)
    raise LaunchError(f"{name} was not ready after {timeout_s:.0f} s; log {log}")


def wait_until_ready(mesh: Mesh, names: list[str], ready_timeout_s: float) -> None:
    """Waits for each service's port file and records its ports in `mesh`.

    Raises:
        LaunchError: one exited or was not ready within `ready_timeout_s`.
    """
    for name in names:
        info = wait_for_port_file(name, mesh.port_file(name), mesh.processes[name],
                                   mesh.logs[name], ready_timeout_s)
        mesh.ports[name] = int(info["grpc"])
        if "metrics" in info:
            mesh.metrics_ports[name] = int(info["metrics"])
        if name == ORCHESTRATOR:
            mesh.rest_port = int(info.get("rest", 0))


def backends_not_seen(stub: health_pb2_grpc.HealthStub) -> dict[str, str]:
    """The backends the orchestrator does not report SERVING yet, with what it reports."""
    unseen = {}
    for backend in BACKENDS:
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=backend.grpc_service),
                               timeout=1.0)
        except grpc.RpcError as error:
            unseen[backend.name] = f"health check failed: {error.code().name}"
            continue
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            unseen[backend.name] = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return unseen


def wait_until_backends_seen(mesh: Mesh, deadline: float) -> None:
    """Waits (until `deadline`, time.monotonic()) for the orchestrator's health service to report
    every backend SERVING under the backend's service name: then a call through the orchestrator
    reaches all of them, which is what a caller of `start_mesh` is promised.

    Raises:
        LaunchError: a service exited, or the orchestrator did not see every backend in time.
    """
    with grpc.insecure_channel(mesh.target, options=channel_options()) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while unseen := backends_not_seen(stub):
            for name, process in mesh.processes.items():
                if process.poll() is not None:
                    raise LaunchError(exit_reason(name, process, mesh.port_file(name),
                                                   mesh.logs[name]))
            if time.monotonic() > deadline:
                raise LaunchError("the orchestrator does not see "
                                  + ", ".join(f"{name} ({state})" for name, state in unseen.items())
                                  + f"; logs in {mesh.logs[ORCHESTRATOR].parent}")
            time.sleep(0.02)
