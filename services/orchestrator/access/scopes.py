"""Scopes: what an API key may call. Each method of the orchestrator's API needs one scope; a key
holding `admin` may call every method.

| scope | methods |
|---|---|
| `solve` | SolveProblem, StreamSolveProblem |
| `query` | AnswerQuery, StreamAnswerQuery, GetDocument, ListDocuments |
| `ingest` | IngestDocuments, StreamIngestDocuments, DeleteDocument |
| `admin` | DeleteCollection, and any method not in this table |
| `solve` or `query` | RunService's methods (CreateRun, CreateBatch: each request's own) |

A method missing from the table needs `admin`, so a new RPC is closed to ordinary keys until it is
placed here. Calls without a key (when keys are not required) have every scope, as before scopes
existed; so have keys whose records name no scopes (written before scopes existed).

A request that names a collection (a `collection` field, or a `name` / `parent` resource name
`collections/{collection}/...`) is checked against the key's allowed collections, when its record
lists any (`collection_of`).
"""

from __future__ import annotations

SOLVE = "solve"
QUERY = "query"
INGEST = "ingest"
ADMIN = "admin"
SCOPES = (SOLVE, QUERY, INGEST, ADMIN)
"""Every scope, in the order `mcts-mesh keys` shows them."""
DEFAULT_NEW_KEY_SCOPES = (SOLVE, QUERY)
"""Scopes of a key that `mcts-mesh keys create` makes without `--scope`: it may solve and query,
not write collections nor administer (least privilege; ask for `--scope ingest`)."""

_SERVICE = "/mesh.orchestrator.v1.OrchestratorService/"
METHOD_SCOPES: dict[str, str] = {
    _SERVICE + "SolveProblem": SOLVE,
    _SERVICE + "StreamSolveProblem": SOLVE,
    _SERVICE + "AnswerQuery": QUERY,
    _SERVICE + "StreamAnswerQuery": QUERY,
    _SERVICE + "GetDocument": QUERY,
    _SERVICE + "ListDocuments": QUERY,
    _SERVICE + "IngestDocuments": INGEST,
    _SERVICE + "StreamIngestDocuments": INGEST,
    _SERVICE + "DeleteDocument": INGEST,
    _SERVICE + "DeleteCollection": ADMIN,
}
"""Full gRPC method name ("/package.Service/Method") -> the scope it needs."""


RUN_SERVICE = "/mesh.orchestrator.v1.RunService/"
RUN_SCOPES = (SOLVE, QUERY)
"""RunService's methods need one of these; the runs servicer checks the scope each run's request
needs (`request_scope`)."""
REQUEST_SCOPES = {"solve": SOLVE, "answer": QUERY}
"""A run's kind -> the scope its request needs (what SolveProblem / AnswerQuery need)."""


def missing_scope(scopes: frozenset[str] | None, method: str) -> str | None:
    """None when a key holding `scopes` may call `method`, else the scope it lacks ("solve or
    query" for RunService's methods)."""
    if method.startswith(RUN_SERVICE):
        return None if any(allows(scopes, scope) for scope in RUN_SCOPES) \
            else " or ".join(RUN_SCOPES)
    scope = scope_of(method)
    return None if allows(scopes, scope) else scope


def scope_of(method: str) -> str:
    """The scope that `method` (a full gRPC method name) needs: its entry in METHOD_SCOPES, else
    `admin`."""
    return METHOD_SCOPES.get(method, ADMIN)


def allows(scopes: frozenset[str] | None, scope: str) -> bool:
    """Whether a key holding `scopes` (None: every scope) may use `scope`."""
    return scopes is None or scope in scopes or ADMIN in scopes


def collection_of(request: object) -> str | None:
    """The collection a request message names: its `collection` field when it has one ("" when
    empty: the caller checks its default collection), else the `{collection}` of a `name` or
    `parent` field of the form `collections/{collection}[/...]`; None when it names none."""
    descriptor = getattr(request, "DESCRIPTOR", None)
    if descriptor is None:
        return None
    fields = descriptor.fields_by_name
    if "collection" in fields:
        return request.collection
    for field in ("name", "parent"):
        if field in fields:
            value = getattr(request, field)
            if isinstance(value, str) and value.startswith("collections/"):
                return value.split("/", 2)[1] or None
    return None
