"""A local HTTP server that speaks the providers' wire formats, for the real SDK clients.

`POST /v1/chat/completions` answers in OpenAI's Chat Completions JSON and `POST /v1/messages` in
Anthropic's Messages JSON; error statuses carry each provider's error body. Replies are scripted per
test (`script`, in order, or `respond`, by content), every request is recorded (`requests`), and a
reply can be delayed to provoke a client timeout. It runs on 127.0.0.1, port 0, in a background
thread (`conftest.py` starts it), and never reaches the network.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                       429: "rate_limit_error"}
_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                          404: "not_found_error", 429: "rate_limit_error", 500: "api_error",
                          529: "overloaded_error"}


@dataclass
class Reply:
    """One scripted reply: HTTP `status` (200 answers `text`), after `delay_s` seconds."""

    status: int = 200
    text: str = "Grounded answer [1]."
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class ProviderWire:
    """State of the fake provider server: scripted replies in order, then `default`."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.default = Reply()
        self.requests: list[tuple[str, dict]] = []
        self.respond: Callable[[dict], Reply] | None = None
        """When set (and the script is empty), the reply to a request body, chosen from its
        content rather than its order."""
        self._lock = threading.Lock()
        self.url = ""

    def next_reply(self, path: str, body: dict) -> Reply:
        with self._lock:
            self.requests.append((path, body))
            if self.script:
                return self.script.pop(0)
            return self.respond(body) if self.respond is not None else self.default

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for seen, _ in self.requests if seen == path)


def _openai_body(reply: Reply, request: dict) -> dict:
    if reply.status != 200:
        kind = _OPENAI_ERROR_TYPES.get(reply.status, "server_error")
        return {"error": {"message": f"scripted {reply.status}", "type": kind, "param": None,
                          "code": None}}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": request.get("model", ""),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply.text}}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
    }


def _anthropic_body(reply: Reply, request: dict) -> dict:
    if reply.status != 200:
        kind = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": f"scripted {reply.status}"}}
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", ""),
        "content": [{"type": "text", "text": reply.text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 6},
    }


def handler(wire: ProviderWire) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("content-length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            reply = wire.next_reply(self.path, request)
            if self.path == "/v1/chat/completions":
                body = _openai_body(reply, request)
            elif self.path == "/v1/messages":
                body = _anthropic_body(reply, request)
            else:
                reply, body = Reply(status=404), {"error": {"message": "no such path"}}
            time.sleep(reply.delay_s)
            payload = json.dumps(body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler
