"""What the blocking and the asyncio clients share: the methods and which of them are retried,
the retry policy (tenacity), the call metadata carrying the API key, and requests built from a
message or keyword fields."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from google.protobuf.message import Message
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orchestrator_grpc
from mesh.orchestrator.v1 import run_service_pb2_grpc as run_grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from mcts_mesh.client.errors import MeshRpcError, UnavailableError

DEFAULT_TARGET = "127.0.0.1:50051"
"""The orchestrator's gRPC address when `mcts-mesh up` runs on its default ports."""
DEFAULT_TIMEOUT_S = 120.0
"""Deadline of a call whose caller gives none, seconds (retries included)."""

ORCHESTRATOR = "OrchestratorService"
RUNS = "RunService"
STUBS = {ORCHESTRATOR: orchestrator_grpc.OrchestratorServiceStub, RUNS: run_grpc.RunServiceStub}
"""Each service's generated stub class."""

IDEMPOTENT = frozenset({
    "SolveProblem", "AnswerQuery", "IngestDocuments", "GetDocument", "ListDocuments",
    "CreateRun", "CreateBatch", "GetRun", "ListRuns", "GetBatch", "ListBatches",
})
"""Methods retried on UNAVAILABLE: those that change nothing (SolveProblem, AnswerQuery and the
reads), IngestDocuments (a repeat converges to the same versions), and CreateRun / CreateBatch,
which the client sends with a request_id (AIP-155) so a repeat returns what the first created.
Deletes, cancels and streams are never repeated by the client."""

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class RetryPolicy:
    """How an idempotent call is repeated after UNAVAILABLE: at most `attempts` tries in all,
    waiting an exponential, jittered backoff from `initial_backoff_s` up to `max_backoff_s`, or
    the server's RetryInfo delay when longer, and never past the call's deadline. `attempts` 1
    turns retries off."""

    attempts: int = 4
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts is {self.attempts}; must be >= 1")
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError("backoffs must satisfy 0 <= initial_backoff_s <= max_backoff_s")

    def _options(self, deadline: float) -> dict[str, Any]:
        backoff = wait_exponential_jitter(multiplier=self.initial_backoff_s,
                                          jitter=self.initial_backoff_s, max=self.max_backoff_s)

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            asked = error.retry_delay if isinstance(error, MeshRpcError) else None
            return max(backoff(state), asked or 0.0)

        def past_deadline(state: RetryCallState) -> bool:
            return time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline

        return {"retry": retry_if_exception_type(UnavailableError), "wait": wait,
                "stop": stop_after_attempt(self.attempts) | past_deadline, "reraise": True}

    def retrying(self, deadline: float) -> Retrying:
        """A tenacity `Retrying` for one call whose deadline is `deadline` (time.monotonic)."""
        return Retrying(**self._options(deadline))

    def async_retrying(self, deadline: float) -> AsyncRetrying:
        """`retrying` for coroutines."""
        return AsyncRetrying(**self._options(deadline))


def call_metadata(api_key: str | None, scheme: Literal["x-api-key", "bearer"]
                  ) -> tuple[tuple[str, str], ...]:
    """The metadata that carries `api_key`: `x-api-key: KEY`, or `authorization: Bearer KEY`
    (the orchestrator reads either); none without a key.

    Raises:
        ValueError: `scheme` is neither.
    """
    if scheme not in ("x-api-key", "bearer"):
        raise ValueError(f"scheme is {scheme!r}; must be 'x-api-key' or 'bearer'")
    if not api_key:
        return ()
    if scheme == "bearer":
        return (("authorization", f"Bearer {api_key}"),)
    return (("x-api-key", api_key),)


def build(kind: type[M], request: M | None, fields: dict[str, Any]) -> M:
    """`request` as is, or a `kind` made from keyword `fields` (nested messages as dicts).

    Raises:
        TypeError: both or a request of another type.
        ValueError: a field `kind` does not have (protobuf's own error).
    """
    if request is None:
        return kind(**fields)
    if fields:
        raise TypeError("pass a request message or keyword fields, not both")
    if not isinstance(request, kind):
        raise TypeError(f"request is a {type(request).__name__}; expected {kind.__name__}")
    return request


def with_request_id(request: M) -> M:
    """A copy of a CreateRun/CreateBatch request with a fresh UUID4 `request_id` when it has
    none, so that a retried create returns the run (batch) the first try created."""
    if request.request_id:
        return request
    copy = type(request)()
    copy.CopyFrom(request)
    copy.request_id = str(uuid.uuid4())
    return copy


def deadline_of(timeout: float | None, default: float) -> tuple[float, float]:
    """(timeout, its time.monotonic() deadline) of a call; `timeout` None means `default`.

    Raises:
        ValueError: a timeout that is not > 0.
    """
    timeout = default if timeout is None else timeout
    if not timeout > 0:
        raise ValueError(f"timeout is {timeout}; must be > 0 seconds")
    return timeout, time.monotonic() + timeout

