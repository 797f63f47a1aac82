"""In-process calls (`libs.in_process`) against a real `grpc.aio` server on port 0: each outcome is
checked against what the same call over gRPC gives (status, details, metadata), since the REST front
relies on them being the same."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_status import rpc_status
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from libs.errors import InvalidArgument
from libs.in_process import CallFailed
from libs.server import MAX_MESSAGE_BYTES, Servicer, start_server
from libs.settings import ServiceSettings

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
ANSWER = f"/{SERVICE}/AnswerQuery"
STREAM = f"/{SERVICE}/StreamSolveProblem"


class _Servicer(pb_grpc.OrchestratorServiceServicer):
    """AnswerQuery's behaviour is named by the query; StreamSolveProblem yields `seed` messages,
    then fails when `simulations` is 1 or waits forever when it is 2."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.closed = asyncio.Event()

    async def AnswerQuery(self, request, context):
        if request.query == "bad":
            raise InvalidArgument("query", "not a question")
        if request.query == "bug":
            raise RuntimeError("secret internals")
        if request.query == "code":
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("set, not aborted")
            return pb.AnswerQueryResponse()
        if request.query == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if request.query == "huge":
            return pb.AnswerQueryResponse(answer="x" * (MAX_MESSAGE_BYTES + 1))
        await context.send_initial_metadata((("x-served-by", "test"),))
        user = dict(context.invocation_metadata()).get("x-user", "")
        return pb.AnswerQueryResponse(answer=f"{request.query}/{user}")

    async def StreamSolveProblem(self, request, context):
        try:
            for iteration in range(request.seed):
                yield pb.StreamSolveProblemResponse(iteration=iteration + 1)
            if request.simulations == 1:
                raise InvalidArgument("simulations", "one is not enough")
            if request.simulations == 2:
                await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        finally:
            self.closed.set()


class _Recording(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_service(self, continuation, handler_call_details):
        self.methods.append(handler_call_details.method)
        return await continuation(handler_call_details)


@pytest.fixture
async def served():
    servicer, recording = _Servicer(), _Recording()
    running = await start_server(
        "orchestrator", ServiceSettings(port=0),
        [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, servicer, SERVICE)],
        interceptors=[recording])
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    yield running.in_process, pb_grpc.OrchestratorServiceStub(channel), servicer, recording
    await channel.close()
    await running.stop(0)


async def _over_grpc(stub, query: str):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnswerQuery(pb.AnswerQueryRequest(query=query), timeout=5)
    return rpc_status.from_call(caught.value), caught.value


async def test_a_call_passes_the_interceptors_and_returns_the_reply_and_header_metadata(served):
    server, _, _, recording = served
    call = server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="q"), 5.0, [("x-user", "ann")])
    reply = await call
    assert reply.answer == "q/ann"
    assert call.initial_metadata() == (("x-served-by", "test"),)
    assert recording.methods == [ANSWER]


async def test_a_domain_error_fails_with_the_status_a_grpc_client_gets(served):
    server, stub, _, _ = served
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="bad"), 5.0)
    over_grpc, _ = await _over_grpc(stub, "bad")
    assert caught.value.status == over_grpc
    assert caught.value.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert len(caught.value.status.details) > 0  # BadRequest and ErrorInfo


async def test_a_bug_is_internal_without_its_message(served):
    server, _, _, _ = served
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="bug"), 5.0)
    assert caught.value.status.code == grpc.StatusCode.INTERNAL.value[0]
    assert "secret" not in caught.value.status.message


async def test_a_code_set_without_abort_is_the_calls_status(served):
    server, _, _, _ = served
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="code"), 5.0)
    _, over_grpc = await _over_grpc(served[1], "code")
    assert caught.value.status.code == over_grpc.code().value[0] == 5
    assert caught.value.status.message == over_grpc.details() == "set, not aborted"


async def test_the_deadline_cancels_the_handler_and_fails_deadline_exceeded(served):
    server, _, servicer, _ = served
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="slow"), 0.2)
    assert caught.value.status.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert servicer.cancelled.is_set()


async def test_cancel_stops_the_handler(served):
    server, _, servicer, _ = served
    call = server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="slow"), 10.0)
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.wait_for(servicer.cancelled.wait(), 1)


async def test_limits_the_transport_would_enforce(served):
    server, _, _, recording = served
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="q"), 5.0,
                                 [("x-big", "a" * 20_000)])
    assert caught.value.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert caught.value.status.message.startswith("metadata: ")
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="x" * MAX_MESSAGE_BYTES),
                                 5.0)
    assert caught.value.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert caught.value.status.message.startswith("request is ")
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="huge"), 5.0)
    assert caught.value.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert caught.value.status.message.startswith("response is ")
    assert recording.methods == [ANSWER]  # refused before the interceptors, as on the wire


async def test_an_unknown_method_is_unimplemented(served):
    server, _, _, _ = served
    with pytest.raises(CallFailed) as caught:
        await server.unary_unary(f"/{SERVICE}/Nope", pb.AnswerQueryRequest(), 5.0)
    assert caught.value.status.code == grpc.StatusCode.UNIMPLEMENTED.value[0]


async def test_health_is_served_in_process(served):
    from grpc_health.v1 import health_pb2

    server = served[0]
    reply = await server.unary_unary("/grpc.health.v1.Health/Check",
                                     health_pb2.HealthCheckRequest(service=SERVICE), 5.0)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def _read_all(call) -> list:
    items = []
    while (item := await call.read()) is not grpc.aio.EOF:
        items.append(item.iteration)
    return items


async def test_a_stream_gives_its_messages_then_eof(served):
    server, _, servicer, _ = served
    call = await server.unary_stream(STREAM, pb.StreamSolveProblemRequest(seed=3), 5.0)
    assert await _read_all(call) == [1, 2, 3]
    assert await call.read() is grpc.aio.EOF
    assert servicer.closed.is_set() and not servicer.cancelled.is_set()


async def test_a_stream_that_fails_after_messages_raises_its_status_on_read(served):
    server, _, _, _ = served
    call = await server.unary_stream(STREAM, pb.StreamSolveProblemRequest(seed=2, simulations=1),
                                     5.0)
    assert (await call.read()).iteration == 1
    assert (await call.read()).iteration == 2
    with pytest.raises(CallFailed) as caught:
        await call.read()
    assert caught.value.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "one is not enough" in caught.value.status.message


async def test_a_stream_past_its_deadline_or_cancelled_stops_its_handler(served):
    server, _, servicer, _ = served
    call = await server.unary_stream(STREAM, pb.StreamSolveProblemRequest(seed=1, simulations=2),
                                     0.3)
    assert (await call.read()).iteration == 1
    with pytest.raises(CallFailed) as caught:
        await call.read()
    assert caught.value.status.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert servicer.cancelled.is_set()

    servicer.cancelled.clear()
    servicer.closed.clear()
    # Cancelled while a message waits to be read: the handler, held at its yield, is closed
    # (GeneratorExit, as when a gRPC server drops a stream whose client left).
    call = await server.unary_stream(STREAM, pb.StreamSolveProblemRequest(seed=5), 5.0)
    assert (await call.read()).iteration == 1
    await asyncio.sleep(0.05)
    assert not servicer.closed.is_set()
    call.cancel()
    await asyncio.wait_for(servicer.closed.wait(), 1)


async def test_the_server_span_records_the_status_of_each_ending():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    running = await start_server(
        "orchestrator", ServiceSettings(port=0),
        [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, _Servicer(), SERVICE)],
        tracer_provider=provider)
    server = running.in_process
    try:
        await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="q"), 5.0)
        for query, timeout in (("bad", 5.0), ("slow", 0.1)):
            with pytest.raises(CallFailed):
                await server.unary_unary(ANSWER, pb.AnswerQueryRequest(query=query), timeout)
        call = server.unary_unary(ANSWER, pb.AnswerQueryRequest(query="slow"), 5.0)
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await running.stop(0)
        provider.shutdown()
    codes = [span.attributes["rpc.grpc.status_code"] for span in exporter.get_finished_spans()
             if span.name == ANSWER.lstrip("/")]
    assert codes == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0],
                     grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
                     grpc.StatusCode.CANCELLED.value[0]]
