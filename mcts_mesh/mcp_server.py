"""An MCP (Model Context Protocol) server over the orchestrator's public gRPC API.

Tools: `solve` (Connect Four, Sudoku, mazes), `query` (a text question answered from a retrieval
collection), `run_mcts` (the mcts agent alone on a Connect Four position, with its search
statistics) and `health` (the orchestrator's grpc.health.v1 status). Each tool is one call of the
orchestrator's API, like the `mcts-mesh` command; nothing here reaches a backend directly.

Transports (the official `mcp` SDK, `mcp.server.mcpserver.MCPServer`): stdio, for an MCP client
that starts the server itself, and streamable HTTP (`/mcp`), for a client that connects to a
running one: `mcts-mesh mcp --target HOST:PORT --transport stdio|http [--host H --port P]`.

A failed call comes back as a tool error (`is_error`) whose text is the gRPC code, its message and
each BadRequest field violation ("field connect_four.moves: ..."), which a model can act on.
With an API key (`--api-key` or $MCTS_MESH_API_KEY), every call carries it as `x-api-key`, as the
`mcts-mesh` command sends it, for an orchestrator that requires keys.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from mcts_mesh.client import client_options

AGENTS = ("mcts", "neural", "checker", "retrieval", "llm", "solver", "hrm", "trm")
INSTRUCTIONS = (
    "mcts-mesh answers problems that have a checker (Connect Four moves, Sudoku, mazes) by "
    "consensus of tree search, neural networks and exact solvers, and answers text questions "
    "from retrieved documents with their sources. Use `solve` for puzzles and games, `run_mcts` "
    "to see a Monte Carlo Tree Search alone, `query` for questions, `health` to check the mesh."
)


class _Orchestrator:
    """One grpc.aio channel to the orchestrator, opened in the serving event loop on first use."""

    def __init__(self, target: str, deadline_s: float, api_key: str | None = None) -> None:
        self.target = target
        self.deadline_s = deadline_s
        self.metadata = (("x-api-key", api_key),) if api_key else None
        self._channel: grpc.aio.Channel | None = None

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:  # the options of the `mcts-mesh` command's channel
            self._channel = grpc.aio.insecure_channel(self.target, options=client_options())
        return self._channel

    def stub(self) -> orchestrator_service_pb2_grpc.OrchestratorServiceStub:
        return orchestrator_service_pb2_grpc.OrchestratorServiceStub(self.channel())

    async def call(self, method: str, request) -> dict[str, Any]:
        """Calls `method`; the response as JSON-ready dict (proto field names), or a ToolError."""
        try:
            response = await getattr(self.stub(), method)(request, timeout=self.deadline_s,
                                                          metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            raise ToolError(describe_error(error)) from None
        return json_format.MessageToDict(response, preserving_proto_field_name=True)


def describe_error(error: grpc.aio.AioRpcError) -> str:
    """"CODE: message" and one line per BadRequest field violation of the error's details."""
    lines = [f"{error.code().name}: {error.details()}"]
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        for detail in status_pb2.Status.FromString(value).details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                lines += [f"field {v.field}: {v.description}" for v in bad.field_violations]
    return "\n".join(lines)


def _agents(names: list[str] | None) -> list[int]:
    agents = []
    for name in names or []:
        short = name.strip().lower().removeprefix("agent_")
        if short not in AGENTS:
            raise ToolError(f"agents: unknown agent {name!r}; choose from {', '.join(AGENTS)}")
        agents.append(pb.Agent.Value(f"AGENT_{short.upper()}"))
    return agents


def _position(moves: str, board: str) -> common_pb2.ConnectFourPosition:
    """A Connect Four position; `board` "WxH" (e.g. "5x4") states its board, "" means 7x6 (the
    orchestrator checks the limits and names the field it refuses)."""
    position = common_pb2.ConnectFourPosition(moves=moves.strip())
    if board.strip():
        parts = board.strip().lower().split("x")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            raise ToolError(f"board: {board!r} is not of the form WxH, e.g. 5x4")
        position.board.columns, position.board.rows = int(parts[0]), int(parts[1])
    return position


def _problem(kind: str, problem: str, board: str = "") -> dict[str, Any]:
    if kind == "connect4":
        return {"connect_four": _position(problem, board)}
    if kind == "sudoku":
        return {"sudoku": pb.SudokuProblem(puzzle=problem.strip())}
    grid = problem.strip("\n")
    if "\n" not in grid and "/" in grid:  # one line: rows joined by '/'
        grid = grid.replace("/", "\n")
    return {"maze": pb.MazeProblem(grid=grid)}


def build_server(target: str, deadline_s: float = 120.0,
                 api_key: str | None = None) -> MCPServer:
    """The MCP server with its four tools, calling the orchestrator at `target` ("host:port"),
    each call with a deadline of `deadline_s` seconds and `api_key` (if any) as x-api-key."""
    orchestrator = _Orchestrator(target, deadline_s, api_key)
    server = MCPServer(name="mcts-mesh", instructions=INSTRUCTIONS)
    _add_solve_and_query(server, orchestrator)
    _add_run_mcts_and_health(server, orchestrator, target)
    return server


def _add_solve_and_query(server: MCPServer, orchestrator: _Orchestrator) -> None:
    """The tools `solve` and `query` (listed in this order, first)."""

    @server.tool()
    async def solve(kind: Literal["connect4", "sudoku", "maze"], problem: str,
                    agents: list[str] | None = None, simulations: int | None = None,
                    seed: int = 0, board: str = "") -> dict[str, Any]:
        """Solves a problem with a checker by consensus of the mesh's agents.

        kind "connect4": `problem` is the columns played from the empty board, one digit 1-7 per
        move ("4453"; "" is the start); the answer is the column to play (1-7), the position's
        value for the player to move in [-1, 1], and the exact outcome when solved.
        kind "sudoku": N*N characters row by row ('.' or '0' blank, N = 4, 6, 8 or 9); the answer
        is the filled grid, verified by the exact checker.
        kind "maze": rows of '#' (wall), ' ' (open), 'S', 'G' joined by newlines (or '/'); the
        answer marks a shortest path with 'o'.
        agents: any of mcts, neural, checker, solver, hrm, trm (default: all that apply).
        simulations: MCTS simulations per search (1..10,000,000). seed: for reproducible searches.
        board: connect4 only, the board as "WxH" (e.g. "5x4": columns 1-5); empty means 7x6.
        """
        request = pb.SolveProblemRequest(**_problem(kind, problem, board),
                                         agents=_agents(agents), seed=seed)
        if simulations is not None:
            request.simulations = simulations
        return await orchestrator.call("SolveProblem", request)

    @server.tool()
    async def query(query: str, collection: str = "", top_k: int | None = None) -> dict[str, Any]:
        """Answers a text question from the passages retrieved from `collection` (the service's
        default collection when empty), through the LLM gateway; the answer cites its sources
        (document id, title, text, score). `offline: true` means the extractive offline provider
        drafted it (no LLM key configured). top_k: passages to retrieve, 1..20."""
        request = pb.AnswerQueryRequest(query=query, collection=collection)
        if top_k is not None:
            request.top_k = top_k
        return await orchestrator.call("AnswerQuery", request)


def _add_run_mcts_and_health(server: MCPServer, orchestrator: _Orchestrator, target: str) -> None:
    """The tools `run_mcts` and `health` (listed after `solve` and `query`)."""

    @server.tool()
    async def run_mcts(moves: str, simulations: int = 20_000, seed: int = 0,
                       board: str = "") -> dict[str, Any]:
        """Runs Monte Carlo Tree Search alone (UCT with random rollouts, the mcts service) on a
        Connect Four position: `moves` are the columns played, one digit 1-7 per move (`board`
        "WxH", e.g. "5x4", for another board; empty means 7x6). Returns the chosen column, the
        root value, the vote's rationale ("visits best/total") and the search statistics
        (simulations, tree nodes, depth, simulations per second)."""
        request = pb.SolveProblemRequest(connect_four=_position(moves, board),
                                         agents=[pb.AGENT_MCTS], simulations=simulations,
                                         seed=seed)
        reply = await orchestrator.call("SolveProblem", request)
        return {"column": reply.get("connect_four", {}).get("column"),
                "value": reply.get("connect_four", {}).get("value", 0.0),
                "rationale": [v.get("rationale", "") for v in reply.get("votes", [])],
                "search_statistics": reply.get("search_statistics", {})}

    @server.tool()
    async def health() -> dict[str, Any]:
        """The orchestrator's gRPC health (grpc.health.v1): "SERVING" when it answers requests,
        "NOT_SERVING" while starting or draining, "UNREACHABLE" (with the error) when the
        address does not answer."""
        stub = health_pb2_grpc.HealthStub(orchestrator.channel())
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10,
                                     metadata=orchestrator.metadata)
        except grpc.aio.AioRpcError as error:
            return {"target": target, "status": "UNREACHABLE", "error": describe_error(error)}
        return {"target": target,
                "status": health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}


def serve(target: str, transport: Literal["stdio", "http"], host: str = "127.0.0.1",
          port: int = 8765, deadline_s: float = 120.0, api_key: str | None = None,
          on_listening: Callable[[int], None] | None = None) -> None:
    """Runs the MCP server until the client disconnects (stdio) or SIGINT/SIGTERM (http).

    http: streamable HTTP on http://host:port/mcp (port 0 picks a free one; `on_listening`
    gets the bound port once the socket is bound).
    """
    server = build_server(target, deadline_s, api_key)
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app(host=host)
    listener = socket.create_server((host, port))
    if on_listening is not None:
        on_listening(listener.getsockname()[1])
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


def write_port_file(path: str) -> Callable[[int], None]:
    """An `on_listening` that writes {"http": port} to `path` (atomically)."""
    def write(port: int) -> None:
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps({"http": port}))
        tmp.replace(path)
    return write
