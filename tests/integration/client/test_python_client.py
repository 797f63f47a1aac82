"""`mcts_mesh.client` against a real orchestrator (tests/integration/client/conftest.py): every
public RPC through `Client` (blocking, run in a thread beside the servers' event loop) and
`AsyncClient`, the API key in either metadata, errors as exceptions with their google.rpc
details (BadRequest, ErrorInfo, RetryInfo, QuotaFailure), deadlines, and no retry of a call that
is not idempotent."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orch
from mesh.orchestrator.v1 import run_service_pb2 as runs

from mcts_mesh.client import (
    AsyncClient,
    Client,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RetryPolicy,
    UnauthenticatedError,
)
from mcts_mesh.client.errors import DeadlineExceededError, FailedPreconditionError
from services.orchestrator.api.servicer import OrchestratorServicer

SOLVE = {"connect_four": {"moves": "4453"}, "agents": [orch.AGENT_MCTS, orch.AGENT_CHECKER],
         "simulations": 200}
DOCUMENTS = [{"id": "mitosis", "title": "Cells", "text": "Cells divide by mitosis into two."},
             {"id": "genes", "title": "Genes", "text": "Genes code for proteins in cells."}]


def _documents_round_trip(client: Client) -> None:
    ingested = client.ingest_documents(collection="biology", documents=DOCUMENTS)
    assert ingested.document_count == 2
    document = client.get_document("collections/biology/documents/mitosis")
    assert document.document_id == "mitosis" and document.chunk_count >= 1
    listed = client.list_documents("collections/biology", page_size=1)
    assert len(listed.documents) == 1 and listed.next_page_token
    rest = client.list_documents("collections/biology", page_token=listed.next_page_token)
    assert {d.document_id for d in [*listed.documents, *rest.documents]} == {"mitosis", "genes"}
    answer = client.answer_query(query="How do cells divide?", collection="biology", top_k=2)
    assert answer.answer and any(source.document_id == "mitosis" for source in answer.sources)
    client.delete_document("collections/biology/documents/genes")
    with pytest.raises(NotFoundError) as caught:
        client.get_document("collections/biology/documents/genes")
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    streamed = client.stream_ingest_documents(
        orch.StreamIngestDocumentsRequest(collection="more", documents=[document])
        for document in DOCUMENTS)
    assert streamed.document_count == 2
    client.delete_collection("collections/biology")
    with pytest.raises(NotFoundError):
        client.list_documents("collections/biology")


def _solves_and_runs(client: Client) -> None:
    solved = client.solve_problem(**SOLVE)
    assert 1 <= solved.connect_four.column <= 7
    events = list(client.stream_solve_problem(**SOLVE))
    assert events[-1].WhichOneof("event") == "response"
    assert events[-1].response.connect_four.column == solved.connect_four.column
    run = client.create_run(run=runs.Run(solve=orch.SolveProblemRequest(**SOLVE)))
    assert run.name.startswith("runs/")
    watched = list(client.watch_run(run.name, timeout=120))
    assert watched and client.get_run(run.name).state == runs.Run.State.STATE_SUCCEEDED
    assert any(listed.name == run.name for listed in client.list_runs().runs)
    client.delete_run(run.name)
    batch = client.create_batch(items=[{"solve": SOLVE}, {"solve": SOLVE}])
    assert client.get_batch(batch.name).name == batch.name
    list(client.watch_batch(batch.name, timeout=120))
    assert any(listed.name == batch.name for listed in client.list_batches().batches)
    with pytest.raises(FailedPreconditionError):
        client.cancel_batch(batch.name)  # every run has ended
    with pytest.raises(NotFoundError):
        client.cancel_run("runs/" + str(uuid.uuid4()))


async def test_the_blocking_client_calls_every_method(client_mesh):
    def scenario() -> None:
        with Client(client_mesh.target, api_key=client_mesh.admin_key) as client:
            _documents_round_trip(client)
            _solves_and_runs(client)

    await asyncio.to_thread(scenario)


async def test_the_async_client_calls_the_same_methods(client_mesh):
    async with AsyncClient(client_mesh.target, api_key=client_mesh.admin_key,
                           key_scheme="bearer") as client:
        ingested = await client.ingest_documents(collection="biology", documents=DOCUMENTS)
        assert ingested.document_count == 2
        assert (await client.get_document("collections/biology/documents/genes")).title == "Genes"
        solved = await client.solve_problem(orch.SolveProblemRequest(**SOLVE))
        events = [event async for event in client.stream_solve_problem(**SOLVE)]
        assert events[-1].response.connect_four.column == solved.connect_four.column
        run = await client.create_run(run=runs.Run(solve=orch.SolveProblemRequest(**SOLVE)))
        assert [event async for event in client.watch_run(run.name, timeout=120)]
        assert (await client.get_run(run.name)).state == runs.Run.State.STATE_SUCCEEDED
        await client.delete_collection("collections/biology")


@pytest.mark.skipif("StreamAnswerQuery" not in vars(OrchestratorServicer),
                    reason="the orchestrator does not serve StreamAnswerQuery yet")
async def test_the_answer_streams_with_the_response_last(client_mesh):
    async with AsyncClient(client_mesh.target, api_key=client_mesh.admin_key) as client:
        await client.ingest_documents(collection="biology", documents=DOCUMENTS)
        messages = [m async for m in client.stream_answer_query(
            query="How do cells divide?", collection="biology")]
    assert messages[-1].WhichOneof("event") == "response"
    assert messages[-1].response.answer


async def test_errors_carry_their_google_rpc_details(client_mesh):
    async with AsyncClient(client_mesh.target, api_key=client_mesh.solve_key) as client:
        with pytest.raises(InvalidArgumentError) as bad:
            await client.solve_problem(connect_four={"moves": "4489"})
        assert bad.value.field == "connect_four.moves"
        assert bad.value.field_violations[0].description
        with pytest.raises(PermissionDeniedError) as denied:
            await client.delete_collection("collections/biology")
        assert denied.value.reason == "SCOPE_NOT_GRANTED"
    async with AsyncClient(client_mesh.target, api_key="not-a-key") as client:
        with pytest.raises(UnauthenticatedError) as unknown:
            await client.solve_problem(**SOLVE)
        assert unknown.value.reason == "API_KEY_INVALID"
    async with AsyncClient(client_mesh.target, api_key=client_mesh.limited_key) as client:
        await client.solve_problem(**SOLVE)
        with pytest.raises(ResourceExhaustedError) as limited:
            await client.solve_problem(**SOLVE)
        assert limited.value.reason == "RATE_LIMIT_EXCEEDED" and limited.value.retry_delay > 0
    async with AsyncClient(client_mesh.target, api_key=client_mesh.budget_key) as client:
        await client.solve_problem(**SOLVE)
        with pytest.raises(ResourceExhaustedError) as spent:
            await client.solve_problem(**SOLVE)
        assert spent.value.reason == "BUDGET_EXCEEDED"
        assert [v.subject for v in spent.value.quota_violations]


async def test_a_deadline_too_short_is_deadline_exceeded(client_mesh):
    async with AsyncClient(client_mesh.target, api_key=client_mesh.solve_key,
                           retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(DeadlineExceededError):
            await client.solve_problem(**SOLVE, timeout=0.001)
