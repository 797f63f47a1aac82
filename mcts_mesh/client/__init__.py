"""A Python client of the mesh: `Client` (blocking) and `AsyncClient` (asyncio), one method per
public RPC of the orchestrator (OrchestratorService and RunService), with deadlines, the API key,
retries of UNAVAILABLE for idempotent calls, and the mesh's errors as exceptions carrying their
`google.rpc` details (`mcts_mesh.client.errors`). The guide is docs/guides/clients.md.

    from mcts_mesh.client import Client

    with Client("127.0.0.1:50051", api_key="...") as mesh:
        move = mesh.solve_problem(connect_four={"moves": "4453"}).connect_four.column

`open_channel`, `client_options` and `ApiKeyInterceptor` (`channel`) are the raw channel the
command line uses.
"""

from mcts_mesh.client._core import DEFAULT_TARGET, DEFAULT_TIMEOUT_S, IDEMPOTENT, RetryPolicy
from mcts_mesh.client.aio import AsyncClient
from mcts_mesh.client.channel import API_KEY_ENV, ApiKeyInterceptor, client_options, open_channel
from mcts_mesh.client.errors import (
    FieldViolation,
    InvalidArgumentError,
    MeshRpcError,
    NotFoundError,
    PermissionDeniedError,
    QuotaViolation,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from mcts_mesh.client.sync import Client

__all__ = [
    "API_KEY_ENV", "DEFAULT_TARGET", "DEFAULT_TIMEOUT_S", "IDEMPOTENT", "ApiKeyInterceptor",
    "AsyncClient", "Client", "FieldViolation", "InvalidArgumentError", "MeshRpcError",
    "NotFoundError", "PermissionDeniedError", "QuotaViolation", "ResourceExhaustedError",
    "RetryPolicy", "UnauthenticatedError", "UnavailableError", "client_options", "open_channel",
]
