"""OpenAI's error body for the chat-completions routes: `{"error": {"message", "type", "param",
"code"}}`, made from the `google.rpc.Status` the mesh answers everywhere else, with the same HTTP
status the REST front gives that status.

- `type`: "invalid_request_error" (400, 404, 413, 415), "authentication_error" (401),
  "permission_error" (403), "rate_limit_error" (429), "timeout_error" (504), "api_error" (5xx,
  499).
- `param`: the request parameter at fault, from the status's BadRequest field violation, in the
  chat request's terms (`messages[2].role`, `temperature`, `mesh.top_k`): the fields of the
  mesh's AnswerQueryRequest are renamed to the chat parameter that set them (`query` ->
  `messages`, `collection` -> `mesh.collection`); null when no parameter is at fault.
- `code`: the ErrorInfo reason in lower case (`rate_limit_exceeded`, `token_budget_exceeded`,
  `body_too_large`...), "invalid_value" for a field violation, "model_not_found" for an unknown
  model, "invalid_api_key" for a refused key; null when the status has neither.
"""

from __future__ import annotations

import json

import grpc
from google.rpc import error_details_pb2, status_pb2
from starlette.responses import Response

from libs.errors import InvalidArgument
from libs.rest.status import status_response

JSON = "application/json"
_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error",
          415: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          429: "rate_limit_error", 504: "timeout_error"}
_OWN_FIELDS = {"temperature", "stop", "n", "max_completion_tokens", "model",
               "messages", "stream", "stream_options"}
"""Parameters the chat request sets under its own name."""
_RENAMED = {"query": "messages", "max_answer_tokens": "max_tokens",
            "max_tokens": "mesh.token_budget"}


class ChatParamError(InvalidArgument):
    """A malformed chat request, naming its parameter; `code` overrides "invalid_value"
    (e.g. "model_not_found"); `http_status` 413 for an oversize conversation."""

    def __init__(self, param: str, description: str, code: str = "invalid_value",
                 http_status: int = 400) -> None:
        super().__init__(param, description)
        self.openai_code = code
        self.http_status = http_status


def chat_param(field: str) -> str:
    """The chat parameter that set the AnswerQueryRequest field `field` (see the module
    docstring)."""
    head = field.split(".", 1)[0].split("[", 1)[0]
    if head in _RENAMED:
        return _RENAMED[head] + field[len(head):]
    if head in _OWN_FIELDS or head == "mesh":
        return field
    return f"mesh.{field}"


def error_body(message: str, http_status: int, param: str | None = None,
               code: str | None = None) -> dict[str, object]:
    """OpenAI's error object for one failure."""
    kind = _TYPES.get(http_status, "api_error" if http_status >= 499 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def status_error(status: status_pb2.Status, http_status: int) -> dict[str, object]:
    """OpenAI's error object for a `google.rpc.Status` answered with `http_status`."""
    param: str | None = None
    code: str | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            if bad.field_violations:
                param = chat_param(bad.field_violations[0].field)
                code = "invalid_value"
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            code = info.reason.lower() or None
    if status.code == grpc.StatusCode.UNAUTHENTICATED.value[0]:
        code = "invalid_api_key"
    message = status.message
    if param is not None and message.startswith(f"{_field_of(status)}: "):
        message = f"{param}: {message.split(': ', 1)[1]}"
    return error_body(message, http_status, param, code)


def _field_of(status: status_pb2.Status) -> str:
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            if bad.field_violations:
                return bad.field_violations[0].field
    return ""


def failure_response(status: status_pb2.Status) -> Response:
    """The error response of a failed call: the status's HTTP status and headers
    (Retry-After from its RetryInfo, WWW-Authenticate), OpenAI's body."""
    base = status_response(status)
    headers = {name: value for name, value in base.headers.items()
               if name.lower() not in ("content-length", "content-type")}
    return openai_error_response(status, base.status_code, headers)


def openai_error_response(status: status_pb2.Status, http_status: int,
                          headers: dict[str, str]) -> Response:
    """The route's error response (`libs.rest.extras.ErrorBody`): OpenAI's body, the front's
    HTTP status and headers (Retry-After, WWW-Authenticate, Connection)."""
    return json_error(status_error(status, http_status), http_status, headers)


def json_error(body: dict[str, object], http_status: int,
               headers: dict[str, str] | None = None) -> Response:
    """An error body as a JSON response."""
    return Response(json.dumps(body), status_code=http_status, headers=headers,
                     media_type=JSON)


def param_error_response(error: ChatParamError) -> Response:
    """The 400 (or 413) of a malformed chat request."""
    return json_error(error_body(f"{error.field}: {error.description}", error.http_status,
                                 error.field, error.openai_code), error.http_status)
