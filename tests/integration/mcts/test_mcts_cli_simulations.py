"""`mcts-mesh solve/eval connect4 --agents mcts --simulations N` against a real mcts service and a
real orchestrator (grpc.aio, port 0, in this process; the CLI in a subprocess): every search runs
exactly N simulations in one iteration, and the JSON reports the engine's simulations per second.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from libs.data import REPO_DATA
from libs.server import start_server
from services.mcts.main import build_servicers as mcts_servicers
from services.mcts.settings import MctsSettings
from services.orchestrator.main import Wiring
from services.orchestrator.main import build_servicers as orchestrator_servicers
from services.orchestrator.settings import OrchestratorSettings

SIMULATIONS = 3_000
PONS = REPO_DATA / "connect4-pons"


@pytest.fixture
async def target():
    mcts_settings = MctsSettings(port=0, max_threads=1)
    servicers, ready = await mcts_servicers(mcts_settings)
    mcts = await start_server("mcts", mcts_settings, servicers, ready)
    unused = "127.0.0.1:9"  # agents other than mcts are never asked
    settings = OrchestratorSettings(port=0, rest_port=-1, mcts_target=f"127.0.0.1:{mcts.port}",
                                    neural_target=unused, retrieval_target=unused,
                                    llm_target=unused)
    wiring = Wiring(settings)
    servicers, ready = await orchestrator_servicers(settings, wiring)
    orchestrator = await start_server("orchestrator", settings, servicers, ready)
    yield f"127.0.0.1:{orchestrator.port}"
    await orchestrator.stop(0)
    await wiring.aclose()
    await mcts.stop(0)


async def cli(target: str, *args: str) -> list[dict]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mcts_mesh.cli", "--target", target, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode == 0, stderr.decode()
    return [json.loads(line) for line in stdout.decode().splitlines()]


async def test_solve_reports_the_engines_rate_for_exactly_the_requested_simulations(target):
    [record] = await cli(target, "solve", "connect4", "", "--agents", "mcts",
                         "--simulations", str(SIMULATIONS), "--json")
    assert record["agents"] == ["mcts"] and record["iterations"] == 1
    assert record["simulations"] == SIMULATIONS
    assert record["simulations_per_second"] > 0


async def test_eval_searches_every_position_with_exactly_the_requested_simulations(target):
    lines = await cli(target, "eval", "connect4", str(PONS / "Test_L3_R1"), "--limit", "2",
                      "--agents", "mcts", "--simulations", str(SIMULATIONS), "--json")
    records, summary = lines[:-1], lines[-1]
    assert summary["positions"] == 2 and summary["mean_simulations_per_second"] > 0
    for record in records:
        assert record["iterations"] == 1 and record["agents"] == ["mcts"]
        assert record["simulations"] == SIMULATIONS
