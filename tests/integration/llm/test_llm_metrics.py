"""The gateway's metrics on a real grpc.aio server: breaker states published at start-up, and a
call that falls back from a refusing provider to the offline one counted per provider (calls by
outcome, retries, tokens)."""

from __future__ import annotations

import socket

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from prometheus_client import REGISTRY

from libs.server import start_server
from services.llm.main import build_servicers
from services.llm.settings import LlmSettings


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_fallback_is_counted_per_provider():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    settings = LlmSettings(port=0, fallback_order=["local"], max_retries=1,
                                  backoff_initial_s=0.001, backoff_max_s=0.002,
                                  local_base_url=refused)
    before = {
        "local_error": _value("mesh_llm_calls_total", provider="local", outcome="error"),
        "local_retries": _value("mesh_llm_retries_total", provider="local"),
        "offline_ok": _value("mesh_llm_calls_total", provider="offline", outcome="ok"),
        "tokens": _value("mesh_llm_tokens_total", provider="offline", direction="completion"),
    }
    servicers, ready = await build_servicers(settings)
    server = await start_server("llm", settings, servicers, ready)
    try:
        for provider in ("local", "offline"):
            assert _value("mesh_llm_circuit_state", provider=provider, state="closed") == 1
            assert _value("mesh_llm_circuit_state", provider=provider, state="opened") == 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            reply = await llm_service_pb2_grpc.LlmServiceStub(channel).Generate(
                llm_service_pb2.GenerateRequest(prompt="What is it?", context=[
                    llm_service_pb2.ContextPassage(text="It is a test.", source="t")]),
                timeout=10)
        assert reply.provider == "offline"
    finally:
        await server.stop(0)
    assert _value("mesh_llm_calls_total", provider="local", outcome="error") == \
        before["local_error"] + 1
    assert _value("mesh_llm_retries_total", provider="local") == before["local_retries"] + 1
    assert _value("mesh_llm_calls_total", provider="offline", outcome="ok") == \
        before["offline_ok"] + 1
    assert _value("mesh_llm_tokens_total", provider="offline", direction="completion") == \
        before["tokens"] + reply.usage.completion_tokens
