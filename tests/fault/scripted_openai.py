"""A scripted OpenAI-compatible server (`POST /v1/chat/completions`) for fault injection.

Each request takes the next step of `script` (then `default`): "ok" answers in Chat Completions
JSON; "length" answers the same with `finish_reason: "length"` (cut by max_tokens, streamed
too); "429" and "500" answer that status with OpenAI's error body (429 with `Retry-After: 0`);
"hang" sends nothing for `hang_s` seconds (a timeout before the first token); "cut" sends the
status line, the headers and half the body, then closes the connection (a failure in the middle
of the response). It runs on 127.0.0.1, port 0, in a thread, and counts the requests it got.

A request with `"stream": true` gets server-sent events as OpenAI sends them (chunked transfer
encoding, one `chat.completion.chunk` per word of the answer, then the finish reason, then, when
`stream_options.include_usage` is set, a chunk with no choices and the usage, then
`data: [DONE]`): "ok" streams it all; "cut" streams the first delta then closes the connection (a
failure after the first token); "stall" streams the first delta then waits, watching the socket,
until the client closes the connection (recorded in `disconnects` and `disconnected`) or
`hang_s` passes. The usage streamed is the same as the whole completion's.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedOpenAI:
    """The server and its script; `url` is the base URL to give an OpenAI client (".../v1")."""

    def __init__(self, hang_s: float = 10.0) -> None:
        self.script: list[str] = []
        self.default = "ok"
        self.hang_s = hang_s
        self.requests = 0
        self.bodies: list[dict] = []
        """Every request body, in order."""
        self.disconnects = 0
        """Streams ("stall") and hangs ("hang") whose client closed the connection while the
        server waited."""
        self.disconnected = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_step(self, body: dict | None = None) -> str:
        with self._lock:
            self.requests += 1
            self.bodies.append(body or {})
            return self.script.pop(0) if self.script else self.default

    def reset(self, *script: str, default: str = "ok") -> None:
        with self._lock:
            self.script = list(script)
            self.default = default


ANSWER = "Four chambers [1]."
USAGE = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}


def _completion(model: str, finish_reason: str = "stop") -> bytes:
    return json.dumps({
        "id": "chatcmpl-fault", "object": "chat.completion", "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": ANSWER}}],
        "usage": USAGE,
    }).encode()


def _chunk(model: str, delta: dict, finish_reason: str | None = None,
           usage: dict | None = None) -> bytes:
    """One server-sent event of a streamed completion."""
    choices = [] if usage is not None else [
        {"index": 0, "delta": delta, "finish_reason": finish_reason}]
    return b"data: " + json.dumps({
        "id": "chatcmpl-fault", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": model, "choices": choices, "usage": usage}).encode() + b"\n\n"


def stream_events(body: dict, finish_reason: str = "stop") -> list[bytes]:
    """The events of a streamed answer to `body`: a delta per word (the first with the role),
    the finish reason, the usage when asked for, and [DONE]."""
    model = body.get("model", "")
    words = ANSWER.split(" ")
    deltas = [word if i == 0 else " " + word for i, word in enumerate(words)]
    events = [_chunk(model, {"role": "assistant", "content": deltas[0]})]
    events += [_chunk(model, {"content": delta}) for delta in deltas[1:]]
    events.append(_chunk(model, {}, finish_reason))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(_chunk(model, {}, usage=USAGE))
    events.append(b"data: [DONE]\n\n")
    return events


def wait_for_disconnect(connection: socket.socket, limit_s: float) -> bool:
    """True when the peer closed `connection` within `limit_s` seconds (the socket turns
    readable with no data left), False when the time passed first."""
    deadline = time.monotonic() + limit_s
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([connection], [], [], min(left, 0.05))
        if readable:
            try:
                if not connection.recv(1, socket.MSG_PEEK):
                    return True
            except (ConnectionResetError, OSError):
                return True
    return False


def _error(status: int) -> bytes:
    kind = "rate_limit_error" if status == 429 else "server_error"
    return json.dumps({"error": {"message": f"scripted {status}", "type": kind, "param": None,
                                 "code": None}}).encode()


def _handler(server: ScriptedOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0")))
                              or b"{}")
            step = server.next_step(body)
            if body.get("stream") and step in ("ok", "length", "cut", "stall"):
                self._stream(step, body)
                return
            try:
                if step == "hang":  # until the client leaves (counted) or hang_s passes
                    if wait_for_disconnect(self.connection, server.hang_s):
                        with server._lock:
                            server.disconnects += 1
                        server.disconnected.set()
                    self.close_connection = True
                    return
                status = {"429": 429, "500": 500}.get(step, 200)
                payload = (_completion(body.get("model", ""), "length" if step == "length"
                                       else "stop") if status == 200 else _error(status))
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                if status == 429:
                    self.send_header("retry-after", "0")
                self.end_headers()
                if step == "cut":
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first

        def _stream(self, step: str, body: dict) -> None:
            """Server-sent events in chunked transfer encoding (see the module's docstring)."""
            events = stream_events(body, "length" if step == "length" else "stop")
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                whole = step in ("ok", "length")
                for event in events if whole else events[:1]:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                if whole:
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if step == "stall" and wait_for_disconnect(self.connection, server.hang_s):
                    with server._lock:
                        server.disconnects += 1
                    server.disconnected.set()
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler
