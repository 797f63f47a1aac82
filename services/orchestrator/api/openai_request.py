"""A chat-completions request body, checked (pydantic, strict types) and turned into the mesh's
AnswerQueryRequest.

The conversation: the last message must be the user's; its text is the query. The system (and
developer) messages and the earlier turns are the context: when there are any, the query sent to
the mesh is the context ("Instructions:" then "Conversation so far:", one `role: text` line per
turn) followed by "Question:" and the last user message. A conversation whose query would be
over the mesh's query limit (`MAX_QUERY_CHARS` characters) is refused 413 (param `messages`).
Content is a string or a list of `{"type": "text", "text": ...}` parts (other part types are
refused, naming them).

OpenAI's parameters: `temperature` (0..2) is the drafts' sampling temperature; `max_tokens` (or
`max_completion_tokens`) the most tokens each language-model call may generate
(`max_answer_tokens`); `n` (1..8) the number of independent answers (choices); `stop` (a string
or up to 4) cuts each answer before the first stop sequence. Parameters the mesh cannot honour
(`tools`, `functions`, `logprobs`, a non-text `response_format`) are refused naming them; others
(`user`, `seed`, penalties...) are accepted and have no effect.

Mesh options travel in the extra body field `mesh` (see `MeshOptions`).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from google.protobuf.message import Message
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from services.orchestrator.api.openai_errors import ChatParamError
from services.orchestrator.api.openai_models import MeshModel, find_model
from services.orchestrator.text.query import MAX_QUERY_CHARS

MAX_CHOICES = 8
MAX_STOPS = 4
_Number = StrictInt | StrictFloat


class TextPart(BaseModel):
    """One part of a message's content: only text."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    """One message of the conversation."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: StrictStr | list[TextPart] | None = None
    name: StrictStr | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False


class MeshOptions(BaseModel):
    """The mesh's own options (the body's `mesh` object), each as AnswerQueryRequest's field of
    the same name; unset means the orchestrator's default."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    collection: StrictStr | None = Field(None, description="Retrieval collection; unset: the "
                                         "default collection (answered without sources when it "
                                         "does not exist).")
    top_k: StrictInt | None = Field(None, description="Passages to retrieve, 1..20.")
    sample_count: StrictInt | None = Field(None, description="Self-consistency drafts per "
                                           "iteration, 1..20.")
    mcts_iterations: StrictInt | None = Field(None, description="Step search: simulations, "
                                              "1..10,000.")
    step_branching: StrictInt | None = Field(None, description="Step search: next steps per "
                                             "leaf, 1..8.")
    max_steps: StrictInt | None = Field(None, description="Step search: most steps, 1..20.")
    max_refinements: StrictInt | None = Field(None, description="Refine: most rounds, 1..10.")
    token_budget: StrictInt | None = Field(None, description="Token budget of each answer "
                                           "(prompt plus completion tokens of every call), "
                                           "1..10,000,000 (AnswerQueryRequest.max_tokens).")
    max_cost_usd: _Number | None = Field(None, description="Cost budget of each answer in US "
                                         "dollars, 0..1,000.")
    search_mode: Literal["dense", "sparse", "hybrid"] | None = Field(
        None, description="Retrieval ranking.")
    fusion: Literal["dbsf", "rrf"] | None = Field(None, description="Fusion of a hybrid "
                                                  "retrieval.")
    thread_id: StrictStr | None = Field(None, description="Conversation thread, "
                                        "^[a-zA-Z0-9_-]{1,100}$.")


class ChatRequest(BaseModel):
    """The body of POST /v1/chat/completions."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    model: StrictStr
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    temperature: _Number | None = Field(None, ge=0, le=2)
    max_tokens: StrictInt | None = Field(None, ge=1, le=32_768)
    max_completion_tokens: StrictInt | None = Field(None, ge=1, le=32_768)
    n: StrictInt = Field(1, ge=1, le=MAX_CHOICES)
    stop: StrictStr | Annotated[list[StrictStr], Field(max_length=MAX_STOPS)] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    mesh: MeshOptions | None = None
    tools: list | None = None
    functions: list | None = None
    logprobs: StrictBool | None = None
    response_format: dict | None = None

    def stops(self) -> list[str]:
        """The stop sequences (empty ones dropped)."""
        items = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return [item for item in items if item]


def parse_chat(body: bytes) -> tuple[ChatRequest, MeshModel]:
    """The checked request and the model it names.

    Raises:
        ChatParamError: not JSON (param null is reported as "body"), a parameter of the wrong
            type or out of range, an unknown role, no messages, a last message that is not the
            user's, an unknown model, a parameter the mesh does not support.
    """
    try:
        value = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as error:
        raise ChatParamError("body", f"the request body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ChatParamError("body", "the request body must be a JSON object")
    try:
        request = ChatRequest.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        raise ChatParamError(_param(first["loc"]), first["msg"]) from None
    for name in ("tools", "functions"):
        if getattr(request, name):
            raise ChatParamError(name, "not supported: the mesh answers text only")
    if request.logprobs:
        raise ChatParamError("logprobs", "not supported: the mesh does not return logprobs")
    if request.response_format and request.response_format.get("type") != "text":
        raise ChatParamError("response_format", "only {\"type\": \"text\"} is supported")
    model = find_model(request.model)
    if model is None:
        raise ChatParamError("model", f"the model {request.model!r} does not exist; "
                             "GET /v1/models lists them", code="model_not_found")
    if request.messages[-1].role != "user":
        raise ChatParamError(f"messages[{len(request.messages) - 1}].role",
                             "the last message must be the user's question")
    return request, model


_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "literal"}


def _param(loc: tuple) -> str:
    """A pydantic error location as a parameter path (`messages[0].role`); the union members'
    type names that pydantic inserts (`str`, `list[TextPart]`) are dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier() and part not in _UNION_TAGS:
            out += f".{part}" if out else part
    return out or "body"


def compose_query(messages: list[ChatMessage]) -> str:
    """The mesh's query for a conversation (see the module docstring).

    Raises:
        ChatParamError: (413) the query would be over `MAX_QUERY_CHARS` characters.
    """
    question = messages[-1].text()
    instructions = [m.text() for m in messages[:-1] if m.role in ("system", "developer")]
    turns = [f"{m.role}: {m.text()}" for m in messages[:-1] if m.role in ("user", "assistant")]
    parts = []
    if instructions:
        parts.append("Instructions:\n" + "\n".join(instructions))
    if turns:
        parts.append("Conversation so far:\n" + "\n".join(turns))
    query = "\n\n".join([*parts, f"Question:\n{question}"]) if parts else question
    if len(query) > MAX_QUERY_CHARS:
        raise ChatParamError("messages", f"the conversation is {len(query):,} characters as a "
                             f"query; at most {MAX_QUERY_CHARS:,} are accepted",
                             code="context_length_exceeded", http_status=413)
    if not query.strip():
        raise ChatParamError(f"messages[{len(messages) - 1}].content", "must not be empty")
    return query


_SEARCH_MODES = {"dense": common_pb2.SEARCH_MODE_DENSE, "sparse": common_pb2.SEARCH_MODE_SPARSE,
                 "hybrid": common_pb2.SEARCH_MODE_HYBRID}
_FUSIONS = {"dbsf": common_pb2.FUSION_METHOD_DBSF, "rrf": common_pb2.FUSION_METHOD_RRF}


def answer_request(request: ChatRequest, model: MeshModel,
                   message_class: type = pb.AnswerQueryRequest) -> Message:
    """The AnswerQueryRequest (or StreamAnswerQueryRequest: same fields) of one choice.

    Raises:
        ChatParamError: (413) an oversize conversation.
    """
    out = message_class(query=compose_query(request.messages), role=model.role)
    if model.mcts_iterations:
        out.mcts_iterations = model.mcts_iterations
    if model.sample_count:
        out.sample_count = model.sample_count
    if request.temperature is not None:
        out.temperature = float(request.temperature)
    answer_tokens = request.max_completion_tokens or request.max_tokens
    if answer_tokens is not None:
        out.max_answer_tokens = answer_tokens
    _apply_mesh(out, request.mesh)
    return out


def _apply_mesh(out: Message, options: MeshOptions | None) -> None:
    if options is None:
        return
    values = options.model_dump(exclude_none=True)
    if "search_mode" in values:
        out.search_mode = _SEARCH_MODES[values.pop("search_mode")]
    if "fusion" in values:
        out.fusion = _FUSIONS[values.pop("fusion")]
    if "token_budget" in values:
        values["max_tokens"] = values.pop("token_budget")
    if "max_cost_usd" in values:
        out.max_cost_usd = float(values.pop("max_cost_usd"))
    for name, value in values.items():
        try:
            setattr(out, name, value)
        except ValueError:  # over the proto field's integer range
            param = "token_budget" if name == "max_tokens" else name
            raise ChatParamError(f"mesh.{param}", f"{value} is out of range") from None
