"""The MCP server's tools against a stand-in orchestrator (a real grpc.aio server on port 0): the
request each tool sends, the API key as x-api-key, and a gRPC error turned into a tool error."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from mcp.server.mcpserver.exceptions import ToolError
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from mcts_mesh.mcp_server import build_server


class _Orchestrator(orchestrator_service_pb2_grpc.OrchestratorServiceServicer):
    def __init__(self) -> None:
        self.requests: list[tuple[pb.SolveProblemRequest, dict]] = []

    async def SolveProblem(self, request, context):
        self.requests.append((request, dict(context.invocation_metadata())))
        if request.connect_four.moves == "9":
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.BadRequest(field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="connect_four.moves",
                                                            description="columns are 1..7")]))
            await context.abort_with_status(rpc_status.to_status(status_pb2.Status(
                code=code_pb2.INVALID_ARGUMENT, message="bad moves", details=[detail])))
        return pb.SolveProblemResponse(connect_four=pb.ConnectFourAnswer(column=4, value=0.25),
                                       votes=[pb.AgentVote(agent=pb.AGENT_MCTS,
                                                           rationale="visits 10/20")])


async def test_tools_send_the_request_with_the_key_and_report_bad_fields():
    servicer = _Orchestrator()
    server = grpc.aio.server()
    orchestrator_service_pb2_grpc.add_OrchestratorServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        mcp = build_server(f"127.0.0.1:{port}", deadline_s=10, api_key="k-123")
        reply = await mcp.call_tool("run_mcts", {"moves": "44", "simulations": 500, "seed": 3})
        assert not reply.is_error
        assert reply.structured_content["column"] == 4
        assert reply.structured_content["rationale"] == ["visits 10/20"]
        request, metadata = servicer.requests[-1]
        assert (request.connect_four.moves, request.simulations, request.seed) == ("44", 500, 3)
        assert list(request.agents) == [pb.AGENT_MCTS]
        assert metadata["x-api-key"] == "k-123"

        reply = await mcp.call_tool("solve", {"kind": "maze", "problem": "#S#/# #/#G#",
                                              "agents": ["AGENT_SOLVER", "trm"]})
        request, _ = servicer.requests[-1]
        assert request.maze.grid == "#S#\n# #\n#G#"
        assert list(request.agents) == [pb.AGENT_SOLVER, pb.AGENT_TRM]

        # Called in-process the tool raises ToolError; over a session it is an is_error result
        # with this text (tests/e2e/clients/test_mcp.py).
        with pytest.raises(ToolError) as bad:
            await mcp.call_tool("solve", {"kind": "connect4", "problem": "9"})
        assert str(bad.value).endswith("INVALID_ARGUMENT: bad moves\n"
                                       "field connect_four.moves: columns are 1..7")
        await mcp.call_tool("solve", {"kind": "connect4", "problem": "3", "board": "5x4"})
        request, _ = servicer.requests[-1]
        assert (request.connect_four.board.columns, request.connect_four.board.rows) == (5, 4)
        await mcp.call_tool("run_mcts", {"moves": "3", "board": "4X4"})
        assert servicer.requests[-1][0].connect_four.board.columns == 4
        with pytest.raises(ToolError, match="board: '5 by 4' is not of the form WxH"):
            await mcp.call_tool("solve", {"kind": "connect4", "problem": "3", "board": "5 by 4"})
        with pytest.raises(ToolError, match="unknown agent 'oracle'"):
            await mcp.call_tool("solve", {"kind": "connect4", "problem": "4", "agents": ["oracle"]})
    finally:
        await server.stop(0)
