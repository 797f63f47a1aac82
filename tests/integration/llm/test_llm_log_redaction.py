"""The LLM service keeps its credentials out of its log (issue 29, point 8): a provider that echoes
the API key it was sent in its error body (in full, in a header echo, in JSON), and a base URL with
credentials (`http://user:pass@host/v1`), leave none of them in the lines the real service
(`mcts-mesh serve llm`, a child process) writes while its providers fail."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc


class _EchoingProvider(BaseHTTPRequestHandler):
    """Answers every request with an error whose body repeats the key and headers it was sent
    (401 for even requests, 500 for odd ones: a failure that is retried)."""

    count = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        type(self).count += 1
        self.rfile.read(int(self.headers.get("content-length") or 0))
        sent = self.headers.get("authorization", "") + " " + self.headers.get("x-api-key", "")
        key = sent.split()[-1] if sent.split() else ""
        body = json.dumps({"error": {
            "message": f"Incorrect API key provided: {key}. You sent: {sent}",
            "type": "invalid_request_error", "param": key, "code": "invalid_api_key"}}).encode()
        self.send_response(401 if type(self).count % 2 else 500)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingProvider)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_provider_keys_and_url_credentials_never_reach_the_log(provider, tmp_path):
    openai_key = secrets.token_hex(20)  # no well-known shape: only the exact key can match
    local_key = secrets.token_hex(20)
    password = secrets.token_hex(12)
    port_file = tmp_path / "ports.json"
    log = tmp_path / "llm.log"
    env = {**os.environ,
           "LLM_PORT": "0", "LLM_LOG_FORMAT": "text",
           "LLM_OPENAI_API_KEY": openai_key,
           "LLM_OPENAI_BASE_URL": f"http://127.0.0.1:{provider}/v1",
           "LLM_LOCAL_BASE_URL": f"http://meshuser:{password}@127.0.0.1:{provider}/v1",
           "LLM_LOCAL_API_KEY": local_key,
           "LLM_FALLBACK_ORDER": '["openai", "local"]', "LLM_OFFLINE_ENABLED": "false",
           "LLM_MAX_RETRIES": "1", "LLM_BACKOFF_INITIAL_S": "0", "LLM_BACKOFF_MAX_S": "0.01"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "serve", "llm", "--port-file",
             str(port_file)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.stat().st_size):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the LLM service did not start"
            time.sleep(0.05)
        port = json.loads(port_file.read_text())["grpc"]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as caught:
                llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
                    llm_service_pb2.GenerateRequest(prompt="Say hello."), timeout=30)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    text = log.read_text()
    assert _EchoingProvider.count >= 3  # both providers were called, one of them twice
    assert "provider openai failed" in text and "provider local failed" in text, text
    assert "Incorrect API key provided" in text  # the provider's message is kept, redacted
    for secret in (openai_key, local_key, password):
        assert secret not in text, f"a secret reached the log:\n{text}"
    assert "http://***@127.0.0.1" in text  # the settings line shows the URL, redacted
