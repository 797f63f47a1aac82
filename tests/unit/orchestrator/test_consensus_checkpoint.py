"""Checkpoints of the consensus loop: a loop resumed from the checkpoint of any finished round
answers as the uninterrupted loop does and calls no agent for a round already finished; the
search's root statistics travel in the checkpoint; checkpoints survive their bytes."""

from __future__ import annotations

import time

import pytest
from mesh.common.v1 import common_pb2

from libs.errors import Unavailable
from services.orchestrator.agents.mcts import merge_at_root, most_visited
from services.orchestrator.loop.checkpoint import LoopCheckpoint
from services.orchestrator.loop.checkpoint_codec import CheckpointCodec, CheckpointError
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.state import LoopState
from services.orchestrator.loop.types import AgentName, Budget, Proposal, Role, Round, Tally
from services.orchestrator.problems.connect_four import ExactResult
from services.orchestrator.routing.rules import RuleRouter
from services.orchestrator.text.query import Passage


class ScriptedAgent:
    """Answers `script[iteration]` (the last entry repeats); records the iterations asked."""

    def __init__(self, name: AgentName, script: list, repeatable=False,
                 role: Role = Role.PROPOSER) -> None:
        self.name, self.role, self.repeatable = name, role, repeatable
        self._script = script
        self.asked: list[int] = []

    async def propose(self, round_: Round) -> Proposal:
        self.asked.append(round_.iteration)
        answer = self._script[min(round_.iteration, len(self._script)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Search:
    """A repeatable search over fixed visit counts per round that, like the mcts agent, adds
    its round to the statistics of its earlier rounds (`Round.earlier`)."""

    name, role, repeatable = AgentName.MCTS, Role.PROPOSER, True

    def __init__(self, visits_per_round: list[dict[int, int]]) -> None:
        self._rounds = visits_per_round
        self.asked: list[int] = []
        self.earlier_simulations: list[int] = []

    async def propose(self, round_: Round) -> Proposal:
        self.asked.append(round_.iteration)
        visits = self._rounds[min(round_.iteration, len(self._rounds)) - 1]
        statistics = common_pb2.SearchStatistics(simulations=sum(visits.values()))
        for column, count in sorted(visits.items()):
            statistics.actions.add(action=column, visits=count, value=0.1 * column)
        earlier = round_.earlier.get(self.name)
        self.earlier_simulations.append(earlier.detail.simulations if earlier else 0)
        if earlier is not None:
            statistics = merge_at_root(earlier.detail, statistics)
        best = most_visited(statistics)
        total = sum(action.visits for action in statistics.actions)
        share = max(action.visits for action in statistics.actions) / total
        return Proposal(str(best), share, f"visits {total}", value=0.5, detail=statistics)


def first_answer(tally: Tally, proposals, context) -> str:
    return f"{tally.answer}|{len(context)}"


CODEC = CheckpointCodec([ExactResult, Passage])


def game_agents():
    """A search that moves from column 2 to 5 as its visits grow, a network voting 5 and a
    checker that abstains with its partial proof: agreement in the third round."""
    search = Search([{2: 60, 5: 40}, {2: 150, 5: 50}, {5: 400}])
    neural = ScriptedAgent(AgentName.NEURAL, [Proposal("5", 0.7, "policy", detail="net-v1")])
    checker = ScriptedAgent(AgentName.CHECKER, [Proposal(
        None, 0.0, "budget", excluded=frozenset({"1"}),
        detail=ExactResult(None, (None, -2, 1, None, None, None, None), 512))])
    return [search, neural, checker]


def budget() -> Budget:
    return Budget(max_iterations=5, deadline=time.monotonic() + 30, simulations=100,
                  max_simulations=10_000, seed=3)


def comparable(result):
    """What must be equal between a resumed and an uninterrupted run (not latencies)."""
    return (result.answer, result.tally, result.consensus_reached, result.iterations,
            [(v.agent, v.answer, v.confidence, v.iteration, v.rationale) for v in result.votes],
            result.agents, [(r.agents, r.reason) for r in result.routes],
            {name: (p.answer, p.detail) for name, p in result.proposals.items()},
            [(step.step, step.iteration) for step in result.timings])


async def run_whole(agents):
    checkpoints: list[LoopCheckpoint] = []
    loop = ConsensusLoop(agents, RuleRouter(), first_answer, 0.25,
                         checkpoints=checkpoints.append)
    return await loop.run("position", budget()), checkpoints


async def test_a_loop_resumed_from_any_round_answers_as_the_uninterrupted_one():
    whole, checkpoints = await run_whole(game_agents())
    assert whole.iterations == 3 and whole.answer == "5|0"
    assert [(c.next_state, c.rounds_run) for c in checkpoints] == [
        (LoopState.ROUTE, 1), (LoopState.ROUTE, 2), (LoopState.SYNTHESIZE, 3)]
    for checkpoint in checkpoints:
        agents = game_agents()
        resumed = await ConsensusLoop(agents, RuleRouter(), first_answer, 0.25).run(
            "position", budget(), resume=CODEC.decode(CODEC.encode(checkpoint)))
        assert comparable(resumed) == comparable(whole)
        for agent in agents:  # no finished round is asked again
            assert all(iteration > checkpoint.rounds_run for iteration in agent.asked)


async def test_the_resumed_search_continues_from_the_checkpointed_root_statistics():
    _, checkpoints = await run_whole(game_agents())
    agents = game_agents()
    await ConsensusLoop(agents, RuleRouter(), first_answer, 0.25).run(
        "position", budget(), resume=CODEC.decode(CODEC.encode(checkpoints[1])))
    search = agents[0]
    assert search.asked == [3]
    assert search.earlier_simulations == [100 + 200]  # rounds 1 and 2 merged at the root
    assert checkpoints[1].simulations == 400


async def test_a_checkpoint_at_synthesis_calls_no_agent():
    whole, checkpoints = await run_whole(game_agents())
    agents = game_agents()
    resumed = await ConsensusLoop(agents, RuleRouter(), first_answer, 0.25).run(
        "position", budget(), resume=CODEC.decode(CODEC.encode(checkpoints[-1])))
    assert resumed.answer == whole.answer
    assert all(agent.asked == [] for agent in agents)


def text_agents():
    passages = (Passage("d1", "Title", "Paris is the capital.", 0.9, "a.txt", 0.8),)
    retrieval = ScriptedAgent(AgentName.RETRIEVAL, [Proposal("", 0.5, "1 passage",
                                                             detail=passages)],
                              role=Role.CONTEXT)
    llm = ScriptedAgent(AgentName.LLM, [Unavailable("llm down"), Proposal("Paris", 0.9, "d")],
                        repeatable=True)
    second = ScriptedAgent(AgentName.NEURAL, [Proposal("Lyon", 0.3, "d", settled=False),
                                              Proposal("Paris", 0.6, "d")], repeatable=True)
    third = ScriptedAgent(AgentName.SOLVER, [Proposal("Paris", 0.4, "d")])
    return [retrieval, llm, second, third]


async def test_context_and_failures_survive_a_checkpoint():
    agents = text_agents()
    checkpoints: list[LoopCheckpoint] = []
    loop = ConsensusLoop(agents, RuleRouter(), first_answer, 0.1, checkpoints=checkpoints.append)
    whole = await loop.run("query", budget())
    assert whole.answer == "Paris|1" and len(whole.failures) == 1
    resumed_agents = text_agents()
    decoded = CODEC.decode(CODEC.encode(checkpoints[0]))
    resumed = await ConsensusLoop(resumed_agents, RuleRouter(), first_answer, 0.1).run(
        "query", budget(), resume=decoded)
    assert resumed_agents[0].asked == []  # retrieval is not run again
    assert comparable(resumed) == comparable(whole)
    assert isinstance(resumed.failures[0][1], Unavailable)
    assert resumed.failures[0][1].message == "llm down"


def test_the_codec_refuses_what_it_does_not_know():
    class Secret:
        pass

    checkpoint = LoopCheckpoint(
        next_state=LoopState.ROUTE, iteration=2, rounds_run=1, simulations=2, context=(),
        ran=(), last_agents=(), accepted=(), votes=(), latest=(),
        proposals=((AgentName.MCTS, Proposal("1", 1.0, "x", detail=Secret())),),
        failures=(), failure_iterations=(), degraded=False, timings=(), routes=(), tally=None,
        consensus=False)
    with pytest.raises(CheckpointError, match="Secret"):
        CODEC.encode(checkpoint)
    with pytest.raises(CheckpointError, match="version"):
        CODEC.decode(b'{"version": 99, "checkpoint": null}')
    with pytest.raises(CheckpointError):
        CODEC.decode(b"not json")
    forged = (b'{"version":1,"checkpoint":{"d":["os:system",{}]}}')
    with pytest.raises(CheckpointError, match="os:system"):
        CODEC.decode(forged)
    unregistered = CheckpointCodec()  # ExactResult not among its types
    with pytest.raises(CheckpointError, match="ExactResult"):
        unregistered.encode(dataclass_checkpoint())


def dataclass_checkpoint() -> LoopCheckpoint:
    return LoopCheckpoint(
        next_state=LoopState.SYNTHESIZE, iteration=1, rounds_run=1, simulations=1, context=(),
        ran=(), last_agents=(), accepted=(), votes=(), latest=(),
        proposals=((AgentName.CHECKER, Proposal(None, 0.0, "x", detail=ExactResult(3))),),
        failures=(), failure_iterations=(), degraded=False, timings=(), routes=(), tally=None,
        consensus=False)
