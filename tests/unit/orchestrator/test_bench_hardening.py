"""bench/hardening.py's pure parts: which settings each side gets and the arithmetic of its table.
No mesh is started and no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def hardening(bench_script):
    return bench_script("hardening")


def test_only_the_after_side_gets_budgets_and_the_mesh_token(hardening, tmp_path):
    before = hardening.side_env("before", tmp_path, "t" * 32)
    after = hardening.side_env("after", tmp_path, "t" * 32)
    for env in (before, after):
        assert env["ORCHESTRATOR_REQUIRE_API_KEY"] == "true"
        assert env["ORCHESTRATOR_API_KEYS_FILE"] == str(tmp_path / "keys.json")
        assert Path(env["RETRIEVAL_ONNX_PATH"]).is_absolute()
    tokens = {name for name in after if name.endswith("MESH_TOKEN")}
    assert tokens == {"MCTS_MESH_TOKEN", "NEURAL_MESH_TOKEN", "RETRIEVAL_MESH_TOKEN",
                      "LLM_MESH_TOKEN", "ORCHESTRATOR_MESH_TOKEN"}
    assert all(after[name] == "t" * 32 for name in tokens)
    assert not any("MESH_TOKEN" in name or "BUDGET" in name for name in before)
    assert "{" not in "".join(after.values())  # every placeholder filled


def test_rows_give_percentiles_differences_and_ratios(hardening):
    latency, cpu = {}, {}
    for workload in hardening.WORKLOADS:
        for transport in hardening.TRANSPORTS:
            latency[(workload, transport, "before")] = [float(v) for v in range(1000, 0, -1)]
            latency[(workload, transport, "after")] = [v + 0.5 for v in range(1, 1001)]
            cpu[(workload, transport, "before")] = 2000.0
            cpu[(workload, transport, "after")] = 3000.0
    rows = hardening.rows_of(latency, cpu)
    assert len(rows) == 4
    row = rows[0]
    assert (row["before_p50_ms"], row["after_p50_ms"]) == (500.5, 501.0)
    assert (row["before_p99_ms"], row["after_p99_ms"]) == (991.0, 991.5)  # the 991st of 1,000
    assert row["added_p50_ms"] == pytest.approx(0.5)
    assert row["ratio_p50"] == pytest.approx(501.0 / 500.5)
    assert (row["before_cpu_ms"], row["after_cpu_ms"], row["ratio_cpu"]) == (2.0, 3.0, 1.5)
