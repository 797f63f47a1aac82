"""Validation at the orchestrator's edge: every bad field gives InvalidArgument naming it, before
any agent runs."""

from __future__ import annotations

import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2

from libs.errors import FailedPrecondition, InvalidArgument
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import Draft


class CountingAgent:
    def __init__(self, name: AgentName, answer: str, role: Role = Role.PROPOSER,
                 detail=None) -> None:
        self.name = name
        self.detail = detail
        self.role = role
        self.repeatable = name is AgentName.MCTS
        self.answer = answer
        self.calls = 0

    async def propose(self, round_: Round) -> Proposal:
        self.calls += 1
        return Proposal(self.answer, 0.9, "fake", detail=self.detail)


class FakeRetrievalStub:
    def __init__(self) -> None:
        self.calls = 0

    async def IngestDocuments(self, request, timeout):
        self.calls += 1
        assert timeout > 0
        return retrieval_service_pb2.IngestDocumentsResponse(
            document_count=len(request.documents), chunk_count=2 * len(request.documents))


class FakeContext:
    def time_remaining(self) -> float:
        return 10.0


@pytest.fixture
def parts():
    agents = [CountingAgent(AgentName.CHECKER, "4"), CountingAgent(AgentName.MCTS, "4"),
              CountingAgent(AgentName.NEURAL, "4")]
    text = [CountingAgent(AgentName.RETRIEVAL, "doc", Role.CONTEXT),
            CountingAgent(AgentName.LLM, "an answer",
                          detail=Draft("an answer", "offline", "extractive", True))]
    retrieval = FakeRetrievalStub()
    servicer = OrchestratorServicer(OrchestratorSettings(), AgentSet(agents, text),
                                    retrieval=retrieval)
    return servicer, agents + text, retrieval


def solve(**fields) -> pb.SolveProblemRequest:
    fields.setdefault("connect_four", common_pb2.ConnectFourPosition(moves="44"))
    return pb.SolveProblemRequest(**fields)


@pytest.mark.parametrize(("request_", "field"), [
    (pb.SolveProblemRequest(), "problem"),
    (solve(connect_four=common_pb2.ConnectFourPosition(moves="48")), "connect_four.moves"),
    (solve(connect_four=common_pb2.ConnectFourPosition(moves="4a")), "connect_four.moves"),
    (solve(connect_four=common_pb2.ConnectFourPosition(moves="4444444")), "connect_four.moves"),
    (solve(connect_four=common_pb2.ConnectFourPosition(moves="1212121")), "connect_four.moves"),
    (solve(agents=[pb.AGENT_UNSPECIFIED]), "agents"),
    (solve(agents=[pb.AGENT_MCTS, pb.AGENT_LLM]), "agents"),
    (solve(agents=[pb.AGENT_RETRIEVAL]), "agents"),
    (solve(simulations=0), "simulations"),
    (solve(simulations=10_000_001), "simulations"),
    (solve(max_iterations=0), "max_iterations"),
    (solve(max_iterations=11), "max_iterations"),
    (solve(thread_id="no spaces"), "thread_id"),
    (solve(thread_id="x" * 101), "thread_id"),
])
async def test_bad_solve_fields_name_the_field(parts, request_, field):
    servicer, agents, _ = parts
    with pytest.raises(InvalidArgument) as caught:
        await servicer.SolveProblem(request_, FakeContext())
    assert caught.value.field == field
    assert all(agent.calls == 0 for agent in agents)


async def test_full_board_is_rejected(parts):
    servicer, _, _ = parts
    # A drawn full board: filled in an order that never makes four in a row.
    moves = "121212343434565656717171" + "232323454545676767"
    with pytest.raises(InvalidArgument) as caught:
        await servicer.SolveProblem(solve(connect_four=common_pb2.ConnectFourPosition(
            moves=moves)), FakeContext())
    assert caught.value.field == "connect_four.moves"


async def test_valid_solve_limits_are_accepted(parts):
    servicer, _, _ = parts
    response = await servicer.SolveProblem(
        solve(simulations=10_000_000, max_iterations=10, thread_id="a_B-9" * 20,
              agents=[pb.AGENT_MCTS, pb.AGENT_MCTS]), FakeContext())
    assert response.connect_four.column == 4
    assert list(response.agents) == [pb.AGENT_MCTS]
    assert response.thread_id == "a_B-9" * 20


@pytest.mark.parametrize(("request_", "field"), [
    (pb.AnswerQueryRequest(query=""), "query"),
    (pb.AnswerQueryRequest(query="   "), "query"),
    (pb.AnswerQueryRequest(query="x" * 10_001), "query"),
    (pb.AnswerQueryRequest(query="q", top_k=0), "top_k"),
    (pb.AnswerQueryRequest(query="q", top_k=21), "top_k"),
    (pb.AnswerQueryRequest(query="q", mcts_iterations=0), "mcts_iterations"),
    (pb.AnswerQueryRequest(query="q", mcts_iterations=10_001), "mcts_iterations"),
    (pb.AnswerQueryRequest(query="q", thread_id="bad/id"), "thread_id"),
    (pb.AnswerQueryRequest(query="q", collection="no spaces"), "collection"),
])
async def test_bad_query_fields_name_the_field(parts, request_, field):
    servicer, agents, _ = parts
    with pytest.raises(InvalidArgument) as caught:
        await servicer.AnswerQuery(request_, FakeContext())
    assert caught.value.field == field
    assert all(agent.calls == 0 for agent in agents)


async def test_valid_mcts_iterations_without_roles_configured_is_failed_precondition(parts):
    servicer, _, _ = parts
    for value in (1, 10_000):
        with pytest.raises(FailedPrecondition, match="search role is not configured here"):
            await servicer.AnswerQuery(pb.AnswerQueryRequest(query="q", mcts_iterations=value),
                                       FakeContext())


async def test_query_of_ten_thousand_characters_is_answered(parts):
    servicer, _, _ = parts
    response = await servicer.AnswerQuery(pb.AnswerQueryRequest(query="x" * 10_000, top_k=20),
                                          FakeContext())
    assert response.answer == "an answer" and response.offline
    assert list(response.agents) == [pb.AGENT_RETRIEVAL, pb.AGENT_LLM]


@pytest.mark.parametrize(("request_", "field"), [
    (pb.IngestDocumentsRequest(collection="", documents=[common_pb2.Document(id="a", text="t")]),
     "collection"),
    (pb.IngestDocumentsRequest(collection="x" * 65,
                               documents=[common_pb2.Document(id="a", text="t")]), "collection"),
    (pb.IngestDocumentsRequest(collection="c"), "documents"),
    (pb.IngestDocumentsRequest(collection="c", documents=[common_pb2.Document(id="", text="t")]),
     "documents[0].id"),
    (pb.IngestDocumentsRequest(collection="c", documents=[
        common_pb2.Document(id="a", text="t"), common_pb2.Document(id="b", text=" ")]),
     "documents[1].text"),
])
async def test_bad_ingest_fields_name_the_field(parts, request_, field):
    servicer, _, retrieval = parts
    with pytest.raises(InvalidArgument) as caught:
        await servicer.IngestDocuments(request_, FakeContext())
    assert caught.value.field == field
    assert retrieval.calls == 0


async def test_ingest_is_forwarded(parts):
    servicer, _, retrieval = parts
    response = await servicer.IngestDocuments(pb.IngestDocumentsRequest(
        collection="scifact", documents=[common_pb2.Document(id="a", text="t")]), FakeContext())
    assert (response.document_count, response.chunk_count) == (1, 2)
    assert retrieval.calls == 1
