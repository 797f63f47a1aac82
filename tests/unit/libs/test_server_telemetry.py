"""libs.telemetry.ServerTelemetryInterceptor on a real grpc.aio server: the SERVER span and the RPC
metrics carry the status the client receives (aborts, codes set on the context, cancellations,
unexpected errors), the caller's trace is joined, and health and reflection leave no trace."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import REGISTRY

from libs.errors import FailedPrecondition, InvalidArgument
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from libs.telemetry import set_work_attributes

SERVICE = "mesh.llm.v1.LlmService"
METHOD = "Generate"


class _Behaving(llm_service_pb2_grpc.LlmServiceServicer):
    """Generate's prompt says how to end: ok, invalid, precondition, set-code, abort, slow, boom."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def Generate(self, request, context):
        set_work_attributes({"mesh.test.prompt": request.prompt, "mesh.test.none": None})
        if request.prompt == "invalid":
            raise InvalidArgument("prompt", "is not welcome")
        if request.prompt == "precondition":
            raise FailedPrecondition("no model for this grid")
        if request.prompt == "set-code":
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("nothing here")
            return llm_service_pb2.GenerateResponse()
        if request.prompt == "abort":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not yours")
        if request.prompt == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if request.prompt == "boom":
            raise RuntimeError("unexpected")
        return llm_service_pb2.GenerateResponse(text=request.prompt)


@pytest.fixture
async def served():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    servicer = _Behaving()
    running = await start_server(
        "telemetry-test", ServiceSettings(port=0, metrics_port=0),
        [Servicer(llm_service_pb2_grpc.add_LlmServiceServicer_to_server, servicer, SERVICE)],
        tracer_provider=provider)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    yield llm_service_pb2_grpc.LlmServiceStub(channel), exporter, servicer, channel
    await channel.close()
    await running.stop(0)


def _handled(code: str) -> float:
    return REGISTRY.get_sample_value(
        "grpc_server_handled_total",
        {"grpc_service": SERVICE, "grpc_method": METHOD, "grpc_code": code}) or 0.0


def _server_spans(exporter: InMemorySpanExporter):
    return [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]


async def _call(stub, prompt: str, timeout: float = 5.0) -> grpc.StatusCode:
    try:
        await stub.Generate(llm_service_pb2.GenerateRequest(prompt=prompt), timeout=timeout)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize(("prompt", "code", "message"), [
    ("ok", grpc.StatusCode.OK, None),
    ("invalid", grpc.StatusCode.INVALID_ARGUMENT, "prompt"),
    ("precondition", grpc.StatusCode.FAILED_PRECONDITION, "no model for this grid"),
    ("set-code", grpc.StatusCode.NOT_FOUND, "nothing here"),
    ("abort", grpc.StatusCode.PERMISSION_DENIED, "not yours"),
    ("boom", grpc.StatusCode.INTERNAL, "internal error in telemetry-test"),
])
async def test_server_span_and_metrics_carry_the_status_the_client_gets(served, prompt, code,
                                                                        message):
    stub, exporter, _, _ = served
    before = _handled(code.name)
    assert await _call(stub, prompt) == code
    await asyncio.sleep(0.05)  # the span ends after the status is sent
    [span] = _server_spans(exporter)
    assert span.name == f"{SERVICE}/{METHOD}"
    assert span.attributes["rpc.grpc.status_code"] == code.value[0]
    assert span.attributes["mesh.test.prompt"] == prompt
    assert "mesh.test.none" not in span.attributes
    if code is grpc.StatusCode.OK:
        assert span.status.status_code is StatusCode.UNSET
    else:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description.startswith(code.name)
        assert message in span.status.description
    assert _handled(code.name) == before + 1
    assert REGISTRY.get_sample_value(
        "grpc_server_in_flight_requests", {"grpc_service": SERVICE, "grpc_method": METHOD}) == 0


async def test_a_call_the_client_cancels_is_a_cancelled_error_span(served):
    stub, exporter, servicer, _ = served
    before = _handled("CANCELLED")
    call = stub.Generate(llm_service_pb2.GenerateRequest(prompt="slow"), timeout=10)
    await asyncio.sleep(0.3)
    assert REGISTRY.get_sample_value(
        "grpc_server_in_flight_requests", {"grpc_service": SERVICE, "grpc_method": METHOD}) == 1
    call.cancel()
    await asyncio.wait_for(servicer.cancelled.wait(), 5)
    await asyncio.sleep(0.1)
    [span] = _server_spans(exporter)
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert span.status.status_code is StatusCode.ERROR
    assert _handled("CANCELLED") == before + 1


async def test_a_call_past_its_deadline_is_deadline_exceeded(served):
    stub, exporter, servicer, _ = served
    assert await _call(stub, "slow", timeout=0.3) == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(servicer.cancelled.wait(), 5)
    await asyncio.sleep(0.1)
    [span] = _server_spans(exporter)
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert span.status.status_code is StatusCode.ERROR


async def test_the_server_span_joins_the_callers_trace(served):
    stub, exporter, _, _ = served
    caller = TracerProvider().get_tracer("caller")
    with caller.start_as_current_span("client-side") as parent:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        await stub.Generate(llm_service_pb2.GenerateRequest(prompt="ok"), timeout=5,
                            metadata=tuple(carrier.items()))
    await asyncio.sleep(0.05)
    [span] = _server_spans(exporter)
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.parent.span_id == parent.get_span_context().span_id


async def test_health_and_reflection_make_no_span_and_no_sample(served):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    _, exporter, _, channel = served
    health = health_pb2_grpc.HealthStub(channel)
    assert (await health.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == \
        health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    async for reply in reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5):
        assert reply.list_services_response.service
    await asyncio.sleep(0.05)
    assert exporter.get_finished_spans() == ()
    assert REGISTRY.get_sample_value(
        "grpc_server_handled_total",
        {"grpc_service": "grpc.health.v1.Health", "grpc_method": "Check", "grpc_code": "OK"}) \
        is None


async def test_metrics_port_serves_the_rpc_metrics():
    import httpx

    from libs.metrics import start_metrics_server

    server = start_metrics_server("test", "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient() as client:
            reply = await client.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        assert reply.status_code == 200
        assert "# TYPE grpc_server_handled_total counter" in reply.text
        assert "# TYPE grpc_server_handling_seconds histogram" in reply.text
    finally:
        server.stop()
    assert start_metrics_server("test", "127.0.0.1", -1) is None


def test_no_exporter_means_non_recording_spans_that_still_carry_a_trace_id():
    from libs.telemetry import setup_tracing

    provider = setup_tracing("quiet", None, set_global=False)
    with provider.get_tracer("t").start_as_current_span("s") as span:
        assert not span.is_recording()
        assert trace.get_current_span().get_span_context().trace_id != 0
