"""A scripted Anthropic-wire server (`POST /v1/messages`), whole and streamed, for the real
`anthropic` SDK.

Each request takes the next step of `script` (then `default`): "ok" answers (a Messages JSON body,
or with `"stream": true` the server-sent events Anthropic sends: message_start with the input
tokens, a text content block with one text_delta per word, message_delta with the stop reason and
the output tokens, message_stop); "500" and "529" answer that status with Anthropic's error body;
"cut" streams the first delta then closes the connection; "stall" streams the first delta then
waits, watching the socket, until the client closes the connection (counted in `disconnects`,
`disconnected` set) or `hang_s` passes. The usage streamed is the whole message's. It runs on
127.0.0.1, port 0, in a thread.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scripted_openai import wait_for_disconnect

ANSWER = "The heart has four chambers [1]."
INPUT_TOKENS = 41
OUTPUT_TOKENS = 9


class ScriptedAnthropic:
    """The server and its script; `url` is the base URL to give an Anthropic client."""

    def __init__(self, hang_s: float = 10.0) -> None:
        self.script: list[str] = []
        self.default = "ok"
        self.hang_s = hang_s
        self.bodies: list[dict] = []
        self.disconnects = 0
        self.disconnected = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScriptedAnthropic:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_step(self, body: dict) -> str:
        with self._lock:
            self.bodies.append(body)
            return self.script.pop(0) if self.script else self.default

    def reset(self, *script: str, default: str = "ok") -> None:
        with self._lock:
            self.script = list(script)
            self.default = default


def _message(model: str) -> dict:
    return {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}}


def _event(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def stream_events(model: str) -> list[bytes]:
    """The events of a streamed message, a text_delta per word (the first after the block
    starts, so `events[:3]` ends with the first delta)."""
    start = _message(model) | {"content": [], "stop_reason": None,
                               "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}
    words = ANSWER.split(" ")
    deltas = [word if i == 0 else " " + word for i, word in enumerate(words)]
    return [
        _event("message_start", {"message": start}),
        _event("content_block_start", {"index": 0, "content_block": {"type": "text",
                                                                     "text": ""}}),
        *[_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                               "text": delta}})
          for delta in deltas],
        _event("content_block_stop", {"index": 0}),
        _event("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": OUTPUT_TOKENS}}),
        _event("message_stop", {}),
    ]


def _handler(server: ScriptedAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0")))
                              or b"{}")
            step = server.next_step(body)
            try:
                if step in ("500", "529"):
                    self._json(int(step), {"type": "error", "error": {
                        "type": "api_error" if step == "500" else "overloaded_error",
                        "message": f"scripted {step}"}})
                elif body.get("stream"):
                    self._stream(step, body.get("model", ""))
                else:
                    self._json(200, _message(body.get("model", "")))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first

        def _json(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, step: str, model: str) -> None:
            events = stream_events(model)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in events if step == "ok" else events[:3]:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            if step == "ok":
                self.wfile.write(b"0\r\n\r\n")
                return
            if step == "stall" and wait_for_disconnect(self.connection, server.hang_s):
                with server._lock:
                    server.disconnects += 1
                server.disconnected.set()
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler
