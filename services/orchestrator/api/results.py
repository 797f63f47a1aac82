"""A batch's results as JSON Lines over REST: `GET /v1/batches/{batch}/results`.

One line per run of the batch, in item order: `{"name": "runs/...", "index": 0, "state":
"STATE_SUCCEEDED", "response": {...}}`, where `response` is the SolveProblemResponse or
AnswerQueryResponse (proto3 JSON, as the synchronous call answers), or `"error":
<google.rpc.Status>` for a FAILED run; a run that has not ended (QUEUED, RUNNING) or was
cancelled without a result has neither. The batch is read first (GetBatch), so an unknown batch
or another key's is a 404 before anything is streamed; then the runs come from ListRuns with the
filter `batch = "batches/{batch}"`, a page at a time, each page written as it arrives. Every call
is an in-process call with the HTTP request's key, so a caller sees only its own batches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from mesh.orchestrator.v1 import run_service_pb2 as pb
from starlette.responses import Response, StreamingResponse

from libs.rest.extras import Caller, FrontRoute
from libs.rest.jsonl import JSON_LINES, json_line
from libs.rest.path_template import parse_template
from libs.rest.transcoding import message_to_json_value

SERVICE = "/mesh.orchestrator.v1.RunService"
GET_BATCH = f"{SERVICE}/GetBatch"
LIST_RUNS = f"{SERVICE}/ListRuns"
RESULTS_TEMPLATE = "/v1/{name=batches/*}/results"
PAGE_SIZE = 1000
"""Runs per ListRuns page (the method's largest)."""


def result_record(run: pb.Run) -> dict[str, object]:
    """The JSON Lines record of one run: name, index, state, and response or error."""
    record: dict[str, object] = {"name": run.name, "index": run.batch_index,
                                 "state": pb.Run.State.Name(run.state)}
    kind = run.WhichOneof("result")
    if kind == "error":
        record["error"] = message_to_json_value(run.error)
    elif kind is not None:
        record["response"] = message_to_json_value(getattr(run, kind))
    return record


async def batch_results(caller: Caller, path_values: dict[str, str], _query: str) -> Response:
    """The results download of the batch `path_values["name"]` (see the module docstring).

    Raises:
        CallFailed: GetBatch or the first ListRuns page failed (NOT_FOUND for an unknown batch
            or another key's, INVALID_ARGUMENT for a malformed name).
    """
    batch = await caller.unary(GET_BATCH, pb.GetBatchRequest(name=path_values["name"]))
    request = pb.ListRunsRequest(filter=f'batch = "{batch.name}"', page_size=PAGE_SIZE)
    first = await caller.unary(LIST_RUNS, request)
    file_name = batch.name.rsplit("/", 1)[-1]
    return StreamingResponse(
        _lines(caller, request, first), media_type=JSON_LINES,
        headers={"Content-Disposition": f'attachment; filename="{file_name}-results.jsonl"'})


async def _lines(caller: Caller, request: pb.ListRunsRequest, page: pb.ListRunsResponse
                 ) -> AsyncIterator[bytes]:
    """Each page's records, then the next page's, until the last. A page that fails after the
    response has started ends the body early; the run count of GetBatch tells a reader so."""
    while True:
        yield b"".join(json_line(result_record(run)) for run in page.runs)
        if not page.next_page_token:
            return
        request.page_token = page.next_page_token
        page = await caller.unary(LIST_RUNS, request)


_RECORD_SCHEMA = {
    "type": "object",
    "title": "One run's result",
    "properties": {
        "name": {"type": "string", "description": "runs/{run}"},
        "index": {"type": "integer", "format": "int32",
                  "description": "The run's position among the batch's items (0-based)."},
        "state": {"$ref": "#/components/schemas/mesh.orchestrator.v1.Run.State"},
        "response": {"type": "object", "description": "SolveProblemResponse or "
                     "AnswerQueryResponse, for a SUCCEEDED run."},
        "error": {"$ref": "#/components/schemas/google.rpc.Status"},
    },
}


def results_route() -> FrontRoute:
    """The route of the download, with its OpenAPI operation."""
    template = parse_template(RESULTS_TEMPLATE)
    operation = {
        "operationId": "RunService_DownloadBatchResults",
        "tags": ["RunService"],
        "summary": "A batch's results as JSON Lines, one line per run in item order.",
        "parameters": [{"name": "batch", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {
            "200": {"description": "JSON Lines: one record per run.",
                    "content": {JSON_LINES: {"schema": _RECORD_SCHEMA}}},
            "default": {"description": "An error: a google.rpc.Status.",
                        "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/google.rpc.Status"}}}},
        },
    }
    return FrontRoute("GET", template, batch_results, operation, LIST_RUNS)
