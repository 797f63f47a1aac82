"""`AsyncClient`: the orchestrator's public API (OrchestratorService and RunService) over a
grpc.aio channel, one coroutine (or async iterator) per RPC; as `mcts_mesh.client.sync.Client`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any, Literal

import grpc
from google.protobuf import empty_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orch
from mesh.orchestrator.v1 import run_service_pb2 as runs

from mcts_mesh.client._core import (
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT_S,
    IDEMPOTENT,
    ORCHESTRATOR,
    RUNS,
    STUBS,
    RetryPolicy,
    build,
    call_metadata,
    deadline_of,
    with_request_id,
)
from mcts_mesh.client.channel import client_options
from mcts_mesh.client.errors import DeadlineExceededError, error_from_rpc


class AsyncClient:
    """An asyncio client of the mesh's orchestrator (use it inside a running event loop;
    `async with AsyncClient(...) as client`).

    Every method takes its request message, or its fields as keywords (nested messages as dicts:
    `solve_problem(connect_four={"moves": "4453"})`), and a `timeout` in seconds (default: the
    client's `timeout`), which bounds the call and its retries together. Idempotent methods
    (`_core.IDEMPOTENT`) are repeated on UNAVAILABLE as `retry` says; CreateRun and CreateBatch
    get a request_id when they have none, so a repeat never creates twice.

    Every method raises a `mcts_mesh.client.errors.MeshRpcError` subclass when the call fails
    (`InvalidArgumentError` with `field_violations`, `ResourceExhaustedError` with `retry_delay`
    and `quota_violations`, ...), never a bare grpc.RpcError.

    Args:
        target: "host:port" of the orchestrator's gRPC port.
        api_key: the key sent with every call (none: an open mesh).
        key_scheme: how the key travels: "x-api-key" metadata or "bearer"
            (`authorization: Bearer KEY`).
        timeout: default deadline of a call, seconds.
        retry: the retry policy of idempotent calls (`RetryPolicy(attempts=1)`: none).
        credentials: TLS credentials (`grpc.ssl_channel_credentials()`); None: plaintext.
        options: extra gRPC channel arguments.
    """

    def __init__(self, target: str = DEFAULT_TARGET, *, api_key: str | None = None,
                 key_scheme: Literal["x-api-key", "bearer"] = "x-api-key",
                 timeout: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 credentials: grpc.ChannelCredentials | None = None,
                 options: list[tuple[str, Any]] | None = None) -> None:
        self._metadata = call_metadata(api_key, key_scheme)
        self._timeout = deadline_of(timeout, timeout)[0]
        self._retry = retry or RetryPolicy()
        self._channel = (grpc.aio.insecure_channel(target, options=client_options(options))
                         if credentials is None
                         else grpc.aio.secure_channel(target, credentials,
                                                      options=client_options(options)))
        self._stubs = {name: stub(self._channel) for name, stub in STUBS.items()}

    async def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _unary(self, service: str, method: str, request, timeout: float | None):
        """One unary call, repeated on UNAVAILABLE when `method` is idempotent."""
        _, deadline = deadline_of(timeout, self._timeout)
        stub = getattr(self._stubs[service], method)

        async def attempt():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceededError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                            "the deadline passed between retries")
            try:
                return await stub(request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as error:
                raise error_from_rpc(error) from None

        if method not in IDEMPOTENT:
            return await attempt()
        return await self._retry.async_retrying(deadline)(attempt)

    async def _server_stream(self, service: str, method: str, request, timeout: float | None
                             ) -> AsyncIterator[Any]:
        """A server-streaming call's messages; stopping early cancels the call."""
        timeout, _ = deadline_of(timeout, self._timeout)
        call = getattr(self._stubs[service], method)(request, timeout=timeout,
                                                     metadata=self._metadata)
        try:
            async for message in call:
                yield message
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None
        finally:
            call.cancel()

    # OrchestratorService

    async def solve_problem(self, request: orch.SolveProblemRequest | None = None, /, *,
                      timeout: float | None = None, **fields: Any) -> orch.SolveProblemResponse:
        """SolveProblem: a Connect Four move, a Sudoku solution or a maze path (retried)."""
        return await self._unary(ORCHESTRATOR, "SolveProblem",
                           build(orch.SolveProblemRequest, request, fields), timeout)

    def stream_solve_problem(self, request: orch.StreamSolveProblemRequest | None = None, /, *,
                             timeout: float | None = None, **fields: Any
                             ) -> AsyncIterator[orch.StreamSolveProblemResponse]:
        """StreamSolveProblem: the consensus loop's events as they happen, the response last."""
        return self._server_stream(ORCHESTRATOR, "StreamSolveProblem",
                                   build(orch.StreamSolveProblemRequest, request, fields),
                                   timeout)

    async def answer_query(self, request: orch.AnswerQueryRequest | None = None, /, *,
                     timeout: float | None = None, **fields: Any) -> orch.AnswerQueryResponse:
        """AnswerQuery: an answer from retrieved passages with its sources (retried)."""
        return await self._unary(ORCHESTRATOR, "AnswerQuery",
                           build(orch.AnswerQueryRequest, request, fields), timeout)

    def stream_answer_query(self, request: orch.StreamAnswerQueryRequest | None = None, /, *,
                            timeout: float | None = None, **fields: Any
                            ) -> AsyncIterator[orch.StreamAnswerQueryResponse]:
        """StreamAnswerQuery: sources, answer deltas or loop events, the response last."""
        return self._server_stream(ORCHESTRATOR, "StreamAnswerQuery",
                                   build(orch.StreamAnswerQueryRequest, request, fields), timeout)

    async def ingest_documents(self, request: orch.IngestDocumentsRequest | None = None, /, *,
                         timeout: float | None = None, **fields: Any
                         ) -> orch.IngestDocumentsResponse:
        """IngestDocuments: documents into a collection, each replaced whole (retried)."""
        return await self._unary(ORCHESTRATOR, "IngestDocuments",
                           build(orch.IngestDocumentsRequest, request, fields), timeout)

    async def stream_ingest_documents(
            self, requests: Iterable[orch.StreamIngestDocumentsRequest]
            | AsyncIterable[orch.StreamIngestDocumentsRequest], *, timeout: float | None = None
    ) -> orch.StreamIngestDocumentsResponse:
        """StreamIngestDocuments: a stream of document batches, one summary (not retried)."""
        timeout, _ = deadline_of(timeout, self._timeout)
        try:
            return await self._stubs[ORCHESTRATOR].StreamIngestDocuments(
                requests, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None

    async def get_document(self, name: str, *, timeout: float | None = None) -> orch.Document:
        """GetDocument of `collections/{collection}/documents/{document}` (retried)."""
        return await self._unary(ORCHESTRATOR, "GetDocument", orch.GetDocumentRequest(name=name),
                           timeout)

    async def list_documents(self, parent: str, *, page_size: int = 0, page_token: str = "",
                       timeout: float | None = None) -> orch.ListDocumentsResponse:
        """ListDocuments of `collections/{collection}`, one page (retried)."""
        return await self._unary(ORCHESTRATOR, "ListDocuments", orch.ListDocumentsRequest(
            parent=parent, page_size=page_size, page_token=page_token), timeout)

    async def delete_document(self, name: str, *, timeout: float | None = None) -> empty_pb2.Empty:
        """DeleteDocument and all its chunks (not retried)."""
        return await self._unary(ORCHESTRATOR, "DeleteDocument",
                           orch.DeleteDocumentRequest(name=name), timeout)

    async def delete_collection(self, name: str, *, timeout: float | None = None
                                ) -> empty_pb2.Empty:
        """DeleteCollection `collections/{collection}` and its documents (not retried)."""
        return await self._unary(ORCHESTRATOR, "DeleteCollection",
                           orch.DeleteCollectionRequest(name=name), timeout)

    # RunService

    async def create_run(self, request: runs.CreateRunRequest | None = None, /, *,
                   timeout: float | None = None, **fields: Any) -> runs.Run:
        """CreateRun: queues a SolveProblem or AnswerQuery run (retried; request_id added)."""
        return await self._unary(RUNS, "CreateRun",
                           with_request_id(build(runs.CreateRunRequest, request, fields)), timeout)

    async def get_run(self, name: str, *, timeout: float | None = None) -> runs.Run:
        """GetRun of `runs/{run}` (retried)."""
        return await self._unary(RUNS, "GetRun", runs.GetRunRequest(name=name), timeout)

    async def list_runs(self, *, filter: str = "", page_size: int = 0, page_token: str = "",
                  timeout: float | None = None) -> runs.ListRunsResponse:
        """ListRuns, newest first, one page; `filter` as `state = RUNNING` (retried)."""
        return await self._unary(RUNS, "ListRuns", runs.ListRunsRequest(
            filter=filter, page_size=page_size, page_token=page_token), timeout)

    async def cancel_run(self, name: str, *, timeout: float | None = None) -> runs.Run:
        """CancelRun (not retried)."""
        return await self._unary(RUNS, "CancelRun", runs.CancelRunRequest(name=name), timeout)

    async def delete_run(self, name: str, *, timeout: float | None = None) -> empty_pb2.Empty:
        """DeleteRun of a run that has ended (not retried)."""
        return await self._unary(RUNS, "DeleteRun", runs.DeleteRunRequest(name=name), timeout)

    def watch_run(self, name: str, *, after_sequence: int = 0, timeout: float | None = None
                  ) -> AsyncIterator[runs.RunEvent]:
        """WatchRun: the run's events after `after_sequence` until it ends."""
        return self._server_stream(RUNS, "WatchRun", runs.WatchRunRequest(
            name=name, after_sequence=after_sequence), timeout)

    async def create_batch(self, request: runs.CreateBatchRequest | None = None, /, *,
                     timeout: float | None = None, **fields: Any) -> runs.Batch:
        """CreateBatch: one run per item, all or none (retried; request_id added)."""
        return await self._unary(RUNS, "CreateBatch",
                           with_request_id(build(runs.CreateBatchRequest, request, fields)),
                           timeout)

    async def get_batch(self, name: str, *, timeout: float | None = None) -> runs.Batch:
        """GetBatch of `batches/{batch}` (retried)."""
        return await self._unary(RUNS, "GetBatch", runs.GetBatchRequest(name=name), timeout)

    async def list_batches(self, *, page_size: int = 0, page_token: str = "",
                     timeout: float | None = None) -> runs.ListBatchesResponse:
        """ListBatches, newest first, one page (retried)."""
        return await self._unary(RUNS, "ListBatches", runs.ListBatchesRequest(
            page_size=page_size, page_token=page_token), timeout)

    async def cancel_batch(self, name: str, *, timeout: float | None = None) -> runs.Batch:
        """CancelBatch: cancels its runs that have not ended (not retried)."""
        return await self._unary(RUNS, "CancelBatch", runs.CancelBatchRequest(name=name), timeout)

    def watch_batch(self, name: str, *, after_sequence: int = 0, timeout: float | None = None
                    ) -> AsyncIterator[runs.RunEvent]:
        """WatchBatch: its runs' state changes after `after_sequence` until all have ended."""
        return self._server_stream(RUNS, "WatchBatch", runs.WatchBatchRequest(
            name=name, after_sequence=after_sequence), timeout)
