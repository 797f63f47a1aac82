"""Connect Four on a board of W columns and H rows (7x6 by default, `Board`): bitboard rules, an
exact solver, and the outcome check.

Shared by the mcts service (rollouts), neural (encoding), the orchestrator (the exact checker)
and the CLI. Moves are written as in Pascal Pons' benchmark files: one character '1'..'W' per
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
from libs.connect4.geometry import STANDARD, Board

__all__ = ["HEIGHT", "STANDARD", "WIDTH", "Board", "IllegalPosition", "Position", "encode",
           "legal_mask"]
