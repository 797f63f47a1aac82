"""Reader of Pascal Pons' Connect Four benchmark files (`../shared/data/connect4-pons/`).

Each line is `<moves> <score>`: the columns 1-7 played from the empty board and the exact score for
the player to move (positive wins, 22 minus the winner's stone count; negative loses; 0 draws).
"""

from __future__ import annotations

from pathlib import Path


def read_pons(path: Path, limit: int | None = None) -> list[tuple[str, int]]:
    """The (moves, score) pairs of a benchmark file, in file order; `limit` keeps the first N.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not `<moves> <score>`.
    """
    rows: list[tuple[str, int]] = []
    with Path(path).open() as handle:
        for number, line in enumerate(handle, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != 2:
                raise ValueError(f"{path}:{number}: expected '<moves> <score>', got {line!r}")
            rows.append((fields[0], int(fields[1])))
    return rows
