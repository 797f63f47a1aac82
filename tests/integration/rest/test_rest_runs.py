"""RunService through the orchestrator's REST front: watches as Server-Sent Events resumed with
`Last-Event-ID`, CreateBatch from a JSON Lines upload, a batch's results as JSON Lines, and keys
checked before any of it is read.

A real grpc.aio server with the orchestrator's access interceptor (keys required) and the REST
front on port 0, over HTTP. The RunService behind it is a test double whose answers are obvious:
one run whose events the test publishes round by round (a watch streams the stored ones after
`after_sequence`, then each new one, and ends when the run is finished), and one batch of five
runs listed two per page, so the front's SSE, upload and download are what is checked.
"""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
from google.protobuf import json_format
from mesh.orchestrator.v1 import orchestrator_service_pb2 as opb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as opb_grpc
from mesh.orchestrator.v1 import run_service_pb2 as pb
from mesh.orchestrator.v1 import run_service_pb2_grpc as pb_grpc

from libs.errors import InvalidArgument, NotFound
from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from services.orchestrator.access import open_access
from services.orchestrator.access.interceptor import AccessInterceptor
from services.orchestrator.access.keys import FileKeyStore
from services.orchestrator.api.rest import batch_upload, build_rest_app
from services.orchestrator.settings import OrchestratorSettings

RUN = "runs/r1"
BATCH = "batches/b1"
MAX_ITEMS, MAX_BYTES = 5, 2000
DEADLINE_S = 20.0


class _Runs(pb_grpc.RunServiceServicer):
    """One run (`RUN`) with events published by the test, one batch (`BATCH`) of five runs."""

    def __init__(self) -> None:
        self.events: list[pb.RunEvent] = []
        self.finished = False
        self.changed = asyncio.Condition()
        self.watches_ended = 0
        self.watch_ended = asyncio.Condition()
        self.created: list[pb.CreateBatchRequest] = []
        self.batch_runs = [_batch_run(index) for index in range(5)]

    async def publish(self, *events: pb.RunEvent, finish: bool = False) -> None:
        async with self.changed:
            for event in events:
                event.sequence = len(self.events) + 1
                event.run = RUN
                self.events.append(event)
            self.finished = finish
            self.changed.notify_all()

    async def WatchRun(self, request, context):
        if request.name != RUN:
            raise NotFound(f"{request.name} not found")
        seen = request.after_sequence
        try:
            while True:
                async with self.changed:
                    after = seen
                    await self.changed.wait_for(
                        lambda: len(self.events) > after or self.finished)  # noqa: B023
                    pending, done = self.events[seen:], self.finished
                for event in pending:
                    yield event
                    seen = event.sequence
                if done:
                    return
        finally:
            async with self.watch_ended:
                self.watches_ended += 1
                self.watch_ended.notify_all()

    async def CreateBatch(self, request, context):
        for index, item in enumerate(request.items):
            moves = item.solve.connect_four.moves
            if any(move not in "1234567" for move in moves):
                raise InvalidArgument(f"items[{index}].solve.connect_four.moves",
                                      f"columns are 1-7, got {moves!r}")
        self.created.append(request)
        return pb.Batch(name=BATCH, display_name=request.batch.display_name,
                        run_count=len(request.items))

    async def GetBatch(self, request, context):
        if request.name != BATCH:
            raise NotFound(f"{request.name} not found")
        return pb.Batch(name=BATCH, run_count=len(self.batch_runs))

    async def ListRuns(self, request, context):
        assert request.filter == f'batch = "{BATCH}"'
        start = int(request.page_token or 0)
        end = start + 2
        return pb.ListRunsResponse(runs=self.batch_runs[start:end],
                                   next_page_token=str(end) if end < len(self.batch_runs) else "")


def _batch_run(index: int) -> pb.Run:
    run = pb.Run(name=f"runs/b1-{index}", batch=BATCH, batch_index=index,
                 state=pb.Run.STATE_SUCCEEDED)
    if index == 3:
        run.state = pb.Run.STATE_FAILED
        run.error.code, run.error.message = 3, "connect_four.moves: the game is over"
    elif index == 4:
        run.state = pb.Run.STATE_QUEUED
    else:
        run.solve_response.connect_four.column = index + 1
    return run


class _Front:
    def __init__(self, client: httpx.AsyncClient, rest, key: str, runs: _Runs) -> None:
        self.client, self.rest, self.port, self.key, self.runs = client, rest, rest.port, key, runs
        self.auth = {"X-Api-Key": key}

    async def watch_ends(self, count: int) -> None:
        """Waits until `count` watch calls have ended on the server (the client's disconnect
        reached the servicer)."""
        async with self.runs.watch_ended:
            await asyncio.wait_for(self.runs.watch_ended.wait_for(
                lambda: self.runs.watches_ended >= count), DEADLINE_S)


@pytest.fixture
async def front(tmp_path):
    keys = FileKeyStore(tmp_path / "api-keys.json")
    key = await keys.create("alice")
    settings = OrchestratorSettings(port=0, rest_port=0, require_api_key=True,
                                    api_keys_file=str(keys.path))
    control = await open_access(settings)
    runs = _Runs()
    grpc_server = await start_server(
        "orchestrator", settings,
        [Servicer(pb_grpc.add_RunServiceServicer_to_server, runs,
                  "mesh.orchestrator.v1.RunService"),
         Servicer(opb_grpc.add_OrchestratorServiceServicer_to_server,
                  opb_grpc.OrchestratorServiceServicer(),
                  "mesh.orchestrator.v1.OrchestratorService")],
        interceptors=[AccessInterceptor(control)])
    app = build_rest_app(grpc_server.in_process,
                         RestSettings(port=0, default_deadline_s=10.0, sse_heartbeat_s=0.2,
                                      sse_first_event_wait_s=0.2),
                         access=control, batch_upload=batch_upload(MAX_ITEMS, MAX_BYTES))
    # a long drain: a watch that did not end when the front stops would hold stop() for a minute
    rest = await serve_rest(app, "127.0.0.1", 0, drain_grace_s=60.0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}",
                                 timeout=DEADLINE_S) as client:
        yield _Front(client, rest, key, runs)
    async with runs.changed:
        runs.finished = True
        runs.changed.notify_all()
    await rest.stop()
    await grpc_server.stop(0)
    await control.aclose()


async def _sse_events(response: httpx.Response, until=lambda event: False,
                      comments: list[str] | None = None) -> list[dict[str, str]]:
    """The SSE events of `response` (each a dict of its fields) until one satisfies `until` or
    the stream ends; comment lines are appended to `comments`. Reading resumes where the last
    call on the same response stopped."""
    if not hasattr(response, "sse_lines"):
        response.sse_lines = response.aiter_lines()
    events: list[dict[str, str]] = []
    current: dict[str, str] = {}
    async for line in response.sse_lines:
        if not line:
            if current:
                events.append(current)
                if until(current):
                    return events
                current = {}
            continue
        if line.startswith(":"):
            if comments is not None:
                comments.append(line)
                if until({"comment": line}):
                    return events
            continue
        name, _, value = line.partition(":")
        current[name] = value.removeprefix(" ")
    assert not current, "the stream ended inside an event"
    return events


def _round(number: int) -> list[pb.RunEvent]:
    """A round of the consensus loop: its start and its tally."""
    return [pb.RunEvent(solve_progress=opb.StreamSolveProblemResponse(
                iteration=number, iteration_started=opb.IterationStarted(simulations=100))),
            pb.RunEvent(solve_progress=opb.StreamSolveProblemResponse(
                iteration=number, tally=opb.RoundTally(answer="4", confidence=0.5)))]


def _state(previous: int, state: int) -> pb.RunEvent:
    return pb.RunEvent(state_changed=pb.StateChanged(previous_state=previous, state=state))


async def test_a_watch_resumed_with_last_event_id_delivers_every_event_once(front):
    runs = front.runs
    await runs.publish(_state(pb.Run.STATE_QUEUED, pb.Run.STATE_RUNNING), *_round(1))
    received: list[dict[str, str]] = []
    async with front.client.stream("GET", f"/v1/{RUN}:watch", headers=front.auth) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        received += await _sse_events(response, until=lambda event: event.get("id") == "3")
    await front.watch_ends(1)  # the disconnect between rounds reached the service

    await runs.publish(*_round(2))
    async with front.client.stream("GET", f"/v1/{RUN}:watch",
                                   headers={**front.auth, "Last-Event-ID": "3"}) as response:
        received += await _sse_events(response, until=lambda event: event.get("id") == "5")
    await front.watch_ends(2)

    await runs.publish(*_round(3), _state(pb.Run.STATE_RUNNING, pb.Run.STATE_SUCCEEDED),
                       finish=True)
    # the header wins over the query: it is what the client saw last
    async with front.client.stream("GET", f"/v1/{RUN}:watch?after_sequence=1",
                                   headers={**front.auth, "Last-Event-ID": "5"}) as response:
        received += await _sse_events(response)  # to the end of the stream

    data = [event for event in received if "id" in event]
    assert [int(event["id"]) for event in data] == list(range(1, 9))
    for event in data:
        message = json_format.Parse(event["data"], pb.RunEvent())
        assert message.sequence == int(event["id"]) and message.run == RUN
        assert "event" not in event  # plain messages: EventSource.onmessage sees them
    iterations = [json.loads(event["data"])["solveProgress"]["iteration"] for event in data[1:7]]
    assert iterations == [1, 1, 2, 2, 3, 3]
    assert received[-1] == {"event": "end", "data": "{}"}


async def test_a_watch_also_resumes_from_the_query_and_sends_heartbeats(front):
    await front.runs.publish(*_round(1))
    comments: list[str] = []
    async with front.client.stream("GET", f"/v1/{RUN}:watch?afterSequence=2",
                                   headers=front.auth) as response:
        assert response.status_code == 200  # nothing after 2 yet: the stream starts anyway
        events = await _sse_events(response, comments=comments,
                                   until=lambda event: len(comments) >= 2)
    assert events == [] and all(line.startswith(": ping") for line in comments)
    await front.runs.publish(*_round(2), finish=True)
    async with front.client.stream("GET", f"/v1/{RUN}:watch?afterSequence=2",
                                   headers=front.auth) as response:
        events = await _sse_events(response)
    assert [event.get("id") for event in events] == ["3", "4", None]


async def test_a_front_that_stops_ends_its_watches_without_end_so_clients_resume(front):
    await front.runs.publish(*_round(1))
    async with front.client.stream("GET", f"/v1/{RUN}:watch", headers=front.auth) as response:
        events = await _sse_events(response, until=lambda event: event.get("id") == "2")
        stopping = asyncio.ensure_future(front.rest.stop())
        events += await _sse_events(response)  # the stream ends (a read timeout fails the test)
    await stopping
    assert [event.get("id") for event in events] == ["1", "2"]  # no `event: end`
    await front.watch_ends(1)


async def test_a_watch_of_an_unknown_run_is_an_error_response_not_a_stream(front):
    reply = await front.client.get("/v1/runs/nope:watch", headers=front.auth)
    assert reply.status_code == 404, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert "runs/nope" in reply.json()["message"]


async def test_a_malformed_last_event_id_is_refused_naming_the_header(front):
    reply = await front.client.get(f"/v1/{RUN}:watch",
                                   headers={**front.auth, "Last-Event-ID": "abc"})
    assert reply.status_code == 400
    violation = reply.json()["details"][0]["fieldViolations"][0]
    assert violation["field"] == "Last-Event-ID"


def _lines(*records: object) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


async def test_a_json_lines_upload_creates_one_batch(front):
    body = _lines({"solve": {"connectFour": {"moves": "44"}, "simulations": "200"}},
                  {"answer": {"query": "what is MCTS?"}}) + b"\n" + \
        _lines({"solve": {"connect_four": {"moves": "4453"}}})
    reply = await front.client.post(
        "/v1/batches?requestId=1b4e28ba-2fa1-11d2-883f-0016d3cca427&batch.displayName=eval",
        content=body, headers={**front.auth, "Content-Type": "application/jsonl"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["name"] == BATCH and reply.json()["runCount"] == 3
    (request,) = front.runs.created
    assert request.request_id == "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    assert request.batch.display_name == "eval"
    assert [item.WhichOneof("request") for item in request.items] == ["solve", "answer", "solve"]
    assert request.items[0].solve.simulations == 200
    assert request.items[2].solve.connect_four.moves == "4453"


@pytest.mark.parametrize(("line", "field", "what"), [
    ({"solve": {"connectFour": {"moves": "44"}, "agent": ["AGENT_MCTS"]}},
     "items[1].solve.agent", "unknown field"),
    ({"solve": {"simulations": "many"}}, "items[1].solve.simulations", "simulations"),
    ({"solve": {"connectFour": {"moves": "44"}}, "answer": {"query": "x"}},
     "items[1].answer", "oneof"),
    ([1, 2], "items[1]", "JSON object"),
    ("{not json", "items[1]", "not JSON"),
])
async def test_a_bad_line_refuses_the_whole_upload_naming_its_line_and_field(
        front, line, field, what):
    bad = line.encode() if isinstance(line, str) else json.dumps(line).encode()
    body = _lines({"solve": {"connectFour": {"moves": "4"}}}) + b"\n" + bad + b"\n" + \
        _lines({"answer": {"query": "q"}})
    reply = await front.client.post("/v1/batches", content=body,
                                    headers={**front.auth, "Content-Type": "application/x-ndjson"})
    assert reply.status_code == 400, reply.text
    status = reply.json()
    assert status["message"].startswith(f"line 3: {field}: ")
    violation = status["details"][0]["fieldViolations"][0]
    assert violation["field"] == field and violation["description"].startswith("line 3: ")
    assert what in status["message"]
    assert front.runs.created == []  # refused up front: nothing was created (line 2 is blank)


async def test_an_item_the_service_refuses_is_told_with_its_line(front):
    body = _lines({"solve": {"connectFour": {"moves": "4"}}}) + b"\n\n" + \
        _lines({"solve": {"connectFour": {"moves": "48"}}})
    reply = await front.client.post("/v1/batches", content=body,
                                    headers={**front.auth, "Content-Type": "application/x-ndjson"})
    assert reply.status_code == 400
    status = reply.json()
    assert status["message"].startswith("line 4: items[1].solve.connect_four.moves")
    assert status["details"][0]["fieldViolations"][0]["description"].startswith("line 4: ")


async def test_uploads_over_the_limits_are_refused_naming_the_limit(front):
    headers = {**front.auth, "Content-Type": "application/x-ndjson"}
    many = _lines(*[{"answer": {"query": "q"}}] * (MAX_ITEMS + 1))
    reply = await front.client.post("/v1/batches", content=many, headers=headers)
    assert reply.status_code == 400
    assert "ORCHESTRATOR_BATCH_MAX_ITEMS" in reply.json()["message"]
    large = _lines({"answer": {"query": "q" * MAX_BYTES}})
    reply = await front.client.post("/v1/batches", content=large, headers=headers)
    assert reply.status_code == 413
    assert "ORCHESTRATOR_BATCH_MAX_BYTES" in reply.json()["message"]
    reply = await front.client.post("/v1/batches", content=b"a,b\n",
                                    headers={**front.auth, "Content-Type": "text/csv"})
    assert reply.status_code == 415
    assert front.runs.created == []


async def test_a_batch_json_body_still_works(front):
    reply = await front.client.post("/v1/batches", headers=front.auth, json={
        "items": [{"answer": {"query": "q"}}], "batch": {"displayName": "json"}})
    assert reply.status_code == 200, reply.text
    assert front.runs.created[0].batch.display_name == "json"


async def test_results_download_as_json_lines_one_line_per_run(front):
    reply = await front.client.get(f"/v1/{BATCH}/results", headers=front.auth)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/x-ndjson")
    assert "b1-results.jsonl" in reply.headers["content-disposition"]
    records = [json.loads(line) for line in reply.text.splitlines()]
    assert [record["index"] for record in records] == [0, 1, 2, 3, 4]  # across three pages
    assert [record["state"] for record in records] == ["STATE_SUCCEEDED"] * 3 + [
        "STATE_FAILED", "STATE_QUEUED"]
    assert [record["response"]["connectFour"]["column"] for record in records[:3]] == [1, 2, 3]
    assert records[3]["error"]["code"] == 3 and "response" not in records[3]
    assert set(records[4]) == {"name", "index", "state"}
    missing = await front.client.get("/v1/batches/nope/results", headers=front.auth)
    assert missing.status_code == 404


def _keyless_head(port: int, head: bytes) -> bytes:
    """Sends a request head without a key and without the body it announces; returns what the
    server answers before the body would have come (it never does)."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as sock:
        sock.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.parametrize("head", [
    b"POST /v1/batches HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\n"
    b"Content-Length: 1000000\r\n\r\n",
    b"GET /v1/batches/b1/results HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /v1/runs/r1:watch HTTP/1.1\r\nHost: 127.0.0.1\r\nLast-Event-ID: 2\r\n\r\n",
])
async def test_no_key_is_401_before_the_body_or_anything_else_is_read(front, head):
    answer = await asyncio.to_thread(_keyless_head, front.port, head)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert front.runs.created == [] and front.runs.watches_ended == 0


async def test_the_openapi_document_lists_the_runs_paths(front):
    document = (await front.client.get("/openapi.json")).json()
    paths = document["paths"]
    for path in ("/v1/runs", "/v1/runs/{run}", "/v1/runs/{run}:cancel", "/v1/batches",
                 "/v1/batches/{batch}", "/v1/batches/{batch}/results"):
        assert path in paths, path
    watch = paths["/v1/runs/{run}:watch"]["get"]
    assert "text/event-stream" in watch["responses"]["200"]["content"]
    assert any(parameter["name"] == "Last-Event-ID" for parameter in watch["parameters"])
    upload = paths["/v1/batches"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/x-ndjson", "application/jsonl"} <= set(upload)
    results = paths["/v1/batches/{batch}/results"]["get"]
    assert "application/x-ndjson" in results["responses"]["200"]["content"]
