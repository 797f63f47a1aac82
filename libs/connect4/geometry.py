"""The size of a Connect Four board: W columns and H rows (the standard game is 7x6).

Every bitboard of `libs.connect4` packs a board into an int64 the way Pascal Pons' solver does
(blog.gamesolver.org, part 6): `H + 1` bits per column (H cells plus one sentinel bit above the
top), column `col` (0..W-1, left to right) at bits `col * (H + 1) .. col * (H + 1) + H - 1`, row 0
at the bottom. The kernels of a board size are compiled for that size (`libs.connect4.rules`), so
the standard board pays nothing for the others.

Limits: at least 4 columns and 4 rows (four in a row must fit both ways, as in every board the
project uses: 4x4, 5x4, 6x5, 7x6) and at most 42 cells in at most 49 bits, so that the solver's
keys (`position + mask`) and scores keep the bounds of the 7x6 board.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SIDE = 4
"""Fewest columns and fewest rows."""
MAX_CELLS = 42
"""Most cells (the standard board's)."""
MAX_BITS = 49
"""Most bits of a bitboard, `(rows + 1) * columns` (the standard board's)."""


@dataclass(frozen=True, order=True)
class Board:
    """A board size.

    Attributes:
        columns: W, the number of columns (moves are columns 1..W in move strings).
        rows: H, the number of rows.
    Raises:
        ValueError: a size outside the limits of the module docstring (the message names the
            field: `columns` or `rows`).
    """

    columns: int = 7
    rows: int = 6

    def __post_init__(self) -> None:
        for name, value in (("columns", self.columns), ("rows", self.rows)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if value < MIN_SIDE:
                raise ValueError(f"{name} is {value}; a board needs at least {MIN_SIDE}")
        if self.columns > 9:
            raise ValueError(f"columns is {self.columns}; move strings allow at most 9")
        if self.cells > MAX_CELLS or self.bits > MAX_BITS:
            raise ValueError(f"rows is {self.rows}: a {self.name} board has {self.cells} cells "
                             f"in {self.bits} bits; at most {MAX_CELLS} cells in {MAX_BITS} bits")

    @property
    def cells(self) -> int:
        """W * H."""
        return self.columns * self.rows

    @property
    def bits(self) -> int:
        """Bits of a bitboard, (H + 1) * W."""
        return (self.rows + 1) * self.columns

    @property
    def name(self) -> str:
        """'WxH', e.g. '7x6'."""
        return f"{self.columns}x{self.rows}"

    @staticmethod
    def parse(text: str) -> Board:
        """A board from 'WxH' (e.g. '5x4').

        Raises:
            ValueError: not of the form 'WxH' with integers, or a size outside the limits.
        """
        parts = str(text).lower().split("x")
        if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
            raise ValueError(f"board {text!r} is not of the form WxH (e.g. 7x6)")
        return Board(int(parts[0]), int(parts[1]))


STANDARD = Board(7, 6)
"""The standard 7x6 board, the default everywhere."""
