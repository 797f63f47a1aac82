"""The MCP server (`mcts-mesh mcp`) driven through the official SDK's client session, over stdio
and over streamable HTTP, against the real mesh."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import asynccontextmanager

import grpc
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

TOOLS = {"solve", "query", "run_mcts", "health"}
ENDGAME = "2252576253462244111563365343671351441"  # Pons Test_L3_R1: score -1, checker solves it


@asynccontextmanager
async def _stdio_session(mesh, repo_root):
    params = StdioServerParameters(
        command=sys.executable, cwd=str(repo_root),
        args=["-m", "mcts_mesh.cli", "--target", mesh.target, "mcp", "--transport", "stdio"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.fixture
def http_server(mesh, tmp_path, repo_root):
    port_file = tmp_path / "mcp.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "mcts_mesh.cli", "--target", mesh.target, "mcp", "--transport",
         "http", "--port", "0", "--port-file", str(port_file)],
        cwd=repo_root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not port_file.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert port_file.exists(), process.stderr.read().decode() if process.poll() is not None else ""
    yield f"http://127.0.0.1:{json.loads(port_file.read_text())['http']}/mcp"
    process.terminate()
    process.wait(10)


def _result(reply):
    assert not reply.is_error, reply.content
    return reply.structured_content


async def test_stdio_tools_answer_through_the_orchestrator(mesh, repo_root):
    with grpc.insecure_channel(mesh.target) as channel:
        orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel).IngestDocuments(
            pb.IngestDocumentsRequest(collection="mcp", documents=[
                common_pb2.Document(id="heart", text="The human heart has four chambers."),
                common_pb2.Document(id="moon", text="The Moon orbits the Earth every 27 days.")]),
            timeout=120)
    async with _stdio_session(mesh, repo_root) as session:
        assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS

        assert _result(await session.call_tool("health", {}))["status"] == "SERVING"

        solved = _result(await session.call_tool(
            "solve", {"kind": "connect4", "problem": ENDGAME, "agents": ["checker"]}))
        assert solved["connect_four"]["outcome"] == "OUTCOME_LOSS"
        assert solved["connect_four"]["score"] == -1

        sudoku = _result(await session.call_tool("solve", {"kind": "sudoku",
                                                            "problem": "1.3..4.22..3.3.1"}))
        assert sudoku["sudoku"] == {"solution": "1234341221434321", "valid": True}

        searched = _result(await session.call_tool("run_mcts", {"moves": "4453",
                                                                 "simulations": 2000}))
        assert 1 <= searched["column"] <= 7
        assert int(searched["search_statistics"]["simulations"]) == 2000
        assert searched["rationale"][0].startswith("visits ")

        answered = _result(await session.call_tool(
            "query", {"query": "How many chambers does the heart have?", "collection": "mcp"}))
        assert answered["sources"][0]["document_id"] == "heart"
        assert "four chambers" in answered["answer"]

        bad = await session.call_tool("solve", {"kind": "connect4", "problem": "4489"})
        assert bad.is_error
        text = bad.content[0].text
        assert "INVALID_ARGUMENT: " in text and "field connect_four.moves: " in text, text


async def test_streamable_http_session(http_server):
    async with streamable_http_client(http_server) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
            assert _result(await session.call_tool("health", {}))["status"] == "SERVING"
            solved = _result(await session.call_tool(
                "solve", {"kind": "connect4", "problem": ENDGAME, "agents": ["checker"]}))
            assert solved["connect_four"]["score"] == -1
