"""The MCTS agent: a client of mesh.mcts.v1.MctsService.Search (UCT with random rollouts).

Its confidence is the visit share of the best column. It is `repeatable`: the loop doubles the
round's simulations each iteration, and a later round continues the agent's earlier search rather
than starting again. It runs only the simulations still missing (4,000 in all at iteration 2 is
2,000 new ones), with the round's own seed, and merges the new tree with the earlier ones at the
root by summing each column's visits and values. This is root parallelisation spread over the
rounds (Chaslot, Winands & van den Herik 2008, "Parallel Monte-Carlo Tree Search", section 3.1;
the mcts service merges its root-parallel trees the same way). On a round that the cap on
simulations keeps at the earlier total, it runs that many again.

A further round runs only while it could bring agreement (`reconsiders`, the loop's `Reconsiders`
hook): while another agent's column has at least `close_ratio` of the visits of the search's most
visited one. This is the CLOSE criterion of MCTS time management (search longer only when the
runner-up is close to the most visited move; Baier & Winands 2016, "Time Management for Monte
Carlo Tree Search", IEEE TCIAIG 8(3)), with the other agents' columns as the runners-up. Far
behind, a column gains little from more simulations: on 1,324 Pons positions with at most 13
moves (Test_L1_*, Test_L2_*), of the round-1 disagreements with the network's column below 10% of
the best column's visits (82 at 2,000 simulations, 318 at 20,000), continuing to the third round
ended in agreement on 0 and 8 and changed the answer on 1 and 17, keeping the game-theoretic
outcome as often as the first round's answer did (one move gained and one lost, judged by the
exact solver; `experiments/2026-11-26-search-close-ratio/` measured it).
"""

from __future__ import annotations

import time

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.connect4_messages import position_message
from libs.errors import DeadlineExceeded, Unavailable, propagate
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.problems.connect_four import ConnectFourProblem


class MctsAgent:
    """Asks the mcts service for a search of the round's position.

    Args:
        stub: a MctsService stub over a channel from `libs.channels.open_channel`.
        deadline_s: seconds the searches of one request may take in all, counted from the run's
            start (`Round.started`); the request's deadline shortens it. Every round's Search
            thus carries the same deadline, by which the mcts service orders its waiting searches
            (earliest deadline first), so an older request's later round goes before a newer
            request's first.
        close_ratio: a further round runs only while another agent's column has at least this
            share of the best column's visits, in [0, 1] (see the module docstring); 0: on every
            disagreement.

    Raises:
        ValueError: `close_ratio` outside [0, 1].
    """

    name = AgentName.MCTS
    role = Role.PROPOSER
    repeatable = True

    def __init__(self, stub: mcts_service_pb2_grpc.MctsServiceStub, deadline_s: float,
                 close_ratio: float = 0.0) -> None:
        if not 0.0 <= close_ratio <= 1.0:
            raise ValueError("close_ratio must be in [0, 1]")
        self._stub = stub
        self._deadline_s = deadline_s
        self._close_ratio = close_ratio

    def reconsiders(self, proposal: Proposal, rivals: frozenset[str]) -> bool:
        """True when one of `rivals` (columns "1".."W" the other agents vote for) has at least
        `close_ratio` of the visits of `proposal`'s column in its search statistics (all the
        rounds' so far); always True at `close_ratio` 0 or without statistics.
        """
        statistics = proposal.detail
        if self._close_ratio <= 0.0 or not isinstance(statistics, common_pb2.SearchStatistics):
            return True
        visits = {str(action.action): action.visits for action in statistics.actions}
        best = visits.get(proposal.answer or "", 0)
        return any(visits.get(rival, 0) >= self._close_ratio * best for rival in rivals)

    async def propose(self, round_: Round) -> Proposal:
        """The most visited column; `detail` is the search's `SearchStatistics` message.

        Raises:
            DeadlineExceeded: no time left, or the search ran past its deadline.
            Unavailable: the mcts service is down, failed, or proposed an unplayable column.
        """
        problem: ConnectFourProblem = round_.problem
        now = time.monotonic()
        started = now if round_.started is None else round_.started
        timeout = min(round_.deadline, started + self._deadline_s) - now
        if timeout <= 0:
            raise DeadlineExceeded("mcts: no time left for a search")
        earlier = _earlier_statistics(round_)
        done = earlier.simulations if earlier is not None else 0
        simulations = round_.simulations - done
        if simulations < 1:  # the cap on simulations stopped the doubling: search as much again
            simulations = round_.simulations
        request = mcts_service_pb2.SearchRequest(
            game=mcts_service_pb2.GAME_CONNECT_FOUR,
            connect_four=position_message(problem.position),
            simulations=simulations,
            seed=round_.seed,
        )
        try:
            response = await self._stub.Search(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise propagate(error, "mcts") from error
        if str(response.best_action) not in problem.legal_answers():
            raise Unavailable(f"mcts proposed column {response.best_action}, which is not "
                              f"playable in {problem.position.moves!r}")
        statistics = response.statistics
        best_action = response.best_action
        if earlier is not None:
            statistics = merge_at_root(earlier, statistics)
            best_action = most_visited(statistics)
        visits = {action.action: action.visits for action in statistics.actions}
        total = sum(visits.values())
        best = visits.get(best_action, 0)
        confidence = best / total if total > 0 else 0.0
        return Proposal(str(best_action), confidence, f"visits {best}/{total}",
                        value=float(statistics.root_value), detail=statistics)


def _earlier_statistics(round_: Round) -> common_pb2.SearchStatistics | None:
    """This agent's search statistics from the run's earlier iterations, if it answered one."""
    earlier = round_.earlier.get(AgentName.MCTS)
    if earlier is None or not isinstance(earlier.detail, common_pb2.SearchStatistics):
        return None
    return earlier.detail


def merge_at_root(first: common_pb2.SearchStatistics, second: common_pb2.SearchStatistics
                  ) -> common_pb2.SearchStatistics:
    """Two independent searches of one position as one: each column's visits summed and its value
    averaged weighted by visits (root parallelisation; see the module docstring).

    Counts and times add up (simulations, tree size, elapsed ms, evaluations, ...), the depth is
    the deeper one's, the root value is the visit-weighted mean, `seed` is the first search's, and
    `simulations_per_second` is the total simulations over the total elapsed time.
    """
    merged = common_pb2.SearchStatistics()
    for name in _SUMMED:
        setattr(merged, name, getattr(first, name) + getattr(second, name))
    merged.max_depth = max(first.max_depth, second.max_depth)
    merged.threads = max(first.threads, second.threads)
    merged.tree_full = first.tree_full or second.tree_full
    merged.seed = first.seed
    if merged.elapsed_ms > 0:
        merged.simulations_per_second = merged.simulations / (merged.elapsed_ms / 1e3)
    merged.root_value = _weighted(first.root_value, first.simulations, second.root_value,
                                  second.simulations)
    columns: dict[int, list[common_pb2.ActionStatistics]] = {}
    for action in (*first.actions, *second.actions):
        columns.setdefault(action.action, []).append(action)
    for column in sorted(columns):
        parts = columns[column]
        visits = sum(part.visits for part in parts)
        value = sum(part.value * part.visits for part in parts) / visits if visits else 0.0
        merged.actions.add(action=column, visits=visits, value=value, prior=parts[-1].prior)
    return merged


def most_visited(statistics: common_pb2.SearchStatistics) -> int:
    """The column with the most visits; among equals the higher value, then the lower column."""
    best = max(statistics.actions, key=lambda a: (a.visits, a.value, -a.action))
    return best.action


def _weighted(a: float, weight_a: int, b: float, weight_b: int) -> float:
    total = weight_a + weight_b
    return (a * weight_a + b * weight_b) / total if total > 0 else 0.0


_SUMMED = ("simulations", "tree_size", "elapsed_ms", "collisions", "evaluations", "batches",
           "batch_selection_ms", "evaluation_ms", "batch_backup_ms", "transposition_hits",
           "selection_ms", "expansion_ms", "rollout_ms", "backup_ms", "wait_ms",
           "timed_simulations")
