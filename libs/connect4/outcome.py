"""Does a move keep the game-theoretic outcome? The accuracy measure of the Connect Four benchmark.

A move keeps the outcome when the position after it has the same result (win, draw or loss) for the
player who moved as the position before it had for them; in a lost position every move keeps it.
The result after the move is decided by the exact solver in weak mode (`libs.connect4.solver`).
"""

from __future__ import annotations

from libs.connect4.board import IllegalPosition, Position
from libs.connect4.geometry import STANDARD, Board
from libs.connect4.solver import Solver, default_solver

JUDGE_MAX_NODES = 2_000_000_000
"""Node budget for judging a move: a guard against a hang, not a limit meant to bind (positions
after a move in Pons' Begin-Hard file need up to about 60M nodes, 7-20 s)."""


class SolverBudgetExhausted(Exception):
    """The solver ran out of nodes before deciding the position after the move."""


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def keeps_outcome(moves: str, column: int, score_before: int,
                  max_nodes: int = JUDGE_MAX_NODES, solver: Solver | None = None,
                  board: Board = STANDARD) -> bool:
    """True when playing `column` in the position `moves` keeps its game-theoretic result.

    Args:
        moves: the position before the move (Pons move string).
        column: the move, 1..W.
        score_before: the exact score of the position before the move for the player to move (the
            benchmark file's score; only its sign is used).
        max_nodes: node budget of the solver for the position after the move.
        solver: the solver to use; None uses this thread's default solver.
        board: the board size (7x6 by default).
    Returns:
        False for an illegal move (column outside 1..W or full); True in a lost position;
        otherwise whether the result after the move (for the mover) equals `sign(score_before)`.
    Raises:
        IllegalPosition: `moves` is malformed, illegal or a finished game.
        SolverBudgetExhausted: `max_nodes` did not suffice to solve the position after the move.
    """
    before = Position.from_moves(moves, board)
    if before.is_finished:
        raise IllegalPosition("the game is over: there is no move to judge")
    if not 1 <= column <= board.columns or not before.can_play(column - 1):
        return False
    expected = _sign(score_before)
    if expected < 0:
        return True
    after = before.play(column - 1)
    if after.won:
        result = 1
    elif after.is_full:
        result = 0
    else:
        solved = (solver or default_solver()).solve(after, max_nodes=max_nodes, weak=True)
        if solved.score is None:
            raise SolverBudgetExhausted(
                f"{max_nodes} nodes did not decide the position after {moves!r} + {column}"
            )
        result = -solved.score
    return result == expected
