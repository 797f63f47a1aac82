"""Fixtures of the Connect Four tests: Pascal Pons' benchmark files in the repository's data/."""

from __future__ import annotations

import pytest

from libs.connect4 import pons
from libs.data import REPO_DATA

PONS_DIR = REPO_DATA / "connect4-pons"


def _read_pons(name: str, limit: int) -> list[tuple[str, int]]:
    """The first `limit` (moves, score) lines of a Pons benchmark file, read as they are."""
    path = PONS_DIR / name
    if not path.is_file():
        pytest.fail(f"benchmark file {path} is missing (expected beside the repository)")
    return pons.read_pons(path, limit)


@pytest.fixture(scope="session")
def read_pons():
    """`read_pons(name, limit)`: the first `limit` (moves, score) lines of a Pons benchmark file."""
    return _read_pons
