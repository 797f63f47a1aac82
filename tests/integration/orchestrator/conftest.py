"""A fake NeuralService for the HRM/TRM agents (grpc.aio on port 0) and the real orchestrator
wired to it; `served_eval`, `mcts-mesh eval` through a real orchestrator and a neural service."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from mesh.neural.v1 import neural_service_pb2 as neural_pb
from mesh.neural.v1 import neural_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from mcts_mesh import cli
from services.orchestrator.main import Wiring, build_servicers
from services.orchestrator.settings import OrchestratorSettings

REASONING_MODELS = [
    neural_pb.Model(name="connect4-pv", architecture="connect4_pv", version="c4"),
    neural_pb.Model(name="trm-sudoku6", architecture="trm", task="sudoku-6x6", version="t6"),
    neural_pb.Model(name="trm-maze9", architecture="trm", task="maze-9x9", version="m9"),
]


class FakeReasoningNeural(neural_service_pb2_grpc.NeuralServiceServicer):
    """Lists REASONING_MODELS; Solve answers `answers[grid]`, or echoes the grid (a wrong
    answer), with halt probability 0.7 after one segment."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self.requests: list[neural_pb.SolveRequest] = []

    async def ListModels(self, request, context):
        return neural_pb.ListModelsResponse(models=REASONING_MODELS)

    async def Solve(self, request, context):
        self.requests.append(request)
        model = next((m for m in REASONING_MODELS if m.name == request.model), None)
        if model is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown model {request.model}")
        grid = self.answers.get(request.grid, request.grid)
        return neural_pb.SolveResponse(
            grid=grid, segments=[neural_pb.SegmentPrediction(grid=grid, halt_probability=0.7)],
            segments_used=1, halt_probability=0.7, latency_ms=1.0, model=model)


class ReasoningMesh:
    """What `reasoning_mesh(**settings)` started: the fake, an aio stub, the orchestrator's
    address and its running server."""

    def __init__(self, fake, stub, target: str, server) -> None:
        self.fake = fake
        self.stub = stub
        self.target = target
        self.server = server


@pytest.fixture
async def reasoning_mesh():
    """A factory: starts the fake neural service and the orchestrator (settings overridden by
    keyword) and returns `(fake, stub)`; everything stops at teardown."""
    started = []

    async def start(**settings_fields):
        fake = FakeReasoningNeural()
        neural = await start_server("fake-neural", ServiceSettings(port=0), [Servicer(
            neural_service_pb2_grpc.add_NeuralServiceServicer_to_server, fake,
            "mesh.neural.v1.NeuralService")])
        settings = OrchestratorSettings(port=0, rest_port=-1, checker_max_nodes=1_000,
                                        neural_target=f"127.0.0.1:{neural.port}",
                                        **settings_fields)
        wiring = Wiring(settings)
        servicers, ready = await build_servicers(settings, wiring)
        orchestrator = await start_server("orchestrator", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{orchestrator.port}")
        started.append((neural, orchestrator, wiring, channel))
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        return ReasoningMesh(fake, stub, f"127.0.0.1:{orchestrator.port}", orchestrator)

    yield start
    for neural, orchestrator, wiring, channel in started:
        await channel.close()
        await orchestrator.stop(0)
        await wiring.aclose()
        await neural.stop(0)


@pytest.fixture
def served_eval(capsys):
    """An async `run(neural_port, halting_mode, args)`: starts the real orchestrator (port 0)
    wired to the neural service on `neural_port` with `reasoning_halting_mode=halting_mode`,
    runs `mcts-mesh --target ... eval *args --json` against it, checks it exits 0, stops the
    orchestrator, and returns the JSON lines it printed (the records, then the summary)."""

    async def run(neural_port: int, halting_mode: str, args: list[str]) -> list[dict]:
        settings = OrchestratorSettings(port=0, rest_port=-1,
                                        reasoning_halting_mode=halting_mode,
                                        neural_target=f"127.0.0.1:{neural_port}")
        wiring = Wiring(settings)
        servicers, ready = await build_servicers(settings, wiring)
        orchestrator = await start_server("orchestrator", settings, servicers, ready)
        try:
            capsys.readouterr()
            code = await asyncio.to_thread(cli.main, [
                "--target", f"127.0.0.1:{orchestrator.port}", "eval", *args, "--json"])
            assert code == 0
            return [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        finally:
            await orchestrator.stop(0)
            await wiring.aclose()

    return run
