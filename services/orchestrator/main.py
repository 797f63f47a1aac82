"""Entry point of the orchestrator: `mcts-mesh serve orchestrator` calls `main()`.

Wiring happens here and only here: channels to the four other services, the agents over them, the
servicer, and the REST front in the same process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from mesh.llm.v1 import llm_service_pb2_grpc
from mesh.mcts.v1 import mcts_service_pb2_grpc
from mesh.neural.v1 import neural_service_pb2_grpc
from mesh.orchestrator.v1 import (
    orchestrator_service_pb2,
    orchestrator_service_pb2_grpc,
    run_service_pb2,
    run_service_pb2_grpc,
)
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from libs.channels import Keepalive, MeshChannel, open_channel
from libs.errors import MeshError
from libs.rest.serving import serve_rest
from libs.rest.settings import RestSettings
from libs.server import RunningServer, Servicer, run_service, serve
from libs.services import BACKENDS
from services.orchestrator.access import open_access
from services.orchestrator.access.control import AccessControl
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.agents.checker import CheckerAgent, CheckerBudget, warm_up_solvers
from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.agents.mcts import MctsAgent
from services.orchestrator.agents.neural import NeuralAgent
from services.orchestrator.agents.puzzle_checker import PuzzleCheckerAgent
from services.orchestrator.agents.reasoning import ReasoningAgent, ReasoningModels
from services.orchestrator.agents.retrieval import RetrievalAgent, search_passages
from services.orchestrator.agents.solver import SolverAgent
from services.orchestrator.api.console import console_routes
from services.orchestrator.api.rest import batch_upload, build_rest_app
from services.orchestrator.api.run_execution import RunExecutor
from services.orchestrator.api.runs import RunServicer
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.dependencies import Dependency, DependencyWatcher
from services.orchestrator.loop.types import AgentName
from services.orchestrator.routing.log import RoutingLog
from services.orchestrator.routing.predictors import RoutePredictor, TextRoutePredictor
from services.orchestrator.routing.rules import QUICK_CHECKER_MAX_NODES
from services.orchestrator.routing.selection import AgentSet, Routers
from services.orchestrator.runs.model import StoreError
from services.orchestrator.runs.store import RunStore
from services.orchestrator.runs.upkeep import RunUpkeep
from services.orchestrator.runs.worker import RunWorkers
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.reasoning import RoleServices

NAME = "orchestrator"
SERVICE_NAME = orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"].full_name
RUN_SERVICE_NAME = run_service_pb2.DESCRIPTOR.services_by_name["RunService"].full_name

WARM_UP_MOVES = "4444443"
"""A position the checker solves in a few nodes: compiles (or loads from the numba cache) the
solver's kernels before the service reports SERVING."""

log = logging.getLogger(__name__)


DEPENDENCY_SERVICES = {backend.name: backend.grpc_service for backend in BACKENDS}
"""The services the orchestrator depends on (the registry's backends, `libs.services`): word ->
full proto service name (the name its health service reports each one under)."""


class Wiring:
    """The channels the servicer's agents talk over, and the routing log when one is set;
    `aclose()` closes them."""

    def __init__(self, settings: OrchestratorSettings) -> None:
        auth = settings.mesh_auth()  # the backends' credential: mutual TLS or the mesh token

        def channel(target: str) -> MeshChannel:
            return open_channel(target, connect_timeout_s=settings.connect_timeout_s,
                                keepalive=Keepalive.of(settings), auth=auth)

        # One channel per backend, named by its word, to ORCHESTRATOR_<WORD>_TARGET.
        self.channels = {backend.name: channel(getattr(settings, f"{backend.name}_target"))
                         for backend in BACKENDS}
        self.routing_log = (RoutingLog(Path(settings.routing_log_path),
                                       settings.routing_log_max_bytes,
                                       settings.routing_log_backups)
                            if settings.routing_log_path else None)

    def dependencies(self) -> list[Dependency]:
        """Each dependency with the channel its agents use (health is checked over it)."""
        return [Dependency(name, service, self.channels[name])
                for name, service in DEPENDENCY_SERVICES.items()]

    async def aclose(self) -> None:
        for channel in self.channels.values():
            await channel.close()
        if self.routing_log is not None:
            await asyncio.to_thread(self.routing_log.close)


class Runs:
    """Durable runs in this process: the store (opened by `open_runs`), its workers (built by
    `build_servicers`, started once the server is ready) and its upkeep (/ready, metrics,
    retention)."""

    def __init__(self, settings: OrchestratorSettings, store: RunStore) -> None:
        self.store = store
        self.upkeep = RunUpkeep(store, settings.run_retention.total_seconds())
        self.workers: RunWorkers | None = None

    def start(self) -> None:
        self.upkeep.start()
        if self.workers is not None:
            self.workers.start()

    async def aclose(self) -> None:
        """Stops the workers (their runs resume elsewhere once their leases expire) and the
        upkeep, and closes the store."""
        if self.workers is not None:
            await self.workers.stop()
        await self.upkeep.stop()
        await self.store.close()


async def open_runs(settings: OrchestratorSettings) -> Runs:
    """The run store at `run_store_url`, migrated to the newest schema.

    Raises:
        SystemExit: the database is corrupt, of a newer schema, not a run store, or cannot be
            reached; the message names the file or URL (nothing was written).
    """
    try:
        store = await RunStore.open(settings.run_store_url,
                                    batch_max_items=settings.batch_max_items,
                                    batch_max_bytes=settings.batch_max_bytes)
    except (StoreError, MeshError) as error:
        raise SystemExit(f"orchestrator: cannot open the run store "
                         f"(ORCHESTRATOR_RUN_STORE_URL): {error}") from None
    log.info("run store %s: %d workers, leases of %g s, retention %s", store.url,
             settings.run_workers, settings.run_lease_s, settings.run_retention)
    return Runs(settings, store)


def _agent_set(settings: OrchestratorSettings, wiring: Wiring,
               retrieval: retrieval_service_pb2_grpc.RetrievalServiceStub) -> AgentSet:
    """The agents of games, text queries and puzzles over the wiring's channels."""
    checker_budget = CheckerBudget(max_nodes=settings.checker_max_nodes,
                                   time_budget_s=settings.checker_time_budget_ms / 1e3,
                                   min_moves=settings.checker_min_moves,
                                   base_nodes=settings.checker_base_nodes,
                                   early_nodes=settings.checker_early_nodes,
                                   score_min_moves=settings.checker_score_min_moves)
    first = settings.checker_first_max_nodes if settings.checker_first else None
    quick_checker = CheckerAgent(dataclasses.replace(
        checker_budget, max_nodes=min(settings.checker_max_nodes, QUICK_CHECKER_MAX_NODES)),
        first)
    game_agents = [
        CheckerAgent(checker_budget, first),
        MctsAgent(mcts_service_pb2_grpc.MctsServiceStub(wiring.channels["mcts"]),
                  settings.mcts_deadline_s, settings.search_close_ratio),
        NeuralAgent(neural_service_pb2_grpc.NeuralServiceStub(wiring.channels["neural"]),
                    settings.neural_deadline_s, settings.neural_model),
    ]
    text_agents = [
        RetrievalAgent(retrieval, settings.retrieval_deadline_s),
        LlmAgent(llm_service_pb2_grpc.LlmServiceStub(wiring.channels["llm"]),
                 settings.llm_deadline_s, settings.max_answer_tokens),
    ]
    # Sudoku and mazes: HRM and TRM (the neural service's Solve, where it has a model for the
    # grid) propose first, the exact solver when their proposals fail, the checker verifies all.
    neural = neural_service_pb2_grpc.NeuralServiceStub(wiring.channels["neural"])
    models = ReasoningModels(neural, settings.neural_deadline_s, settings.reasoning_models_ttl_s)
    puzzle_agents = [
        *(ReasoningAgent(name, neural, models, settings.reasoning_deadline_s,
                         settings.reasoning_halting_mode, settings.reasoning_max_segments, model)
          for name, model in ((AgentName.HRM, settings.hrm_model),
                              (AgentName.TRM, settings.trm_model))),
        SolverAgent(settings.solver_time_budget_s),
        PuzzleCheckerAgent(),
    ]
    return AgentSet(game_agents, text_agents, puzzle_agents, quick_checker)


def _routers(settings: OrchestratorSettings,
             neural: neural_service_pb2_grpc.NeuralServiceStub) -> Routers:
    """The rule routers, with the neural service's predictors where their models are set."""
    route_predictor = (RoutePredictor(neural, settings.router_model,
                                      settings.router_deadline_ms / 1e3)
                       if settings.router_model else None)
    text_route_predictor = (TextRoutePredictor(neural, settings.text_router_model,
                                               settings.router_deadline_ms / 1e3)
                            if settings.text_router_model else None)
    return Routers(predictor=route_predictor, text_predictor=text_route_predictor)


async def build_servicers(
    settings: OrchestratorSettings, wiring: Wiring | None = None, runs: Runs | None = None,
    access: AccessControl | None = None
) -> tuple[list[Servicer], Callable[[], Awaitable[None]]]:
    """The orchestrator's servicers over channels to the other services, and its readiness hook.

    The channels connect lazily: the orchestrator is ready once its checker's kernels are loaded;
    a dependency that comes up later is used from then on, and calls before that fail UNAVAILABLE.

    Args:
        settings: targets, budgets and deadlines.
        wiring: the channels (one is opened from `settings` when None; the caller closes it).
        runs: durable runs: RunService is served and the run workers start with readiness
            (None: neither).
        access: the server's access control, which runs are executed under (None: none).
    """
    wiring = wiring or Wiring(settings)
    retrieval = retrieval_service_pb2_grpc.RetrievalServiceStub(wiring.channels["retrieval"])
    neural = neural_service_pb2_grpc.NeuralServiceStub(wiring.channels["neural"])
    roles = RoleServices(
        llm=llm_service_pb2_grpc.LlmServiceStub(wiring.channels["llm"]),
        retrieve=functools.partial(search_passages, retrieval),
        mcts=mcts_service_pb2_grpc.MctsServiceStub(wiring.channels["mcts"]),
        llm_deadline_s=settings.llm_deadline_s,
        retrieval_deadline_s=settings.retrieval_deadline_s)
    servicer = OrchestratorServicer(settings, _agent_set(settings, wiring, retrieval),
                                    _routers(settings, neural), wiring.routing_log, roles,
                                    retrieval)

    servicers = [Servicer(orchestrator_service_pb2_grpc.add_OrchestratorServiceServicer_to_server,
                          servicer, SERVICE_NAME)]
    if runs is not None:
        runs.workers = RunWorkers(runs.store, RunExecutor(servicer, access),
                                  workers=settings.run_workers, lease_s=settings.run_lease_s,
                                  max_attempts=settings.run_max_attempts)
        servicers.append(Servicer(run_service_pb2_grpc.add_RunServiceServicer_to_server,
                                  RunServicer(runs.store, servicer, access, runs.workers.wake,
                                              handoff=runs.workers.handoff,
                                              cancelled=runs.workers.cancelled),
                                  RUN_SERVICE_NAME))

    async def ready() -> None:
        nodes = await warm_up_solvers(WARM_UP_MOVES, 10_000)
        log.info("checker ready (warm-up solve: %d nodes); downstream targets: %s", nodes,
                 ", ".join(f"{name} {target}" for name, target in (
                     ("mcts", settings.mcts_target), ("neural", settings.neural_target),
                     ("retrieval", settings.retrieval_target), ("llm", settings.llm_target))))
        if runs is not None:
            runs.start()

    return servicers, ready


def rest_settings(settings: OrchestratorSettings) -> RestSettings:
    """The REST front's settings from the orchestrator's."""
    return RestSettings(host=settings.host, port=settings.rest_port,
                        default_deadline_s=settings.request_deadline_s,
                        metrics=settings.metrics_port >= 0 and settings.rest_metrics,
                        max_deadline_s=settings.rest_max_deadline_s,
                        max_body_bytes=settings.rest_max_body_bytes,
                        max_json_depth=settings.rest_max_json_depth,
                        cors_allowed_origins=settings.rest_cors_allowed_origins,
                        cors_max_age_s=settings.rest_cors_max_age_s,
                        allowed_hosts=settings.rest_allowed_hosts,
                        allowed_origins=settings.rest_allowed_origins,
                        max_query_bytes=settings.rest_max_query_bytes,
                        max_query_parameters=settings.rest_max_query_parameters,
                        max_head_bytes=settings.rest_max_head_bytes,
                        max_headers=settings.rest_max_headers,
                        head_timeout_s=settings.rest_head_timeout_s)


async def run(settings: OrchestratorSettings,
              on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Serves gRPC (and REST unless `rest_port` is -1) until SIGTERM or SIGINT, then drains.

    Once serving, it watches its dependencies' health (`DependencyWatcher`): its own health
    service reports each under the dependency's service name, apart from its own readiness ("" and
    its service name), and /ready lists them.

    Every call of the API passes access control first (API keys, scopes, admission, rate limits,
    budgets, the maximum deadline; see `services.orchestrator.access`; /ready lists Redis when
    it holds limits); health and reflection stay open.
    `on_listening({"grpc": port, "rest": port})` is called once both listen (no "rest" when off).
    """
    wiring = Wiring(settings)

    async def start_extra(settings: OrchestratorSettings, running: RunningServer):
        watcher = DependencyWatcher(wiring.dependencies(), settings.health_interval_s,
                                    settings.health_timeout_s, on_change=running.health.set)
        await watcher.check_all()
        watcher.start()
        if settings.rest_port < 0:
            return {}, watcher.stop
        app = build_rest_app(
            running.in_process, rest_settings(settings), access=access,
            dependencies=lambda: [*watcher.report(), *access.report(),
                                  *(runs.upkeep.report() if runs is not None else [])],
            batch_upload=batch_upload(settings.batch_max_items, settings.batch_max_bytes),
            pages=console_routes(settings.rest_jaeger_ui_url) if settings.rest_console else ())
        rest = await serve_rest(app, settings.host, settings.rest_port, settings.drain_grace_s)

        async def stop() -> None:
            await watcher.stop()
            await rest.stop()

        return {"rest": rest.port}, stop

    access = await open_access(settings)
    runs: Runs | None = None
    try:
        runs = await open_runs(settings)
        servicers, ready = await build_servicers(settings, wiring, runs, access)
        await serve(NAME, settings, servicers, ready, on_listening=on_listening,
                    start_extra=start_extra,
                    interceptors=[AccessInterceptor(access,
                                                    max_deadline_s=settings.max_deadline_s)],
                    public=True)
    finally:
        if runs is not None:
            await runs.aclose()
        await access.aclose()
        await wiring.aclose()


def main(settings: OrchestratorSettings | None = None,
         on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Reads `ORCHESTRATOR_*` settings (unless given), logs them, and serves until SIGTERM."""
    settings = settings or OrchestratorSettings()
    run_service(NAME, settings, lambda: run(settings, on_listening))


if __name__ == "__main__":
    main()
