"""Contract rules `buf lint` does not check: public RPCs are annotated for REST and documented."""

from __future__ import annotations

from pathlib import Path

from google.api import annotations_pb2
from google.protobuf import descriptor_pb2
from mesh.llm.v1 import llm_service_pb2
from mesh.mcts.v1 import mcts_service_pb2
from mesh.neural.v1 import neural_service_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2, run_service_pb2
from mesh.retrieval.v1 import retrieval_service_pb2

FILES = (orchestrator_service_pb2, run_service_pb2, mcts_service_pb2, neural_service_pb2,
         retrieval_service_pb2, llm_service_pb2)
PUBLIC_SERVICES = (orchestrator_service_pb2.DESCRIPTOR.services_by_name["OrchestratorService"],
                   run_service_pb2.DESCRIPTOR.services_by_name["RunService"])


def test_every_orchestrator_rpc_has_an_http_rule():
    """Every unary or server-streaming RPC; client-streaming ones say "gRPC only" instead."""
    for service in PUBLIC_SERVICES:
        for method in service.methods:
            if method.client_streaming:
                continue  # a stream of requests has no REST mapping here (gRPC only, documented)
            rule = method.GetOptions().Extensions[annotations_pb2.http]
            assert rule.WhichOneof("pattern"), f"{method.name} has no google.api.http rule"


PROTOS = Path(__file__).resolve().parents[2] / "protos"


def test_every_rpc_has_a_comment():
    for module in FILES:
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        # Source info is not kept in the generated descriptor; check the .proto text instead.
        path = module.DESCRIPTOR.name
        text = (PROTOS / path).read_text()
        for service in proto.service:
            for method in service.method:
                marker = f"rpc {method.name}("
                before = text[: text.index(marker)].rstrip().splitlines()
                comment = []
                for line in reversed(before):
                    if not line.strip().startswith("//"):
                        break
                    comment.append(line)
                assert comment, f"{path}: rpc {method.name} has no comment"
