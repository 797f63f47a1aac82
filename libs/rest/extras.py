"""What a REST front serves besides its main service's `google.api.http` bindings: more annotated
services, server-streaming methods served as Server-Sent Events (`sse`), create methods that also
take a JSON Lines upload (`jsonl`), and routes of its own (a JSON Lines download, say) whose
handlers call the service in-process like any binding does.

A route of its own goes through everything a binding goes through first (Host and Origin, the key
check before the query is read, the query limits, the deadline, the headers to metadata), then its
handler gets a `Caller` that makes in-process calls with that request's metadata, deadline and
peer, so each call is authenticated, admitted, traced and counted as a binding's call is.
A route that takes a body (`FrontRoute.body`) gets it read as a binding's is (JSON only: 415;
at most `max_body_bytes`: 413; nested at most `max_json_depth` deep: 400) in `Caller.body`. A
client that disconnects before the handler returns cancels the handler (and so its calls); a
streamed response stops its own work when the client leaves (Starlette cancels its body). A
route with an `error_body` answers every refusal of its own (no key, a refused body, a failed
call) in that form instead of a `google.rpc.Status`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.rpc import status_pb2
from starlette.responses import Response
from starlette.routing import BaseRoute

from libs.in_process import InProcessServer, InProcessStreamCall, Metadata
from libs.rest.jsonl import LinesUpload
from libs.rest.path_template import PathTemplate
from libs.rest.sse import SseWatch


class Caller:
    """In-process calls on behalf of one HTTP request (its metadata, deadline and peer)."""

    def __init__(self, server: InProcessServer, metadata: Metadata, timeout_s: float,
                 peer: str, body: bytes = b"") -> None:
        self._server = server
        self._metadata = metadata
        self._timeout_s = timeout_s
        self._peer = peer
        self.body = body
        """The request body (a route with `body` set; b"" otherwise), within the front's
        limits, not parsed."""

    async def unary(self, rpc_path: str, request: Message) -> Message:
        """The reply of one unary call ("/pkg.Service/Method").

        Raises:
            CallFailed: the call ended with a status other than OK.
        """
        return await self._server.unary_unary(rpc_path, request, self._timeout_s,
                                              self._metadata, self._peer)

    async def stream(self, rpc_path: str, request: Message) -> InProcessStreamCall:
        """Starts one server-streaming call; read its messages with `read()` (grpc.aio.EOF
        after the last) and `cancel()` it when they are no longer wanted.

        Raises:
            CallFailed: the call was refused before it started (access control, limits).
        """
        return await self._server.unary_stream(rpc_path, request, self._timeout_s,
                                               self._metadata, self._peer)


RouteHandler = Callable[[Caller, dict[str, str], str], Awaitable[Response]]
"""`handler(caller, path_values, query)`: the response of a route of the front's own. It may raise
`MeshError` (answered with its status, naming the field) or `CallFailed` (answered with the
call's status) before it returns a response."""

ErrorBody = Callable[[status_pb2.Status, int, dict[str, str]], Response]
"""`error_body(status, http_status, headers)`: a route's own form of an error response (the
status's code already mapped to `http_status`; `headers` such as Retry-After,
WWW-Authenticate, Connection to keep)."""


@dataclass(frozen=True)
class FrontRoute:
    """A route of the front's own.

    Attributes:
        http_method: "GET", "POST", ...
        template: its path template (variables as in `google.api.http` rules).
        handler: makes the response (see `RouteHandler`).
        operation: its OpenAPI operation object (operationId, parameters, responses).
        rpc_path: the main RPC it stands for, recorded on its REST span as `rpc.method`.
        body: True when it takes a JSON body (read into `Caller.body`).
        error_body: its own form of error responses; None: a `google.rpc.Status`.
        unknown_key_as_none: where callers without a key are let in (keys not required), a key
            that is not known is served as no key (dropped from the calls' metadata) instead of
            refused 401, as vLLM and Ollama serve OpenAI's SDKs, which always send one; a
            known key is used as everywhere. Where keys are required it changes nothing.
    """

    http_method: str
    template: PathTemplate
    handler: RouteHandler
    operation: Mapping[str, object]
    rpc_path: str
    body: bool = False
    error_body: ErrorBody | None = None
    unknown_key_as_none: bool = False


@dataclass(frozen=True)
class Extras:
    """What a front serves besides its main service's bindings.

    Attributes:
        services: more annotated services whose bindings are served (they must be served by the
            same in-process server).
        watches: server-streaming methods served as SSE, by full method name
            ("mesh.orchestrator.v1.RunService.WatchRun").
        uploads: methods that also take a JSON Lines body, by full method name.
        routes: routes of the front's own (tried before the bindings).
        pages: Starlette routes served before the gateway, without a key (static pages such as
            the orchestrator's web console; the API calls they make carry the key). The Host and
            Origin guard still applies; their errors should be `HTTPException`s (answered as a
            `google.rpc.Status`).
    """

    services: tuple[ServiceDescriptor, ...] = ()
    watches: Mapping[str, SseWatch] = field(default_factory=dict)
    uploads: Mapping[str, LinesUpload] = field(default_factory=dict)
    routes: tuple[FrontRoute, ...] = ()
    pages: tuple[BaseRoute, ...] = ()
