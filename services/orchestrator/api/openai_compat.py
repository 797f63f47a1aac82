"""OpenAI's chat-completions API on the orchestrator's REST front, as routes of the front's own
(`libs.rest.extras.FrontRoute`): the same key check (`Authorization: Bearer <key>` or
`x-api-key`) before the body is read (where keys are not required, an unknown key is served as
no key, since OpenAI's SDKs always send one), the same body limits, and in-process calls that
pass access control (scope `query`), admission, rate limits and budgets as AnswerQuery's do.

- `GET /v1/models`, `GET /v1/models/{model}`: the models (`openai_models.MODELS`), each a way
  the mesh answers text.
- `POST /v1/chat/completions`: the conversation answered (`openai_request` says how the body
  maps to an AnswerQueryRequest). Each of the `n` choices is one independent AnswerQuery; they
  run concurrently. The reply is a `chat.completion`; with `stream: true`, Server-Sent Events of
  `chat.completion.chunk` objects ending with `data: [DONE]` (`openai_stream`).

Each choice carries the mesh's extension field `mesh`: the answer's sources, agents, votes,
confidence, provider, role, stop reason (`mesh_extension`). `usage` sums the choices' tokens as
the LLM gateway reported them. Errors are OpenAI's error body (`openai_errors`) with the HTTP
status the front gives the same status elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from starlette.responses import Response

from libs.in_process import CallFailed
from libs.rest.extras import Caller, FrontRoute
from libs.rest.path_template import parse_template
from services.orchestrator.api.openai_errors import (
    JSON,
    ChatParamError,
    error_body,
    failure_response,
    json_error,
    openai_error_response,
    param_error_response,
)
from services.orchestrator.api.openai_models import MODELS, find_model, model_object
from services.orchestrator.api.openai_openapi import (
    CHAT_OPERATION,
    MODEL_OPERATION,
    MODELS_OPERATION,
)
from services.orchestrator.api.openai_request import ChatRequest, answer_request, parse_chat
from services.orchestrator.api.openai_response import finish_reason, mesh_extension, usage
from services.orchestrator.api.openai_stream import apply_stops, chat_stream

SERVICE = "/mesh.orchestrator.v1.OrchestratorService"
ANSWER_QUERY = f"{SERVICE}/AnswerQuery"


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


async def chat_completions(caller: Caller, _path: dict[str, str], _query: str) -> Response:
    """POST /v1/chat/completions (see the module docstring).

    Errors (OpenAI's body): 400 naming `param` for a malformed request, 413 for an oversize
    conversation, and the statuses of AnswerQuery's failures (401, 403, 404, 429, 503, 504).
    """
    try:
        request, model = parse_chat(caller.body)
        messages = [answer_request(request, model) for _ in range(request.n)]
    except ChatParamError as error:
        return param_error_response(error)
    if request.stream:
        return await chat_stream(caller, request, model, completion_id())
    try:
        replies = await _answers(caller, messages)
    except CallFailed as failure:
        return failure_response(failure.status)
    return Response(json.dumps(_completion(request, model.id, replies)), media_type=JSON)


async def _answers(caller: Caller, messages: list[pb.AnswerQueryRequest]
                   ) -> list[pb.AnswerQueryResponse]:
    """The choices' answers, asked concurrently; the first failure cancels the others.

    Raises:
        CallFailed: one of the calls failed.
    """
    tasks = [asyncio.ensure_future(caller.unary(ANSWER_QUERY, message)) for message in messages]
    try:
        return list(await asyncio.gather(*tasks))  # type: ignore[arg-type]
    finally:
        for task in tasks:
            task.cancel()


def _completion(request: ChatRequest, model_id: str, replies: list[pb.AnswerQueryResponse]
                ) -> dict[str, object]:
    """The `chat.completion` object of the answers."""
    stops = request.stops()
    choices = []
    for index, reply in enumerate(replies):
        text, stopped = apply_stops(reply.answer, stops)
        choices.append({"index": index, "finish_reason": finish_reason(reply, stopped),
                        "logprobs": None,
                        "message": {"role": "assistant", "content": text, "refusal": None},
                        "mesh": mesh_extension(reply)})
    return {"id": completion_id(), "object": "chat.completion", "created": int(time.time()),
            "model": model_id, "choices": choices, "usage": usage(replies),
            "system_fingerprint": None}


class _Models:
    """GET /v1/models and /v1/models/{model}; `created` is when the front started."""

    def __init__(self) -> None:
        self.created = int(time.time())

    async def list(self, _caller: Caller, _path: dict[str, str], _query: str) -> Response:
        body = {"object": "list", "data": [model_object(m, self.created) for m in MODELS]}
        return Response(json.dumps(body), media_type=JSON)

    async def get(self, _caller: Caller, path: dict[str, str], _query: str) -> Response:
        model = find_model(path["model"])
        if model is None:
            return json_error(error_body(f"the model {path['model']!r} does not exist",
                                         404, "model", "model_not_found"), 404)
        return Response(json.dumps(model_object(model, self.created)), media_type=JSON)


def openai_routes() -> tuple[FrontRoute, ...]:
    """The routes, each answering its errors in OpenAI's body."""
    models = _Models()
    return (
        FrontRoute("POST", parse_template("/v1/chat/completions"), chat_completions,
                   CHAT_OPERATION, ANSWER_QUERY, body=True, error_body=openai_error_response,
                   unknown_key_as_none=True),
        FrontRoute("GET", parse_template("/v1/models"), models.list, MODELS_OPERATION,
                   ANSWER_QUERY, error_body=openai_error_response, unknown_key_as_none=True),
        FrontRoute("GET", parse_template("/v1/models/{model}"), models.get, MODEL_OPERATION,
                   ANSWER_QUERY, error_body=openai_error_response, unknown_key_as_none=True),
    )
