"""Scopes, key grants, budgets and `mcts-mesh keys create --scope` without gRPC (issue 29,
findings 5 and 7): the records, the scope table, the in-memory budgets on a fake clock, what a
response is charged, and the keys CLI."""

from __future__ import annotations

import json

import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import InvalidArgument
from mcts_mesh import cli
from services.orchestrator.access.budgets import MemoryBudgets, Usage, usage_of
from services.orchestrator.access.control import AccessControl, Admitted, Credential, Rejection
from services.orchestrator.access.keys import Budgets, FileKeyStore, Grants, KeyRecord, RateLimits
from services.orchestrator.access.limits import MemoryRateLimiter
from services.orchestrator.access.scopes import METHOD_SCOPES, allows, collection_of, scope_of

SERVICE = "/mesh.orchestrator.v1.OrchestratorService/"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_every_method_maps_to_one_scope_and_unknown_ones_need_admin():
    assert scope_of(SERVICE + "SolveProblem") == scope_of(SERVICE + "StreamSolveProblem") == \
        "solve"
    assert scope_of(SERVICE + "AnswerQuery") == "query"
    assert scope_of(SERVICE + "IngestDocuments") == scope_of(SERVICE + "StreamIngestDocuments") \
        == "ingest"
    assert scope_of(SERVICE + "DeleteCollection") == scope_of("/x.Y/Z") == "admin"
    for method in pb.DESCRIPTOR.services_by_name["OrchestratorService"].methods:
        assert SERVICE + method.name in METHOD_SCOPES, f"{method.name}: place it in the table"
    assert allows(None, "admin") and allows(frozenset({"admin"}), "ingest")
    assert not allows(frozenset({"solve", "query"}), "ingest")


def test_the_collection_a_request_names():
    assert collection_of(pb.AnswerQueryRequest(collection="docs")) == "docs"
    assert collection_of(pb.AnswerQueryRequest()) == ""  # the default collection
    assert collection_of(pb.SolveProblemRequest()) is None
    assert collection_of(common_pb2.Document(id="collections/x")) is None

    class Named:  # an AIP resource name, as a Get/Delete request carries it
        class DESCRIPTOR:  # noqa: N801 - the protobuf attribute's name
            fields_by_name = {"name": None}

        name = "collections/docs/documents/a"

    assert collection_of(Named()) == "docs"


def test_records_round_trip_and_old_records_have_every_scope():
    old = KeyRecord.from_json({"name": "old", "sha256": "ab" * 32, "created": "2026-01-01T00:00Z"})
    assert old.scopes is None and old.collections is None and old.budgets is None
    record = KeyRecord("new", "cd" * 32, "2026-01-01T00:00Z", RateLimits(per_second=2),
                       scopes=frozenset({"ingest", "query"}), collections=frozenset({"docs"}),
                       max_in_flight=3, budgets=Budgets(tokens=10, usd=0.5))
    data = record.to_json()
    assert data["scopes"] == ["ingest", "query"] and data["collections"] == ["docs"]
    assert data["budgets"] == {"tokens": 10, "usd": 0.5, "simulations": 0}
    assert KeyRecord.from_json(json.loads(json.dumps(data))) == record
    for bad in ({"scopes": ["root"]}, {"scopes": "solve"}, {"scopes": []},
                {"collections": ["a b"]}, {"max_in_flight": -1}, {"budgets": {"usd": -1}},
                {"budgets": {"tokens": 1.5}}):
        with pytest.raises((InvalidArgument, TypeError, ValueError)):
            KeyRecord.from_json({**data, **bad})


async def test_control_checks_scopes_and_collections(tmp_path):
    store = FileKeyStore(tmp_path / "keys.json")
    reader = await store.create("reader", grants=Grants(scopes=["query"], collections=["docs"]))
    control = AccessControl(require_key=True, store=store, limiter=MemoryRateLimiter(),
                            default_limits=RateLimits(), max_in_flight=0,
                            default_collection="default")
    await control.start()
    try:
        refused = await control.enter(Credential(reader), SERVICE + "IngestDocuments")
        assert isinstance(refused, Rejection) and refused.reason == "scope"
        assert dict(refused.metadata)["scope"] == "ingest"
        admitted = await control.enter(Credential(reader), SERVICE + "AnswerQuery",
                                       pb.AnswerQueryRequest(collection="docs"))
        assert isinstance(admitted, Admitted)
        control.leave(admitted)
        control.leave(admitted)  # a second leave does nothing
        assert control.in_flight == 0
        refused = await control.enter(Credential(reader), SERVICE + "AnswerQuery",
                                      pb.AnswerQueryRequest())
        assert refused.reason == "collection" and dict(refused.metadata)["collection"] == \
            "default"
    finally:
        await control.aclose()


async def test_memory_budgets_refuse_until_the_window_ends():
    clock = FakeClock()
    budgets = MemoryBudgets(60.0, clock)
    limit = Budgets(tokens=100)
    assert await budgets.check("alice", limit) == []
    await budgets.charge("alice", Usage(tokens=150))
    [used_up] = await budgets.check("alice", limit)
    assert (used_up.budget, used_up.used, used_up.retry_after_s) == ("tokens", 150, 60.0)
    assert await budgets.check("bob", limit) == []
    clock.now += 59.5
    assert (await budgets.check("alice", limit))[0].retry_after_s == pytest.approx(0.5)
    clock.now += 0.5
    assert await budgets.check("alice", limit) == []


def test_what_each_response_is_charged():
    query = pb.AnswerQueryResponse(total_tokens=70, cost_usd=0.25)
    query.step_search.statistics.simulations = 30
    assert usage_of(query) == Usage(70, 0.25, 30)
    solve = pb.SolveProblemResponse(search_statistics=common_pb2.SearchStatistics(
        simulations=4000))
    assert usage_of(solve) == Usage(simulations=4000)
    assert usage_of(pb.StreamSolveProblemResponse(response=solve)) == Usage(simulations=4000)
    assert not usage_of(pb.StreamSolveProblemResponse(iteration=1))
    assert not usage_of(pb.IngestDocumentsResponse(chunk_count=9))


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_keys_create_with_scopes_collections_caps_and_budgets(tmp_path, capsys):
    path = str(tmp_path / "keys.json")
    code, out, err = _cli(capsys, "keys", "--file", path, "create", "reader")
    assert code == 0 and out.startswith("mmk_") and "scopes query, solve" in err
    code, _, err = _cli(capsys, "keys", "--file", path, "create", "writer", "--scope", "ingest",
                        "--scope", "query", "--collection", "docs", "--max-in-flight", "2",
                        "--budget-tokens", "5000", "--budget-usd", "1.5")
    assert code == 0, err
    code, out, _ = _cli(capsys, "keys", "--file", path, "list", "--json")
    rows = {row["name"]: row for row in map(json.loads, out.splitlines())}
    assert rows["reader"]["scopes"] == ["query", "solve"]
    assert "collections" not in rows["reader"] and "budgets" not in rows["reader"]
    assert rows["writer"]["scopes"] == ["ingest", "query"]
    assert rows["writer"]["collections"] == ["docs"] and rows["writer"]["max_in_flight"] == 2
    assert rows["writer"]["budgets"] == {"tokens": 5000, "usd": 1.5, "simulations": 0}
    code, out, _ = _cli(capsys, "keys", "--file", path, "list")
    assert "scopes ingest,query" in out and "scopes query,solve" in out
    with pytest.raises(SystemExit) as bad:
        cli.main(["keys", "--file", path, "create", "root", "--scope", "root"])
    assert bad.value.code == 2
    code, _, err = _cli(capsys, "keys", "--file", path, "create", "bad", "--collection", "a b")
    assert code == 2 and "collections" in err
