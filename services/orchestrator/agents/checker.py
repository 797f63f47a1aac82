"""The exact checker for Connect Four: immediate wins, forced blocks and exact solving.

In order, from cheapest: a move that wins at once (exact); two or more opponent threats that no
move stops (the position is lost, exact); then the negamax solver of `libs.connect4.solver` scores
every column within a node budget: when it finishes, the best column with the exact score (which
happens when few moves remain or the position is tactically simple); when it does not, a single
forced block, or a column already proved winning, is still a proved move. Otherwise the checker
abstains and names the columns that hand the opponent an immediate win, so the vote sets them
aside.

Every proposal it makes is verified: the move keeps the position's game-theoretic outcome.

Budget. Solving costs what is left of the game: measured on 360 positions of Pons' six benchmark
files (experiments/2026-11-24-checker-budget, 2,000,000 nodes at most, about 300 ms of CPU), no
position with fewer than 8 moves played finished; of those with 8-11 moves 6-67% did, most of them
cheaply (at 9 moves 6 of the 9 that finished needed under 8,000 nodes); from 12 moves 88-100% did,
with a median of 120,000-390,000 nodes at 12-15 moves. An unfinished solve still often proves a
column winning, and early: on the 34 positions with fewer than 8 moves among `bench/load.py`'s
early Connect Four workload (Pons' Begin files), 2,000 nodes (about 0.7 ms) proved the move of 13,
each of which then needs neither the search nor the network. So the node budget follows the moves
played: `early_nodes` below `min_moves`, then `base_nodes`, growing 8x per further move up to
`max_nodes` (2,000 nodes at 8 moves, 16,000 at 9, 128,000 at 10, 1,024,000 at 11, 2,000,000 from
12); and `time_budget_s` stops the search in any case (`CancelToken`), as does a request that goes
away. Below `score_min_moves` (10 by default: where the budget is at most 16,000 nodes) a solve
stops at the first column it proves winning: the move and the outcome (WIN) are proved, and the
other columns would only tell how fast the win comes. On the same 64 positions this halved the
solver's nodes (1.1 -> 0.5 ms of CPU per request) with the same 37 proved and the same 12 exact
scores: columns that hand the opponent an immediate win are still scored without search, so a
forced block that wins stays exact. The search runs in a worker thread with the GIL released, so the
event loop and the other agents run meanwhile: one of `SOLVER_THREADS` threads (one per core), so
that concurrent requests never run more solvers than there are cores (more would only share them)
and the solvers' transposition tables (about 25 MB each, one per thread) stay bounded in memory.
A request waiting for a free thread spends its time budget waiting. Each request starts from an
empty table (`libs.connect4.solver`), so its answer depends neither on which thread ran it nor on
the requests before it.

Boards. A position states its board (7x6 unless another); the tactics, the solver and the scores
are those of its board (Pons' convention on C cells: C / 2 + 1 minus the winner's stone count).
The budget of a position on a smaller board is that of the 7x6 position with as many empty cells
(`budget_moves`): every position of a 5x4 board gets the full budget and is solved in well under
it, beside the other agents rather than before them.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from libs.connect4.board import Position
from libs.connect4.geometry import STANDARD, Board
from libs.connect4.solver import CancelToken, MoveScores, best_moves
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.problems.connect_four import ConnectFourProblem, ExactResult


def _columns(cells: int, board: Board) -> list[int]:
    """Columns (0..W-1) of `board` that hold at least one bit of the bitboard `cells`."""
    h1 = board.rows + 1
    return [col for col in range(board.columns) if (cells >> (col * h1)) & ((1 << h1) - 1)]


def _threat_columns(pos: Position) -> list[int]:
    """The columns where the opponent of the player to move would make four in a row now."""
    kernels = pos.rules
    threats = kernels.winning_cells(pos.position ^ pos.mask, pos.mask) & kernels.possible(pos.mask)
    return _columns(threats, pos.board)


def _describe(score: int, num_moves: int, cells: int = STANDARD.cells) -> str:
    """"win in k" / "loss in k" / "draw", k counting the winner's stones still to play, on a
    board of `cells` cells."""
    if score == 0:
        return "draw"
    # Pons: |score| = C/2 + 1 - s when the winner wins with their s-th stone (22 - s on 7x6).
    stones = cells // 2 + 1 - abs(score)
    if score > 0:
        return f"win in {stones - num_moves // 2} (score {score:+d})"
    return f"loss in {stones - (num_moves - num_moves // 2)} (score {score:+d})"


SOLVER_THREADS = os.cpu_count() or 1
"""Threads that run the checker's solver, shared by every request of the process."""
_SOLVER_POOL = ThreadPoolExecutor(max_workers=SOLVER_THREADS, thread_name_prefix="checker")
_PREPARED: set[Board] = {STANDARD}
"""Boards whose kernels this process compiled (7x6: `warm_up_solvers`, before SERVING)."""


async def prepare_board(position: Position) -> None:
    """Compiles the tactics' and the solver's kernels of `position`'s board in a solver thread,
    once per board and process (numba compiles a board size's kernels on their first call, a few
    seconds), so neither the event loop nor a request's time budget pays for it."""
    if position.board not in _PREPARED:
        await asyncio.get_running_loop().run_in_executor(_SOLVER_POOL, best_moves, position, 1)
        _PREPARED.add(position.board)


async def warm_up_solvers(moves: str, max_nodes: int) -> int:
    """Starts every solver thread, each with its table, by solving `moves` on each at once (the
    numba kernels compile on the first); returns the nodes one solve took. The orchestrator calls
    it before it reports SERVING, so its memory is all there from the start."""
    loop = asyncio.get_running_loop()
    results = await asyncio.gather(*(loop.run_in_executor(_SOLVER_POOL, best_moves, moves,
                                                          max_nodes)
                                     for _ in range(SOLVER_THREADS)))
    return results[0].nodes


GROWTH_BITS = 3
"""The node budget grows 8x (3 bits) per move played beyond `CheckerBudget.min_moves`."""


def budget_moves(position: Position) -> int:
    """The moves played by which the budget is read: on the standard board the moves played, on
    a smaller board those of a 7x6 position with as many empty cells (what solving costs follows
    what is left of the game), so every position of a 5x4 board (20 cells) reads as one with 22
    or more moves played."""
    return position.num_moves + STANDARD.cells - position.board.cells


@dataclass(frozen=True)
class CheckerBudget:
    """How much exact solving the checker spends on a position (see the module docstring).

    Attributes:
        max_nodes: negamax nodes at most, at any depth; 0 turns solving off.
        time_budget_s: seconds of solving at most (None: only nodes bound it).
        min_moves: below this many moves played the checker solves with `early_nodes` only.
        base_nodes: the budget at `min_moves` moves, 8x per further move; None means
            `max_nodes` at every depth from `min_moves` on.
        early_nodes: the budget below `min_moves` moves (at most `max_nodes`); 0: only the
            tactics run there.
        score_min_moves: from this many moves played on, a solve that proves a column winning
            goes on to the other columns for the exact score (how fast the win comes); below, it
            stops at the first winning column: the move and the outcome are proved, and the
            score was out of the budget's reach there anyway. 0: always go on.
    """

    max_nodes: int = 2_000_000
    time_budget_s: float | None = None
    min_moves: int = 0
    base_nodes: int | None = None
    early_nodes: int = 0
    score_min_moves: int = 0

    def __post_init__(self) -> None:
        if self.max_nodes < 0 or self.min_moves < 0 or self.early_nodes < 0 \
                or self.score_min_moves < 0:
            raise ValueError("max_nodes, min_moves, early_nodes and score_min_moves must be >= 0")
        if self.base_nodes is not None and self.base_nodes < 1:
            raise ValueError("base_nodes must be >= 1")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError("time_budget_s must be positive")

    def nodes_for(self, num_moves: int) -> int:
        """The node budget of a position with `num_moves` stones played (0: do not solve)."""
        if self.max_nodes == 0:
            return 0
        if num_moves < self.min_moves:
            return min(self.early_nodes, self.max_nodes)
        if self.base_nodes is None:
            return self.max_nodes
        steps = min(num_moves - self.min_moves, 20)
        return min(self.max_nodes, self.base_nodes << (GROWTH_BITS * steps))


class CheckerAgent:
    """The checker as a consensus-loop agent (in-process, deterministic: runs once per request).

    Args:
        budget: a `CheckerBudget`, or a plain node budget per request (negamax nodes at every
            depth, no time limit); 0 skips solving.
        first_max_nodes: where the position's node budget is at most this many nodes, the
            checker runs before the round's other agents (`consensus.SettlesFirst`), and a move
            it proves with the position's value ends the round without them; None: never first.
    """

    name = AgentName.CHECKER
    role = Role.PROPOSER
    repeatable = False

    def __init__(self, budget: CheckerBudget | int, first_max_nodes: int | None = None) -> None:
        self._budget = budget if isinstance(budget, CheckerBudget) \
            else CheckerBudget(max_nodes=budget)
        if first_max_nodes is not None and first_max_nodes < 0:
            raise ValueError("first_max_nodes must be >= 0")
        self._first_max_nodes = first_max_nodes

    def settles_first(self, problem: ConnectFourProblem) -> bool:
        """True where this position's node budget is at most `first_max_nodes` (positions the
        checker only runs its tactics on count as 0 nodes)."""
        return self._first_max_nodes is not None and \
            self._budget.nodes_for(budget_moves(problem.position)) <= self._first_max_nodes

    async def propose(self, round_: Round) -> Proposal:
        """A verified column, or an abstention with the columns that lose at once.

        The solver runs in a worker thread (its numba kernel releases the GIL) for at most the
        position's node budget, the time budget and the round's remaining time, whichever ends
        first; a cancelled call stops the solver at once.
        """
        problem: ConnectFourProblem = round_.problem
        await prepare_board(problem.position)
        quick = self.tactics(problem)
        if quick is not None:
            return quick
        nodes = self._budget.nodes_for(budget_moves(problem.position))
        if nodes == 0:
            return self.from_scores(problem, None, self._skipped(problem))
        seconds = round_.remaining_s()
        if self._budget.time_budget_s is not None:
            seconds = min(seconds, self._budget.time_budget_s)
        stop_at_win = budget_moves(problem.position) < self._budget.score_min_moves
        cancel = CancelToken()
        timer = asyncio.get_running_loop().call_later(seconds, cancel.cancel)
        try:
            scores = await asyncio.get_running_loop().run_in_executor(
                _SOLVER_POOL, best_moves, problem.position, nodes, False, cancel, stop_at_win)
        except asyncio.CancelledError:
            cancel.cancel()
            raise
        finally:
            timer.cancel()
        note = None
        if cancel.cancelled and not scores.complete:
            note = f"not solved within {seconds * 1e3:.0f} ms ({scores.nodes} nodes)"
        return self.from_scores(problem, scores, note)

    def _skipped(self, problem: ConnectFourProblem) -> str:
        n = problem.position.num_moves
        if self._budget.max_nodes == 0:
            return "solving is off"
        return (f"not solved: {n} moves played, fewer than {self._budget.min_moves} "
                f"(too far from the end to finish in budget)")

    @staticmethod
    def tactics(problem: ConnectFourProblem) -> Proposal | None:
        """An immediate win, or a position lost to two threats; None when neither."""
        pos = problem.position
        n, cells = pos.num_moves, pos.board.cells
        for col in problem.legal_columns:
            if pos.rules.is_winning_move(pos.position, pos.mask, col):
                score = (cells + 1 - n) // 2
                return Proposal(str(col + 1), 1.0, "exact: wins at once", value=1.0,
                                verified=True, detail=ExactResult(score=score))
        threat_columns = _threat_columns(pos)
        if len(threat_columns) >= 2:
            score = -((cells - n) // 2)
            col = threat_columns[0]
            return Proposal(str(col + 1), 1.0,
                            f"exact: lost, the opponent threatens columns "
                            f"{', '.join(str(c + 1) for c in threat_columns)}",
                            value=-1.0, verified=True, detail=ExactResult(score=score))
        return None

    @staticmethod
    def from_scores(problem: ConnectFourProblem, scores: MoveScores | None,
                    note: str | None = None) -> Proposal:
        """The proposal from the solver's per-column scores (None: not solved at all); `note`
        says why it is incomplete when it abstains."""
        pos = problem.position
        n = pos.num_moves
        column_scores = scores.scores if scores is not None else ()
        nodes = scores.nodes if scores is not None else 0
        if scores is not None and scores.complete:
            best = scores.best_columns()
            # Among equally scored columns prefer the centre (Pons' move order); columns 1..W.
            col = min(best, key=lambda c: abs(2 * c - pos.board.columns - 1))
            score = max(s for s in scores.scores if s is not None)
            return Proposal(str(col), 1.0,
                            f"exact: {_describe(score, n, pos.board.cells)}, {nodes} nodes",
                            value=float((score > 0) - (score < 0)), verified=True,
                            detail=ExactResult(score, column_scores, nodes))
        # Before the forced block: where the opponent has one threat, a column proved winning can
        # only be the block, and the proof also gives the position's value.
        known_wins = [(s, col + 1) for col, s in enumerate(column_scores)
                      if s is not None and s > 0]
        if known_wins:
            score, col = max(known_wins)
            return Proposal(str(col), 1.0, f"proved win (score {score:+d} after the move)",
                            value=1.0, verified=True,
                            detail=ExactResult(None, column_scores, nodes))
        threat_columns = _threat_columns(pos)
        if len(threat_columns) == 1:
            col = threat_columns[0] + 1
            return Proposal(str(col), 1.0, "forced: blocks the opponent's only threat",
                            verified=True, detail=ExactResult(None, column_scores, nodes))
        safe = _columns(pos.rules.non_losing_moves(pos.position, pos.mask), pos.board)
        legal = problem.legal_columns
        losing = frozenset(str(c + 1) for c in legal if c not in safe) if safe else frozenset()
        budget = note or (f"not solved within {nodes} nodes" if scores is not None
                          else "solving is off")
        return Proposal(None, 0.0, f"{budget}; {len(losing)} column(s) lose at once",
                        excluded=losing, detail=ExactResult(None, column_scores, nodes))
