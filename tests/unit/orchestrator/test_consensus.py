"""The consensus loop's state machine with fake agents whose answers are obvious."""

from __future__ import annotations

import asyncio
import time

import pytest

from libs.errors import DeadlineExceeded, FailedPrecondition, Unavailable
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.tally import aggregate
from services.orchestrator.loop.types import AgentName, Budget, Proposal, Role, Round, Tally, Vote
from services.orchestrator.routing.rules import RuleRouter


class FakeAgent:
    """Answers from a script: `answers[i]` in round i+1 (the last one repeats)."""

    def __init__(self, name: AgentName, answers: list[Proposal | Exception], repeatable=False,
                 role: Role = Role.PROPOSER, delay_s: float = 0.0) -> None:
        self.name = name
        self.role = role
        self.repeatable = repeatable
        self._answers = answers
        self._delay_s = delay_s
        self.rounds: list[Round] = []

    async def propose(self, round_: Round) -> Proposal:
        self.rounds.append(round_)
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        answer = self._answers[min(len(self.rounds), len(self._answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def first_answer(tally: Tally, proposals, context) -> str:
    return tally.answer


def loop(*agents) -> ConsensusLoop[str]:
    return ConsensusLoop(list(agents), RuleRouter(), first_answer, query_length_norm=0.25)


def budget(max_iterations=3, seconds=10.0, simulations=100) -> Budget:
    return Budget(max_iterations=max_iterations, deadline=time.monotonic() + seconds,
                  simulations=simulations, max_simulations=10_000, seed=7)


async def test_agreement_ends_the_loop_in_one_iteration():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("4", 0.8, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("4", 0.6, "policy")])
    result = await loop(mcts, neural).run("problem", budget())
    assert result.answer == "4"
    assert result.consensus_reached
    assert result.iterations == 1
    assert [v.agent for v in result.votes] == [AgentName.MCTS, AgentName.NEURAL]
    assert result.agents == (AgentName.MCTS, AgentName.NEURAL)
    assert result.tally.confidence == pytest.approx(0.7)
    steps = [t.step for t in result.timings]
    assert steps == ["route", "agents", "aggregate", "consensus", "synthesize"]


async def test_disagreement_iterates_with_doubled_simulations_until_agreement():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("2", 0.4, "visits"), Proposal("2", 0.5, "visits"),
                                      Proposal("5", 0.9, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("5", 0.7, "policy")])
    result = await loop(mcts, neural).run("problem", budget(max_iterations=5))
    assert result.answer == "5"
    assert result.consensus_reached
    assert result.iterations == 3
    assert [r.simulations for r in mcts.rounds] == [100, 200, 400]
    assert [r.seed for r in mcts.rounds] == [7, 8, 9]
    assert len(neural.rounds) == 1  # deterministic agents run once
    assert [v.iteration for v in result.votes] == [1, 1, 2, 3]


async def test_budget_end_synthesizes_the_weighted_vote_without_consensus():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("2", 0.9, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("5", 0.3, "policy")])
    result = await loop(mcts, neural).run("problem", budget(max_iterations=2))
    assert result.answer == "2"
    assert not result.consensus_reached
    assert result.iterations == 2
    assert len(mcts.rounds) == 2
    assert result.tally.confidence == pytest.approx(0.45)


class DecisiveSearch(FakeAgent):
    """A repeatable fake with the `Reconsiders` hook: another round can only move its answer to
    the rivals in `movable_to`; it records what the loop asked."""

    def __init__(self, answers: list[Proposal], movable_to: frozenset[str]) -> None:
        super().__init__(AgentName.MCTS, answers, repeatable=True)
        self.movable_to = movable_to
        self.asked: list[tuple[str | None, frozenset[str]]] = []

    def reconsiders(self, proposal: Proposal, rivals: frozenset[str]) -> bool:
        self.asked.append((proposal.answer, rivals))
        return bool(rivals & self.movable_to)


async def test_a_search_that_cannot_reach_the_rivals_answer_is_not_run_again():
    mcts = DecisiveSearch([Proposal("2", 0.9, "visits")], movable_to=frozenset({"3"}))
    neural = FakeAgent(AgentName.NEURAL, [Proposal("5", 0.3, "policy")])
    result = await loop(mcts, neural).run("problem", budget(max_iterations=3))
    assert result.answer == "2"
    assert not result.consensus_reached
    assert result.iterations == 1 and len(mcts.rounds) == 1
    assert mcts.asked == [("2", frozenset({"5"}))]
    assert result.routes[-1].agents == ()
    assert "no agent can change its answer" in result.routes[-1].reason


async def test_a_search_that_can_reach_the_rivals_answer_iterates():
    mcts = DecisiveSearch([Proposal("2", 0.5, "visits"), Proposal("5", 0.6, "visits")],
                          movable_to=frozenset({"5"}))
    neural = FakeAgent(AgentName.NEURAL, [Proposal("5", 0.4, "policy")])
    result = await loop(mcts, neural).run("problem", budget(max_iterations=3))
    assert result.answer == "5" and result.consensus_reached
    assert result.iterations == 2 and len(mcts.rounds) == 2


async def test_verified_checker_answer_wins_over_the_majority():
    checker = FakeAgent(AgentName.CHECKER, [Proposal("7", 1.0, "exact", verified=True)])
    mcts = FakeAgent(AgentName.MCTS, [Proposal("3", 0.9, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("3", 0.9, "policy")])
    result = await loop(checker, mcts, neural).run("problem", budget())
    assert result.answer == "7"
    assert result.tally.verified and result.tally.confidence == 1.0
    assert result.consensus_reached
    assert result.iterations == 1
    assert len(mcts.rounds) == 1


async def test_excluded_answers_are_set_aside():
    checker = FakeAgent(AgentName.CHECKER, [Proposal(None, 0.0, "unsolved",
                                                     excluded=frozenset({"3"}))])
    mcts = FakeAgent(AgentName.MCTS, [Proposal("3", 0.9, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("6", 0.2, "policy")])
    result = await loop(checker, mcts, neural).run("problem", budget(max_iterations=1))
    assert result.answer == "6"
    assert AgentName.CHECKER not in result.agents  # abstained: no vote


async def test_failed_agent_is_left_out_and_the_others_answer():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("4", 0.8, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Unavailable("neural down")])
    result = await loop(mcts, neural).run("problem", budget())
    assert result.answer == "4"
    assert result.agents == (AgentName.MCTS,)
    assert [name for name, _ in result.failures] == [AgentName.NEURAL]


async def test_every_agent_failing_raises_the_failure():
    mcts = FakeAgent(AgentName.MCTS, [Unavailable("mcts down")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Unavailable("neural down")])
    with pytest.raises(Unavailable, match="mcts down"):
        await loop(mcts, neural).run("problem", budget())


async def test_only_abstentions_raise_failed_precondition():
    checker = FakeAgent(AgentName.CHECKER, [Proposal(None, 0.0, "not solved")])
    with pytest.raises(FailedPrecondition, match="not solved"):
        await loop(checker).run("problem", budget())


async def test_deadline_stops_a_slow_agent_with_deadline_exceeded():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("4", 0.8, "visits")], repeatable=True,
                     delay_s=5.0)
    with pytest.raises(DeadlineExceeded):
        await loop(mcts).run("problem", budget(seconds=0.05))


async def test_deadline_in_a_later_iteration_keeps_the_earlier_votes():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("2", 0.9, "visits"),
                                      DeadlineExceeded("search ran out of time")],
                     repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("5", 0.3, "policy")])
    result = await loop(mcts, neural).run("problem", budget(max_iterations=4))
    assert result.answer == "2"
    assert not result.consensus_reached
    assert [v.iteration for v in result.votes] == [1, 1]


async def test_spent_deadline_before_start_raises_deadline_exceeded():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("4", 0.8, "visits")], repeatable=True)
    with pytest.raises(DeadlineExceeded):
        await loop(mcts).run("problem", budget(seconds=-1.0))
    assert mcts.rounds == []


async def test_context_agent_runs_first_and_feeds_the_proposers():
    retrieval = FakeAgent(AgentName.RETRIEVAL,
                          [Proposal("doc-1", 0.7, "2 passages", detail=("p1", "p2"))],
                          role=Role.CONTEXT)
    llm = FakeAgent(AgentName.LLM, [Proposal("the answer", 0.7, "draft")])
    result = await loop(retrieval, llm).run("problem", budget())
    assert result.answer == "the answer"
    assert llm.rounds[0].context == ("p1", "p2")
    assert result.agents == (AgentName.RETRIEVAL, AgentName.LLM)
    assert [t.step for t in result.timings][:2] == ["retrieve", "route"]
    assert result.routes[0].features[9] == 1.0  # has_context


async def test_context_agent_failure_is_raised():
    retrieval = FakeAgent(AgentName.RETRIEVAL, [Unavailable("retrieval down")],
                          role=Role.CONTEXT)
    llm = FakeAgent(AgentName.LLM, [Proposal("x", 0.7, "draft")])
    with pytest.raises(Unavailable):
        await loop(retrieval, llm).run("problem", budget())
    assert llm.rounds == []


def test_aggregate_breaks_ties_toward_the_first_vote():
    votes = [Vote(AgentName.MCTS, "3", 0.5, 1.0, 1, ""),
             Vote(AgentName.NEURAL, "5", 0.5, 1.0, 1, "")]
    tally = aggregate(votes)
    assert tally.answer == "3" and not tally.agreed
    assert tally.consensus_score == pytest.approx(0.5)


def test_aggregate_respects_weights():
    votes = [Vote(AgentName.MCTS, "3", 0.5, 1.0, 1, ""),
             Vote(AgentName.NEURAL, "5", 0.5, 1.0, 1, "")]
    assert aggregate(votes, weights={AgentName.NEURAL: 2.0}).answer == "5"


class FirstAgent(FakeAgent):
    """A FakeAgent with the `SettlesFirst` hook; records what had run when it was called."""

    def __init__(self, name: AgentName, answers: list[Proposal | Exception], first: bool,
                 others: list[FakeAgent]) -> None:
        super().__init__(name, answers)
        self._first = first
        self._others = others
        self.others_started: list[int] = []

    def settles_first(self, problem) -> bool:
        return self._first

    async def propose(self, round_: Round) -> Proposal:
        self.others_started.append(sum(len(other.rounds) for other in self._others))
        return await super().propose(round_)


async def test_a_proof_with_its_value_from_the_first_agent_ends_the_round_without_the_others():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("3", 0.9, "visits")], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("3", 0.9, "policy")])
    checker = FirstAgent(AgentName.CHECKER, [Proposal("7", 1.0, "exact", value=1.0,
                                                      verified=True)], True, [mcts, neural])
    result = await loop(mcts, neural, checker).run("problem", budget())
    assert result.answer == "7"
    assert result.tally.verified and result.consensus_reached and result.iterations == 1
    assert checker.others_started == [0]
    assert mcts.rounds == [] and neural.rounds == []
    assert result.agents == (AgentName.CHECKER,)


@pytest.mark.parametrize("proposal", [
    Proposal("7", 1.0, "forced block", verified=True),  # proved move, value unknown
    Proposal(None, 0.0, "not solved within 16000 nodes"),  # abstains
])
async def test_the_others_run_after_the_first_agent_when_it_does_not_prove_the_value(proposal):
    mcts = FakeAgent(AgentName.MCTS, [Proposal("7", 0.9, "visits", value=0.4)], repeatable=True)
    neural = FakeAgent(AgentName.NEURAL, [Proposal("7", 0.9, "policy")])
    checker = FirstAgent(AgentName.CHECKER, [proposal], True, [mcts, neural])
    result = await loop(mcts, neural, checker).run("problem", budget())
    assert checker.others_started == [0]  # it still ran first
    assert len(mcts.rounds) == 1 and len(neural.rounds) == 1
    assert result.answer == "7" and result.iterations == 1
    assert AgentName.MCTS in result.agents and AgentName.NEURAL in result.agents


async def test_an_agent_that_does_not_settle_first_runs_beside_the_others():
    mcts = FakeAgent(AgentName.MCTS, [Proposal("3", 0.9, "visits")], repeatable=True)
    checker = FirstAgent(AgentName.CHECKER, [Proposal("7", 1.0, "exact", value=1.0,
                                                      verified=True)], False, [mcts])
    result = await loop(mcts, checker).run("problem", budget())
    assert result.answer == "7"
    assert len(mcts.rounds) == 1
    assert set(result.agents) == {AgentName.MCTS, AgentName.CHECKER}
