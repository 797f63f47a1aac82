"""The exact Connect Four solver on Pascal Pons' benchmark files: mean time and nodes per position.

As in Pons' test protocol (blog.gamesolver.org, part 2), every line of a file is solved and checked
against its score; weak mode checks the sign only. Each position starts from an empty
transposition table (every `Solver` call does), as in Pons' benchmark.

    .venv/bin/python bench/connect4_solver.py [--limit N] [--json] [FILE ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from libs.connect4.pons import read_pons
from libs.connect4.solver import Solver

PONS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "connect4-pons"
DEFAULT_FILES = ["Test_L3_R1", "Test_L2_R1", "Test_L2_R2", "Test_L1_R1"]


def run(rows: list[tuple[str, int]], weak: bool) -> dict[str, float]:
    solver = Solver()
    wrong = 0
    nodes = 0
    elapsed = 0.0
    for moves, score in rows:
        started = time.perf_counter()
        result = solver.solve(moves, weak=weak)
        elapsed += time.perf_counter() - started
        nodes += result.nodes
        expected = (score > 0) - (score < 0) if weak else score
        wrong += result.score != expected
    return {"positions": len(rows), "wrong": wrong, "mean_ms": 1e3 * elapsed / len(rows),
            "mean_nodes": nodes / len(rows), "nodes_per_s": nodes / elapsed if elapsed else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.files, args.limit = args.files[:2], args.limit or 10
    # Compile (or load numba's cache) first, on a position a few moves from the end.
    Solver(table_size=(1 << 18) + 3).solve("2252576253462244111563365343671351441")
    out = []
    print(f"{'file':<12} {'mode':<7} {'positions':>9} {'wrong':>6} {'mean ms':>9} "
          f"{'mean nodes':>11} {'nodes/s':>11}")
    for name in args.files:
        rows = read_pons(PONS_DIR / name, args.limit)
        for weak in (False, True):
            row = {"file": name, "mode": "weak" if weak else "strong", **run(rows, weak)}
            out.append(row)
            print(f"{name:<12} {row['mode']:<7} {row['positions']:>9} {row['wrong']:>6} "
                  f"{row['mean_ms']:>9.3f} {row['mean_nodes']:>11,.0f} "
                  f"{row['nodes_per_s']:>11,.0f}", flush=True)
    if args.json:
        print(json.dumps({"solver": out}))


if __name__ == "__main__":
    main()
