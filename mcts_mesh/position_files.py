"""Connect Four position files of the command line: what `eval connect4` reads.

Formats (chosen per file by its first non-blank character: `{` means JSON Lines):
- Pons lines, as in Pascal Pons' benchmark files: `<moves> <score>` per line, the columns played
  from the empty board and the exact score for the player to move (positive wins, negative loses,
  0 draws; only its sign is used), on the standard 7x6 board; an optional third field states
  another board as `<columns>x<rows>`: `2213 1 5x4`. Blank lines and lines starting with `#` are
  skipped. A Pons line cannot hold the empty start position (its moves are an empty string).
- JSON Lines: one object a line, `{"moves": "2213", "board": {"columns": 5, "rows": 4},
  "score": 1}`; `board` unset means 7x6 (the `ConnectFourBoard` message of the protos, as the
  REST front writes it), `moves` may be "" (the start position), and `score` may be left out:
  the exact solver then labels the position on this side (small boards take milliseconds; the
  full 7x6 board near its start may take minutes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from libs.connect4.board import IllegalPosition, Position
from libs.connect4.geometry import STANDARD, Board
from libs.errors import MeshError


class PositionFileError(MeshError):
    """A line of a position file that does not parse; the message names the file and line (the
    command line prints it as one line, exit status 2)."""

    def __init__(self, path: str | Path, number: int, message: str) -> None:
        super().__init__(f"{path}:{number}: {message}")


@dataclass(frozen=True)
class PositionRow:
    """One position of a file.

    Attributes:
        moves: the columns played from the empty board ('1'..'9', first player first).
        board: its board.
        score: the exact score for the player to move (Pons' convention on that board), or None
            when the file gives none.
    """

    moves: str
    board: Board = STANDARD
    score: int | None = None

    @property
    def board_name(self) -> str:
        """'WxH', e.g. '5x4'."""
        return self.board.name


def read_positions(path: str | Path, limit: int | None = None) -> list[PositionRow]:
    """The positions of a Pons-lines or JSON Lines file (see the module docstring), in file order;
    `limit` keeps the first N. Every position is checked to be legal and unfinished on its board.

    Raises:
        FileNotFoundError: no such file.
        PositionFileError: a line that does not parse, a board outside the limits, a position that
            is illegal or finished on its board.
    """
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.lstrip()
    parse = _json_line if stripped.startswith("{") else _pons_line
    rows: list[PositionRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        if limit is not None and len(rows) >= limit:
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            row = parse(line)
            _check(row)
        except (ValueError, TypeError, IllegalPosition) as error:
            message = error.message if isinstance(error, IllegalPosition) else str(error)
            raise PositionFileError(path, number, message) from error
        rows.append(row)
    return rows


def _pons_line(line: str) -> PositionRow:
    """`<moves> <score> [<columns>x<rows>]`."""
    fields = line.split()
    if len(fields) not in (2, 3):
        raise ValueError(f"expected '<moves> <score>' or '<moves> <score> <columns>x<rows>', "
                         f"got {line!r}")
    board = Board.parse(fields[2]) if len(fields) == 3 else STANDARD
    return PositionRow(fields[0], board, int(fields[1]))


def _json_line(line: str) -> PositionRow:
    """`{"moves": ..., "board": {"columns": W, "rows": H}, "score": S}` (board, score optional)."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    unknown = sorted(set(record) - {"moves", "board", "score"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; a line has moves, board, "
                         f"score")
    moves = record.get("moves", "")
    if not isinstance(moves, str):
        raise ValueError(f"moves must be a string, got {moves!r}")
    board = STANDARD
    if record.get("board") is not None:
        size = record["board"]
        if not isinstance(size, dict) or set(size) - {"columns", "rows"}:
            raise ValueError(f"board must be {{\"columns\": W, \"rows\": H}}, got {size!r}")
        board = Board(size.get("columns", 0), size.get("rows", 0))
    score = record.get("score")
    if score is not None and (not isinstance(score, int) or isinstance(score, bool)):
        raise ValueError(f"score must be an integer, got {score!r}")
    return PositionRow(moves, board, score)


def _check(row: PositionRow) -> None:
    """Raises IllegalPosition when `row` is illegal or finished on its board."""
    position = Position.from_moves(row.moves, row.board)
    if position.is_finished:
        raise IllegalPosition(f"{row.moves!r} on {row.board.name} is a finished game")
