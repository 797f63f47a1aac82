"""The whole mesh as real processes on loopback, under a steady load, with one backend at a time
frozen (SIGSTOP past the caller's deadline) or killed (SIGKILL).

For each of mcts, neural, retrieval and llm, requests that need that service run back to
back (Connect Four requests name the one agent backed by the service; text queries need retrieval
and the LLM gateway). Frozen: the requests end by their deadline with a clear status, and after
SIGCONT the success rate returns to 100%. With the LLM gateway frozen the orchestrator should
answer with the retrieved passages, flagged, before the deadline (issue 11, "degrade, don't
hang"): an expected failure until the orchestrator degrades. Killed: the requests that fail get a
clear status (UNAVAILABLE or DEADLINE_EXCEEDED with a message) and none outlives its deadline;
the service comes back (restarted by the launcher's supervision where it exists, else by the
test, on the same port with the same environment, as a supervisor would) and the success rate
returns to 100% with nothing else restarted. Slow: a test-side proxy (`delay_proxy.DelayProxy`)
between a second orchestrator and the real neural process delays every neural call by 3 s (no
service carries a test-only delay setting) while that orchestrator waits 1 s for one: a Connect
Four request with the default agents is still answered by the other agents before its deadline,
one that allows the network alone fails with a clear status by its deadline, and once the delay
is gone the network votes again. Frozen under a long agent deadline: a second orchestrator
waits 30 s for each neural call; with neural frozen, HTTP/2 keepalive (`libs.channels.Keepalive`)
finds the freeze within seconds, and the requests (the search and the network) are answered by
the search with the network's failure named, well before the network's deadline. The supervision
tests check that the launcher itself restarts each service (the orchestrator included) and skip
while it cannot.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import grpc
import pytest
from delay_proxy import DelayProxy
from faultkit import (
    DOWN_CODES,
    Load,
    assert_clear_failures,
    assert_no_hang,
    launcher_supervises,
    needs_supervision,
    process_env,
    restart_by_hand,
    serving,
    spawn_service,
    start_test_mesh,
    stop_process,
    wait_for_full_success,
)
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

pytestmark = [pytest.mark.fault, pytest.mark.slow]

DEADLINE_S = 5.0
FREEZE_DEADLINE_S = 1.5
FROZEN_S = 4.0  # more than twice the freeze deadline
# The slow neural service: the proxy delays each call 3 s; the orchestrator waits 1 s for one.
NEURAL_DEADLINE_S = 1.0
DELAY_S = 3.0
SLOW_DEADLINE_S = 8.0
POSITION = common_pb2.ConnectFourPosition(moves="4453")
BACKENDS = ("mcts", "neural", "retrieval", "llm")
# Neural frozen under a long agent deadline: the orchestrator would wait this long for a neural call
# without keepalive; keepalive (1 s pings, 2 s timeout) plus a 1 s reconnection should end one in
# about 4 s at most.
LONG_NEURAL_DEADLINE_S = 30.0
LONG_FROZEN_S = 12.0


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fault-kill")
    running, supervision = start_test_mesh(tmp)
    with grpc.insecure_channel(running.target) as channel:
        orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel).IngestDocuments(
            pb.IngestDocumentsRequest(collection="fault", documents=[
                common_pb2.Document(id="heart", title="Hearts",
                                    text="The human heart has four chambers that pump blood."),
                common_pb2.Document(id="moon", title="The Moon",
                                    text="The Moon orbits the Earth about every 27 days.")]),
            timeout=300)
    yield running
    if supervision is not None:
        supervision.stop()
    running.stop()


def request_needing(name: str, stub: orchestrator_service_pb2_grpc.OrchestratorServiceStub):
    """A call (deadline in s -> awaitable) whose success needs `name`."""
    if name in ("mcts", "neural"):
        agent = pb.AGENT_MCTS if name == "mcts" else pb.AGENT_NEURAL
        request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                                         agents=[agent], simulations=2000)
        return lambda deadline_s: stub.SolveProblem(request, timeout=deadline_s)
    request = pb.AnswerQueryRequest(query="How many chambers does the heart have?",
                                    collection="fault")

    async def answer(deadline_s: float):
        # With the gateway down the orchestrator degrades to the passages alone (passages_only)
        # and names the failure: for this request that is the gateway's failure, surfaced with the
        # status the mesh reported for it.
        reply = await stub.AnswerQuery(request, timeout=deadline_s)
        if reply.passages_only:
            failure = reply.failures[0]
            raise grpc.aio.AioRpcError(grpc.StatusCode[failure.code], grpc.aio.Metadata(),
                                       grpc.aio.Metadata(), details=failure.message)
        return reply

    return answer


@pytest.mark.parametrize("name", BACKENDS)
async def test_a_frozen_service_costs_a_request_its_deadline_and_no_more(mesh, name):
    channel = grpc.aio.insecure_channel(mesh.target)
    call = request_needing(name, orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel))
    pid = mesh.processes[name].pid
    try:
        await wait_for_full_success(call, FREEZE_DEADLINE_S, needed=3)
        load = Load(call, FREEZE_DEADLINE_S, workers=2)
        load.start()
        await asyncio.sleep(0.5)
        frozen_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(FROZEN_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        recovery_s = await wait_for_full_success(call, FREEZE_DEADLINE_S, needed=10, within_s=60)
        recovered_at = time.monotonic()
        await asyncio.sleep(1.0)
        await load.stop()
    finally:
        os.kill(pid, signal.SIGCONT)
        await channel.close()

    assert_no_hang(load.outcomes)
    assert_clear_failures(load.outcomes)
    frozen = [o for o in load.outcomes if frozen_at + 0.2 <= o.started
              and o.ended <= thawed_at]
    assert frozen, "no request started and ended while the service was frozen"
    after = load.since(recovered_at)
    assert after and all(o.code is None for o in after)
    codes = sorted({o.code.name if o.code else "OK" for o in frozen})
    print(f"\n{name} frozen: {len(frozen)} requests, {codes}, longest "
          f"{max(o.latency_s for o in frozen):.2f} s (deadline {FREEZE_DEADLINE_S} s); "
          f"back to 100% {recovery_s:.1f} s after SIGCONT")


async def test_with_the_llm_frozen_a_query_gets_the_retrieved_passages_before_its_deadline(mesh):
    pid = mesh.processes["llm"].pid
    channel = grpc.aio.insecure_channel(mesh.target)
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    os.kill(pid, signal.SIGSTOP)
    try:
        reply = await stub.AnswerQuery(pb.AnswerQueryRequest(
            query="How many chambers does the heart have?", collection="fault"), timeout=3.0)
    finally:
        os.kill(pid, signal.SIGCONT)
        await channel.close()
    assert reply.passages_only  # flagged: the LLM did not draft it
    assert reply.sources and reply.sources[0].document_id == "heart"


@pytest.fixture
async def proxied(mesh, tmp_path):
    """(stub of an orchestrator whose neural calls go through the proxy, the proxy)."""
    proxy = await DelayProxy(f"127.0.0.1:{mesh.ports['neural']}").start()
    env = {
        "ORCHESTRATOR_PORT": "0",
        "ORCHESTRATOR_REST_PORT": "-1",
        "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{mesh.ports['mcts']}",
        "ORCHESTRATOR_NEURAL_TARGET": proxy.target,
        "ORCHESTRATOR_MESH_TOKEN": mesh.token,
        "ORCHESTRATOR_RETRIEVAL_TARGET": f"127.0.0.1:{mesh.ports['retrieval']}",
        "ORCHESTRATOR_LLM_TARGET": f"127.0.0.1:{mesh.ports['llm']}",
        "ORCHESTRATOR_NEURAL_DEADLINE_S": str(NEURAL_DEADLINE_S),
    }
    orchestrator, port = await asyncio.to_thread(spawn_service, "orchestrator", env,
                                                 tmp_path)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel), proxy
    await channel.close()
    stop_process(orchestrator)
    await proxy.stop()


def _agents(reply: pb.SolveProblemResponse) -> set[str]:
    return {pb.Agent.Name(vote.agent) for vote in reply.votes}


def _failed_agents(reply: pb.SolveProblemResponse) -> set[str]:
    return {pb.Agent.Name(failure.agent) for failure in reply.failures}


@pytest.fixture
async def patient(mesh, tmp_path):
    """The stub of a second orchestrator on the mesh's services that gives each neural call
    `LONG_NEURAL_DEADLINE_S` (its channels' keepalive at the defaults)."""
    env = {
        "ORCHESTRATOR_PORT": "0",
        "ORCHESTRATOR_REST_PORT": "-1",
        "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{mesh.ports['mcts']}",
        "ORCHESTRATOR_NEURAL_TARGET": f"127.0.0.1:{mesh.ports['neural']}",
        "ORCHESTRATOR_RETRIEVAL_TARGET": f"127.0.0.1:{mesh.ports['retrieval']}",
        "ORCHESTRATOR_LLM_TARGET": f"127.0.0.1:{mesh.ports['llm']}",
        "ORCHESTRATOR_NEURAL_DEADLINE_S": str(LONG_NEURAL_DEADLINE_S),
        "ORCHESTRATOR_MESH_TOKEN": mesh.token,
    }
    orchestrator, port = await asyncio.to_thread(spawn_service, "orchestrator", env, tmp_path)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    await channel.close()
    stop_process(orchestrator)


async def test_keepalive_finds_a_frozen_network_long_before_its_deadline(mesh, patient):
    request = pb.SolveProblemRequest(connect_four=POSITION, simulations=2000,
                                     agents=[pb.AGENT_MCTS, pb.AGENT_NEURAL])
    deadline_s = LONG_NEURAL_DEADLINE_S + 10
    replies: list[tuple[float, float, pb.SolveProblemResponse]] = []

    async def call(timeout_s: float):
        started = time.monotonic()
        reply = await patient.SolveProblem(request, timeout=timeout_s)
        replies.append((started, time.monotonic(), reply))
        return reply

    async def with_network(timeout_s: float):
        reply = await call(timeout_s)
        if "AGENT_NEURAL" not in _agents(reply):
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                       grpc.aio.Metadata(), details=f"{reply.failures}")
        return reply

    pid = mesh.processes["neural"].pid
    try:
        await wait_for_full_success(with_network, deadline_s, needed=3)
        load = Load(call, deadline_s, workers=2)
        load.start()
        await asyncio.sleep(1.0)
        frozen_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(LONG_FROZEN_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        recovery_s = await wait_for_full_success(with_network, deadline_s, needed=10, within_s=60)
        recovered_at = time.monotonic()
        await asyncio.sleep(1.0)
        await load.stop()
    finally:
        os.kill(pid, signal.SIGCONT)

    assert_no_hang(load.outcomes)
    assert_clear_failures(load.outcomes)
    assert all(o.code is None for o in load.outcomes), "the search could always answer"
    # Every request was answered by the search: a frozen neural tore down no other connection.
    assert not any("AGENT_MCTS" in _failed_agents(reply) for _, _, reply in replies)
    assert all(1 <= reply.connect_four.column <= 7 for _, _, reply in replies)
    degraded = [(started, ended, reply) for started, ended, reply in replies
                if frozen_at <= ended <= thawed_at and "AGENT_NEURAL" in _failed_agents(reply)]
    assert degraded, "no request was answered without the network while it was frozen"
    codes = {f.code for _, _, reply in degraded for f in reply.failures}
    assert codes <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}, codes
    detected_at = min(ended for _, ended, _ in degraded)
    # Without keepalive the first of these ended a whole neural deadline (30 s) after the freeze.
    assert detected_at - frozen_at < LONG_NEURAL_DEADLINE_S / 2
    before = [ended - started for started, ended, _ in replies
              if started < detected_at and ended > frozen_at]
    after = [ended - started for started, ended, _ in replies
             if detected_at <= started and ended <= thawed_at]
    assert before, "no request was in flight when the freeze was found"
    assert after, "no request was sent after the freeze was found"
    assert max(after) < LONG_NEURAL_DEADLINE_S / 3, after
    assert max(before) < LONG_NEURAL_DEADLINE_S / 2, before
    back = [reply for started, _, reply in replies if started >= recovered_at]
    assert back and all("AGENT_NEURAL" in _agents(reply) for reply in back)
    after.sort()
    print(f"\nneural frozen, {LONG_NEURAL_DEADLINE_S:.0f} s agent deadline: first answer without "
          f"the network {detected_at - frozen_at:.2f} s after SIGSTOP "
          f"({sorted(codes)}); the {len(before)} requests in flight then took up to "
          f"{max(before):.2f} s; {len(after)} sent after it: p50 "
          f"{after[len(after) // 2]:.3f} s, max {max(after):.3f} s; the network votes again "
          f"{recovery_s:.1f} s after SIGCONT")


async def test_a_slow_network_costs_its_vote_not_the_answer(proxied):
    stub, proxy = proxied
    request = pb.SolveProblemRequest(connect_four=POSITION, simulations=2000)
    baseline = await stub.SolveProblem(request, timeout=SLOW_DEADLINE_S)
    assert "AGENT_NEURAL" in _agents(baseline), baseline.votes

    proxy.delay_s = DELAY_S
    calls = proxy.calls
    started = time.monotonic()
    slow = await stub.SolveProblem(request, timeout=SLOW_DEADLINE_S)
    elapsed = time.monotonic() - started
    assert proxy.calls > calls  # the network was asked
    assert 1 <= slow.connect_four.column <= 7
    assert "AGENT_NEURAL" not in _agents(slow), slow.votes
    assert elapsed < SLOW_DEADLINE_S
    print(f"\nneural delayed {DELAY_S} s: answered in {elapsed:.2f} s by {sorted(_agents(slow))}")

    proxy.delay_s = 0.0
    recovered = await stub.SolveProblem(request, timeout=SLOW_DEADLINE_S)
    assert "AGENT_NEURAL" in _agents(recovered)


async def test_network_only_requests_fail_clearly_by_their_deadline_then_recover(proxied):
    stub, proxy = proxied
    request = pb.SolveProblemRequest(connect_four=POSITION, agents=[pb.AGENT_NEURAL])

    async def call(deadline_s: float):
        return await stub.SolveProblem(request, timeout=deadline_s)

    await wait_for_full_success(call, SLOW_DEADLINE_S, needed=3)
    proxy.delay_s = DELAY_S
    load = Load(call, SLOW_DEADLINE_S, workers=2)
    load.start()
    await asyncio.sleep(2 * DELAY_S)
    proxy.delay_s = 0.0
    slow = list(load.outcomes)
    recovered_in = await wait_for_full_success(call, SLOW_DEADLINE_S, needed=10)
    recovered_at = time.monotonic()
    await asyncio.sleep(1.0)
    await load.stop()

    assert_no_hang(load.outcomes)
    assert_clear_failures(load.outcomes, DOWN_CODES)
    failed = [o for o in slow if o.code is not None]
    assert failed, "no network-only request failed while neural was 3 s slow"
    after = load.since(recovered_at)
    assert after and all(o.code is None for o in after)
    print(f"\nnetwork only, neural delayed {DELAY_S} s: {len(failed)}/{len(slow)} failed "
          f"({sorted({o.code.name for o in failed})}), longest "
          f"{max(o.latency_s for o in slow):.2f} s; 100% again {recovered_in:.1f} s after")


def refused_after_s(port: int, since: float, limit_s: float = 5.0) -> float | None:
    """Seconds from `since` until a connection to `port` on loopback is refused (None: not within
    `limit_s`). After SIGKILL the kernel frees the process's memory before it closes its sockets,
    so its port keeps accepting connections (that nobody answers) for tens of ms per 100 MB of
    resident memory: no client can see the death sooner."""
    while time.monotonic() - since < limit_s:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
        except ConnectionRefusedError:
            return time.monotonic() - since
        except OSError:
            pass
        time.sleep(0.001)
    return None


@pytest.mark.parametrize("name", BACKENDS)
async def test_kill_9_under_load_fails_cleanly_and_recovers_after_the_restart(
        mesh, name, tmp_path):
    channel = grpc.aio.insecure_channel(mesh.target)
    call = request_needing(name, orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel))
    try:
        await wait_for_full_success(call, DEADLINE_S, needed=3)
        load = Load(call, DEADLINE_S, workers=2)
        load.start()
        await asyncio.sleep(1.0)
        victim = mesh.processes[name]
        others = {n: p.pid for n, p in mesh.processes.items() if n != name}
        env = process_env(victim.pid)
        killed_at = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        port_closed_s = await asyncio.to_thread(refused_after_s, mesh.ports[name], killed_at)
        await asyncio.to_thread(victim.wait)
        await asyncio.sleep(2.0)  # requests meet the dead service
        if launcher_supervises():
            while not serving(mesh.ports[name]):
                assert time.monotonic() - killed_at < 120, f"{name} was not restarted in 120 s"
                await asyncio.sleep(0.2)
        else:
            await asyncio.to_thread(restart_by_hand, mesh, name, env, tmp_path)
        restarted_at = time.monotonic()
        recovery_s = await wait_for_full_success(call, DEADLINE_S, needed=10)
        recovered_at = time.monotonic()
        await asyncio.sleep(1.0)
        await load.stop()
    finally:
        await channel.close()

    outcomes = load.outcomes
    assert_no_hang(outcomes)
    assert_clear_failures(outcomes)
    during = [o for o in outcomes if killed_at <= o.ended <= restarted_at]
    failed = [o for o in during if o.code is not None]
    assert failed, f"no request failed while {name} was down: the load did not need it"
    first_error_s = min(o.ended for o in failed) - killed_at
    # The load keeps succeeding once the service is back: every request sent after the streak of
    # ten successes succeeded.
    after = load.since(recovered_at)
    assert after and all(o.code is None for o in after), [
        (o.code, o.details) for o in after if o.code is not None][:3]
    # Nothing else was restarted, and every service serves.
    assert {n: p.pid for n, p in mesh.processes.items() if n != name} == others
    assert all(serving(port, timeout_s=5) for port in mesh.ports.values())
    closed = "?" if port_closed_s is None else f"{port_closed_s * 1e3:.0f}"
    print(f"\n{name}: first error {first_error_s * 1e3:.0f} ms after the kill (its port refused "
          f"connections from {closed} ms); "
          f"{len(failed)}/{len(during)} requests failed while down "
          f"({sorted({o.code.name for o in failed})}); back to 100% "
          f"{recovery_s:.1f} s after the restart")


@needs_supervision
@pytest.mark.supervision
@pytest.mark.parametrize("name", (*BACKENDS, "orchestrator"))
async def test_the_launcher_restarts_a_killed_service_on_its_port(mesh, name):
    victim = mesh.processes[name]
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    await asyncio.to_thread(victim.wait)
    while not serving(mesh.ports[name]):
        assert time.monotonic() - killed_at < 120, f"{name} was not restarted in 120 s"
        await asyncio.sleep(0.2)
    channel = grpc.aio.insecure_channel(mesh.target)
    try:
        call = request_needing("llm" if name == "orchestrator" else name,
                               orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel))
        await wait_for_full_success(call, DEADLINE_S, needed=5)
    finally:
        await channel.close()
    print(f"\n{name}: serving again {time.monotonic() - killed_at:.1f} s after kill -9")
