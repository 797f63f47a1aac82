"""Shared machinery of the fault-injection tests: real service processes on loopback, a steady
load that records every request's status and wall time, restarts by hand, and the supervision
probe.

Every test in tests/fault/ carries the `fault` marker (`pytest -m fault` selects them, `-m "not
fault"` leaves them out); the ones that need the launcher to restart crashed services also carry
`supervision` and skip, saying why, while the launcher has no `Supervisor`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.services import BY_NAME
from mcts_mesh import launcher
from mcts_mesh.launcher import Mesh, start_mesh

# Codes a caller may get when a service is down or frozen: anything else is not a clear failure.
DOWN_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
# A request may end this long after its deadline (loop scheduling on a busy 2-core machine)
# before it counts as hung.
DEADLINE_SLACK_S = 1.5


def launcher_supervises() -> bool:
    """Whether `mcts_mesh.launcher` can restart services that exit: the `Supervisor` that
    `mcts-mesh up` drives (health helper's supervision; absent before it is merged)."""
    return hasattr(launcher, "Supervisor")


needs_supervision = pytest.mark.skipif(
    not launcher_supervises(),
    reason="mcts_mesh.launcher has no Supervisor yet: nothing restarts a crashed service")


class Supervision:
    """The launcher's `Supervisor` stepped every 0.2 s in a thread, as `mcts-mesh up` does
    (restarts after a 0.5 s backoff); `stop()` ends it and re-raises what it raised."""

    def __init__(self, mesh: Mesh) -> None:
        self._supervisor = launcher.Supervisor(mesh, launcher.RestartPolicy(
            backoff_initial_s=0.5, backoff_max_s=2.0, max_restarts=10))
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="supervision", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(0.2):
                self._supervisor.step()
        except BaseException as error:  # noqa: BLE001 - re-raised in stop()
            self._error = error

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)
        if self._error is not None:
            raise self._error


def mesh_env(tmp: Path, **extra: str) -> dict[str, str]:
    """Environment of a test mesh: a private retrieval store and the offline LLM provider."""
    return {"RETRIEVAL_DATA_DIR": str(tmp / "retrieval"), "LLM_FALLBACK_ORDER": '["offline"]',
            **extra}


def start_test_mesh(tmp: Path, **extra: str) -> tuple[Mesh, Supervision | None]:
    """`start_mesh` on free ports, supervised when the launcher can supervise (the caller stops
    the supervision before the mesh)."""
    mesh = start_mesh(port_base=0, rest_port=0, env=mesh_env(tmp, **extra), log_dir=tmp / "logs",
                      ready_timeout_s=600)
    return mesh, (Supervision(mesh) if launcher_supervises() else None)


def spawn_service(name: str, env: dict[str, str], tmp: Path) -> tuple[subprocess.Popen, int]:
    """One service as `mcts-mesh serve NAME`, the launcher's way; returns it and its gRPC port
    once it is listening and ready (it writes the port file after SERVING)."""
    port_file = tmp / f"{name}-{time.monotonic_ns()}.json"
    log = tmp / f"{name}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "serve", name, "--port-file", str(port_file)],
            env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{name} exited with {process.returncode}: {tail}")
        if port_file.exists() and port_file.stat().st_size:
            return process, int(json.loads(port_file.read_text())["grpc"])
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{name} was not ready in 600 s; log {log}")


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def restart_by_hand(mesh: Mesh, name: str, old_env: dict[str, str], tmp: Path) -> None:
    """Starts `name` again on the port it had, with the environment it had (what a supervisor
    does), and puts the new process in `mesh.processes`."""
    env = dict(old_env)
    env[f"{BY_NAME[name].env_prefix}PORT"] = str(mesh.ports[name])
    process, port = spawn_service(name, env, tmp)
    assert port == mesh.ports[name]
    mesh.processes[name] = process


def process_env(pid: int) -> dict[str, str]:
    """The environment a running process was started with (read before killing it)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(): value.decode(errors="replace") for key, value in pairs}


def serving(port: int, timeout_s: float = 1.0) -> bool:
    """Whether the gRPC health service on `port` answers SERVING now."""
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class Outcome:
    """One request of a load: when it started and ended (monotonic s), its deadline (s) and
    how it ended (`code` None for success)."""

    started: float
    ended: float
    deadline_s: float
    code: grpc.StatusCode | None
    details: str = ""

    @property
    def latency_s(self) -> float:
        return self.ended - self.started


@dataclass
class Load:
    """A steady load: `workers` concurrent callers, each sending `call()` back to back with
    `pause_s` between requests, until `stop()`."""

    call: Callable[[float], Awaitable[object]]
    deadline_s: float
    workers: int = 2
    pause_s: float = 0.02
    outcomes: list[Outcome] = field(default_factory=list)
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _running: bool = False

    def start(self) -> None:
        self._running = True
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]

    async def stop(self) -> None:
        self._running = False
        await asyncio.gather(*self._tasks)

    async def _worker(self) -> None:
        while self._running:
            started = time.monotonic()
            try:
                await self.call(self.deadline_s)
                outcome = Outcome(started, time.monotonic(), self.deadline_s, None)
            except grpc.aio.AioRpcError as error:
                outcome = Outcome(started, time.monotonic(), self.deadline_s, error.code(),
                                  error.details() or "")
            self.outcomes.append(outcome)
            await asyncio.sleep(self.pause_s)

    def since(self, moment: float) -> list[Outcome]:
        return [o for o in self.outcomes if o.started >= moment]


def assert_no_hang(outcomes: list[Outcome]) -> None:
    """No request outlived its deadline (plus scheduling slack)."""
    hung = [o for o in outcomes if o.latency_s > o.deadline_s + DEADLINE_SLACK_S]
    assert not hung, (f"{len(hung)} requests outlived their {hung[0].deadline_s} s deadline: "
                      f"{[round(o.latency_s, 2) for o in hung[:5]]}")


def assert_clear_failures(outcomes: list[Outcome], allowed=DOWN_CODES) -> None:
    """Every failed request got an allowed status code with a message."""
    unclear = [(o.code, o.details) for o in outcomes
               if o.code is not None and (o.code not in allowed or not o.details.strip())]
    assert not unclear, f"failures without a clear status: {unclear[:5]}"


async def wait_for_full_success(call: Callable[[float], Awaitable[object]], deadline_s: float,
                                needed: int = 10, within_s: float = 120.0) -> float:
    """Sends requests one after another until `needed` succeed in a row; returns the seconds
    that took. Fails the test when that does not happen within `within_s`."""
    started = time.monotonic()
    streak = 0
    last_error = ""
    while streak < needed:
        if time.monotonic() - started > within_s:
            pytest.fail(f"no {needed} successes in a row within {within_s} s; last: {last_error}")
        try:
            await call(deadline_s)
            streak += 1
        except grpc.aio.AioRpcError as error:
            streak = 0
            last_error = f"{error.code().name}: {error.details()}"
            await asyncio.sleep(0.2)
    return time.monotonic() - started
