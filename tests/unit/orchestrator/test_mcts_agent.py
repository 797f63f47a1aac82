"""The mcts agent: later rounds continue the earlier search (root parallelisation over rounds)."""

from __future__ import annotations

import time

import pytest
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2

from libs.connect4.board import Position
from services.orchestrator.agents.mcts import MctsAgent, merge_at_root, most_visited
from services.orchestrator.loop.types import AgentName, Proposal, Round
from services.orchestrator.problems.connect_four import ConnectFourProblem


def statistics(visits: dict[int, int], values: dict[int, float], *, seed: int = 0,
               elapsed_ms: float = 2.0, depth: int = 5) -> common_pb2.SearchStatistics:
    total = sum(visits.values())
    root = sum(values[c] * v for c, v in visits.items()) / total
    return common_pb2.SearchStatistics(
        simulations=total, tree_size=total + 1, max_depth=depth, root_value=root,
        elapsed_ms=elapsed_ms, seed=seed, threads=1,
        actions=[common_pb2.ActionStatistics(action=c, visits=v, value=values[c], prior=1 / 7)
                 for c, v in visits.items()])


def test_merging_sums_visits_and_weights_values_by_visits():
    first = statistics({3: 60, 4: 40}, {3: 0.5, 4: 0.0}, seed=11, elapsed_ms=1.0, depth=7)
    second = statistics({3: 20, 4: 130, 5: 50}, {3: 0.2, 4: 0.3, 5: -0.4}, seed=12,
                        elapsed_ms=3.0, depth=9)
    merged = merge_at_root(first, second)
    actions = {a.action: (a.visits, a.value) for a in merged.actions}
    assert actions[3] == (80, pytest.approx((60 * 0.5 + 20 * 0.2) / 80))
    assert actions[4] == (170, pytest.approx(130 * 0.3 / 170))
    assert actions[5] == (50, pytest.approx(-0.4))
    assert merged.simulations == 300 and merged.tree_size == 302
    assert merged.elapsed_ms == 4.0 and merged.simulations_per_second == pytest.approx(75_000)
    assert merged.max_depth == 9 and merged.seed == 11
    assert merged.root_value == pytest.approx((first.root_value * 100
                                               + second.root_value * 200) / 300)
    # The first search alone preferred column 3; merged, column 4 has the most visits.
    assert most_visited(first) == 3 and most_visited(merged) == 4


def test_ties_go_to_the_higher_value_then_the_lower_column():
    assert most_visited(statistics({2: 50, 6: 50}, {2: 0.1, 6: 0.3})) == 6
    assert most_visited(statistics({2: 50, 6: 50}, {2: 0.3, 6: 0.3})) == 2


class RecordingStub:
    """A MctsService stub that answers every search with the visits it is given."""

    def __init__(self, visits: dict[int, int], values: dict[int, float]) -> None:
        self.requests: list[mcts_service_pb2.SearchRequest] = []
        self.deadlines: list[float] = []
        self._visits = visits
        self._values = values

    async def Search(self, request, timeout):  # noqa: N802 - the stub's method name
        self.requests.append(request)
        self.deadlines.append(time.monotonic() + timeout)
        scale = request.simulations / sum(self._visits.values())
        visits = {c: round(v * scale) for c, v in self._visits.items()}
        found = statistics(visits, self._values, seed=request.seed)
        return mcts_service_pb2.SearchResponse(best_action=most_visited(found), statistics=found)


def round_(iteration: int, simulations: int, earlier: dict | None = None) -> Round:
    return Round(problem=ConnectFourProblem(Position.from_moves("4453")), iteration=iteration,
                 simulations=simulations, seed=100 + iteration - 1,
                 deadline=time.monotonic() + 10, earlier=earlier or {})


async def test_a_later_round_searches_only_the_missing_simulations_and_merges():
    stub = RecordingStub({3: 300, 4: 700}, {3: 0.1, 4: 0.2})
    agent = MctsAgent(stub, deadline_s=5)
    first = await agent.propose(round_(1, 2_000))
    second = await agent.propose(round_(2, 4_000, {AgentName.MCTS: first}))
    assert [(r.simulations, r.seed) for r in stub.requests] == [(2_000, 100), (2_000, 101)]
    assert second.detail.simulations == 4_000
    assert {a.action: a.visits for a in second.detail.actions} == {3: 1_200, 4: 2_800}
    assert second.answer == "4" and second.confidence == pytest.approx(0.7)
    assert second.rationale == "visits 2800/4000"


async def test_a_round_capped_at_the_earlier_total_searches_as_much_again():
    stub = RecordingStub({3: 500, 4: 500}, {3: 0.0, 4: 0.1})
    agent = MctsAgent(stub, deadline_s=5)
    first = await agent.propose(round_(1, 1_000))
    again = await agent.propose(round_(2, 1_000, {AgentName.MCTS: first}))
    assert [r.simulations for r in stub.requests] == [1_000, 1_000]
    assert again.detail.simulations == 2_000


async def test_another_agents_earlier_proposal_is_not_continued():
    stub = RecordingStub({3: 500, 4: 500}, {3: 0.0, 4: 0.1})
    neural = Proposal("4", 0.5, "policy 0.50", detail=None)
    await MctsAgent(stub, deadline_s=5).propose(round_(2, 4_000, {AgentName.NEURAL: neural}))
    assert [r.simulations for r in stub.requests] == [4_000]


def search_proposal(visits: dict[int, int]) -> Proposal:
    found = statistics(visits, {c: 0.0 for c in visits})
    return Proposal(str(most_visited(found)), 0.5, "visits", detail=found)


def test_a_close_rival_column_is_worth_another_round_and_a_far_one_is_not():
    agent = MctsAgent(RecordingStub({4: 1}, {4: 0.0}), deadline_s=5, close_ratio=0.1)
    proposal = search_proposal({4: 1_800, 3: 180, 5: 20})
    assert agent.reconsiders(proposal, frozenset({"3"}))  # 180 >= 0.1 * 1,800
    assert not agent.reconsiders(proposal, frozenset({"5"}))  # 20 < 180
    assert not agent.reconsiders(proposal, frozenset({"7"}))  # never visited
    assert agent.reconsiders(proposal, frozenset({"5", "3"}))  # any close rival
    assert not agent.reconsiders(proposal, frozenset())


def test_close_ratio_zero_always_searches_again_and_out_of_range_is_refused():
    agent = MctsAgent(RecordingStub({4: 1}, {4: 0.0}), deadline_s=5, close_ratio=0.0)
    assert agent.reconsiders(search_proposal({4: 1_999, 5: 1}), frozenset({"7"}))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="close_ratio"):
            MctsAgent(RecordingStub({4: 1}, {4: 0.0}), deadline_s=5, close_ratio=bad)


def test_the_setting_is_checked_and_defaults_to_a_tenth():
    from services.orchestrator.settings import OrchestratorSettings

    assert OrchestratorSettings().search_close_ratio == 0.1
    with pytest.raises(ValueError, match="search_close_ratio"):
        OrchestratorSettings(search_close_ratio=1.5)


async def test_every_round_of_a_run_carries_one_deadline_from_the_runs_start():
    stub = RecordingStub({4: 1}, {4: 0.0})
    agent = MctsAgent(stub, deadline_s=5)
    started = time.monotonic() - 2  # the run began two seconds ago
    far = time.monotonic() + 60
    problem = ConnectFourProblem(Position.from_moves("4453"))
    for iteration in (1, 2):
        await agent.propose(Round(problem, iteration, 100, 0, far, started=started))
    # Both rounds' searches must end 5 s after the run's start (3 s from now), not 5 s from each
    # call: the mcts service orders waiting searches by that deadline.
    assert stub.deadlines[0] == pytest.approx(started + 5, abs=0.05)
    assert stub.deadlines[1] == pytest.approx(started + 5, abs=0.05)
    # The request's own deadline, when nearer, wins.
    near = time.monotonic() + 1
    await agent.propose(Round(problem, 1, 100, 0, near, started=started))
    assert stub.deadlines[2] == pytest.approx(near, abs=0.05)
