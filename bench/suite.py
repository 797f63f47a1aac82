"""Runs the maintained benchmarks of bench/README.md one after the other: in full (`make bench`)
or each in its quick mode (`make bench-quick`: tiny sizes, a smoke run that they still work).

    .venv/bin/python bench/suite.py [--quick] [NAME ...]

NAME is a bench's file name without `.py` (default: every one in `BENCHES`). Each runs as its own
process with this Python, from the repository root; a failing bench does not stop the others.
At the end one line per bench gives its exit status and wall seconds; the exit status is 1 when
any bench failed. tests/unit/test_bench_quick.py runs every quick mode and checks that this list,
bench/README.md and the files in bench/ agree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

BENCHES: dict[str, tuple[str, ...]] = {
    "mcts": (),
    "selfplay": (),
    "connect4_solver": (),
    "neural_runtime": (),
    "batcher": (),
    "reasoning_inference": (),
    "train_speed": (),
    "solve_service": ("models/trm-sudoku6-b16",),
    "reasoning_models": ("--count", "500", "--mesh-count", "200"),
    "retrieval": (),
    "retrieval_parts": (),
    "retrieval_query": (),
    "retrieval_ingest": (),
    "router": (),
    "load": (),
    "overhead": (),
    "hardening": (),
    "access": (),
    "rest_cost": (),
    "gsm8k": (),
    "readiness": (),
    "ttft": (),
    "runs": (),
    "runs_faults": (),
    "runs_store": (),
}
"""Maintained benches by name, with the arguments every run of it takes (before `--quick`)."""

HELPERS: dict[str, str] = {
    "suite": "this runner",
    "mcts_python": "bench/mcts.py's pure-Python UCT peer",
    "mcts_mctx": "bench/mcts.py's mctx peer",
    "mcts_puct": "bench/mcts.py's batched PUCT with the MuZero-style MLP (also runnable alone)",
    "mcts_hop": "bench/mcts.py's gRPC hop row",
    "procstat": "a process's CPU seconds from /proc, for the benches that read the services'",
    "served": "one mesh service started for a bench",
    "fuzz": "the fuzz suite with more cases than CI runs (a harness, not a timing)",
}
"""Python files in bench/ that are not benches of their own, and what they are."""


def command(name: str, quick: bool) -> list[str]:
    """The command line that runs bench `name` (in quick mode when `quick`).

    Raises:
        KeyError: `name` is not in `BENCHES`.
    """
    return [sys.executable, str(BENCH_DIR / f"{name}.py"), *BENCHES[name],
            *(["--quick"] if quick else [])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each bench in its quick mode")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"of {', '.join(BENCHES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHES]
    if unknown:
        parser.error(f"not a maintained bench: {', '.join(unknown)}")
    results = []
    for name in args.names or list(BENCHES):
        line = command(name, args.quick)
        print(f"\n== {' '.join(line[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(line, cwd=REPO, check=False).returncode
        results.append((name, code, time.monotonic() - started))
    print(f"\n{'bench':<22} {'exit':>4} {'seconds':>8}")
    for name, code, seconds in results:
        print(f"{name:<22} {code:>4} {seconds:>8.1f}")
    return 1 if any(code for _, code, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
