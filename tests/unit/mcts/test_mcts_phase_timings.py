"""Honest phase timings: on a loaded machine (threads hashing beside the search, more of them than
cores) the phases of a search never add up to more than its wall time, for one thread, root
parallelisation and tree parallelisation."""

from __future__ import annotations

import hashlib
import threading

import pytest

from services.mcts.native.cycle_clock import AVAILABLE
from services.mcts.rollout.connect4 import uct_search

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="no cycle counter: phases are not timed")


@pytest.fixture
def busy_machine():
    """Three threads burning CPU (hashlib releases the GIL on large buffers) until the test ends."""
    done = threading.Event()
    block = bytes(1 << 20)

    def burn() -> None:
        while not done.is_set():
            hashlib.sha256(block).digest()

    burners = [threading.Thread(target=burn, daemon=True) for _ in range(3)]
    for burner in burners:
        burner.start()
    yield
    done.set()
    for burner in burners:
        burner.join()


@pytest.mark.parametrize(("threads", "parallelism"), [(1, "root"), (2, "root"), (2, "tree")])
def test_phases_never_sum_above_the_wall_time(busy_machine, threads, parallelism):
    for seed in range(3):
        result = uct_search("4453", 20_000, seed=seed, threads=threads, parallelism=parallelism)
        phases = (result.selection_s + result.expansion_s + result.rollout_s + result.backup_s
                  + result.wait_s)
        assert result.timed_simulations > 0
        assert 0 < phases <= result.elapsed_s, (phases, result.elapsed_s)
        assert min(result.selection_s, result.rollout_s, result.backup_s) > 0
