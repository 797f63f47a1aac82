"""Fixtures of the Connect Four tests: Pascal Pons' benchmark files in ../shared/data."""

from __future__ import annotations

from pathlib import Path

import pytest

PONS_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "connect4-pons"


def _read_pons(name: str, limit: int) -> list[tuple[str, int]]:
    """The first `limit` (moves, score) lines of a Pons benchmark file, read as they are."""
    path = PONS_DIR / name
    if not path.is_file():
        pytest.fail(f"benchmark file {path} is missing (expected beside the repository)")
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            moves, score = line.split(" ")
            rows.append((moves, int(score)))
        if len(rows) == limit:
            break
    return rows


@pytest.fixture(scope="session")
def read_pons():
    """`read_pons(name, limit)`: the first `limit` (moves, score) lines of a Pons benchmark file."""
    return _read_pons
