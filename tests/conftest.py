"""Fixtures every kind of test shares: where the repository and the evaluation data sets are, the
bench scripts some unit tests import, SIGINT's default disposition, and longer timeouts for the
tests that start whole meshes."""

from __future__ import annotations

import importlib.util
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from libs.data import MissingDataset, dataset

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO_ROOT / "bench"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


class DataSets:
    """The data sets as `libs.data` finds them (`MCTS_MESH_DATA_DIR` or `../shared/data`, then the
    repository's `data/`): `data_dir / "connect4-pons"` is that set's folder. A set found nowhere
    skips the test, with `libs.data.MissingDataset`'s one line as the reason (which set, where it
    looked, how to provide it), so a clone without `../shared` runs the default suite."""

    def __truediv__(self, name: str) -> Path:
        try:
            return dataset(name)
        except MissingDataset as missing:
            pytest.skip(str(missing))


def data_set(name: str) -> Path:
    """`DataSets() / name`, for module-level constants: the set's folder, or a skip."""
    return DataSets() / name


@pytest.fixture(scope="session")
def data_dir() -> DataSets:
    """The data sets (`DataSets`): real, public evaluation data, used as it is."""
    return DataSets()


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread during the test (Python's
    `default_int_handler`, what an interactive shell gives); the previous disposition comes back
    after it. Tests that send themselves SIGINT need it: a background job (`nohup make test &`)
    starts with SIGINT ignored, and Python then keeps it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be restored
            signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def bench_script() -> Iterator[Callable[[str], ModuleType]]:
    """`bench_script("load")` imports `bench/load.py` under a name of its own (registered in
    sys.modules, where dataclasses look their module up), with `bench/` on the import path for the
    script's sibling modules; both are undone at the end of the session. A name with a slash is a
    path from the repository root without `.py`: a study under `experiments/`."""
    loaded: list[str] = []
    sys.path.append(str(BENCH_DIR))

    def load(name: str) -> ModuleType:
        path = REPO_ROOT / f"{name}.py" if "/" in name else BENCH_DIR / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"bench_{path.stem}_under_test", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        loaded.append(spec.name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)
    sys.path.remove(str(BENCH_DIR))


MESH_DIRS = ("e2e", "fault", "fuzz")
"""Test folders whose modules start whole meshes (waiting up to 600 s for them to be ready)."""
MESH_TEST_TIMEOUT_S = 1200
"""pytest-timeout's limit for a test in MESH_DIRS: the first test of a module also pays for the
mesh its fixture starts; every other test gets pyproject's default (600 s). A test's own
`@pytest.mark.timeout` wins over both."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = REPO_ROOT / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in MESH_DIRS and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(MESH_TEST_TIMEOUT_S))
