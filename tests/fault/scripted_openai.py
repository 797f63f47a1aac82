"""A scripted OpenAI-compatible server (`POST /v1/chat/completions`) for fault injection.

Each request takes the next step of `script` (then `default`): "ok" answers in Chat Completions
JSON; "429" and "500" answer that status with OpenAI's error body (429 with `Retry-After: 0`);
"hang" sends nothing for `hang_s` seconds (a timeout before the first token); "cut" sends the
status line, the headers and half the body, then closes the connection (a failure in the middle
of the response). It runs on 127.0.0.1, port 0, in a thread, and counts the requests it got.
"""

from __future__ import annotations

import json
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

    def next_step(self) -> str:
        with self._lock:
            self.requests += 1
            return self.script.pop(0) if self.script else self.default

    def reset(self, *script: str, default: str = "ok") -> None:
        with self._lock:
            self.script = list(script)
            self.default = default


def _completion(model: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-fault", "object": "chat.completion", "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Four chambers [1]."}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35},
    }).encode()


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
            step = server.next_step()
            try:
                if step == "hang":
                    time.sleep(server.hang_s)
                    self.close_connection = True
                    return
                status = {"429": 429, "500": 500}.get(step, 200)
                payload = _completion(body.get("model", "")) if status == 200 else _error(status)
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

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler
