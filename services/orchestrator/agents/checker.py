"""The exact checker for Connect Four: immediate wins, forced blocks and exact solving.

In order, from cheapest: a move that wins at once (exact); two or more opponent threats that no
move stops (the position is lost, exact); then the negamax solver of `libs.connect4.solver` scores
every column within a node budget: when it finishes, the best column with the exact score (which
happens when few moves remain or the position is tactically simple); when it does not, a single
forced block, or a column already proved winning, is still a proved move. Otherwise the checker
abstains and names the columns that hand the opponent an immediate win, so the vote sets them
aside.

Every proposal it makes is verified: the move keeps the position's game-theoretic outcome.
"""

from __future__ import annotations

import asyncio

from libs.connect4.board import (
    H1,
    WIDTH,
    non_losing_moves,
    possible,
    winning_cells,
)
from libs.connect4.solver import MoveScores, best_moves
from services.orchestrator.connect_four import ConnectFourProblem, ExactResult
from services.orchestrator.consensus import Proposal, Round
from services.orchestrator.routing import AgentName, Role


def _columns(cells: int) -> list[int]:
    """Columns (0..6) that hold at least one bit of `cells`."""
    return [col for col in range(WIDTH) if (cells >> (col * H1)) & ((1 << H1) - 1)]


def _describe(score: int, num_moves: int) -> str:
    """"win in k" / "loss in k" / "draw", k counting the winner's stones still to play."""
    if score == 0:
        return "draw"
    # Pons: |score| = 22 - s when the winner wins with their s-th stone.
    stones = 22 - abs(score)
    if score > 0:
        return f"win in {stones - num_moves // 2} (score {score:+d})"
    return f"loss in {stones - (num_moves - num_moves // 2)} (score {score:+d})"


class CheckerAgent:
    """The checker as a consensus-loop agent (in-process, deterministic: runs once per request).

    Args:
        max_nodes: solver node budget per request (negamax nodes); 0 skips solving.
    """

    name = AgentName.CHECKER
    role = Role.PROPOSER
    repeatable = False

    def __init__(self, max_nodes: int) -> None:
        if max_nodes < 0:
            raise ValueError("max_nodes must be >= 0")
        self._max_nodes = max_nodes

    async def propose(self, round_: Round) -> Proposal:
        """A verified column, or an abstention with the columns that lose at once.

        The solver runs in a worker thread (its numba kernel releases the GIL); its node budget
        bounds the time, the loop's deadline bounds the wait.
        """
        problem: ConnectFourProblem = round_.problem
        quick = self.tactics(problem)
        if quick is not None:
            return quick
        scores = None
        if self._max_nodes > 0:
            scores = await asyncio.to_thread(best_moves, problem.position, self._max_nodes)
        return self.from_scores(problem, scores)

    @staticmethod
    def tactics(problem: ConnectFourProblem) -> Proposal | None:
        """An immediate win, or a position lost to two threats; None when neither."""
        pos = problem.position
        n = pos.num_moves
        for col in pos.legal_columns():
            if pos.is_winning_move(col):
                score = (43 - n) // 2
                return Proposal(str(col + 1), 1.0, "exact: wins at once", value=1.0,
                                verified=True, detail=ExactResult(score=score))
        threats = winning_cells(pos.position ^ pos.mask, pos.mask) & possible(pos.mask)
        threat_columns = _columns(threats)
        if len(threat_columns) >= 2:
            score = -((42 - n) // 2)
            col = threat_columns[0]
            return Proposal(str(col + 1), 1.0,
                            f"exact: lost, the opponent threatens columns "
                            f"{', '.join(str(c + 1) for c in threat_columns)}",
                            value=-1.0, verified=True, detail=ExactResult(score=score))
        return None

    @staticmethod
    def from_scores(problem: ConnectFourProblem, scores: MoveScores | None) -> Proposal:
        """The proposal from the solver's per-column scores (None: not solved at all)."""
        pos = problem.position
        n = pos.num_moves
        column_scores = scores.scores if scores is not None else ()
        nodes = scores.nodes if scores is not None else 0
        if scores is not None and scores.complete:
            best = scores.best_columns()
            # Among equally scored columns prefer the centre (Pons' move order).
            col = min(best, key=lambda c: abs(c - 4))
            score = max(s for s in scores.scores if s is not None)
            return Proposal(str(col), 1.0, f"exact: {_describe(score, n)}, {nodes} nodes",
                            value=float((score > 0) - (score < 0)), verified=True,
                            detail=ExactResult(score, column_scores, nodes))
        threats = winning_cells(pos.position ^ pos.mask, pos.mask) & possible(pos.mask)
        threat_columns = _columns(threats)
        if len(threat_columns) == 1:
            col = threat_columns[0] + 1
            return Proposal(str(col), 1.0, "forced: blocks the opponent's only threat",
                            verified=True, detail=ExactResult(None, column_scores, nodes))
        known_wins = [(s, col + 1) for col, s in enumerate(column_scores)
                      if s is not None and s > 0]
        if known_wins:
            score, col = max(known_wins)
            return Proposal(str(col), 1.0, f"proved win (score {score:+d} after the move)",
                            value=1.0, verified=True,
                            detail=ExactResult(None, column_scores, nodes))
        safe = _columns(non_losing_moves(pos.position, pos.mask))
        legal = pos.legal_columns()
        losing = frozenset(str(c + 1) for c in legal if c not in safe) if safe else frozenset()
        budget = f"not solved within {nodes} nodes" if scores is not None else "solving is off"
        return Proposal(None, 0.0, f"{budget}; {len(losing)} column(s) lose at once",
                        excluded=losing, detail=ExactResult(None, column_scores, nodes))
