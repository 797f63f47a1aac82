"""ORCHESTRATOR_MAX_RUNNING_SOLVES: solves beyond the limit wait in arrival order, within their
deadline (fake agents through the real servicer and consensus loop)."""

from __future__ import annotations

import asyncio
import time

import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import DeadlineExceeded
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.metrics import SOLVES_WAITING
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings


class Context:
    def __init__(self, remaining_s: float) -> None:
        self._deadline = time.monotonic() + remaining_s

    def time_remaining(self) -> float:
        return self._deadline - time.monotonic()


class Gated:
    """The network agent, answering each position once its gate opens; records the order."""

    name = AgentName.NEURAL
    role = Role.PROPOSER
    repeatable = False

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    async def propose(self, round_: Round) -> Proposal:
        moves = round_.problem.position.moves
        self.started.append(moves)
        await self.gates.setdefault(moves, asyncio.Event()).wait()
        return Proposal("4", 0.6, "policy")


def request(moves: str) -> pb.SolveProblemRequest:
    return pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves=moves),
                                  agents=[pb.AGENT_NEURAL])


def front(agent: Gated, limit: int) -> OrchestratorServicer:
    return OrchestratorServicer(OrchestratorSettings(max_running_solves=limit), AgentSet([agent]))


async def _until(condition) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def waiting() -> float:
    return SOLVES_WAITING._value.get()


async def test_solves_beyond_the_limit_wait_and_start_in_arrival_order():
    agent = Gated()
    servicer = front(agent, 1)
    solves = [asyncio.create_task(servicer.SolveProblem(request(moves), Context(10)))
              for moves in ("4453", "44", "1")]
    await _until(lambda: agent.started == ["4453"] and waiting() == 2)
    agent.gates["4453"].set()
    await _until(lambda: agent.started == ["4453", "44"])
    for moves in ("44", "1"):
        agent.gates.setdefault(moves, asyncio.Event()).set()
    replies = await asyncio.gather(*solves)
    assert agent.started == ["4453", "44", "1"]
    assert all(reply.connect_four.column == 4 for reply in replies)
    assert waiting() == 0


async def test_a_solve_whose_deadline_passes_while_it_waits_fails_and_frees_nothing_it_held():
    agent = Gated()
    servicer = front(agent, 1)
    first = asyncio.create_task(servicer.SolveProblem(request("4453"), Context(10)))
    await _until(lambda: agent.started == ["4453"])
    with pytest.raises(DeadlineExceeded):
        await servicer.SolveProblem(request("44"), Context(0.1))
    cancelled = asyncio.create_task(servicer.SolveProblem(request("1"), Context(10)))
    await _until(lambda: waiting() == 1)
    cancelled.cancel()
    await _until(lambda: waiting() == 0)
    agent.gates["4453"].set()
    await first
    # The slot is free again: a new solve runs at once.
    agent.gates["2"] = asyncio.Event()
    agent.gates["2"].set()
    reply = await asyncio.wait_for(servicer.SolveProblem(request("2"), Context(10)), 5)
    assert reply.connect_four.column == 4
    assert agent.started == ["4453", "2"]


async def test_no_limit_at_zero():
    agent = Gated()
    servicer = front(agent, 0)
    solves = [asyncio.create_task(servicer.SolveProblem(request(moves), Context(10)))
              for moves in ("4453", "44", "1")]
    await _until(lambda: sorted(agent.started) == ["1", "44", "4453"])
    for gate in agent.gates.values():
        gate.set()
    await asyncio.gather(*solves)


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="max_running_solves"):
        OrchestratorSettings(max_running_solves=-1)
