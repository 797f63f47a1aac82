"""A real orchestrator (gRPC with access control, and its REST front) on loopback port 0, whose
LLM gateway (in process, real) has one provider: the scripted OpenAI-compatible server of
tests/fault (`scripted_openai.ScriptedOpenAI`), and whose retrieval service (in process, real,
an empty store in a temporary folder; its ONNX embedder from `make setup`) has nothing
ingested, so answers come from the language model alone.

API keys are required unless `require_api_key=False` is passed: `key` may call everything,
`solve_only` has only the `solve` scope, `slow_key` one request per minute."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.rest import serve_rest
from libs.server import start_server
from services.llm.main import build_servicers as llm_servicers
from services.llm.settings import LlmSettings
from services.orchestrator.access import open_access
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.access.keys import FileKeyStore, Grants, RateLimits
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.main import Wiring, build_servicers, rest_settings
from services.orchestrator.settings import OrchestratorSettings
from services.retrieval.main import build_servicers as retrieval_servicers
from services.retrieval.settings import RetrievalSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fault"))
from scripted_openai import ScriptedOpenAI  # noqa: E402


@dataclass
class OpenAIMesh:
    """What `start_openai_mesh` started; `base_url` is the OpenAI base URL (".../v1")."""

    base_url: str
    key: str
    solve_only: str
    slow_key: str
    provider: ScriptedOpenAI
    _stops: list

    async def close(self) -> None:
        for stop in reversed(self._stops):
            await stop()


HEART = common_pb2.Document(id="heart", title="The heart", source="anatomy.txt",
                            text="The human heart has four chambers: two atria and two "
                                 "ventricles.")


async def _ingest(server, key: str) -> None:
    """The one document of the default collection."""
    await server.unary_unary("/mesh.orchestrator.v1.OrchestratorService/IngestDocuments",
                             pb.IngestDocumentsRequest(collection="default", documents=[HEART]),
                             60.0, (("x-api-key", key),))


EMBEDDER = Path(RetrievalSettings().onnx_path)


async def start_openai_mesh(tmp_path: Path, **orchestrator_fields) -> OpenAIMesh:
    """Starts the provider, the gateway, retrieval, the orchestrator and its REST front
    (the caller skips when `EMBEDDER` is absent)."""
    provider = ScriptedOpenAI(hang_s=5.0).start()
    stops: list = []

    async def close_provider() -> None:
        provider.close()

    stops.append(close_provider)
    try:
        llm_settings = LlmSettings(port=0, fallback_order=["local"], local_base_url=provider.url,
                                   local_model="scripted", offline_enabled=False,
                                   max_retries=0)
        servicers, ready = await llm_servicers(llm_settings)
        llm = await start_server("llm", llm_settings, servicers, ready)
        stops.append(lambda: llm.stop(0))
        retrieval_settings = RetrievalSettings(port=0, data_dir=tmp_path / "retrieval")
        servicers, ready = await retrieval_servicers(retrieval_settings)
        retrieval = await start_server("retrieval", retrieval_settings, servicers, ready)
        closing = servicers[0].servicer

        async def close_retrieval() -> None:
            closing.close()

        stops.append(close_retrieval)
        stops.append(lambda: retrieval.stop(0))
        keys = FileKeyStore(tmp_path / "api-keys.json")
        key = await keys.create("alice")
        solve_only = await keys.create("bob", grants=Grants(scopes=["solve"]))
        slow_key = await keys.create("carol", RateLimits(per_minute=1))
        settings = OrchestratorSettings(
            port=0, rest_port=0, llm_target=f"127.0.0.1:{llm.port}",
            retrieval_target=f"127.0.0.1:{retrieval.port}", api_keys_file=str(keys.path),
            **{"require_api_key": True, **orchestrator_fields})
        access = await open_access(settings)
        stops.append(access.aclose)
        wiring = Wiring(settings)
        stops.append(wiring.aclose)
        servicers, ready = await build_servicers(settings, wiring, None, access)
        orchestrator = await start_server("orchestrator", settings, servicers, ready,
                                          interceptors=[AccessInterceptor(access)])
        stops.append(lambda: orchestrator.stop(0))
        app = build_rest_app(orchestrator.in_process, rest_settings(settings), access=access)
        rest = await serve_rest(app, "127.0.0.1", 0)
        stops.append(rest.stop)
        await _ingest(orchestrator.in_process, key)
    except BaseException:
        for stop in reversed(stops):
            await stop()
        raise
    return OpenAIMesh(f"http://127.0.0.1:{rest.port}/v1", key, solve_only, slow_key, provider,
                      stops)
