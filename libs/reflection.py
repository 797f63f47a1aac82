"""gRPC server reflection under both of its protocol names.

grpcio-reflection implements only `grpc.reflection.v1alpha.ServerReflection`; newer clients
(grpcurl >= 1.9, grpcui, Postman, grpc-java's and grpc-go's reflection clients) ask
`grpc.reflection.v1.ServerReflection` first. The v1 protocol is v1alpha with the package renamed
(grpc/grpc-proto `grpc/reflection/v1/reflection.proto`: the same messages, fields and numbers), so
one servicer answers both: the v1 method is registered as a generic handler that (de)serializes
with the v1alpha messages, which are the same bytes on the wire. The v1 file descriptor is derived
from v1alpha's and added to the default descriptor pool, so a client can also describe the v1
service itself.
"""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
V1_FILE = "grpc/reflection/v1/reflection.proto"


def _register_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Adds grpc/reflection/v1/reflection.proto, derived from v1alpha's, to `pool` (once)."""
    try:
        pool.FindFileByName(V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    file.name, file.package = V1_FILE, "grpc.reflection.v1"
    file.ClearField("options")
    for message in file.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new)
    for service in file.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    pool.AddSerializedFile(file.SerializeToString())


def enable_server_reflection(service_names: list[str], server: grpc.aio.Server) -> None:
    """Serves reflection for `service_names` (plus both reflection services) on `server`.

    Args:
        service_names: full proto names of the services to list ("mesh.mcts.v1.MctsService", ...).
        server: a grpc.aio server, before it starts.
    """
    _register_v1_descriptor(descriptor_pool.Default())
    names = [*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    servicer = reflection.aio.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString),
    })
    server.add_generic_rpc_handlers((v1,))
