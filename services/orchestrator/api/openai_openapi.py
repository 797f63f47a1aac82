"""OpenAPI operations of the OpenAI-compatible routes: the chat request (OpenAI's parameters the
mesh honours, and the `mesh` extra body field), the completion with its `mesh` extension field,
the models, and OpenAI's error body."""

from __future__ import annotations

from services.orchestrator.api.openai_request import ChatRequest, MeshOptions

_ERROR = {
    "type": "object", "title": "OpenAI error body",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"},
        "type": {"type": "string", "description": "invalid_request_error, "
                 "authentication_error, permission_error, rate_limit_error, timeout_error, "
                 "api_error"},
        "param": {"type": "string", "nullable": True,
                  "description": "The parameter at fault (messages[0].role, mesh.top_k)."},
        "code": {"type": "string", "nullable": True,
                 "description": "invalid_value, model_not_found, context_length_exceeded, "
                 "invalid_api_key, rate_limit_exceeded, ... (the mesh's ErrorInfo reason)"}}}},
}
_EXTENSION = {
    "type": "object", "title": "The mesh's account of one answer",
    "description": "From the AnswerQueryResponse (proto3 JSON names): sources (passages the "
    "answer drew on: documentId, title, text, score, source), agents, votes, failures, "
    "confidence in [0, 1], provider, offline, role, stopReason, passagesOnly, ungrounded, "
    "iterations, threadId, costUsd, totalTokens.",
    "properties": {
        "sources": {"type": "array", "items": {
            "$ref": "#/components/schemas/mesh.orchestrator.v1.Source"}},
        "agents": {"type": "array", "items": {"type": "string"}},
        "confidence": {"type": "number"},
        "provider": {"type": "string"},
        "stopReason": {"type": "string"},
    },
}
_USAGE = {"type": "object", "properties": {
    "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
    "total_tokens": {"type": "integer", "description": "As the LLM gateway counted them, "
                     "over every call of every choice."}}}
_COMPLETION = {
    "type": "object", "title": "chat.completion (or, streamed, chat.completion.chunk events)",
    "properties": {
        "id": {"type": "string"}, "object": {"type": "string"},
        "created": {"type": "integer"}, "model": {"type": "string"},
        "choices": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer"},
            "message": {"type": "object", "properties": {
                "role": {"type": "string"}, "content": {"type": "string"}}},
            "finish_reason": {"type": "string"},
            "mesh": _EXTENSION}}},
        "usage": _USAGE,
    },
}
_MODEL = {"type": "object", "properties": {
    "id": {"type": "string"}, "object": {"type": "string"}, "created": {"type": "integer"},
    "owned_by": {"type": "string"}, "description": {"type": "string"}}}


def _errors() -> dict[str, object]:
    return {"description": "OpenAI's error body; 400 names the param, 413 an oversize "
            "conversation, 401 no or a bad key, 403 a key without the query scope, 429 "
            "limits or budgets.", "content": {"application/json": {"schema": _ERROR}}}


CHAT_OPERATION: dict[str, object] = {
    "operationId": "OpenAI_CreateChatCompletion", "tags": ["OpenAI"],
    "summary": "OpenAI's chat completions: the conversation answered by the mesh; "
               "stream: true answers Server-Sent Events of chat.completion.chunk objects "
               "ending with data: [DONE].",
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "description": "OpenAI's chat request: model, messages, "
                   "temperature, max_tokens / max_completion_tokens (per language-model call), "
                   "n (independent answers, 1..8), stop (up to 4), stream, "
                   "stream_options.include_usage; plus `mesh`."}}}},
    "responses": {
        "200": {"description": "The completion (application/json), or its chunks "
                "(text/event-stream).", "content": {
                    "application/json": {"schema": _COMPLETION},
                    "text/event-stream": {"schema": {"type": "string"}}}},
        "default": _errors(),
    },
}
MODELS_OPERATION: dict[str, object] = {
    "operationId": "OpenAI_ListModels", "tags": ["OpenAI"],
    "summary": "The models: each a way the mesh answers text, with a description.",
    "responses": {"200": {"description": "{object: list, data: [model]}", "content": {
        "application/json": {"schema": {"type": "object", "properties": {
            "object": {"type": "string"}, "data": {"type": "array", "items": _MODEL}}}}}},
        "default": _errors()},
}
MODEL_OPERATION: dict[str, object] = {
    "operationId": "OpenAI_RetrieveModel", "tags": ["OpenAI"],
    "summary": "One model.",
    "parameters": [{"name": "model", "in": "path", "required": True,
                    "schema": {"type": "string"}}],
    "responses": {"200": {"description": "The model.", "content": {
        "application/json": {"schema": _MODEL}}}, "default": _errors()},
}


def _with_request_schema() -> None:
    """The chat request's full schema (OpenAI's parameters and `mesh`) in the operation."""
    schema = ChatRequest.model_json_schema()
    schema.pop("$defs", None)
    properties = schema["properties"]
    properties["messages"] = {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role"], "properties": {
            "role": {"type": "string", "enum": ["system", "developer", "user", "assistant"]},
            "content": {"description": "A string, or a list of {type: text, text} parts."}}}}
    properties["mesh"] = dict(MeshOptions.model_json_schema(),
                              description="The mesh's own options, an extra body field "
                              "(extra_body={'mesh': {...}} in OpenAI's Python SDK).")
    properties["stream_options"] = {"type": "object", "properties": {
        "include_usage": {"type": "boolean"}}}
    for name in ("tools", "functions", "logprobs", "response_format"):
        properties[name] = {"description": "Refused (400) when set: not supported."}
    body = CHAT_OPERATION["requestBody"]["content"]["application/json"]  # type: ignore[index]
    body["schema"] = dict(schema, description=body["schema"]["description"])


_with_request_schema()
