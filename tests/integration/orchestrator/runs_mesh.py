"""Test doubles and start-up for durable runs: fake mcts and neural services whose answers are
obvious (the search votes column 2 with 60% of its visits and column 5 with 40%, the network
votes 5, so a solve with both iterates to its max_iterations), and the real orchestrator with its
run store, workers and access control on loopback."""

from __future__ import annotations

import asyncio

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc, run_service_pb2_grpc

from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.access import open_access
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.main import Wiring, build_servicers, open_runs
from services.orchestrator.settings import OrchestratorSettings

SEARCH_VISITS = {2: 60, 5: 40}
AGENTS = [orchestrator_pb.AGENT_MCTS, orchestrator_pb.AGENT_NEURAL]


def three_rounds(moves: str = "4") -> orchestrator_pb.SolveProblemRequest:
    """A Connect Four solve by the search and the network, which disagree for three rounds."""
    return orchestrator_pb.SolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves=moves), agents=AGENTS,
        simulations=100, max_iterations=3, seed=5)


class FakeSearch(mcts_service_pb2_grpc.MctsServiceServicer):
    """Answers SEARCH_VISITS scaled to the request's simulations. While `hold` is clear, a
    search waits for it; `cancelled` counts searches whose caller went away while waiting. With
    `pause_after` set to n, the search after the n-th clears `hold` (it and later ones wait)."""

    def __init__(self) -> None:
        self.requests: list[mcts_service_pb2.SearchRequest] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.waiting = 0
        self.cancelled = 0
        self.pause_after: int | None = None

    async def Search(self, request, context):
        self.requests.append(request)
        if self.pause_after is not None and len(self.requests) > self.pause_after:
            self.pause_after = None
            self.hold.clear()
        if not self.hold.is_set():
            self.waiting += 1
            try:
                await self.hold.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            finally:
                self.waiting -= 1
        total = sum(SEARCH_VISITS.values())
        statistics = common_pb2.SearchStatistics(simulations=request.simulations)
        for column, visits in SEARCH_VISITS.items():
            statistics.actions.add(action=column, visits=visits * request.simulations // total,
                                   value=0.0)
        return mcts_service_pb2.SearchResponse(best_action=2, statistics=statistics)


class FakeNetwork(neural_service_pb2_grpc.NeuralServiceServicer):
    """Votes column 5 with probability 0.6."""

    async def EvaluatePositions(self, request, context):
        policy = [0.05, 0.1, 0.05, 0.1, 0.6, 0.05, 0.05]
        return neural_service_pb2.EvaluatePositionsResponse(evaluations=[
            neural_service_pb2.PositionEvaluation(policy=policy, value=0.1)
            for _ in request.positions])


async def start_backends():
    """One server on loopback with the fake search and network; returns (server, search)."""
    search = FakeSearch()
    server = await start_server("fake-backends", ServiceSettings(port=0), [
        Servicer(mcts_service_pb2_grpc.add_MctsServiceServicer_to_server, search,
                 "mesh.mcts.v1.MctsService"),
        Servicer(neural_service_pb2_grpc.add_NeuralServiceServicer_to_server, FakeNetwork(),
                 "mesh.neural.v1.NeuralService")])
    return server, search


class RunsOrchestrator:
    """A started orchestrator with durable runs: `runs` (RunService) and `solves`
    (OrchestratorService) stubs on one channel, each call's metadata from `key`."""

    def __init__(self, server, access, runs, wiring) -> None:
        self.server, self.access, self.runs_wiring, self.wiring = server, access, runs, wiring
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        self.runs = run_service_pb2_grpc.RunServiceStub(self.channel)
        self.solves = orchestrator_service_pb2_grpc.OrchestratorServiceStub(self.channel)

    @property
    def store(self):
        return self.runs_wiring.store

    async def close(self) -> None:
        await self.channel.close()
        await self.server.stop(0)
        await self.runs_wiring.aclose()
        await self.access.aclose()
        await self.wiring.aclose()


async def start_orchestrator(backend_port: int, **fields) -> RunsOrchestrator:
    """The orchestrator (port 0, no REST) with `fields` as settings, its mcts and neural targets
    the fake backends."""
    settings = OrchestratorSettings(port=0, rest_port=-1, metrics_port=-1,
                                    mcts_target=f"127.0.0.1:{backend_port}",
                                    neural_target=f"127.0.0.1:{backend_port}", **fields)
    access = await open_access(settings)
    runs = await open_runs(settings)
    wiring = Wiring(settings)
    servicers, ready = await build_servicers(settings, wiring, runs, access)
    server = await start_server(
        "orchestrator", settings, servicers, ready,
        interceptors=[AccessInterceptor(access, max_deadline_s=settings.max_deadline_s)],
        public=True)
    return RunsOrchestrator(server, access, runs, wiring)


async def until(condition, timeout_s: float = 30.0, step_s: float = 0.02):
    """Polls `condition()` (sync or async) until it is truthy, up to `timeout_s`; returns it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError("condition never held")
        await asyncio.sleep(step_s)
