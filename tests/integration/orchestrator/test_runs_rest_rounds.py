"""A three-round solve run watched over REST as Server-Sent Events by a client that disconnects
between rounds and resumes with `Last-Event-ID`: every event arrives exactly once, the same events
as a full replay after the run ended.

The real orchestrator (run store on SQLite, workers, access control) and its REST front on port 0,
with the fake search and network of `runs_mesh`, which disagree for three rounds; the fake search
holds the next round's search while the client is away, so each disconnect falls between rounds.
"""

from __future__ import annotations

import json

import httpx
import pytest
from google.protobuf import json_format
from runs_mesh import start_backends, start_orchestrator, three_rounds

from libs.rest import RestSettings, serve_rest
from services.orchestrator.api.rest import build_rest_app

TIMEOUT_S = 30.0


@pytest.fixture
async def front(tmp_path):
    backends, search = await start_backends()
    orchestrator = await start_orchestrator(
        backends.port, run_store_url=f"sqlite:///{tmp_path}/runs.db", run_workers=1)
    app = build_rest_app(orchestrator.server.in_process,
                         RestSettings(port=0, sse_first_event_wait_s=0.2),
                         access=orchestrator.access)
    rest = await serve_rest(app, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}",
                                     timeout=TIMEOUT_S) as client:
            yield client, search
    finally:
        search.hold.set()
        await rest.stop()
        await orchestrator.close()
        await backends.stop(0)


async def _events(response: httpx.Response, until=lambda event: False) -> list[dict]:
    """The SSE events of `response` (dicts of their fields) until one satisfies `until` or the
    stream ends."""
    events, current = [], {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            current[name] = value
            continue
        if current:
            events.append(current)
            if until(current):
                break
            current = {}
    return events


def _tally_of(iteration: int):
    def ended(event: dict) -> bool:
        progress = json.loads(event.get("data", "{}")).get("solveProgress", {})
        return "tally" in progress and progress["iteration"] == iteration
    return ended


async def test_a_client_that_disconnects_between_rounds_gets_every_event_once(front):
    client, search = front
    search.pause_after = 1  # the second round's search waits until the client has left
    body = {"solve": json_format.MessageToDict(three_rounds())}
    run = (await client.post("/v1/runs", json=body)).json()
    watch = f"/v1/{run['name']}:watch"
    received: list[dict] = []
    for iteration in (1, 2):
        headers = {"Last-Event-ID": received[-1]["id"]} if received else {}
        async with client.stream("GET", watch, headers=headers) as response:
            assert response.status_code == 200
            received += await _events(response, until=_tally_of(iteration))
        # the client is gone; the next round's search may go on, the one after waits
        search.pause_after = iteration + 1
        search.hold.set()
    async with client.stream("GET", watch, headers={"Last-Event-ID": received[-1]["id"]}) \
            as response:
        received += await _events(response)
    assert received[-1] == {"event": "end", "data": "{}"}
    ids = [int(event["id"]) for event in received if "id" in event]
    assert ids == list(range(1, len(ids) + 1))
    async with client.stream("GET", watch) as response:  # a full replay of the ended run
        replay = await _events(response)
    assert [event for event in received if "id" in event] == \
        [event for event in replay if "id" in event]
    tallies = [json.loads(event["data"])["solveProgress"]["iteration"] for event in received
               if '"tally"' in event.get("data", "")]
    assert tallies == [1, 2, 3]
    assert (await client.get(f"/v1/{run['name']}")).json()["state"] == "STATE_SUCCEEDED"
