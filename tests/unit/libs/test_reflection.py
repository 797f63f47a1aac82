"""Reflection answers under grpc.reflection.v1 and v1alpha with the same content."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection_pb2

from libs.reflection import V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME, enable_server_reflection

HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


async def _ask(port: int, service: str, request):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        stream = call(iter([request]), timeout=10)
        return [reply async for reply in stream][0]


async def test_v1_and_v1alpha_list_and_describe_the_same_services():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)
    enable_server_reflection([HEALTH], server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        listed = {}
        for service in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME):
            reply = await _ask(port, service, reflection_pb2.ServerReflectionRequest(
                list_services=""))
            listed[service] = {s.name for s in reply.list_services_response.service}
        assert listed[V1_SERVICE_NAME] == listed[V1ALPHA_SERVICE_NAME] == {
            HEALTH, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME}

        reply = await _ask(port, V1_SERVICE_NAME, reflection_pb2.ServerReflectionRequest(
            file_containing_symbol=V1_SERVICE_NAME))
        file = descriptor_pb2.FileDescriptorProto.FromString(
            reply.file_descriptor_response.file_descriptor_proto[0])
        assert (file.name, file.package) == ("grpc/reflection/v1/reflection.proto",
                                             "grpc.reflection.v1")
        method = file.service[0].method[0]
        assert (method.input_type, method.output_type) == (
            ".grpc.reflection.v1.ServerReflectionRequest",
            ".grpc.reflection.v1.ServerReflectionResponse")
        assert method.client_streaming and method.server_streaming
        # Calling it twice registers the v1 file once.
        enable_server_reflection([HEALTH], grpc.aio.server())
    finally:
        await server.stop(0)
