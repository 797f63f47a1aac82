"""Access control for durable runs: RunService's methods need `solve` or `query`; a worker enters
on behalf of a run's key by its name (same scope, admission, rate limits; a revoked key is
INVALID_KEY); `caller` says whose resources a credential sees; the run executor defers a run
refused by a limit that passes and fails one refused for good with the call's status."""

from __future__ import annotations

import pytest
from google.rpc import code_pb2, status_pb2
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb

from services.orchestrator.access.control import (
    ANONYMOUS,
    INVALID_KEY,
    MISSING_KEY,
    AccessControl,
    Admitted,
    Credential,
)
from services.orchestrator.access.keys import FileKeyStore, Grants, RateLimits
from services.orchestrator.access.limits import MemoryRateLimiter
from services.orchestrator.access.scopes import missing_scope
from services.orchestrator.api.run_execution import RunExecutor
from services.orchestrator.runs.execution import Deferred
from services.orchestrator.runs.model import RunRecord, RunState

RUNS = "/mesh.orchestrator.v1.RunService/"
SOLVE = "/mesh.orchestrator.v1.OrchestratorService/SolveProblem"


def test_run_service_methods_need_solve_or_query():
    for method in ("GetRun", "CreateBatch", "WatchRun"):
        assert missing_scope(frozenset({"ingest"}), RUNS + method) == "solve or query"
        assert missing_scope(frozenset({"query"}), RUNS + method) is None
        assert missing_scope(None, RUNS + method) is None
    assert missing_scope(frozenset({"query"}), SOLVE) == "solve"


async def control(tmp_path, require_key=True, **grants):
    keys = FileKeyStore(tmp_path / "keys.json")
    made = {name: await keys.create(name, RateLimits(per_second=1),
                                    Grants(**options) if options else None)
            for name, options in grants.items()}
    access = AccessControl(require_key=require_key, store=keys, limiter=MemoryRateLimiter(),
                           default_limits=RateLimits(), max_in_flight=4, reload_s=60.0)
    await access.start()
    return access, made


async def test_a_worker_enters_for_the_runs_key_under_its_scope_and_limits(tmp_path):
    access, _ = await control(tmp_path, alice={"scopes": ("solve",)},
                              reader={"scopes": ("query",)})
    try:
        admitted = await access.enter_as("alice", SOLVE)
        assert isinstance(admitted, Admitted) and access.in_flight_of("alice") == 1
        access.leave(admitted)
        refused = await access.enter_as("alice", SOLVE)  # one call a second
        assert refused.reason == "rate_limit" and refused.retry_after_s > 0
        assert (await access.enter_as("reader", SOLVE)).reason == "scope"
        assert await access.enter_as("revoked", SOLVE) is INVALID_KEY
        assert await access.enter_as("", SOLVE) is MISSING_KEY
    finally:
        await access.aclose()


async def test_without_required_keys_a_keyless_run_enters_anonymously(tmp_path):
    access, _ = await control(tmp_path, require_key=False)
    try:
        admitted = await access.enter_as("", SOLVE)
        assert admitted.client == ANONYMOUS
    finally:
        await access.aclose()


async def test_caller_names_the_owner_and_whether_it_sees_all(tmp_path):
    access, made = await control(tmp_path, alice={"scopes": ("solve",)},
                                 root={"scopes": ("admin",)}, legacy={})
    try:
        alice = access.caller(Credential(made["alice"]))
        assert (alice.owner, alice.admin, alice.may("solve"), alice.may("query")) == \
            ("alice", False, True, False)
        assert access.caller(Credential(made["root"])).admin
        assert access.caller(Credential(made["legacy"])).admin  # no scopes: every scope
        assert access.caller(Credential("mmk_unknown")) is INVALID_KEY
    finally:
        await access.aclose()


def solve_run(owner: str) -> RunRecord:
    request = orchestrator_pb.SolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves="4"))
    return RunRecord(name="runs/x", owner=owner, kind="solve",
                     request=request.SerializeToString(), state=RunState.RUNNING, attempts=1,
                     create_time=0.0, update_time=0.0)


class _Unused:
    async def SolveProblem(self, *args, **kwargs):
        raise AssertionError("a refused run must not run")


async def test_the_executor_defers_on_limits_that_pass_and_fails_for_a_revoked_key(tmp_path):
    access, _ = await control(tmp_path, alice={"scopes": ("solve",)})
    executor = RunExecutor(_Unused(), access)
    try:
        admitted = await access.enter_as("alice", SOLVE)
        access.leave(admitted)
        with pytest.raises(Deferred):  # alice's one call a second is spent
            await executor.execute(solve_run("alice"), progress=None)
        outcome = await executor.execute(solve_run("gone"), progress=None)
        assert outcome.state is RunState.FAILED
        assert status_pb2.Status.FromString(outcome.error).code == code_pb2.UNAUTHENTICATED
    finally:
        await access.aclose()
