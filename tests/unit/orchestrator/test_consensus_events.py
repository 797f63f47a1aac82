"""The consensus loop's event sink (`events.py`) with fake agents: what it reports, in which order,
and that a loop with a sink answers exactly as one without."""

from __future__ import annotations

import asyncio
import time

import pytest

from libs.errors import DeadlineExceeded, Unavailable
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.events import (
    AgentFinished,
    AgentStarted,
    IterationStarted,
    TallyUpdated,
)
from services.orchestrator.loop.types import AgentName, Budget, Proposal, Role
from services.orchestrator.routing.rules import RuleRouter


class FakeAgent:
    """Answers `answers[i]` in its (i+1)-th call (the last one repeats), after `delay_s`."""

    def __init__(self, name, answers, repeatable=False, delay_s=0.0) -> None:
        self.name, self.role, self.repeatable = name, Role.PROPOSER, repeatable
        self._answers, self._delay_s = answers, delay_s
        self.rounds = []

    async def propose(self, round_):
        self.rounds.append(round_)
        await asyncio.sleep(self._delay_s)
        answer = self._answers[min(len(self.rounds), len(self._answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def first_answer(tally, proposals, context) -> str:
    return tally.answer


def _budget(seconds: float = 10.0) -> Budget:
    return Budget(max_iterations=5, deadline=time.monotonic() + seconds, simulations=100,
                  max_simulations=10_000, seed=7)


def _agents():
    return (FakeAgent(AgentName.MCTS, [Proposal("2", 0.4, "visits"), Proposal("5", 0.9, "v")],
                      repeatable=True),
            FakeAgent(AgentName.NEURAL, [Proposal("5", 0.7, "policy")]),
            FakeAgent(AgentName.CHECKER, [Unavailable("checker: down")]))


async def test_events_follow_the_loop_and_change_nothing():
    events = []
    watched = await ConsensusLoop(list(_agents()), RuleRouter(), first_answer, 0.25,
                                  events=events.append).run("p", _budget())
    plain = await ConsensusLoop(list(_agents()), RuleRouter(), first_answer, 0.25).run(
        "p", _budget())
    assert (watched.answer, watched.iterations, [v.answer for v in watched.votes]) == \
        (plain.answer, plain.iterations, [v.answer for v in plain.votes])
    iterations = [e for e in events if isinstance(e, IterationStarted)]
    assert [(e.iteration, e.simulations) for e in iterations] == [(1, 100), (2, 200)]
    assert iterations[1].agents == (AgentName.MCTS,)
    first_round = events[1:events.index(iterations[1])]
    started = {e.agent for e in first_round if isinstance(e, AgentStarted)}
    assert started == set(iterations[0].agents)
    finished = {e.agent: e for e in first_round if isinstance(e, AgentFinished)}
    assert finished[AgentName.NEURAL].proposal.answer == "5"
    assert finished[AgentName.CHECKER].proposal is None
    assert isinstance(finished[AgentName.CHECKER].error, Unavailable)
    assert all(e.latency_ms >= 0 for e in finished.values())
    tallies = [e for e in events if isinstance(e, TallyUpdated)]
    assert [(t.iteration, t.tally.answer, t.tally.agreed) for t in tallies] == [
        (1, "5", False), (2, "5", True)]
    assert {v.agent for v in tallies[0].votes} == {AgentName.MCTS, AgentName.NEURAL}
    assert isinstance(events[-1], TallyUpdated) and events[-1].tally.answer == watched.answer


async def test_an_agent_stopped_by_the_deadline_is_reported():
    events = []
    slow = FakeAgent(AgentName.MCTS, [Proposal("4", 0.9, "late")], repeatable=True, delay_s=5)
    quick = FakeAgent(AgentName.NEURAL, [Proposal("4", 0.6, "policy")])
    result = await ConsensusLoop([slow, quick], RuleRouter(), first_answer, 0.25,
                                 events=events.append).run("p", _budget(seconds=0.3))
    assert result.answer == "4"
    stopped = [e for e in events if isinstance(e, AgentFinished) and e.agent == AgentName.MCTS]
    assert len(stopped) == 1 and isinstance(stopped[0].error, DeadlineExceeded)


async def test_observed_agents_keep_their_identity():
    agents = list(_agents())
    loop = ConsensusLoop(agents, RuleRouter(), first_answer, 0.25, events=lambda _: None)
    observed = loop._agents[AgentName.MCTS]
    assert (observed.name, observed.role, observed.repeatable) == (
        AgentName.MCTS, agents[0].role, True)
    assert observed.rounds is agents[0].rounds  # other attributes are forwarded
    with pytest.raises(AttributeError):
        observed.no_such_attribute  # noqa: B018
