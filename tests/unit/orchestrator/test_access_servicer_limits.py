"""The servicer's side of issue 29's limits: AnswerQuery waits for one of the running-solves slots
that solves hold (finding 5), and StreamIngestDocuments forwards to retrieval with a deadline
(finding 4). Fake agents and a fake retrieval stub through the real servicer."""

from __future__ import annotations

import asyncio

import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from test_running_solves import Context, Gated, _until, request, waiting

from libs.errors import DeadlineExceeded
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import Draft


class Drafter:
    """The LLM agent, drafting "42" once its gate opens."""

    name = AgentName.LLM
    role = Role.PROPOSER
    repeatable = False

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = 0

    async def propose(self, round_: Round) -> Proposal:
        self.started += 1
        await self.gate.wait()
        return Proposal("42", 0.9, "draft", detail=Draft("42", "fake", "fake-1", False))


def servicer(solver: Gated, drafter: Drafter, limit: int = 1) -> OrchestratorServicer:
    return OrchestratorServicer(OrchestratorSettings(max_running_solves=limit, text_sample_count=1),
                                AgentSet([solver], [drafter]))


QUERY = pb.AnswerQueryRequest(query="what is six times seven?")


async def test_a_query_waits_for_a_running_solves_slot():
    solver, drafter = Gated(), Drafter()
    front = servicer(solver, drafter)
    solve = asyncio.create_task(front.SolveProblem(request("4453"), Context(10)))
    await _until(lambda: solver.started == ["4453"])
    query = asyncio.create_task(front.AnswerQuery(QUERY, Context(10)))
    await _until(lambda: waiting() == 1)
    assert drafter.started == 0  # it waits while the solve holds the only slot
    solver.gates["4453"].set()
    await solve
    await _until(lambda: drafter.started == 1)
    drafter.gate.set()
    reply = await asyncio.wait_for(query, 10)
    assert reply.answer == "42"
    assert waiting() == 0


async def test_a_query_whose_deadline_passes_while_it_waits_fails():
    solver, drafter = Gated(), Drafter()
    front = servicer(solver, drafter)
    solve = asyncio.create_task(front.SolveProblem(request("4453"), Context(10)))
    await _until(lambda: solver.started == ["4453"])
    with pytest.raises(DeadlineExceeded, match="other solves and queries ran"):
        await front.AnswerQuery(QUERY, Context(0.1))
    assert drafter.started == 0
    solver.gates["4453"].set()
    await solve


class _NoDeadline:
    def time_remaining(self) -> None:
        return None


class _Retrieval:
    """Records the timeout of StreamIngestDocuments and reads the stream."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    async def StreamIngestDocuments(self, requests, timeout=None):
        self.timeouts.append(timeout)
        count = 0
        async for _ in requests:
            count += 1
        from mesh.retrieval.v1 import retrieval_service_pb2

        return retrieval_service_pb2.StreamIngestDocumentsResponse(document_count=count)


async def test_stream_ingest_forwards_with_a_deadline_when_the_caller_set_none():
    retrieval = _Retrieval()
    settings = OrchestratorSettings(ingest_deadline_s=123.0)
    front = OrchestratorServicer(settings, AgentSet(), retrieval=retrieval)

    async def documents():
        yield pb.StreamIngestDocumentsRequest(collection="docs")

    reply = await front.StreamIngestDocuments(documents(), _NoDeadline())
    assert reply.document_count == 1
    assert retrieval.timeouts == [123.0]
    reply = await front.StreamIngestDocuments(documents(), Context(7.0))
    assert 6.0 < retrieval.timeouts[1] <= 7.0
