"""The fuzz suite (tests/fuzz) with more cases than CI runs: hypothesis messages against every
gRPC method of every service and schemathesis against every REST route of `/openapi.json`, on a
mesh of real processes started by the tests.

`--examples N` sets the well-typed messages per gRPC method (a third as many malformed ones) and
`--rest-examples M` the positive cases per REST route (half as many negative). It prints pytest's
summary and the number of cases tried by kind, and exits with pytest's code.

Example:
    .venv/bin/python bench/fuzz.py --examples 400 --rest-examples 600
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=400,
                        help="well-typed hypothesis messages per gRPC method")
    parser.add_argument("--rest-examples", type=int, default=600,
                        help="positive schemathesis cases per REST route")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    env = {**os.environ, "MCTS_MESH_FUZZ_EXAMPLES": str(args.examples),
           "MCTS_MESH_FUZZ_REST_EXAMPLES": str(args.rest_examples)}
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rxXf",
         str(REPO_ROOT / "tests" / "fuzz"), *args.pytest_args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    lines = run.stdout.splitlines()
    summary = [line for line in lines if line.startswith(("fuzz cases tried", "FAILED", "XFAIL",
                                                          "XPASS"))]
    print("\n".join(summary + lines[-1:]))
    print(f"\n{args.examples} well-typed messages per gRPC method, {args.rest_examples} positive "
          f"cases per REST route; {elapsed / 60:.1f} min")
    if run.returncode not in (0, 1):
        print(run.stdout[-5000:] + run.stderr[-5000:], file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
