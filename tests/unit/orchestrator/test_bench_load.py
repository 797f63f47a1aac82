"""bench/load.py's CPU-per-request table: what it reads from /proc and how it divides.

No timing is asserted: only that the CPU counter moves with work done, that a gone process gives
None instead of a failure, and the arithmetic of the table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest


@pytest.fixture(scope="module")
def load(bench_script):
    return bench_script("load")


def test_cpu_seconds_follow_the_work_a_process_does(load):
    before = load.cpu_seconds(os.getpid())
    spent = time.process_time()
    while time.process_time() - spent < 0.3:
        pass
    after = load.cpu_seconds(os.getpid())
    assert before is not None and after is not None
    assert after - before >= 0.2  # /proc counts in clock ticks (10 ms)


def test_a_process_that_is_gone_has_no_cpu_seconds(load):
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert load.cpu_seconds(process.pid) is None


def test_cpu_per_request_divides_each_service_and_sums_them(load):
    before = {"mcts": 10.0, "neural": 5.0}
    after = {"mcts": 12.0, "neural": 5.5}
    assert load.cpu_ms_per_request(before, after, 500) == {"mcts": 4.0, "neural": 1.0,
                                                            "all": 5.0}
    gone = load.cpu_ms_per_request(before, {"mcts": 12.0, "neural": None}, 500)
    assert gone == {"mcts": 4.0, "neural": None, "all": None}
    assert load.cpu_ms_per_request(before, after, 0)["all"] is None


def test_the_cpu_table_has_a_row_per_mesh_run(load, capsys):
    load.print_cpu([("grpc", 32, {"mcts": 2.5, "neural": None, "all": None})])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| transport | concurrency | CPU ms per request: mcts | neural | all |"
    assert lines[2] == "| grpc | 32 | 2.50 | n/a | n/a |"


def _tally(load, requests: int, latency_s: float):
    tally = load.Tally(elapsed_s=1.0)
    for _ in range(requests):
        tally.add(latency_s, "OK")
    return tally


def test_rests_share_is_judged_only_with_the_aiohttp_client(load, capsys):
    rows = [("grpc", 32, _tally(load, 300, 0.1)), ("rest", 32, _tally(load, 200, 0.1))]
    load.print_targets(rows, "aiohttp")
    assert "| REST at 32 >= 70% of gRPC | 67% | NO |" in capsys.readouterr().out
    load.print_targets(rows, "httpx")
    assert ("| REST at 32 >= 70% of gRPC | 67% (httpx client) | not judged: install aiohttp |"
            in capsys.readouterr().out)
