"""The orchestrator's view of its dependencies' health, kept apart from its own readiness.

Every `interval_s` seconds each dependency (mcts, neural, retrieval, llm) is asked
`grpc.health.v1.Health/Check` for its service name with a `timeout_s` deadline, over the same
channel the agents use (every `STARTUP_RECHECK_S` while one is not SERVING in the first minute,
when the mesh's services start together). A Check with a deadline, not a Watch stream: a frozen
process (SIGSTOP) keeps its TCP connection open, so a stream would stay silent and look healthy.

States (the names of grpc.health.v1's ServingStatus):
- SERVING: it answered SERVING.
- NOT_SERVING: it answered anything else, or could not be reached (connection refused: nothing
  listens, UNAVAILABLE).
- UNKNOWN: not checked yet, or no answer within the deadline (frozen or overloaded) or another
  error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

SERVING = "SERVING"
NOT_SERVING = "NOT_SERVING"
UNKNOWN = "UNKNOWN"
STARTUP_RECHECK_S = 0.1
"""Seconds between rounds while a dependency is not SERVING yet, during `STARTUP_WINDOW_S`."""
STARTUP_WINDOW_S = 60.0
"""Seconds after the watcher starts during which a dependency not SERVING is re-checked every
`STARTUP_RECHECK_S` (then every `interval_s`, like the others)."""
TO_PROTO = {
    SERVING: health_pb2.HealthCheckResponse.SERVING,
    NOT_SERVING: health_pb2.HealthCheckResponse.NOT_SERVING,
    UNKNOWN: health_pb2.HealthCheckResponse.UNKNOWN,
}


@dataclass(frozen=True)
class Dependency:
    """A service the orchestrator calls: its word ("mcts"), its full proto service name
    ("mesh.mcts.v1.MctsService") and the channel to it."""

    name: str
    service: str
    channel: grpc.aio.Channel


@dataclass(frozen=True)
class DependencyState:
    """The last check of a dependency: `state` (SERVING, NOT_SERVING, UNKNOWN), `detail` (what the
    check saw, e.g. "no answer within 1.0 s"), `since` (time.monotonic() when it entered `state`)
    and `checked` (time.monotonic() of the last check; 0 before the first)."""

    name: str
    service: str
    state: str
    detail: str
    since: float
    checked: float

    def as_json(self, now: float) -> dict[str, object]:
        """The entry /ready shows: name, service, state, detail and seconds in that state."""
        return {"name": self.name, "service": self.service, "state": self.state,
                "detail": self.detail, "for_s": round(now - self.since, 1)}


OnChange = Callable[[str, int], Awaitable[None]]
"""Called with (service name, grpc.health.v1 ServingStatus) when a dependency changes state."""


class DependencyWatcher:
    """Checks every dependency's health periodically and keeps the last state of each.

    Args:
        dependencies: what to watch.
        interval_s: seconds between two rounds of checks.
        timeout_s: deadline of each Check, in seconds.
        on_change: told about every change of state (the orchestrator sets its own health service's
            status for the dependency's name), and about each dependency's first state.
    """

    def __init__(self, dependencies: list[Dependency], interval_s: float, timeout_s: float,
                 on_change: OnChange | None = None) -> None:
        self._dependencies = dependencies
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._on_change = on_change
        now = time.monotonic()
        self._states = {d.name: DependencyState(d.name, d.service, UNKNOWN, "not checked yet",
                                                now, 0.0) for d in dependencies}
        self._task: asyncio.Task[None] | None = None

    def states(self) -> list[DependencyState]:
        """The last state of each dependency, in the order given."""
        return [self._states[d.name] for d in self._dependencies]

    def report(self) -> list[dict[str, object]]:
        """`states()` as /ready shows them (see `DependencyState.as_json`)."""
        now = time.monotonic()
        return [state.as_json(now) for state in self.states()]

    async def check_all(self) -> None:
        """One round: checks every dependency at once and records the results."""
        results = await asyncio.gather(*(self._check(d) for d in self._dependencies))
        now = time.monotonic()
        for dependency, (state, detail) in zip(self._dependencies, results, strict=True):
            await self._record(dependency, state, detail, now)

    def start(self) -> None:
        """Starts the periodic checks (the first round right away)."""
        self._task = asyncio.create_task(self._loop(), name="dependency-watcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        started = time.monotonic()
        while True:
            await self.check_all()
            await asyncio.sleep(self._next_round_s(time.monotonic() - started))

    def _next_round_s(self, running_s: float) -> float:
        """Seconds to the next round: `interval_s`, or `STARTUP_RECHECK_S` while a dependency is
        not SERVING during the first `STARTUP_WINDOW_S` (a mesh whose services all start at
        once: each backend is seen within a tenth of a second of becoming ready)."""
        if running_s < STARTUP_WINDOW_S and any(state.state != SERVING
                                                 for state in self._states.values()):
            return min(self._interval_s, STARTUP_RECHECK_S)
        return self._interval_s

    async def _check(self, dependency: Dependency) -> tuple[str, str]:
        stub = health_pb2_grpc.HealthStub(dependency.channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=dependency.service),
                                     timeout=self._timeout_s)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                return NOT_SERVING, "unreachable (UNAVAILABLE)"
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return UNKNOWN, f"no answer within {self._timeout_s:.1f} s"
            return UNKNOWN, f"health check failed: {code.name}"
        if reply.status == health_pb2.HealthCheckResponse.SERVING:
            return SERVING, "answered SERVING"
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return NOT_SERVING, f"answered {name}"

    async def _record(self, dependency: Dependency, state: str, detail: str, now: float) -> None:
        previous = self._states[dependency.name]
        changed = state != previous.state or previous.checked == 0.0
        self._states[dependency.name] = DependencyState(
            dependency.name, dependency.service, state, detail,
            now if state != previous.state else previous.since, now)
        if not changed:
            return
        level = logging.INFO if state == SERVING else logging.WARNING
        log.log(level, "dependency %s: %s -> %s (%s)", dependency.name,
                previous.state if previous.checked else "unchecked", state, detail)
        if self._on_change is not None:
            await self._on_change(dependency.service, TO_PROTO[state])
