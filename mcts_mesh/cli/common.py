"""What the client commands share: the orchestrator's address, its stub, the agent names of the
command line, and how a failed call is printed."""

from __future__ import annotations

import sys

import grpc

DEFAULT_TARGET = "127.0.0.1:50051"
AGENT_NAMES = ("mcts", "neural", "checker", "retrieval", "llm", "solver", "hrm", "trm")


def agents(text: str | None) -> list[int]:
    """The `Agent` values of an `--agents` list ("mcts,neural"); [] when empty.

    Raises:
        SystemExit: an unknown agent name (the message lists the known ones).
    """
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    if not text:
        return []
    values = []
    for name in text.split(","):
        name = name.strip().lower()
        if name not in AGENT_NAMES:
            raise SystemExit(
                f"--agents: unknown agent {name!r}; choose from {', '.join(AGENT_NAMES)}")
        values.append(pb.Agent.Value(f"AGENT_{name.upper()}"))
    return values


def agent_name(value: int) -> str:
    """The command line's word for an `Agent` value (AGENT_MCTS -> "mcts")."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    return pb.Agent.Name(value).removeprefix("AGENT_").lower()


def fail(error: grpc.RpcError) -> int:
    """Prints a failed call the way a user reads it: code, message, field violations; returns
    the exit status 2."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
    status = rpc_status.from_call(error)
    if status is not None:
        for detail in status.details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                for violation in bad.field_violations:
                    print(f"  field {violation.field}: {violation.description}", file=sys.stderr)
    return 2


def stub(target: str, api_key: str | None = None):
    """(channel, OrchestratorServiceStub) to `target`, sending `api_key` as x-api-key; the caller
    closes the channel."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

    from mcts_mesh.client import open_channel

    channel = open_channel(target, api_key)
    return channel, orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)


def failure_records(response) -> list[dict]:
    """The agents that failed in a response, as {agent, code, message} records."""
    return [{"agent": agent_name(f.agent), "code": f.code, "message": f.message}
            for f in response.failures]
