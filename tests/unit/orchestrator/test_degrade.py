"""Degrade, don't hang: the orchestrator answers with the agents that still can and says which
failed (fake agents through the real servicer and consensus loop)."""

from __future__ import annotations

import asyncio
import time

import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import DeadlineExceeded, Unavailable
from services.orchestrator.agents.checker import CheckerAgent, CheckerBudget
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import Passage


class Context:
    def __init__(self, remaining_s: float) -> None:
        self._deadline = time.monotonic() + remaining_s

    def time_remaining(self) -> float:
        return self._deadline - time.monotonic()


class Down:
    """An agent whose service is down: it fails UNAVAILABLE at once."""

    def __init__(self, name: AgentName) -> None:
        self.name = name
        self.role = Role.PROPOSER
        self.repeatable = name is AgentName.MCTS

    async def propose(self, round_: Round) -> Proposal:
        error = Unavailable(f"{self.name.value} failed: UNAVAILABLE: not reachable")
        error.failed_service = self.name.value
        raise error


class Frozen(Down):
    """An agent whose service never answers: the call runs until the round's deadline."""

    async def propose(self, round_: Round) -> Proposal:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class Fixed:
    def __init__(self, name: AgentName, proposal: Proposal, role=Role.PROPOSER) -> None:
        self.name = name
        self.role = role
        self.repeatable = False
        self._proposal = proposal

    async def propose(self, round_: Round) -> Proposal:
        return self._proposal


PASSAGES = (Passage("d1", "Title one", "First passage.", 0.8, "corpus.jsonl"),
            Passage("d2", "Title two", "Second passage.", 0.6, "corpus.jsonl"))


def retrieval() -> Fixed:
    return Fixed(AgentName.RETRIEVAL, Proposal("d1", 0.8, "2 passages", detail=PASSAGES),
                 role=Role.CONTEXT)


def servicer(game_agents=(), text_agents=()) -> OrchestratorServicer:
    return OrchestratorServicer(OrchestratorSettings(),
                                AgentSet(list(game_agents), list(text_agents)))


async def test_connect_four_with_mcts_down_is_answered_by_the_network_and_the_checker():
    neural = Fixed(AgentName.NEURAL, Proposal("4", 0.6, "policy 0.60", value=0.1))
    checker = CheckerAgent(CheckerBudget(min_moves=8, base_nodes=2_000))
    front = servicer([checker, Down(AgentName.MCTS), neural])
    request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"))
    response = await front.SolveProblem(request, Context(5.0))
    assert response.connect_four.column == 4
    assert response.answered_by == pb.AGENT_NEURAL
    assert [(f.agent, f.code) for f in response.failures] == [(pb.AGENT_MCTS, "UNAVAILABLE")]
    assert response.failures[0].message == "mcts failed: UNAVAILABLE: not reachable"
    assert response.failures[0].iteration == 1


async def test_every_agent_answering_reports_no_failure():
    neural = Fixed(AgentName.NEURAL, Proposal("4", 0.6, "policy"))
    response = await servicer([neural]).SolveProblem(
        pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                               agents=[pb.AGENT_NEURAL]), Context(5.0))
    assert not response.failures


async def test_a_frozen_llm_gives_the_passages_flagged_before_the_deadline():
    front = servicer(text_agents=[retrieval(), Frozen(AgentName.LLM)])
    started = time.monotonic()
    response = await asyncio.wait_for(
        front.AnswerQuery(pb.AnswerQueryRequest(query="what?", collection="docs"), Context(1.0)),
        timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert response.passages_only and response.answer == "" and response.confidence == 0
    assert [s.document_id for s in response.sources] == ["d1", "d2"]
    assert [(f.agent, f.code) for f in response.failures] == [
        (pb.AGENT_LLM, "DEADLINE_EXCEEDED")]


async def test_an_llm_that_is_down_gives_the_passages_at_once():
    front = servicer(text_agents=[retrieval(), Down(AgentName.LLM)])
    response = await asyncio.wait_for(
        front.AnswerQuery(pb.AnswerQueryRequest(query="what?", collection="docs"), Context(30.0)),
        timeout=5.0)
    assert response.passages_only
    assert response.failures[0].code == "UNAVAILABLE"
    assert response.failures[0].message == "llm failed: UNAVAILABLE: not reachable"


async def test_with_no_passage_an_llm_failure_is_the_error():
    empty = Fixed(AgentName.RETRIEVAL, Proposal(None, 0.0, "no passage", detail=()),
                  role=Role.CONTEXT)
    front = servicer(text_agents=[empty, Down(AgentName.LLM)])
    with pytest.raises(Unavailable, match="llm failed"):
        await front.AnswerQuery(pb.AnswerQueryRequest(query="what?", collection="docs"),
                                Context(5.0))


async def test_a_query_whose_retrieval_used_the_deadline_still_says_why():
    class SlowRetrieval(Fixed):
        async def propose(self, round_: Round) -> Proposal:
            await asyncio.sleep(max(0.0, round_.remaining_s()) + 0.01)
            return await super().propose(round_)

    slow = SlowRetrieval(AgentName.RETRIEVAL, Proposal("d1", 0.8, "x", detail=PASSAGES),
                         role=Role.CONTEXT)
    front = servicer(text_agents=[slow, Down(AgentName.LLM)])
    with pytest.raises(DeadlineExceeded):
        await front.AnswerQuery(pb.AnswerQueryRequest(query="what?", collection="docs"),
                                Context(0.3))
