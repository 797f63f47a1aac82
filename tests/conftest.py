"""Fixtures every kind of test shares: where the repository and the shared evaluation data are."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """`../shared/data` beside the repository (real, public evaluation data; used as it is)."""
    if not DATA_DIR.is_dir():
        pytest.fail(f"shared data not found at {DATA_DIR}")
    return DATA_DIR
