"""Starts the mesh on one machine: the five services as child processes on loopback.

Each service runs its own entry point (`mcts-mesh serve <service>`), exactly as a Kubernetes
Deployment would; the launcher only chooses ports, passes settings through the services'
environment variables (the same names compose and k8s use), and waits until each reports SERVING.
Port base 0 gives every service a free port (tests): the launcher picks concrete free ports up
front, so that a restarted service comes back on the same port and the orchestrator's targets stay
valid.

The mesh authenticates its own hops: `start_mesh` generates a mesh token per run
(`secrets.token_urlsafe`) and gives it to every service (`<PREFIX>MESH_TOKEN`); the backends refuse
calls without it, the orchestrator and mcts present it (`libs.mesh_auth`). `Mesh.token` holds it for
callers that talk to a backend directly.

The services end when their launcher ends, however it ends (kill -9 included): each one follows
its launcher (`follow_launcher`, run first thing in `mcts-mesh serve`) through a pipe whose write
end only the launcher holds (its EOF means the launcher is gone: the service stops as on SIGTERM),
and on Linux also through the kernel's parent-death signal (prctl PR_SET_PDEATHSIG, SIGTERM), set
when the service was started from the launcher's main thread (the signal follows the thread that
forked, not the process).

`Supervisor` keeps a started mesh running: a service that exits is restarted on the same port and
with the same settings after an exponential backoff, up to a limit of restarts in a row (a service
that stayed up `stable_s` seconds starts a fresh count); the others keep serving meanwhile.
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from libs.services import BACKENDS, BY_NAME, NAMES, ORCHESTRATOR
from mcts_mesh.startup import (
    LaunchError as LaunchError,  # raised by start_mesh; callers import it from here
)
from mcts_mesh.startup import (
    read_port_file,
    wait_until_backends_seen,
    wait_until_ready,
)

log = logging.getLogger(__name__)

METRICS_PORT_OFFSET = 10
"""Metrics ports follow the gRPC ports 10 higher: orchestrator 50061, mcts 50062, ... 50065."""
DEFAULT_PORT_BASE = 50051
DEFAULT_REST_PORT = 8080
LIFELINE_ENV = "MCTS_MESH_LIFELINE"
"""Names, in a service's environment, the read end of the pipe from its launcher (`Mesh.launch`):
"FD:DEVICE:INODE", so that a process started later with a copy of that environment (a test that
restarts a service by hand) does not take some other file of its own for the pipe."""
LAUNCHER_PID_ENV = "MCTS_MESH_LAUNCHER_PID"
"""The launcher's pid, set when the service may use the parent-death signal (`follow_launcher`)."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class Mesh:
    """The running mesh: gRPC ports per service, the REST port, and the child processes.

    `envs` holds each service's environment and `run_dir` its port files, so that `launch(name)`
    can start a service again exactly as it was started; `command` is what runs a service (the
    service's name and `--port-file PATH` follow it)."""

    ports: dict[str, int] = field(default_factory=dict)
    rest_port: int = 0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """Each service's Prometheus port (`http://127.0.0.1:PORT/metrics`)."""
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    run_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mcts-mesh-run-")))
    command: list[str] = field(
        default_factory=lambda: [sys.executable, "-m", "mcts_mesh.cli", "serve"])
    token: str | None = None
    """The mesh token of this run (`start_mesh` generates it), sent as `x-mesh-token`
    (`libs.mesh_auth.token_metadata`) by anything that calls a backend directly."""
    _lifeline: tuple[int, int] | None = field(default=None, repr=False)

    def port_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.json"

    @property
    def token_file(self) -> Path:
        """Where `start_mesh` wrote the mesh token (readable by this user only)."""
        return self.run_dir / "mesh-token"

    def _lifeline_read_end(self) -> int:
        """The read end of the pipe every service watches; only this process holds the write
        end (not inheritable), so the services read EOF once it is gone, however it ended."""
        if self._lifeline is None:
            self._lifeline = os.pipe()
        return self._lifeline[0]

    def launch(self, name: str, append_log: bool = False) -> subprocess.Popen:
        """Starts service `name` (`mcts-mesh serve name`) with its environment; its output goes to
        its log (appended on a restart). Does not wait for it. The service follows this process
        (`follow_launcher`): it stops when this process ends."""
        port_file = self.port_file(name)
        port_file.unlink(missing_ok=True)
        lifeline = self._lifeline_read_end()
        pipe = os.fstat(lifeline)
        env = {**self.envs[name], LIFELINE_ENV: f"{lifeline}:{pipe.st_dev}:{pipe.st_ino}"}
        if threading.current_thread() is threading.main_thread():
            env[LAUNCHER_PID_ENV] = str(os.getpid())
        with self.logs[name].open("ab" if append_log else "wb") as log_handle:
            process = subprocess.Popen(
                [*self.command, name, "--port-file", str(port_file)],
                env=env, stdout=log_handle, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(lifeline,),
            )
        self.processes[name] = process
        return process

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
        if self._lifeline is not None:
            for fd in self._lifeline:
                os.close(fd)
            self._lifeline = None


def _set_parent_death_signal(sig: signal.Signals) -> bool:
    """Asks Linux to send `sig` to this process when the thread that forked it ends
    (prctl PR_SET_PDEATHSIG); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_lifeline(fd: int) -> None:
    try:
        while os.read(fd, 64):  # the launcher never writes: this returns b"" once it is gone
            pass
    except OSError:
        pass
    log.warning("the launcher is gone; stopping")
    os.kill(os.getpid(), signal.SIGTERM)


def _lifeline_fd(value: str) -> int | None:
    """The pipe's fd that `value` ("FD:DEVICE:INODE") names, if this process has it open."""
    try:
        fd, device, inode = (int(part) for part in value.split(":"))
        opened = os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd if (opened.st_dev, opened.st_ino) == (device, inode) else None


def follow_launcher(environ: dict[str, str] | None = None) -> None:
    """Makes this service stop (SIGTERM: its graceful drain) when the `mcts-mesh up` that started
    it ends, however it ends; does nothing for a service started otherwise. Called first thing in
    `mcts-mesh serve`, before any thread starts.

    - Everywhere: a daemon thread reads the lifeline pipe (`LIFELINE_ENV`) and sends SIGTERM
      to this process at its EOF. Nothing is followed unless that pipe is open here.
    - Linux, started from the launcher's main thread (`LAUNCHER_PID_ENV`): the parent-death
      signal too; a launcher already gone by then (this process was re-parented) is SIGTERM at
      once.
    The variables are removed from `environ` (this process's environment by default), so that
    processes this service starts do not follow the launcher by mistake.
    """
    environ = os.environ if environ is None else environ
    launcher_pid = environ.pop(LAUNCHER_PID_ENV, None)
    fd = _lifeline_fd(environ.pop(LIFELINE_ENV, ""))
    if fd is None:
        return  # not started by a launcher (or not by this one): nothing to follow
    os.set_inheritable(fd, False)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # even if the launcher's was ignored
    if launcher_pid and _set_parent_death_signal(signal.SIGTERM) \
            and os.getppid() != int(launcher_pid):
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=_watch_lifeline, args=(fd,), name="launcher-lifeline",
                     daemon=True).start()


def reserve_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free on `host` now (the kernel's choice for port 0), so that each
    service gets a concrete port it keeps across restarts."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True)
class _LaunchPlan:
    """What `start_mesh` gives each service: its ports, the run's token, the shared settings."""

    base_env: dict[str, str]
    token: str
    ports: dict[str, int]
    metrics_ports: dict[str, int]
    rest_port: int | None
    metrics: bool
    log_format: str | None

    @classmethod
    def of(cls, port_base: int, rest_port: int | None, base_env: dict[str, str], token: str,
           metrics: bool, log_format: str | None) -> _LaunchPlan:
        """The registry's offsets from `port_base` (libs.services), or concrete free ports when
        it is 0 (the REST port too when `rest_port` is 0)."""
        if port_base:
            ports = {name: port_base + BY_NAME[name].port_offset for name in NAMES}
            metrics_ports = {name: port + METRICS_PORT_OFFSET for name, port in ports.items()}
        else:
            free = reserve_ports(2 * len(NAMES) + 1)
            ports = dict(zip(NAMES, free[:len(NAMES)], strict=True))
            metrics_ports = dict(zip(NAMES, free[len(NAMES):-1], strict=True))
            if rest_port == 0:
                rest_port = free[-1]
        return cls(base_env, token, ports, metrics_ports, rest_port, metrics, log_format)

    def env(self, name: str) -> dict[str, str]:
        """Service `name`'s environment: its port, the token, its metrics port and log format,
        and for the orchestrator every backend's address and the REST port."""
        prefix = BY_NAME[name].env_prefix
        child_env = dict(self.base_env)
        child_env[f"{prefix}PORT"] = str(self.ports[name])
        child_env[f"{prefix}MESH_TOKEN"] = self.token
        if name == "mcts":
            child_env["MCTS_NEURAL_TARGET"] = f"127.0.0.1:{self.ports['neural']}"
        if self.metrics:
            child_env[f"{prefix}METRICS_PORT"] = str(self.metrics_ports[name])
        if self.log_format is not None:
            child_env[f"{prefix}LOG_FORMAT"] = self.log_format
        if name == ORCHESTRATOR:  # ORCHESTRATOR_MCTS_TARGET, ..., ORCHESTRATOR_LLM_TARGET
            for backend in BACKENDS:
                child_env[f"{prefix}{backend.env_prefix}TARGET"] = \
                    f"127.0.0.1:{self.ports[backend.name]}"
            child_env[f"{prefix}REST_PORT"] = "-1" if self.rest_port is None \
                else str(self.rest_port)
        return child_env


def start_mesh(port_base: int = DEFAULT_PORT_BASE, rest_port: int | None = DEFAULT_REST_PORT,
               env: dict[str, str] | None = None, log_dir: Path | None = None,
               ready_timeout_s: float = 300.0, metrics: bool = True,
               log_format: str | None = None) -> Mesh:
    """Starts all five services at once and returns once each reports SERVING and the orchestrator
    reports every backend SERVING (a call through it reaches them all), with a new mesh token
    (`Mesh.token`) that every service gets as its `<PREFIX>MESH_TOKEN`.

    Args:
        port_base: the orchestrator's gRPC port; the others follow (+1..+4). 0 picks free ports
            (concrete ones, chosen here, kept across restarts).
        rest_port: the REST front's port (0 picks a free one); None leaves the REST front off.
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
    mesh = Mesh(token=secrets.token_urlsafe(32))
    # For a person who calls a backend directly (grpcurl -H "x-mesh-token: $(cat FILE)").
    descriptor = os.open(mesh.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(mesh.token)
    plan = _LaunchPlan.of(port_base, rest_port, {**os.environ, **(env or {})}, mesh.token,
                          metrics, log_format)
    try:
        # All five at once: the orchestrator does not wait for its backends (it reports each one
        # NOT_SERVING until it answers), so the mesh is up as soon as the slowest service is.
        for name in NAMES:
            mesh.envs[name] = plan.env(name)
            mesh.logs[name] = log_dir / f"{name}.log"
            mesh.launch(name)
        deadline = time.monotonic() + ready_timeout_s
        wait_until_ready(mesh, list(NAMES), ready_timeout_s)
        wait_until_backends_seen(mesh, deadline)
    except BaseException:
        mesh.stop()
        raise
    return mesh


@dataclass(frozen=True)
class RestartPolicy:
    """How `Supervisor` restarts a service that exits.

    Attributes:
        max_restarts: restarts in a row at most per service; one more exit stops the mesh.
        backoff_initial_s: seconds before the first restart; each restart in a row doubles it.
        backoff_max_s: the longest wait before a restart, in seconds.
        stable_s: a service that stays up this many seconds starts a fresh count (and backoff).
        ready_timeout_s: seconds a restarted service gets to report SERVING before it is killed
            and counted as a failed restart.
    """

    max_restarts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    stable_s: float = 60.0
    ready_timeout_s: float = 300.0

    def backoff_s(self, restart: int) -> float:
        """Seconds before restart number `restart` (1 = the first in a row)."""
        return min(self.backoff_initial_s * 2 ** (restart - 1), self.backoff_max_s)


@dataclass
class _Watch:
    started_at: float
    restarts: int = 0
    due: float | None = None
    """When the pending restart starts (time.monotonic()); None when none is pending."""
    starting: bool = False
    """Restarted and not yet SERVING."""


class GaveUp(RuntimeError):
    """A service exited more times in a row than the policy allows; the message says which, how
    often and why it last exited."""


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


class Supervisor:
    """Restarts the services of `mesh` that exit, following `policy`. Call `step()` often (every
    0.1-0.5 s); it never blocks. The mesh stays up as long as no service exceeds its restarts.

    Each exit and restart is logged (logger `mcts_mesh.launcher`) and counted in `restarts`.
    """

    def __init__(self, mesh: Mesh, policy: RestartPolicy | None = None) -> None:
        self.mesh = mesh
        self.policy = policy or RestartPolicy()
        now = time.monotonic()
        self._watches = {name: _Watch(started_at=now) for name in mesh.processes}
        self.restarts: dict[str, int] = {name: 0 for name in mesh.processes}
        """Restarts made so far per service (in all, not in a row)."""

    def step(self) -> None:
        """Looks at every service once: restarts those whose backoff has passed, notes those that
        came back SERVING, schedules a restart for those that exited.

        Raises:
            GaveUp: a service exited after `policy.max_restarts` restarts in a row.
        """
        now = time.monotonic()
        for name, watch in self._watches.items():
            self._step(name, watch, now)

    def _step(self, name: str, watch: _Watch, now: float) -> None:
        mesh = self.mesh
        if watch.due is not None:
            if now >= watch.due:
                watch.due = None
                watch.starting = True
                watch.started_at = now
                self.restarts[name] += 1
                log.warning("restarting %s (restart %d in a row, %d in all) on port %s", name,
                            watch.restarts, self.restarts[name], mesh.ports.get(name, "?"))
                mesh.launch(name, append_log=True)
            return
        process = mesh.processes[name]
        code = process.poll()
        if watch.starting:
            if code is None:
                info = read_port_file(mesh.port_file(name))
                if info is not None and "error" not in info:
                    watch.starting = False
                    log.warning("%s is back: SERVING on port %s after %.1f s", name,
                                info.get("grpc"), now - watch.started_at)
                    return
                if now - watch.started_at < self.policy.ready_timeout_s:
                    return
                log.warning("%s was not ready %.0f s after its restart; killing it", name,
                            self.policy.ready_timeout_s)
                process.kill()
                code = process.wait()
            info = read_port_file(mesh.port_file(name))
            reason = (str(info["error"]) if info and "error" in info else
                      f"{name} exited with {_exit_description(code)} while starting; log "
                      f"{mesh.logs[name]}")
            watch.starting = False
        elif code is None:
            return
        else:
            reason = f"{name} exited with {_exit_description(code)}; log {mesh.logs[name]}"
        self._schedule(name, watch, now, reason)

    def _schedule(self, name: str, watch: _Watch, now: float, reason: str) -> None:
        if now - watch.started_at >= self.policy.stable_s:
            watch.restarts = 0
        if watch.restarts >= self.policy.max_restarts:
            raise GaveUp(f"{name} exited {watch.restarts + 1} times in a row; giving up after "
                         f"{watch.restarts} restarts. Last: {reason}")
        watch.restarts += 1
        delay = self.policy.backoff_s(watch.restarts)
        watch.due = now + delay
        log.warning("%s; restarting it in %.1f s (restart %d of at most %d in a row)",
                    reason, delay, watch.restarts, self.policy.max_restarts)
