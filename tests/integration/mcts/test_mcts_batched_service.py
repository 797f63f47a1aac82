"""The mcts service's batched searches over real grpc.aio servers on port 0: Search with rule PUCT
and Gumbel (rollout leaves, and neural leaves from the neural service serving the committed
models/connect4-pv checkpoint), and the SearchExternal stream with a caller whose answers make the
right action obvious, malformed replies, and a caller that stops answering."""

from __future__ import annotations

import asyncio
import math
import shutil
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.server import start_server
from services.mcts.main import build_servicers
from services.mcts.settings import MctsSettings
from services.neural.main import build_servicers as build_neural_servicers
from services.neural.settings import NeuralSettings

MODELS = Path(__file__).resolve().parents[3] / "models"
GUMBEL = mcts_service_pb2.SELECTION_RULE_GUMBEL
PUCT = mcts_service_pb2.SELECTION_RULE_PUCT


def field_of(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    raise AssertionError(f"no BadRequest detail in {status}")


@pytest.fixture
async def neural_target(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(MODELS / "connect4-pv", models / "connect4-pv")
    settings = NeuralSettings(port=0, models_dir=models, device="cpu")
    servicers, ready = await build_neural_servicers(settings)
    server = await start_server("neural", settings, servicers, ready)
    yield f"127.0.0.1:{server.port}"
    await server.stop(0)


@pytest.fixture
async def mcts():
    started = []

    async def start(neural_target: str = "127.0.0.1:1", **fields):
        settings = MctsSettings(port=0, default_simulations=500, neural_target=neural_target,
                                **fields)
        neural_channel = grpc.aio.insecure_channel(neural_target)
        servicers, ready = await build_servicers(settings, neural_channel)
        server = await start_server("mcts", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        started.append((server, channel, neural_channel))
        return mcts_service_pb2_grpc.MctsServiceStub(channel)

    yield start
    for server, channel, neural_channel in started:
        await channel.close()
        await neural_channel.close()
        await server.stop(0)


def search_request(moves: str, **fields) -> mcts_service_pb2.SearchRequest:
    return mcts_service_pb2.SearchRequest(
        game=mcts_service_pb2.GAME_CONNECT_FOUR,
        connect_four=common_pb2.ConnectFourPosition(moves=moves), **fields)


@pytest.mark.parametrize("rule", [PUCT, GUMBEL])
async def test_puct_and_gumbel_with_rollouts_find_the_immediate_win(mcts, rule):
    stub = await mcts()
    # Gumbel samples (its Gumbel noise can outweigh a small q gap at 400 simulations); seed 0
    # is one whose draw lets the win through, and the search is deterministic for a seed.
    # exploration is c_puct, which Gumbel does not use (refused with it).
    request = search_request("112233", rule=rule, simulations=400, batch_size=8, seed=0,
                             **({"exploration": 2.0} if rule == PUCT else {}))
    reply = await stub.Search(request, timeout=60)
    assert reply.best_action == 4
    stats = reply.statistics
    assert next(a for a in stats.actions if a.action == 4).value == 1.0
    assert stats.simulations == 400 and stats.threads == 1 and stats.seed == 0
    assert [a.action for a in stats.actions] == [1, 2, 3, 4, 5, 6, 7]
    assert sum(a.visits for a in stats.actions) == 400
    assert stats.evaluations >= 1 and stats.batches >= 2
    assert stats.batch_selection_ms > 0 and stats.evaluation_ms > 0 and stats.batch_backup_ms > 0
    again = await stub.Search(request, timeout=60)
    assert [a.visits for a in again.statistics.actions] == [a.visits for a in stats.actions]


async def test_bad_batched_requests_name_the_field(mcts):
    stub = await mcts()
    cases = [
        (dict(rule=PUCT, batch_size=0), "batch_size"),
        (dict(rule=PUCT, batch_size=5000), "batch_size"),
        (dict(rule=GUMBEL, virtual_loss=-1.0), "virtual_loss"),
        (dict(rule=PUCT, threads=2), "threads"),
        (dict(rule=GUMBEL, gumbel_num_considered=0), "gumbel_num_considered"),
        (dict(rule=PUCT, gumbel_num_considered=4), "gumbel_num_considered"),
        (dict(rule=GUMBEL, exploration=2.0), "exploration"),
        (dict(rule=9), "rule"),
        (dict(rule=PUCT, evaluator=7), "evaluator"),
    ]
    for fields, name in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Search(search_request("", simulations=10, **fields), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_of(caught.value) == name


async def test_options_the_uct_rule_would_ignore_are_refused(mcts):
    """Under the default rule a neural evaluator, a model or a batch size would be silently
    ignored (the search runs rollouts): each is INVALID_ARGUMENT naming the field."""
    stub = await mcts()
    neural = mcts_service_pb2.LEAF_EVALUATOR_NEURAL
    cases = [
        (dict(evaluator=neural), "evaluator"),
        (dict(evaluator=neural, model="connect4-pv"), "evaluator"),
        (dict(model="bogus"), "model"),
        (dict(rule=PUCT, evaluator=neural, model="../../etc/passwd"), "model"),
        (dict(rule=PUCT, model="connect4-pv"), "model"),
        (dict(batch_size=-1), "batch_size"),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=10**6), "batch_size"),
        (dict(rule=PUCT, evaluator=neural, batch_size=10**6), "batch_size"),
        (dict(batch_size=8), "batch_size"),
        (dict(virtual_loss=1.0), "virtual_loss"),
        (dict(gumbel_num_considered=4), "gumbel_num_considered"),
        (dict(evaluator=7), "evaluator"),
    ]
    for fields, name in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Search(search_request("", simulations=10, **fields), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
        assert field_of(caught.value) == name, fields
    # Explicit rollouts under UCT stay valid.
    reply = await stub.Search(search_request(
        "", simulations=10, evaluator=mcts_service_pb2.LEAF_EVALUATOR_ROLLOUT), timeout=30)
    assert reply.statistics.simulations == 10


async def test_neural_leaves_come_from_the_neural_service(mcts, neural_target):
    stub = await mcts(neural_target)
    reply = await stub.Search(search_request(
        "112233", rule=PUCT, evaluator=mcts_service_pb2.LEAF_EVALUATOR_NEURAL,
        model="connect4-pv", simulations=200, batch_size=8), timeout=60)
    assert reply.best_action == 4
    stats = reply.statistics
    assert stats.simulations == 200 and stats.evaluations > 1
    # Priors come from the network (not uniform) and sum to 1 over the legal columns.
    priors = [a.prior for a in stats.actions]
    assert math.isclose(sum(priors), 1.0, rel_tol=1e-5) and len(set(priors)) > 1
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(search_request(
            "", rule=GUMBEL, evaluator=mcts_service_pb2.LEAF_EVALUATOR_NEURAL,
            model="no-such-model", simulations=10), timeout=30)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def external_settings(**fields) -> mcts_service_pb2.SearchExternalRequest:
    return mcts_service_pb2.SearchExternalRequest(
        settings=mcts_service_pb2.ExternalSearchSettings(**fields))


def obvious_answers(batch: mcts_service_pb2.LeafBatch, num_actions: int, winning: int
                    ) -> mcts_service_pb2.SearchExternalRequest:
    """Uniform priors and value 0 everywhere, except that root action `winning` ends the game won
    by the player who took it (value -1 for the player to move at that leaf)."""
    leaves = []
    for leaf in batch.leaves:
        if list(leaf.path[:1]) == [winning]:
            leaves.append(mcts_service_pb2.LeafEvaluation(value=-1.0, terminal=True))
        else:
            leaves.append(mcts_service_pb2.LeafEvaluation(
                priors=[1.0 / num_actions] * num_actions, value=0.0))
    return mcts_service_pb2.SearchExternalRequest(evaluations=mcts_service_pb2.LeafEvaluations(
        batch_id=batch.batch_id, leaves=leaves))


@pytest.mark.parametrize("rule", [PUCT, GUMBEL])
async def test_external_search_finds_the_obvious_action(mcts, rule):
    stub = await mcts()
    call = stub.SearchExternal(timeout=60)
    await call.write(external_settings(num_actions=5, simulations=60, batch_size=4, rule=rule,
                                       seed=2))
    batches = 0
    while True:
        response = await call.read()
        if response.WhichOneof("message") == "result":
            break
        assert response.batch.batch_id == batches
        if batches == 0:
            assert [list(leaf.path) for leaf in response.batch.leaves] == [[]]
        batches += 1
        await call.write(obvious_answers(response.batch, 5, winning=3))
    await call.done_writing()
    result = response.result
    assert result.best_action == 3
    assert max(range(5), key=lambda a: result.policy[a]) == 3
    stats = result.statistics
    assert stats.simulations == 60 and stats.batches == batches
    assert [a.action for a in stats.actions] == [0, 1, 2, 3, 4]
    assert next(a for a in stats.actions if a.action == 3).value == 1.0


async def test_malformed_replies_are_invalid_argument_naming_the_field(mcts):
    stub = await mcts()
    ok = mcts_service_pb2.LeafEvaluation(priors=[0.5, 0.5, 0.0], value=0.0)

    def reply(batch_id=0, leaves=None):
        return mcts_service_pb2.SearchExternalRequest(evaluations=mcts_service_pb2.LeafEvaluations(
            batch_id=batch_id, leaves=[ok] if leaves is None else leaves))

    cases = [
        (reply(batch_id=5), "evaluations.batch_id"),
        (reply(leaves=[ok, ok]), "evaluations.leaves"),
        (reply(leaves=[mcts_service_pb2.LeafEvaluation(priors=[1.0], value=0.0)]),
         "evaluations.leaves[0].priors"),
        (reply(leaves=[mcts_service_pb2.LeafEvaluation(priors=[1, 1, 1], value=math.nan)]),
         "evaluations.leaves[0].value"),
        (reply(leaves=[mcts_service_pb2.LeafEvaluation(priors=[1, 1, 1], value=1.5)]),
         "evaluations.leaves[0].value"),
        (reply(leaves=[mcts_service_pb2.LeafEvaluation(priors=[0, 0, 0], value=0.0)]),
         "evaluations.leaves[0].priors"),
        (reply(leaves=[mcts_service_pb2.LeafEvaluation(priors=[1, -1, 1], value=0.0)]),
         "evaluations.leaves[0].priors"),
        (external_settings(num_actions=3, simulations=5), "evaluations"),
    ]
    for bad, name in cases:
        call = stub.SearchExternal(timeout=30)
        await call.write(external_settings(num_actions=3, simulations=5))
        first = await call.read()
        assert first.batch.batch_id == 0
        await call.write(bad)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_of(caught.value) == name


async def test_bad_settings_are_invalid_argument(mcts):
    stub = await mcts()
    cases = [
        (external_settings(num_actions=0, simulations=5), "settings.num_actions"),
        (external_settings(num_actions=3, simulations=0), "settings.simulations"),
        (external_settings(num_actions=3, simulations=5, batch_size=0), "settings.batch_size"),
        (external_settings(num_actions=3, simulations=5, rule=mcts_service_pb2.SELECTION_RULE_UCT),
         "settings.rule"),
        (external_settings(num_actions=3, simulations=5, players=3), "settings.players"),
        # max_nodes below 8, or below num_actions + 1 (the root and its children).
        (external_settings(num_actions=3, simulations=5, max_nodes=7), "settings.max_nodes"),
        (external_settings(num_actions=20, simulations=5, max_nodes=20), "settings.max_nodes"),
        # Options the rule would ignore are refused as Search refuses them.
        (external_settings(num_actions=3, simulations=5, gumbel_num_considered=2),
         "settings.gumbel_num_considered"),
        (external_settings(num_actions=3, simulations=5, rule=GUMBEL, dirichlet_alpha=0.3),
         "settings.dirichlet_alpha"),
        (external_settings(num_actions=3, simulations=5, rule=GUMBEL, temperature=1.0),
         "settings.temperature"),
        (external_settings(num_actions=3, simulations=5, dirichlet_epsilon=0.5),
         "settings.dirichlet_epsilon"),
        (external_settings(num_actions=3, simulations=5, rule=GUMBEL, c_puct=2.0),
         "settings.c_puct"),
        (mcts_service_pb2.SearchExternalRequest(
            evaluations=mcts_service_pb2.LeafEvaluations(batch_id=0)), "settings"),
    ]
    for first, name in cases:
        call = stub.SearchExternal(timeout=30)
        await call.write(first)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_of(caught.value) == name


async def test_a_caller_that_stops_answering_ends_at_its_deadline(mcts):
    stub = await mcts()
    call = stub.SearchExternal(timeout=1.0)
    await call.write(external_settings(num_actions=3, simulations=50))
    first = await call.read()
    assert first.batch.batch_id == 0
    # No answer: the search ends at the deadline and sends no result.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_without_a_deadline_the_service_reply_timeout_ends_the_search(mcts):
    stub = await mcts(external_reply_timeout_s=0.3)
    call = stub.SearchExternal()
    await call.write(external_settings(num_actions=3, simulations=50))
    await call.read()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_service_tree_too_small_for_the_actions_names_num_actions(mcts):
    stub = await mcts(max_tree_nodes=8)
    call = stub.SearchExternal(timeout=30)
    await call.write(external_settings(num_actions=20, simulations=5))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(caught.value) == "settings.num_actions"


async def test_the_reply_timeout_covers_a_stream_that_never_sends_settings(mcts):
    stub = await mcts(external_reply_timeout_s=0.3)
    call = stub.SearchExternal()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_deadline_replaces_the_reply_timeout(mcts):
    """With a deadline set, a caller slower than the service's reply timeout still finishes."""
    stub = await mcts(external_reply_timeout_s=0.05)
    call = stub.SearchExternal(timeout=60)
    await call.write(external_settings(num_actions=3, simulations=2))
    while (response := await call.read()).WhichOneof("message") == "batch":
        # Wait past the reply timeout on a state (the timeout's own span elapsing), not a sleep.
        waited = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, waited.set)
        await waited.wait()
        await call.write(obvious_answers(response.batch, 3, winning=1))
    assert response.result.best_action == 1


async def test_half_closing_before_answering_is_invalid_argument(mcts):
    stub = await mcts()
    call = stub.SearchExternal(timeout=30)
    await call.write(external_settings(num_actions=3, simulations=5))
    await call.read()
    await call.done_writing()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(caught.value) == "evaluations"


@pytest.mark.parametrize("priors, name", [([], None), ([0.0, 0.0, 0.0], None),
                                          ([1.0], "evaluations.leaves[0].priors"),
                                          ([1.0, math.inf, 0.0], "evaluations.leaves[0].priors")])
async def test_a_terminal_leaf_takes_no_priors_or_num_actions_finite_ones(mcts, priors, name):
    stub = await mcts()
    call = stub.SearchExternal(timeout=30)
    await call.write(external_settings(num_actions=3, simulations=5))
    await call.read()
    await call.write(mcts_service_pb2.SearchExternalRequest(
        evaluations=mcts_service_pb2.LeafEvaluations(batch_id=0, leaves=[
            mcts_service_pb2.LeafEvaluation(priors=priors, value=1.0, terminal=True)])))
    if name is None:
        # A terminal root: the descents all end on it; nothing more to evaluate.
        result = (await call.read()).result
        assert result.best_action == -1 and result.statistics.tree_size == 1
        assert result.statistics.simulations == 5 and result.statistics.evaluations == 1
        return
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(caught.value) == name


async def test_an_unreachable_neural_service_is_unavailable(mcts):
    stub = await mcts("127.0.0.1:1")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(search_request(
            "", rule=PUCT, evaluator=mcts_service_pb2.LEAF_EVALUATOR_NEURAL, simulations=10),
            timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
