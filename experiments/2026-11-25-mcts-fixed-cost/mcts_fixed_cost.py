"""The fixed cost of one search: CPU time per `uct_search` call against the CPU time of its
numba kernel, in the same process, at sizes from 1 simulation up.

What a search does once rather than per simulation (checking the arguments, taking a tree from the
pool, building the kernel's records, numba's dispatch of the kernel call, summing the root's
statistics) shows as the gap between the two columns; at 1 simulation it is nearly all of the
search. Connect Four from the empty board, UCT, c = 2, uniformly random rollouts (as
`bench/mcts.py`'s first rows), one thread. Each size runs `--repeats` batches of searches after
a warm-up; the table shows medians of the per-search process CPU time (`time.process_time`,
which a loaded machine disturbs less than wall time), the kernel's part, the rest, and the rest
as a share of the search.

To compare two versions of the code, run this script under each (e.g. an older commit exported
with `git archive` and put first on `PYTHONPATH`), alternating, and compare the "rest" column.

    .venv/bin/python experiments/2026-11-25-mcts-fixed-cost/mcts_fixed_cost.py \\
        [--sizes 1,10,100,1000,20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import services.mcts.rollout.engine as engine
from services.mcts.rollout.connect4 import uct_search

EXPLORATION = 2.0


class _TimedKernel:
    """Wraps the engine's sequential kernel, adding each call's process CPU time to `seconds`."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.seconds = 0.0

    def __call__(self, *args):
        started = time.process_time()
        try:
            return self.kernel(*args)
        finally:
            self.seconds += time.process_time() - started


def measure(simulations: int, searches: int, repeats: int, timed: _TimedKernel
            ) -> tuple[float, float]:
    """Medians over `repeats` batches of `searches` searches: (CPU us per search, kernel CPU us
    per search)."""
    totals, kernels = [], []
    for repeat in range(repeats):
        timed.seconds = 0.0
        started = time.process_time()
        for seed in range(searches):
            uct_search("", simulations, EXPLORATION, seed + repeat * searches,
                       decisive_rollouts=False)
        totals.append((time.process_time() - started) / searches * 1e6)
        kernels.append(timed.seconds / searches * 1e6)
    return statistics.median(totals), statistics.median(kernels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100,1000,20000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget-simulations", type=int, default=200_000,
                        help="simulations per batch of searches (at least 3 searches)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    timed = _TimedKernel(engine.run_simulations)
    engine.run_simulations = timed  # `grow` calls the kernel through this module's name
    for simulations in sizes:  # compile, and fill the pool with a tree of each size
        uct_search("", simulations, EXPLORATION, 0, decisive_rollouts=False)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| simulations | CPU us / search | kernel us | rest us | rest / search |")
    print("|---|---|---|---|---|")
    for simulations in sizes:
        searches = max(3, args.budget_simulations // max(simulations, 200))
        total, kernel = measure(simulations, searches, args.repeats, timed)
        rest = total - kernel
        print(f"| {simulations:,} | {total:,.1f} | {kernel:,.1f} | {rest:,.1f} | "
              f"{rest / total:.1%} |")


if __name__ == "__main__":
    main()
