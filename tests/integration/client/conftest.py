"""A real orchestrator for the Python client's tests, in this process on loopback port 0: API keys
required (a key file with an admin key and a solve-only key), durable runs in SQLite, and real
mcts, retrieval (the packaged embedder, a temporary store) and llm (the offline provider)
services; the neural service is left out (its agent is not asked for)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from libs.server import start_server
from services.llm.main import build_servicers as build_llm
from services.llm.settings import LlmSettings
from services.mcts.main import build_servicers as build_mcts
from services.mcts.settings import MctsSettings
from services.orchestrator.access import open_access
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.access.keys import Budgets, FileKeyStore, Grants, RateLimits
from services.orchestrator.main import Wiring, open_runs
from services.orchestrator.main import build_servicers as build_orchestrator
from services.orchestrator.settings import OrchestratorSettings
from services.retrieval.main import build_servicers as build_retrieval
from services.retrieval.settings import RetrievalSettings


@dataclass
class ClientMesh:
    """What `client_mesh` started: the orchestrator's "host:port" and two API keys."""

    target: str
    admin_key: str
    solve_key: str
    limited_key: str
    """A solve key allowed one request an hour."""
    budget_key: str
    """A solve key whose budget is one MCTS simulation per window."""


@pytest.fixture
async def client_mesh(tmp_path):
    keys = FileKeyStore(tmp_path / "keys.json")
    admin = await keys.create("admin", grants=Grants(scopes=("admin",)))
    solver = await keys.create("solver", grants=Grants(scopes=("solve",)))
    limited = await keys.create("limited", RateLimits(per_hour=1), Grants(scopes=("solve",)))
    budget = await keys.create("budget", grants=Grants(scopes=("solve",),
                                                       budgets=Budgets(simulations=1)))
    stops = []
    backends = {}
    for name, build, settings in (
            ("mcts", build_mcts, MctsSettings(port=0, default_simulations=200)),
            ("retrieval", build_retrieval, RetrievalSettings(port=0, data_dir=tmp_path / "store")),
            ("llm", build_llm, LlmSettings(port=0, fallback_order=["offline"]))):
        servicers, ready = await build(settings)
        server = await start_server(name, settings, servicers, ready)
        backends[name] = f"127.0.0.1:{server.port}"
        stops.append(server.stop)
    settings = OrchestratorSettings(
        port=0, rest_port=-1, metrics_port=-1, checker_max_nodes=1_000, default_simulations=200,
        require_api_key=True, api_keys_file=str(tmp_path / "keys.json"),
        run_store_url=f"sqlite:///{tmp_path}/runs.db", neural_target="127.0.0.1:1",
        **{f"{name}_target": target for name, target in backends.items()})
    access = await open_access(settings)
    runs = await open_runs(settings)
    wiring = Wiring(settings)
    servicers, ready = await build_orchestrator(settings, wiring, runs, access)
    orchestrator = await start_server(
        "orchestrator", settings, servicers, ready,
        interceptors=[AccessInterceptor(access, max_deadline_s=settings.max_deadline_s)],
        public=True)
    try:
        yield ClientMesh(f"127.0.0.1:{orchestrator.port}", admin, solver, limited, budget)
    finally:
        await orchestrator.stop(0)
        await runs.aclose()
        await access.aclose()
        await wiring.aclose()
        for stop in reversed(stops):
            await stop(0)
