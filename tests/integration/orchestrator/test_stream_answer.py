"""StreamAnswerQuery and text questions on a fresh mesh, through gRPC on the real orchestrator, in
front of the real LLM gateway (its "local" provider a server speaking OpenAI's wire protocol,
`tests/fault/scripted_openai.py`, reached through the `openai` SDK) and the real retrieval
service on an empty store.

Checked: with no collection named and none ingested, AnswerQuery answers without sources and says
so (`ungrounded`), and NOT_FOUND comes only for a named collection that does not exist; the
single-draft stream sends the sources, then the gateway's text deltas, then the response whose
answer is the deltas joined and whose usage (tokens, cost: what the budgets are charged with) is
the unary call's; self-consistency streams the loop's events and the answer in one delta; a caller
that cancels the stream closes the provider's HTTP connection.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.rest import RestSettings, serve_rest
from libs.server import start_server
from services.llm.main import build_servicers as llm_servicers
from services.llm.settings import LlmSettings
from services.orchestrator.access.budgets import Usage, usage_of
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.main import Wiring, build_servicers
from services.orchestrator.settings import OrchestratorSettings
from services.retrieval.embedder import load_embedder
from services.retrieval.main import build_servicers as retrieval_servicers
from services.retrieval.settings import RetrievalSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fault"))
from scripted_openai import ANSWER, USAGE, ScriptedOpenAI  # noqa: E402

PRICE = (1.0, 2.0)  # US dollars per million prompt / completion tokens
COST = (USAGE["prompt_tokens"] * PRICE[0] + USAGE["completion_tokens"] * PRICE[1]) / 1e6
QUESTION = "How many chambers does the heart have?"


@pytest.fixture(scope="module")
def wire():
    server = ScriptedOpenAI(hang_s=20.0).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def embedder():
    settings = RetrievalSettings()
    if not settings.onnx_path.exists():
        pytest.skip(f"the embedder export {settings.onnx_path} is missing (make setup)")
    return load_embedder(settings.embedder, settings.onnx_path, 16, 2)


@pytest.fixture
async def mesh(wire, embedder, tmp_path):
    """The orchestrator's stub, in front of the real LLM gateway and retrieval service."""
    wire.reset()
    llm_settings = LlmSettings(port=0, fallback_order=["local"], local_base_url=wire.url,
                               local_model="scripted-local", offline_enabled=False,
                               max_retries=0, prices={"scripted-local": PRICE})
    llm = await start_server("llm", llm_settings, *await llm_servicers(llm_settings))
    retrieval_settings = RetrievalSettings(port=0, data_dir=tmp_path / "store")
    retrieval = await start_server("retrieval", retrieval_settings,
                                   *await retrieval_servicers(retrieval_settings, embedder))
    settings = OrchestratorSettings(port=0, rest_port=-1, llm_target=f"127.0.0.1:{llm.port}",
                                    retrieval_target=f"127.0.0.1:{retrieval.port}")
    wiring = Wiring(settings)
    orchestrator = await start_server("orchestrator", settings,
                                      *await build_servicers(settings, wiring))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{orchestrator.port}")
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    stub.in_process = orchestrator.in_process  # for the REST front
    yield stub
    await channel.close()
    await orchestrator.stop(0)
    await wiring.aclose()
    await retrieval.stop(0)
    await llm.stop(0)


def _kinds(messages) -> list[str]:
    return [message.WhichOneof("event") for message in messages]


async def _stream(stub, **fields) -> list[pb.StreamAnswerQueryResponse]:
    return [message async for message in stub.StreamAnswerQuery(
        pb.StreamAnswerQueryRequest(query=QUESTION, **fields), timeout=30)]


async def test_a_fresh_mesh_answers_without_sources_and_says_so(mesh, wire):
    unary = await mesh.AnswerQuery(pb.AnswerQueryRequest(query=QUESTION, sample_count=1),
                                   timeout=30)
    assert unary.answer == ANSWER and not unary.passages_only
    assert unary.ungrounded and list(unary.sources) == []
    assert (unary.prompt_tokens, unary.completion_tokens, unary.total_tokens) == (
        USAGE["prompt_tokens"], USAGE["completion_tokens"], USAGE["total_tokens"])
    assert unary.cost_usd == pytest.approx(COST) and unary.cost_known

    messages = await _stream(mesh, sample_count=1, max_answer_tokens=77)
    assert wire.bodies[-1]["max_tokens"] == 77 and wire.bodies[-1]["stream"] is True
    assert _kinds(messages) == ["sources"] + ["answer_delta"] * len(ANSWER.split(" ")) + [
        "response"]
    assert list(messages[0].sources.sources) == []
    final = messages[-1].response
    assert "".join(m.answer_delta for m in messages[1:-1]) == final.answer == ANSWER
    assert final.ungrounded and list(final.sources) == []
    for field in ("total_tokens", "prompt_tokens", "completion_tokens", "cost_usd", "provider"):
        assert getattr(final, field) == getattr(unary, field), field
    # what the access interceptor charges a key's budgets with, message by message
    assert [usage_of(m) for m in messages[:-1]] == [Usage()] * (len(messages) - 1)
    assert usage_of(messages[-1]) == usage_of(unary) == Usage(tokens=USAGE["total_tokens"],
                                                              usd=pytest.approx(COST))
    elapsed = [m.elapsed_ms for m in messages]
    assert elapsed == sorted(elapsed)


async def test_not_found_only_for_a_named_collection_that_does_not_exist(mesh):
    for call in (mesh.AnswerQuery(pb.AnswerQueryRequest(query=QUESTION, collection="nope"),
                                  timeout=30),
                 mesh.StreamAnswerQuery(pb.StreamAnswerQueryRequest(
                     query=QUESTION, collection="nope"), timeout=30).read()):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        assert "nope" in raised.value.details()


async def test_a_grounded_stream_sends_its_sources_then_the_text(mesh):
    await mesh.IngestDocuments(pb.IngestDocumentsRequest(collection="default", documents=[
        common_pb2.Document(id="heart", title="Heart",
                            text="The human heart has four chambers: two atria and two "
                                 "ventricles.")]), timeout=60)
    messages = await _stream(mesh, sample_count=1)
    assert _kinds(messages)[0] == "sources" and _kinds(messages)[-1] == "response"
    final = messages[-1].response
    assert [s.document_id for s in messages[0].sources.sources] == ["heart"]
    assert [s.document_id for s in final.sources] == ["heart"] and not final.ungrounded
    assert "".join(m.answer_delta for m in messages[1:-1]) == final.answer == ANSWER


async def test_the_draft_started_beside_the_search_answers_only_while_ungrounded(mesh, wire):
    await _stream(mesh, sample_count=1)  # this search finds no default collection
    before = wire.requests
    final = (await _stream(mesh, sample_count=1))[-1].response  # drafted beside the search
    assert final.ungrounded and final.answer == ANSWER
    assert wire.requests == before + 1  # the call started ahead was the draft, not an extra
    await mesh.IngestDocuments(pb.IngestDocumentsRequest(collection="default", documents=[
        common_pb2.Document(id="heart", title="Heart",
                            text="The human heart has four chambers: two atria and two "
                                 "ventricles.")]), timeout=60)
    before = wire.requests
    final = (await _stream(mesh, sample_count=1))[-1].response  # the search decides
    assert not final.ungrounded and [s.document_id for s in final.sources] == ["heart"]
    grounded = [body for body in wire.bodies[before:] if "two atria" in json.dumps(body)]
    assert len(grounded) == 1  # the draft that answered had the passage in its prompt
    before = wire.requests
    await _stream(mesh, sample_count=1)  # the collection is known to exist: nothing ahead
    assert wire.requests == before + 1


async def test_self_consistency_streams_the_loop_then_the_answer_in_one_delta(mesh):
    messages = await _stream(mesh, sample_count=3)
    kinds = _kinds(messages)
    # the retrieval (held until the loop's first iteration starts), then the loop
    assert kinds[:3] == ["agent_started", "agent_finished", "iteration_started"]
    assert messages[1].agent_finished.agent == pb.AGENT_RETRIEVAL
    assert "tally" in kinds and any(m.agent_finished.agent == pb.AGENT_LLM for m in messages)
    assert kinds[-2:] == ["answer_delta", "response"] and kinds.count("answer_delta") == 1
    final = messages[-1].response
    assert messages[-2].answer_delta == final.answer and len(final.drafts) >= 3
    assert final.total_tokens == USAGE["total_tokens"] * len(final.drafts)


@pytest.mark.parametrize("field,value", [("top_k", 99), ("max_answer_tokens", 40_000)])
async def test_a_bad_request_fails_before_any_message(mesh, field, value):
    call = mesh.StreamAnswerQuery(pb.StreamAnswerQueryRequest(query=QUESTION, **{field: value}),
                                  timeout=30)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call.read()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(field)


async def test_the_rest_front_streams_the_answer_as_ndjson(mesh):
    app = build_rest_app(mesh.in_process, RestSettings(port=0, default_deadline_s=30.0))
    rest = await serve_rest(app, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}",
                                     timeout=30) as client:
            reply = await client.post("/v1/queries:streamAnswer",
                                      json={"query": QUESTION, "sampleCount": 1})
            missing = await client.post("/v1/queries:streamAnswer",
                                        json={"query": QUESTION, "collection": "nope"})
    finally:
        await rest.stop()
    assert reply.status_code == 200
    lines = [json.loads(line)["result"] for line in reply.text.splitlines() if line]
    assert [next(iter(set(line) - {"iteration", "elapsedMs"})) for line in lines] == [
        "sources"] + ["answerDelta"] * len(ANSWER.split(" ")) + ["response"]
    assert lines[-1]["response"]["answer"] == ANSWER and lines[-1]["response"]["ungrounded"]
    assert missing.status_code == 404 and "nope" in missing.json()["message"]


async def test_a_caller_that_cancels_closes_the_providers_connection(mesh, wire):
    wire.reset("stall")
    wire.disconnected.clear()
    call = mesh.StreamAnswerQuery(pb.StreamAnswerQueryRequest(query=QUESTION, sample_count=1),
                                  timeout=60)
    while (message := await call.read()).WhichOneof("event") != "answer_delta":
        pass
    assert message.answer_delta
    call.cancel()
    disconnected = await asyncio.to_thread(wire.disconnected.wait, 10.0)
    assert disconnected, "the provider's connection was left open after the caller left"
