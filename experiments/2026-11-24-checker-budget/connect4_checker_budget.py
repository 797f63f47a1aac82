"""How often the checker's exact solve finishes, by moves played and node budget (Pons' files).

The orchestrator's checker scores every column of a position (`Solver.best_moves`) within a node
budget. This script samples `--per-file` positions evenly from each of Pons' six benchmark files,
solves each with a cold transposition table up to `--max-nodes`, and prints, per band of moves
played, the share of positions finished within each budget of the ladder and the median time of
those that finished. It is the measurement behind the checker's budget schedule
(`services.orchestrator.agents.checker.CheckerBudget`: nothing below 8 moves, then a budget that
grows 8x per move played).

    .venv/bin/python experiments/2026-11-24-checker-budget/connect4_checker_budget.py \\
        [--per-file 60] [--max-nodes 2000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

from libs.connect4.pons import read_pons
from libs.connect4.solver import Solver

REPO = Path(__file__).resolve().parents[2]
FILES = ["Test_L1_R1", "Test_L1_R2", "Test_L1_R3", "Test_L2_R1", "Test_L2_R2", "Test_L3_R1"]
LADDER = [10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000]


def pons_dir(given: str | None) -> Path:
    """The directory of Pons' files: `given`, else `shared/data/connect4-pons` beside the
    repository (or beside its parent, for a git worktree one level further down)."""
    if given:
        return Path(given)
    for base in (REPO.parent, REPO.parent.parent):
        candidate = base / "shared" / "data" / "connect4-pons"
        if candidate.is_dir():
            return candidate
    raise SystemExit("Pons' files not found; pass --data DIR")


def measure(directory: Path, per_file: int, max_nodes: int) -> list[dict]:
    """One record per sampled position: file, moves played, nodes, finished, ms."""
    solver = Solver()
    solver.best_moves("4444443", 10_000)  # compile or load numba's cache
    records = []
    for name in FILES:
        rows = read_pons(directory / name)
        step = max(1, len(rows) // per_file)
        for moves, _ in rows[::step][:per_file]:
            started = time.perf_counter()
            scores = solver.best_moves(moves, max_nodes)
            records.append({"file": name, "moves": len(moves), "nodes": scores.nodes,
                            "complete": scores.complete,
                            "ms": (time.perf_counter() - started) * 1e3})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-file", type=int, default=60)
    parser.add_argument("--max-nodes", type=int, default=2_000_000)
    parser.add_argument("--data", default=None, help="directory of Pons' files")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    records = measure(pons_dir(args.data), args.per_file, args.max_nodes)
    ladder = [b for b in LADDER if b <= args.max_nodes]
    bands: dict[int, list[dict]] = defaultdict(list)
    for record in records:
        bands[min(record["moves"] // 2 * 2, 30)].append(record)
    print(f"{'moves':<6} {'positions':>9} " + " ".join(f"{b // 1000:>6}k" for b in ladder)
          + f" {'median ms (finished)':>21}")
    table = []
    for band in sorted(bands):
        rows = bands[band]
        rates = [sum(r["complete"] and r["nodes"] <= b for r in rows) / len(rows) for b in ladder]
        finished = [r["ms"] for r in rows if r["complete"]]
        median = statistics.median(finished) if finished else None
        label = f"{band}-{band + 1}" if band < 30 else "30+"
        table.append({"moves": label, "positions": len(rows), "finished_within": dict(
            zip(map(str, ladder), rates, strict=True)), "median_ms": median})
        print(f"{label:<6} {len(rows):>9} " + " ".join(f"{r:>7.0%}" for r in rates)
              + f" {median if median is not None else float('nan'):>21.1f}")
    nodes = sum(r["nodes"] for r in records)
    seconds = sum(r["ms"] for r in records) / 1e3
    print(f"{len(records)} positions, {nodes / seconds / 1e6:.2f} M nodes/s")
    if args.json:
        print(json.dumps({"bands": table, "nodes_per_s": nodes / seconds}))


if __name__ == "__main__":
    main()
