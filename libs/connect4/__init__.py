"""Connect Four on the 7x6 board: bitboard rules, an exact solver, and the outcome check.

Shared by the mcts service (rollouts), neural (encoding), the orchestrator (the exact checker)
and the CLI. Moves are written as in Pascal Pons' benchmark files: one character '1'..'7' per
move, first player first.
"""

from libs.connect4.board import (
    HEIGHT,
    WIDTH,
    IllegalPosition,
    Position,
    encode,
    legal_mask,
)

__all__ = ["HEIGHT", "WIDTH", "IllegalPosition", "Position", "encode", "legal_mask"]
