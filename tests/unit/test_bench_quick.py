"""Every maintained bench still runs: its quick mode (`bench/suite.py --quick NAME`, what
`make bench-quick` runs) exits 0 and prints a table; and bench/README.md, bench/suite.py's list
and the files in bench/ agree, so a bench is not added, moved or dropped without the others.

Peers a bench cannot import (OpenSpiel, jax / mctx outside `make bench`) or a GPU torch does not see
are rows the bench itself reports as skipped; the test only needs the bench to finish."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
_SPEC = importlib.util.spec_from_file_location("bench_suite_under_test", BENCH_DIR / "suite.py")
suite = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(suite)  # bench/suite.py, the runner `make bench` uses

QUICK_TIMEOUT_S = 420
"""Seconds a quick run may take: the slowest start whole meshes (hardening.py starts two)."""

TABLE_ROW = re.compile(r"^\s*\S.*?(\s{2,}|\s*\|\s*)\S+.*?(\s{2,}|\s*\|\s*)\S+")
"""A line of at least three cells, separated by two or more spaces or by `|`."""


def has_table(text: str) -> bool:
    """True when `text` has a header and a row: two consecutive lines of three cells or more."""
    rows = [bool(TABLE_ROW.match(line)) for line in text.splitlines()]
    return any(a and b for a, b in zip(rows, rows[1:], strict=False))


def test_has_table_needs_two_rows_of_three_cells():
    assert has_table("name  rate  ratio\nours  2.0   1.0x\n")
    assert has_table("| a | b | c |\n|---|---|---|\n")
    assert not has_table("one line  of  cells\n")
    assert not has_table('{"ours": {"positions": 2}}\ndone\n')


def test_readme_suite_and_bench_folder_agree():
    readme = (BENCH_DIR / "README.md").read_text()
    listed = set(re.findall(r"^\| \[`(\w+)\.py`\]", readme, flags=re.MULTILINE))
    files = {path.stem for path in BENCH_DIR.glob("*.py")}
    assert listed == set(suite.BENCHES), "bench/README.md's table and bench/suite.py differ"
    assert files == set(suite.BENCHES) | set(suite.HELPERS), \
        "a file in bench/ is neither a maintained bench nor a helper (one-time studies go to " \
        "experiments/)"


@pytest.mark.slow
@pytest.mark.timeout(QUICK_TIMEOUT_S + 60)
@pytest.mark.parametrize("name", list(suite.BENCHES))
def test_quick_mode_runs_and_prints_a_table(name, repo_root):
    run = subprocess.run(suite.command(name, quick=True), cwd=repo_root, capture_output=True,
                         text=True, timeout=QUICK_TIMEOUT_S, check=False)
    assert run.returncode == 0, f"{name} --quick exited {run.returncode}:\n{run.stderr[-4000:]}"
    assert has_table(run.stdout), f"{name} --quick printed no table:\n{run.stdout[-4000:]}"
