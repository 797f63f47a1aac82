"""The client's retries against a stand-in OrchestratorService on loopback that answers
UNAVAILABLE (with a RetryInfo) a set number of times: idempotent calls are repeated until they
succeed, within the attempts and the deadline, honouring the server's delay; deletes are not
repeated; the API key reaches the server in the metadata the client was told to use."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.protobuf import duration_pb2, empty_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orch
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc

from mcts_mesh.client import AsyncClient, Client, RetryPolicy, UnavailableError

QUICK = RetryPolicy(attempts=4, initial_backoff_s=0.01, max_backoff_s=0.05)


class Flaky(orch_grpc.OrchestratorServiceServicer):
    """Fails the first `failures` calls of each method UNAVAILABLE with RetryInfo `delay_s`."""

    def __init__(self, failures: int, delay_s: float = 0.0) -> None:
        self.failures, self.delay_s = failures, delay_s
        self.calls: dict[str, int] = {}
        self.metadata: list[dict[str, str]] = []

    async def _maybe_fail(self, method: str, context) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        self.metadata.append(dict(context.invocation_metadata()))
        if self.calls[method] <= self.failures:
            status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="warming up")
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(self.delay_s * 1e9))
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            await context.abort_with_status(rpc_status.to_status(status))

    async def GetDocument(self, request, context):
        await self._maybe_fail("GetDocument", context)
        return orch.Document(name=request.name)

    async def DeleteDocument(self, request, context):
        await self._maybe_fail("DeleteDocument", context)
        return empty_pb2.Empty()


@pytest.fixture
async def flaky():
    servers = []

    async def start(failures: int, delay_s: float = 0.0):
        servicer = Flaky(failures, delay_s)
        server = grpc.aio.server()
        orch_grpc.add_OrchestratorServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        return servicer, f"127.0.0.1:{port}"

    yield start
    for server in servers:
        await server.stop(0)


async def test_an_idempotent_call_is_repeated_until_it_succeeds(flaky):
    servicer, target = await flaky(failures=2)
    async with AsyncClient(target, retry=QUICK) as client:
        document = await client.get_document("collections/c/documents/d")
    assert document.name == "collections/c/documents/d"
    assert servicer.calls["GetDocument"] == 3


async def test_the_blocking_client_retries_too_and_sends_the_key(flaky):
    servicer, target = await flaky(failures=1)

    def call() -> None:
        with Client(target, api_key="k1", retry=QUICK) as client:
            client.get_document("collections/c/documents/d")
        with Client(target, api_key="k2", key_scheme="bearer", retry=QUICK) as client:
            client.get_document("collections/c/documents/d")

    await asyncio.to_thread(call)
    assert servicer.calls["GetDocument"] == 3  # one failure, then two successes
    assert servicer.metadata[0]["x-api-key"] == "k1"
    assert servicer.metadata[-1]["authorization"] == "Bearer k2"


async def test_attempts_end_the_retries_with_the_last_error(flaky):
    servicer, target = await flaky(failures=10)
    async with AsyncClient(target, retry=QUICK) as client:
        with pytest.raises(UnavailableError) as caught:
            await client.get_document("collections/c/documents/d")
    assert servicer.calls["GetDocument"] == 4
    assert caught.value.message == "warming up" and caught.value.retry_delay == 0.0


async def test_the_server_retry_delay_is_honoured_within_the_deadline(flaky):
    servicer, target = await flaky(failures=1, delay_s=0.3)
    async with AsyncClient(target, retry=QUICK) as client:
        started = time.monotonic()
        await client.get_document("collections/c/documents/d")
        waited = time.monotonic() - started
        assert waited >= 0.3
        # A RetryInfo delay beyond the deadline ends the retries at once.
        servicer.calls.clear()
        servicer.delay_s = 5.0
        with pytest.raises(UnavailableError):
            await client.get_document("collections/c/documents/d", timeout=1.0)
    assert servicer.calls["GetDocument"] == 1


async def test_a_delete_is_not_repeated(flaky):
    servicer, target = await flaky(failures=1)
    async with AsyncClient(target, retry=QUICK) as client:
        with pytest.raises(UnavailableError):
            await client.delete_document("collections/c/documents/d")
    assert servicer.calls["DeleteDocument"] == 1
