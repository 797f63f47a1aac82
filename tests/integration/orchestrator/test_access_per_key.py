"""Limits per key, against real servers on loopback: a grpc.aio server on port 0 with the
orchestrator's access interceptor, its REST front, and, for the shared budgets and the Redis
failure policies, a real `redis-server`.

- one key at its cap of calls in flight leaves room for the others (issue 29, finding 4);
- the server's maximum deadline ends silent streams and long calls (finding 4);
- budgets of tokens, dollars and simulations per window, charged with what responses report
  (finding 5), in memory and shared through Redis;
- Redis unreachable: budgets fail closed, rate limits fail open (settings switch each), and
  `/ready` lists Redis (point 8);
- scopes and allowed collections: PERMISSION_DENIED / HTTP 403 naming the scope (finding 7).

The servicer is a test double whose answers report a fixed use (60 tokens and $0.01 per query,
600 simulations per solve), so the tests check access control, not the consensus loop.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from redis_server import RedisServer

from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from services.orchestrator.access import open_access
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.access.keys import Budgets, FileKeyStore, Grants, RateLimits
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.settings import OrchestratorSettings

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
SOLVE = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="44"))
QUERY = pb.AnswerQueryRequest(query="what?", collection="docs")
TOKENS, USD, SIMULATIONS = 60, 0.01, 600


class _Metered(pb_grpc.OrchestratorServiceServicer):
    """Answers at once with a fixed use, except a query "slow" and StreamSolveProblem, which wait
    for `release`; StreamIngestDocuments reads its stream to the end; ListDocuments and
    DeleteCollection answer empty."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0
        self.ingested: list[str] = []

    async def SolveProblem(self, request, context):
        return pb.SolveProblemResponse(
            connect_four=pb.ConnectFourAnswer(column=4),
            search_statistics=common_pb2.SearchStatistics(simulations=SIMULATIONS))

    async def AnswerQuery(self, request, context):
        if request.query == "slow":
            self.started += 1
            await self.release.wait()
        return pb.AnswerQueryResponse(answer="done", total_tokens=TOKENS, cost_usd=USD)

    async def StreamSolveProblem(self, request, context):
        self.started += 1
        yield pb.StreamSolveProblemResponse(iteration=1)
        await self.release.wait()

    async def ListDocuments(self, request, context):
        return pb.ListDocumentsResponse()

    async def DeleteCollection(self, request, context):
        return empty_pb2.Empty()

    async def StreamIngestDocuments(self, request_iterator, context):
        self.started += 1
        async for request in request_iterator:
            self.ingested.append(request.collection)
        return pb.StreamIngestDocumentsResponse(document_count=len(self.ingested))


class _Front:
    def __init__(self, server, rest, control, servicer) -> None:
        self.server, self.rest, self.control, self.servicer = server, rest, control, servicer
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        self.stub = pb_grpc.OrchestratorServiceStub(self.channel)
        self.http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}", timeout=30)

    async def close(self) -> None:
        self.servicer.release.set()
        await self.http.aclose()
        await self.channel.close()
        await self.rest.stop()
        await self.server.stop(0)
        await self.control.aclose()

    async def until(self, condition) -> None:
        """Waits for `condition()` (a state of the server), at most about 10 s."""
        for _ in range(2000):
            if condition():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("condition never held")


@pytest.fixture
async def front():
    """A factory: `await front(**orchestrator_settings)` starts one; all stop at teardown."""
    started: list[_Front] = []

    async def start(**fields) -> _Front:
        settings = OrchestratorSettings(port=0, rest_port=0, **fields)
        control = await open_access(settings)
        servicer = _Metered()
        server = await start_server(
            "orchestrator", settings, [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server,
                                                servicer, SERVICE)],
            interceptors=[AccessInterceptor(control, max_deadline_s=settings.max_deadline_s)])
        app = build_rest_app(server.in_process, RestSettings(port=0, default_deadline_s=10.0),
                             dependencies=control.report)
        rest = await serve_rest(app, "127.0.0.1", 0)
        started.append(_Front(server, rest, control, servicer))
        return started[-1]

    yield start
    for item in started:
        await item.close()


@pytest.fixture
def keys(tmp_path) -> FileKeyStore:
    return FileKeyStore(tmp_path / "api-keys.json")


@pytest.fixture
def redis(tmp_path, monkeypatch):
    """A real redis-server the test may stop (`RedisServer`); the orchestrator's client waits
    5 s, not 0.5 s, for it (see test_access_grpc_rest.py's `redis_url`)."""
    monkeypatch.setattr("services.orchestrator.access.REDIS_TIMEOUT_S", 5.0)
    server = RedisServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


def _details(error: grpc.aio.AioRpcError) -> dict[str, object]:
    out: dict[str, object] = {}
    for detail in rpc_status.from_call(error).details:
        for kind in (error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo,
                     error_details_pb2.QuotaFailure):
            message = kind()
            if detail.Unpack(message):
                out[kind.__name__] = message
    return out


async def _refusal(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await asyncio.wait_for(call, 20)
    return refused.value


def _key(key: str) -> tuple[tuple[str, str], ...]:
    return (("x-api-key", key),)


# --- fairness: calls in flight per key ---


async def test_one_key_at_its_cap_of_silent_streams_leaves_room_for_another(front, keys):
    """The review's case: silent StreamIngestDocuments streams from one key filled the global
    cap and another key's calls failed RESOURCE_EXHAUSTED until they closed. With a per-key cap
    of 2 under a global 4, alice's third stream is refused and bob's calls all pass."""
    alice = await keys.create("alice", grants=Grants(scopes=["ingest", "solve"]))
    bob = await keys.create("bob")
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path),
                               max_in_flight=4, max_in_flight_per_key=2)
    streams = [orchestrator.stub.StreamIngestDocuments(metadata=_key(alice), timeout=30)
               for _ in range(4)]
    ends = [asyncio.ensure_future(stream.code()) for stream in streams]
    await orchestrator.until(lambda: orchestrator.servicer.started == 2
                             and sum(end.done() for end in ends) == 2)
    assert [end.result() for end in ends if end.done()] == \
        [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    refused = [await _refusal(stream) for stream, end in zip(streams, ends, strict=True)
               if end.done()]
    streams = [stream for stream, end in zip(streams, ends, strict=True) if not end.done()]
    details = _details(refused[0])
    assert details["ErrorInfo"].reason == "KEY_TOO_MANY_REQUESTS_IN_FLIGHT"
    assert details["RetryInfo"].retry_delay.seconds == 1
    assert orchestrator.control.in_flight_of("alice") == 2

    replies = await asyncio.gather(*(orchestrator.stub.SolveProblem(
        SOLVE, metadata=_key(bob), timeout=10) for _ in range(2)))
    assert [reply.connect_four.column for reply in replies] == [4, 4]
    reply = await orchestrator.http.post("/v1/problems:solve", headers={"x-api-key": bob},
                                         json={"connectFour": {"moves": "44"}})
    assert reply.status_code == 200, reply.text
    # alice's own calls are refused over REST as well, with Retry-After
    reply = await orchestrator.http.post("/v1/problems:solve", headers={"x-api-key": alice},
                                         json={"connectFour": {"moves": "44"}})
    assert reply.status_code == 429 and reply.headers["retry-after"] == "1"

    for stream in streams:
        await stream.done_writing()
        assert (await stream).document_count == 0
    await orchestrator.until(lambda: orchestrator.control.in_flight == 0)
    assert orchestrator.control.in_flight_of("alice") == 0
    assert (await orchestrator.stub.SolveProblem(SOLVE, metadata=_key(alice),
                                                 timeout=10)).connect_four.column == 4


async def test_a_key_record_sets_its_own_cap(front, keys):
    one = await keys.create("one", grants=Grants(max_in_flight=1))
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path),
                               max_in_flight_per_key=10)
    slow = asyncio.ensure_future(orchestrator.stub.AnswerQuery(
        pb.AnswerQueryRequest(query="slow"), metadata=_key(one), timeout=30))
    await orchestrator.until(lambda: orchestrator.servicer.started == 1)
    error = await _refusal(orchestrator.stub.SolveProblem(SOLVE, metadata=_key(one), timeout=10))
    assert _details(error)["ErrorInfo"].reason == "KEY_TOO_MANY_REQUESTS_IN_FLIGHT"
    orchestrator.servicer.release.set()
    assert (await slow).answer == "done"


# --- the server's maximum deadline ---


async def test_the_maximum_deadline_ends_a_silent_stream_and_frees_its_slot(front, keys):
    """A StreamIngestDocuments whose client sends nothing and set no deadline, a response stream
    that goes quiet, and a unary call with a longer deadline all end DEADLINE_EXCEEDED at the
    server's cap (0.5 s here), and their admission slots are free again."""
    key = await keys.create("alice", grants=Grants(scopes=["admin"]))
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path),
                               max_deadline_s=0.5, request_deadline_s=0.5, max_in_flight=3)
    silent = orchestrator.stub.StreamIngestDocuments(metadata=_key(key))  # no deadline
    quiet = orchestrator.stub.StreamSolveProblem(pb.StreamSolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves="44")), metadata=_key(key))
    long = orchestrator.stub.AnswerQuery(pb.AnswerQueryRequest(query="slow"),
                                         metadata=_key(key), timeout=3600)
    assert (await asyncio.wait_for(quiet.read(), 20)).iteration == 1
    for call in (silent, long):
        error = await _refusal(call)
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
        assert "ORCHESTRATOR_MAX_DEADLINE_S" in error.details()
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await asyncio.wait_for(quiet.read(), 20)
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await orchestrator.until(lambda: orchestrator.control.in_flight == 0)
    # over REST too (the front's own default deadline is 10 s, the cap is shorter)
    reply = await orchestrator.http.post("/v1/queries:answer", headers={"x-api-key": key},
                                         json={"query": "slow"})
    assert reply.status_code == 504, reply.text


# --- budgets ---


async def _query(orchestrator, key: str) -> grpc.StatusCode:
    try:
        await orchestrator.stub.AnswerQuery(QUERY, metadata=_key(key), timeout=10)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def _check_budgets(first, second, keys_store) -> None:
    """Against `first` and `second` (one orchestrator twice, or two sharing Redis): alice has
    100 tokens (the default budget) and uses 60 per query; bob has his own budgets, 1,000
    simulations and no tokens, and uses 600 per solve."""
    alice = await keys_store.create("alice")
    bob = await keys_store.create("bob", grants=Grants(budgets=Budgets(simulations=1000)))
    await first.until(lambda: len(first.control._index) == 2)
    await second.until(lambda: len(second.control._index) == 2)
    assert await _query(first, alice) == grpc.StatusCode.OK  # 0 used -> 60
    assert await _query(second, alice) == grpc.StatusCode.OK  # 60 < 100 -> 120
    error = await _refusal(first.stub.AnswerQuery(QUERY, metadata=_key(alice), timeout=10))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = _details(error)
    assert details["ErrorInfo"].reason == "BUDGET_EXCEEDED"
    [violation] = details["QuotaFailure"].violations
    assert violation.subject == "key:alice"
    assert violation.description == "tokens: 120 used of 100 per 3600 s"
    assert 3500 < details["RetryInfo"].retry_delay.seconds <= 3600
    reply = await second.http.post("/v1/queries:answer", headers={"x-api-key": alice},
                                   json={"query": "what?"})
    assert reply.status_code == 429 and 3500 < int(reply.headers["retry-after"]) <= 3600
    assert [d["@type"].rsplit(".", 1)[1] for d in reply.json()["details"]] == \
        ["ErrorInfo", "QuotaFailure", "RetryInfo"]

    # bob's own budgets replace the defaults: tokens unlimited, 1,000 simulations
    for _ in range(3):
        assert await _query(first, bob) == grpc.StatusCode.OK
    for front_ in (first, second):  # 0 -> 600 -> 1,200
        await front_.stub.SolveProblem(SOLVE, metadata=_key(bob), timeout=10)
    error = await _refusal(second.stub.SolveProblem(SOLVE, metadata=_key(bob), timeout=10))
    assert [v.description for v in _details(error)["QuotaFailure"].violations] == \
        ["simulations: 1200 used of 1000 per 3600 s"]


async def test_budgets_are_checked_before_and_charged_with_what_calls_used(front, keys):
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path),
                               api_keys_reload_s=0.05, budget_tokens=100)
    await _check_budgets(orchestrator, orchestrator, keys)


async def test_budgets_are_shared_by_two_orchestrators_through_redis(front, keys, redis):
    settings = dict(require_api_key=True, api_keys_file=str(keys.path), api_keys_reload_s=0.05,
                    budget_tokens=100, redis_url=redis.url)
    await _check_budgets(await front(**settings), await front(**settings), keys)


@pytest.mark.parametrize("in_redis", [False, True], ids=["memory", "redis"])
async def test_a_dollar_budget(front, keys, request, in_redis):
    key = await keys.create("alice", grants=Grants(budgets=Budgets(usd=0.015)))
    shared = {"redis_url": request.getfixturevalue("redis").url} if in_redis else {}
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path), **shared)
    assert await _query(orchestrator, key) == grpc.StatusCode.OK
    assert await _query(orchestrator, key) == grpc.StatusCode.OK
    error = await _refusal(orchestrator.stub.AnswerQuery(QUERY, metadata=_key(key), timeout=10))
    assert [v.description for v in _details(error)["QuotaFailure"].violations] == \
        ["usd: 0.02 used of 0.015 per 3600 s"]


# --- Redis unreachable ---


def _redis_entry(body: dict) -> dict:
    [entry] = [d for d in body["dependencies"] if d["name"] == "redis"]
    return entry


async def test_redis_down_budgets_fail_closed_rate_limits_fail_open_and_ready_says_so(
        front, keys, redis):
    budgeted = await keys.create("budgeted", grants=Grants(budgets=Budgets(tokens=1000)))
    limited = await keys.create("limited", RateLimits(per_minute=100))
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path),
                               redis_url=redis.url)
    for key in (budgeted, limited):
        assert await _query(orchestrator, key) == grpc.StatusCode.OK
    entry = _redis_entry((await orchestrator.http.get("/ready")).json())
    assert entry["state"] == "SERVING"
    assert "rate limits fail_open, budgets fail_closed" in entry["detail"]

    redis.stop()
    error = await _refusal(orchestrator.stub.AnswerQuery(QUERY, metadata=_key(budgeted),
                                                          timeout=10))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    details = _details(error)
    assert details["ErrorInfo"].reason == "LIMITS_STORE_UNAVAILABLE"
    assert details["ErrorInfo"].metadata["limit"] == "budgets"
    reply = await orchestrator.http.post("/v1/queries:answer", headers={"x-api-key": budgeted},
                                         json={"query": "what?"})
    assert reply.status_code == 503 and reply.headers["retry-after"] == "1"
    assert await _query(orchestrator, limited) == grpc.StatusCode.OK  # rate limits fail open
    reply = await orchestrator.http.get("/ready")
    assert reply.status_code == 200  # the orchestrator itself still serves
    entry = _redis_entry(reply.json())
    assert entry["state"] == "NOT_SERVING" and entry["detail"].startswith("unreachable")


async def test_redis_down_with_the_policies_switched(front, keys, redis):
    budgeted = await keys.create("budgeted", grants=Grants(budgets=Budgets(tokens=1000)))
    limited = await keys.create("limited", RateLimits(per_minute=100))
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path),
                               redis_url=redis.url, rate_limit_redis_failure="fail_closed",
                               budget_redis_failure="fail_open")
    redis.stop()
    assert await _query(orchestrator, budgeted) == grpc.StatusCode.OK
    error = await _refusal(orchestrator.stub.AnswerQuery(QUERY, metadata=_key(limited),
                                                          timeout=10))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert _details(error)["ErrorInfo"].metadata["limit"] == "rate limits"
    entry = _redis_entry((await orchestrator.http.get("/ready")).json())
    assert entry["state"] == "NOT_SERVING"
    assert "rate limits fail_closed, budgets fail_open" in entry["detail"]


# --- scopes and collections ---


async def test_scopes_over_grpc_and_rest(front, keys):
    solver = await keys.create("solver", grants=Grants(scopes=["solve"]))
    reader = await keys.create("reader", grants=Grants(scopes=["query"], collections=["docs"]))
    writer = await keys.create("writer", grants=Grants(scopes=["ingest"], collections=["docs"]))
    admin = await keys.create("admin", grants=Grants(scopes=["admin"]))
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path))

    error = await _refusal(orchestrator.stub.AnswerQuery(QUERY, metadata=_key(solver),
                                                          timeout=10))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'query'" in error.details()
    info = _details(error)["ErrorInfo"]
    assert info.reason == "SCOPE_NOT_GRANTED" and info.metadata["scope"] == "query"
    reply = await orchestrator.http.post("/v1/queries:answer", headers={"x-api-key": solver},
                                         json={"query": "what?"})
    assert reply.status_code == 403
    body = reply.json()
    assert body["code"] == 7 and body["details"][0]["reason"] == "SCOPE_NOT_GRANTED"
    assert body["details"][0]["metadata"]["scope"] == "query"
    reply = await orchestrator.http.post("/v1/problems:solve", headers={"x-api-key": solver},
                                         json={"connectFour": {"moves": "44"}})
    assert reply.status_code == 200

    assert await _query(orchestrator, reader) == grpc.StatusCode.OK
    for collection in ("other", ""):  # "" is the default collection, "default"
        error = await _refusal(orchestrator.stub.AnswerQuery(
            pb.AnswerQueryRequest(query="q", collection=collection), metadata=_key(reader),
            timeout=10))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        info = _details(error)["ErrorInfo"]
        assert info.reason == "COLLECTION_NOT_ALLOWED"
        assert info.metadata["collection"] == (collection or "default")
    reply = await orchestrator.http.post(
        "/v1/collections/docs/documents:ingest", headers={"x-api-key": reader},
        json={"documents": [{"id": "a", "text": "x"}]})
    assert reply.status_code == 403 and reply.json()["details"][0]["metadata"]["scope"] == \
        "ingest"

    # a stream: each message's collection is checked
    stream = orchestrator.stub.StreamIngestDocuments(metadata=_key(writer), timeout=10)
    await stream.write(pb.StreamIngestDocumentsRequest(collection="docs"))
    await stream.write(pb.StreamIngestDocumentsRequest(collection="other"))
    error = await _refusal(stream)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _details(error)["ErrorInfo"].metadata["collection"] == "other"
    assert orchestrator.servicer.ingested == ["docs"]

    # the document resources: the scope of each method, the collection of each resource name
    calls = [(reader, "GetDocument", pb.GetDocumentRequest(name="collections/other/documents/a"),
              "COLLECTION_NOT_ALLOWED"),
             (reader, "ListDocuments", pb.ListDocumentsRequest(parent="collections/other"),
              "COLLECTION_NOT_ALLOWED"),
             (reader, "DeleteDocument", pb.DeleteDocumentRequest(
                 name="collections/docs/documents/a"), "SCOPE_NOT_GRANTED"),
             (writer, "DeleteCollection", pb.DeleteCollectionRequest(name="collections/docs"),
              "SCOPE_NOT_GRANTED")]
    for key, method, message, reason in calls:
        error = await _refusal(getattr(orchestrator.stub, method)(message, metadata=_key(key),
                                                                   timeout=10))
        assert _details(error)["ErrorInfo"].reason == reason, method
    # allowed, they reach the servicer
    await orchestrator.stub.ListDocuments(pb.ListDocumentsRequest(parent="collections/docs"),
                                          metadata=_key(reader), timeout=10)
    await orchestrator.stub.DeleteCollection(pb.DeleteCollectionRequest(
        name="collections/other"), metadata=_key(admin), timeout=10)

    # admin may call everything, any collection
    assert await _query(orchestrator, admin) == grpc.StatusCode.OK
    stream = orchestrator.stub.StreamIngestDocuments(metadata=_key(admin), timeout=10)
    await stream.write(pb.StreamIngestDocumentsRequest(collection="other"))
    await stream.done_writing()
    assert (await stream).document_count == 2
    await orchestrator.until(lambda: orchestrator.control.in_flight == 0)


async def test_key_files_without_scopes_and_calls_without_keys_have_every_scope(
        front, keys, tmp_path):
    """A key file written before scopes existed keeps working: its keys may call everything."""
    key = await keys.create("old")
    data = json.loads(keys.path.read_text())
    assert set(data["keys"][0]) == {"name", "sha256", "created"}  # as before scopes
    orchestrator = await front(require_api_key=True, api_keys_file=str(keys.path))
    assert await _query(orchestrator, key) == grpc.StatusCode.OK
    stream = orchestrator.stub.StreamIngestDocuments(metadata=_key(key), timeout=10)
    await stream.write(pb.StreamIngestDocumentsRequest(collection="any"))
    await stream.done_writing()
    assert (await stream).document_count == 1

    anonymous = await front()  # keys optional: calls without a key may call everything
    assert (await anonymous.stub.AnswerQuery(QUERY, timeout=10)).answer == "done"
    stream = anonymous.stub.StreamIngestDocuments(timeout=10)
    await stream.done_writing()
    assert (await stream).document_count == 0
