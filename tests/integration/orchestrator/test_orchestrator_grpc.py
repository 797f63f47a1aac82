"""The real orchestrator server on port 0 against small fake downstream services with obvious
answers."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from mesh.retrieval.v1 import retrieval_service_pb2, retrieval_service_pb2_grpc

from libs.connect4 import Position
from libs.puzzles.sudoku import check_solution, parse_puzzle
from libs.rest import RestSettings, serve_rest
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.main import Wiring, build_servicers
from services.orchestrator.settings import OrchestratorSettings

SLOW_MOVES = "1"  # the fake mcts searches this position for 30 s


class FakeMcts(mcts_service_pb2_grpc.MctsServiceServicer):
    """Prefers column 4 when playable (60% of the visits), else the first playable column."""

    def __init__(self) -> None:
        self.requests: list[mcts_service_pb2.SearchRequest] = []

    async def Search(self, request, context):
        self.requests.append(request)
        if request.connect_four.moves == SLOW_MOVES:
            await asyncio.sleep(30)
        legal = [c + 1 for c in Position.from_moves(request.connect_four.moves).legal_columns()]
        best = 4 if 4 in legal else legal[0]
        total = request.simulations
        others = [c for c in legal if c != best]
        share = (total - int(0.6 * total)) // max(1, len(others))
        actions = [common_pb2.ActionStatistics(action=c, visits=int(0.6 * total) if c == best
                                               else share, value=0.1, prior=1 / len(legal))
                   for c in legal]
        return mcts_service_pb2.SearchResponse(
            best_action=best,
            statistics=common_pb2.SearchStatistics(
                simulations=total, simulations_per_second=1e5, tree_size=total, max_depth=9,
                root_value=0.1, actions=actions, elapsed_ms=1.0, seed=request.seed, threads=1))


class FakeNeural(neural_service_pb2_grpc.NeuralServiceServicer):
    """Half the policy on column 4, value 0.2; its registry holds no HRM or TRM model."""

    async def ListModels(self, request, context):
        return neural_service_pb2.ListModelsResponse(models=[neural_service_pb2.Model(
            name="connect4-pv", version="abc123", architecture="connect4_pv")])

    async def EvaluatePositions(self, request, context):
        policy = [0.5 / 6] * 7
        policy[3] = 0.5
        return neural_service_pb2.EvaluatePositionsResponse(
            evaluations=[neural_service_pb2.PositionEvaluation(policy=policy, value=0.2)
                         for _ in request.positions],
            model=neural_service_pb2.Model(name="connect4-pv", version="abc123"))


class FakeRetrieval(retrieval_service_pb2_grpc.RetrievalServiceServicer):
    def __init__(self) -> None:
        self.searches: list = []

    async def SearchDocuments(self, request, context):
        self.searches.append(request)
        return retrieval_service_pb2.SearchDocumentsResponse(results=[
            retrieval_service_pb2.SearchResult(chunk_id="d1#0", document_id="d1", title="Cells",
                                               text="Cells divide by mitosis.", source="a.txt",
                                               score=1.7, cosine_similarity=0.625),
            retrieval_service_pb2.SearchResult(chunk_id="d2#0", document_id="d2", title="Genes",
                                               text="Genes code proteins.", source="b.txt",
                                               score=0.5, cosine_similarity=0.375),
        ][: request.top_k])

    async def IngestDocuments(self, request, context):
        return retrieval_service_pb2.IngestDocumentsResponse(
            document_count=len(request.documents), chunk_count=len(request.documents))

    async def StreamIngestDocuments(self, request_iterator, context):
        ids = [d.id async for request in request_iterator for d in request.documents]
        return retrieval_service_pb2.StreamIngestDocumentsResponse(
            document_count=len(ids) - 1, chunk_count=2 * len(ids), skipped_document_count=1)


class FakeLlm(llm_service_pb2_grpc.LlmServiceServicer):
    """Answers with the first passage, citing it, like an extractive provider."""

    async def Generate(self, request, context):
        first = request.context[0] if request.context else None
        text = f"{first.text} [{first.source}]" if first else "No context was given."
        return llm_service_pb2.GenerateResponse(
            text=text, provider="offline", model="extractive",
            offline=True, usage=llm_service_pb2.Usage(prompt_tokens=10, completion_tokens=5))


DOWNSTREAM = {
    "mcts": (mcts_service_pb2_grpc.add_MctsServiceServicer_to_server, FakeMcts,
             "mesh.mcts.v1.MctsService"),
    "neural": (neural_service_pb2_grpc.add_NeuralServiceServicer_to_server, FakeNeural,
               "mesh.neural.v1.NeuralService"),
    "retrieval": (retrieval_service_pb2_grpc.add_RetrievalServiceServicer_to_server,
                  FakeRetrieval, "mesh.retrieval.v1.RetrievalService"),
    "llm": (llm_service_pb2_grpc.add_LlmServiceServicer_to_server, FakeLlm,
            "mesh.llm.v1.LlmService"),
}


class Mesh:
    def __init__(self, downstream, orchestrator, stub, fakes) -> None:
        self.downstream = downstream
        self.orchestrator = orchestrator
        self.stub = stub
        self.fakes = fakes


@pytest.fixture
async def mesh():
    downstream = {}
    fakes = {}
    for name, (add, cls, service_name) in DOWNSTREAM.items():
        fakes[name] = cls()
        downstream[name] = await start_server(f"fake-{name}", ServiceSettings(port=0),
                                              [Servicer(add, fakes[name], service_name)])
    settings = OrchestratorSettings(
        port=0, rest_port=-1, checker_max_nodes=1_000, default_simulations=100,
        **{f"{name}_target": f"127.0.0.1:{server.port}" for name, server in downstream.items()})
    wiring = Wiring(settings)
    servicers, ready = await build_servicers(settings, wiring)
    orchestrator = await start_server("orchestrator", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{orchestrator.port}")
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    yield Mesh(downstream, orchestrator, stub, fakes)
    await channel.close()
    await orchestrator.stop(0)
    await wiring.aclose()
    for server in downstream.values():
        await server.stop(0)


def solve_request(moves: str, **fields) -> pb.SolveProblemRequest:
    return pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves=moves),
                                  **fields)


async def assert_still_serving(stub) -> None:
    response = await stub.SolveProblem(solve_request("44"), timeout=30)
    assert response.connect_four.column == 4


async def test_connect_four_solve_returns_a_legal_move_with_votes_and_statistics(mesh):
    response = await mesh.stub.SolveProblem(solve_request("", simulations=300, seed=3,
                                                          thread_id="t-1"), timeout=30)
    assert response.connect_four.column == 4
    assert response.consensus_reached and response.iterations == 1
    assert list(response.agents) == [pb.AGENT_MCTS, pb.AGENT_NEURAL]  # the checker abstained
    assert {vote.agent for vote in response.votes} == {pb.AGENT_MCTS, pb.AGENT_NEURAL}
    mcts_vote = next(v for v in response.votes if v.agent == pb.AGENT_MCTS)
    assert mcts_vote.proposal == "4" and mcts_vote.confidence == pytest.approx(0.6)
    assert mcts_vote.rationale == "visits 180/300" and mcts_vote.iteration == 1
    assert response.search_statistics.simulations == 300
    assert response.search_statistics.seed == 3
    assert response.connect_four.value == pytest.approx(0.1)
    assert response.connect_four.outcome == pb.OUTCOME_UNSPECIFIED
    assert response.thread_id == "t-1"
    assert {t.step for t in response.timings} >= {"route", "agents", "aggregate", "consensus",
                                                   "synthesize"}


async def test_disagreement_continues_the_search_to_double_the_simulations(mesh):
    # Column 4 is full: mcts falls back to column 1, the network's argmax over legal columns is
    # column 3 (ties broken to the centre), so they disagree and mcts searches again: 200 and then
    # 400 simulations in all, each later round adding only the missing ones with its own seed.
    moves = "444444"
    response = await mesh.stub.SolveProblem(solve_request(moves, simulations=100, seed=7,
                                                          max_iterations=3), timeout=30)
    assert str(response.connect_four.column) in {"1", "3"}
    assert response.iterations == 3 and not response.consensus_reached
    requests = mesh.fakes["mcts"].requests
    assert [r.simulations for r in requests] == [100, 100, 200]
    assert [r.seed for r in requests] == [7, 8, 9]
    statistics = response.search_statistics
    assert statistics.simulations == 400 and statistics.seed == 7
    visits = {a.action: a.visits for a in statistics.actions}
    assert sum(visits.values()) == 400 and visits[1] == 60 + 60 + 120


async def test_checker_solves_a_position_near_the_end(mesh):
    # An immediate win: the checker proves it; it wins the tally.
    response = await mesh.stub.SolveProblem(solve_request("121212"), timeout=30)
    assert response.connect_four.column == 1
    assert response.connect_four.outcome == pb.OUTCOME_WIN
    assert response.connect_four.score == (43 - 6) // 2
    assert response.confidence == 1.0 and response.consensus_reached
    assert pb.AGENT_CHECKER in response.agents


async def test_text_query_returns_the_answer_with_sources(mesh):
    response = await mesh.stub.AnswerQuery(pb.AnswerQueryRequest(query="How do cells divide?",
                                                                 top_k=2), timeout=30)
    assert response.answer == "Cells divide by mitosis. [d1]"
    assert [s.document_id for s in response.sources] == ["d1", "d2"]
    assert response.sources[0].title == "Cells" and response.sources[0].source == "a.txt"
    assert response.provider == "offline" and response.offline
    assert list(response.agents) == [pb.AGENT_RETRIEVAL, pb.AGENT_LLM]
    # The best passage's cosine to the query (exact in float32), not its fused score of 1.7.
    assert response.confidence == 0.625
    assert response.iterations == 1


async def test_ingest_is_forwarded(mesh):
    response = await mesh.stub.IngestDocuments(pb.IngestDocumentsRequest(
        collection="notes", documents=[common_pb2.Document(id="a", text="x")]), timeout=30)
    assert response.document_count == 1


async def test_stream_ingest_is_forwarded_message_by_message(mesh):
    async def requests():
        for ids in (["a", "b"], ["c"]):
            yield pb.StreamIngestDocumentsRequest(
                collection="notes", documents=[common_pb2.Document(id=i, text="x") for i in ids])

    response = await mesh.stub.StreamIngestDocuments(requests(), timeout=30)
    assert (response.document_count, response.chunk_count,
            response.skipped_document_count) == (2, 6, 1)


async def test_query_passes_the_search_mode_and_fusion_to_retrieval(mesh):
    await mesh.stub.AnswerQuery(pb.AnswerQueryRequest(
        query="How do cells divide?", search_mode=common_pb2.SEARCH_MODE_SPARSE,
        fusion=common_pb2.FUSION_METHOD_RRF), timeout=30)
    search = mesh.fakes["retrieval"].searches[-1]
    assert (search.mode, search.fusion) == (common_pb2.SEARCH_MODE_SPARSE,
                                            common_pb2.FUSION_METHOD_RRF)


@pytest.mark.parametrize(("call", "request_", "field"), [
    ("SolveProblem", solve_request("18"), "connect_four.moves"),
    ("SolveProblem", solve_request("4", simulations=0), "simulations"),
    ("SolveProblem", solve_request("4", thread_id="bad id"), "thread_id"),
    ("AnswerQuery", pb.AnswerQueryRequest(query="x" * 10_001), "query"),
    ("AnswerQuery", pb.AnswerQueryRequest(query="q", mcts_iterations=10_001), "mcts_iterations"),
    ("AnswerQuery", pb.AnswerQueryRequest(query="q", search_mode=9), "search_mode"),
    ("AnswerQuery", pb.AnswerQueryRequest(query="q", fusion=9), "fusion"),
])
async def test_bad_fields_give_invalid_argument_naming_the_field(mesh, call, request_, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(mesh.stub, call)(request_, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert bad.field_violations[0].field == field
    await assert_still_serving(mesh.stub)


@pytest.mark.parametrize("role", [pb.TEXT_ROLE_DECOMPOSE, pb.TEXT_ROLE_REFINE])
async def test_a_role_with_only_the_offline_provider_gives_failed_precondition(mesh, role):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.stub.AnswerQuery(pb.AnswerQueryRequest(query="q", role=role), timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "needs a language model" in caught.value.details()


async def test_a_search_the_mcts_service_fails_answers_the_passages_alone(mesh):
    # The fake mcts service has no SearchExternal: the search fails before any leaf.
    response = await mesh.stub.AnswerQuery(pb.AnswerQueryRequest(query="q", mcts_iterations=5),
                                           timeout=30)
    assert response.passages_only and response.answer == ""
    assert response.role == pb.TEXT_ROLE_SEARCH and len(response.sources) > 0
    assert [(f.agent, f.code) for f in response.failures] == [(pb.AGENT_MCTS, "UNAVAILABLE")]


async def test_stopped_downstream_gives_unavailable(mesh):
    await mesh.downstream["mcts"].stop(0)
    await mesh.downstream["neural"].stop(0)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.stub.SolveProblem(solve_request("", agents=[pb.AGENT_MCTS, pb.AGENT_NEURAL]),
                                     timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    await mesh.downstream["retrieval"].stop(0)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.stub.AnswerQuery(pb.AnswerQueryRequest(query="q"), timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    # Still serving: the checker alone answers a position it can prove.
    response = await mesh.stub.SolveProblem(solve_request("121212"), timeout=30)
    assert response.connect_four.column == 1


async def test_one_agent_down_the_others_answer(mesh):
    await mesh.downstream["neural"].stop(0)
    response = await mesh.stub.SolveProblem(solve_request("44"), timeout=30)
    assert response.connect_four.column == 4
    assert list(response.agents) == [pb.AGENT_MCTS]


async def test_tiny_deadline_gives_deadline_exceeded_and_the_server_keeps_serving(mesh):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.stub.SolveProblem(solve_request(SLOW_MOVES, agents=[pb.AGENT_MCTS]),
                                     timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await assert_still_serving(mesh.stub)


# Sudoku and mazes: the exact solver proposes, the checker verifies.

NORVIG_TOP95_FIRST = ("4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2....."
                      "1.4......")
MAZE = "#########\n#S  #   #\n# # # # #\n# #   #G#\n#########"
MAZE_SHORTEST = "#########\n#Soo#ooo#\n# #o#o#o#\n# #ooo#G#\n#########"


def sudoku_request(puzzle: str, **fields) -> pb.SolveProblemRequest:
    return pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=puzzle), **fields)


def field_of(error: grpc.aio.AioRpcError) -> str:
    bad = error_details_pb2.BadRequest()
    assert rpc_status.from_call(error).details[0].Unpack(bad)
    return bad.field_violations[0].field


async def test_sudoku_solve_returns_a_valid_solution_with_votes_and_agents(mesh):
    response = await mesh.stub.SolveProblem(sudoku_request(NORVIG_TOP95_FIRST, thread_id="s-1"),
                                            timeout=30)
    solution = response.sudoku.solution
    assert response.sudoku.valid and len(solution) == 81
    assert check_solution(parse_puzzle(NORVIG_TOP95_FIRST), parse_puzzle(solution)).valid
    assert list(response.agents) == [pb.AGENT_SOLVER, pb.AGENT_CHECKER]
    assert response.answered_by == pb.AGENT_SOLVER
    assert [(v.agent, v.proposal) for v in response.votes] == [
        (pb.AGENT_SOLVER, solution), (pb.AGENT_CHECKER, solution)]
    assert response.votes[1].rationale.startswith("solver's answer is valid")
    assert response.confidence == 1.0 and response.consensus_reached
    assert response.iterations == 1 and response.thread_id == "s-1"
    assert "verify" in {t.step for t in response.timings}
    assert not mesh.fakes["mcts"].requests  # no game agent took part


async def test_six_by_six_sudoku_with_explicit_boxes(mesh):
    puzzle = "1.3..." "......" "......" "......" "......" ".....2"
    response = await mesh.stub.SolveProblem(pb.SolveProblemRequest(
        sudoku=pb.SudokuProblem(puzzle=puzzle, box_rows=2, box_cols=3)), timeout=30)
    solution = response.sudoku.solution
    assert response.sudoku.valid and solution[0] == "1" and solution[-1] == "2"
    rows = [solution[i:i + 6] for i in range(0, 36, 6)]
    assert all(sorted(row) == list("123456") for row in rows)
    assert all(sorted(col) == list("123456") for col in zip(*rows, strict=True))


async def test_maze_solve_returns_an_optimal_path(mesh):
    response = await mesh.stub.SolveProblem(pb.SolveProblemRequest(
        maze=pb.MazeProblem(grid=MAZE)), timeout=30)
    assert response.maze.grid == MAZE_SHORTEST
    assert response.maze.path_length == 12 and response.maze.optimal
    assert list(response.agents) == [pb.AGENT_SOLVER, pb.AGENT_CHECKER]
    assert response.votes[1].rationale == "solver's answer is optimal: 12 steps"


@pytest.mark.parametrize(("request_", "field", "words"), [
    (sudoku_request("." * 80), "sudoku.puzzle", "80 characters"),
    (sudoku_request("." * 40 + "x" + "." * 40), "sudoku.puzzle", "'x' is not"),
    (sudoku_request("." * 49), "sudoku.puzzle", "N = 7 is not supported"),
    (sudoku_request("5" + "." * 7 + "5" + "." * 72), "sudoku.puzzle",
     "contradictory givens: digit 5 twice in row 1"),
    (sudoku_request("12345678." + "." * 8 + "9" + "." * 63), "sudoku.puzzle",
     "has no solution"),
    (pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle="." * 36, box_rows=3, box_cols=3)),
     "sudoku.box_rows", "do not tile"),
    (pb.SolveProblemRequest(maze=pb.MazeProblem(grid="#####\n#S G#\n####")), "maze.grid",
     "ragged rows"),
    (pb.SolveProblemRequest(maze=pb.MazeProblem(grid="#####\n#S*G#\n#####")), "maze.grid",
     "'*' is not"),
    (pb.SolveProblemRequest(maze=pb.MazeProblem(grid="#####\n#SSG#\n#####")), "maze.grid",
     "has 2 S"),
    (pb.SolveProblemRequest(maze=pb.MazeProblem(grid="#####\n#S  #\n#####")), "maze.grid",
     "has 0 G"),
    (sudoku_request(NORVIG_TOP95_FIRST, agents=[pb.AGENT_MCTS]), "agents", "does not apply"),
    (pb.SolveProblemRequest(maze=pb.MazeProblem(grid=MAZE), agents=[pb.AGENT_CHECKER]),
     "agents", "only verifies"),
])
async def test_bad_puzzles_give_invalid_argument_naming_the_field(mesh, request_, field, words):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.stub.SolveProblem(request_, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(caught.value) == field
    assert words in caught.value.details()
    await assert_still_serving(mesh.stub)


async def test_hrm_and_trm_without_a_model_for_the_grid_are_failed_precondition(mesh):
    for agent, name in ((pb.AGENT_HRM, "hrm"), (pb.AGENT_TRM, "trm")):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await mesh.stub.SolveProblem(sudoku_request(NORVIG_TOP95_FIRST,
                                                        agents=[agent, pb.AGENT_SOLVER]),
                                         timeout=30)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"no {name} model for sudoku-9x9" in caught.value.details()


async def test_rest_front_solves_a_sudoku_and_maps_bad_puzzles_to_400(mesh):
    app = build_rest_app(mesh.orchestrator.in_process,
                         RestSettings(port=0, default_deadline_s=30.0))
    rest = await serve_rest(app, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}",
                                     timeout=30) as client:
            reply = await client.post("/v1/problems:solve",
                                      json={"sudoku": {"puzzle": NORVIG_TOP95_FIRST}})
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["sudoku"]["valid"] is True and len(body["sudoku"]["solution"]) == 81
            assert body["agents"] == ["AGENT_SOLVER", "AGENT_CHECKER"]
            assert "connectFour" not in body
            reply = await client.post("/v1/problems:solve", json={"maze": {"grid": MAZE}})
            assert reply.status_code == 200, reply.text
            assert reply.json()["maze"] == {"grid": MAZE_SHORTEST, "pathLength": 12,
                                            "optimal": True}
            reply = await client.post("/v1/problems:solve",
                                      json={"sudoku": {"puzzle": "5.......5" + "." * 72}})
            assert reply.status_code == 400
            violation = reply.json()["details"][0]["fieldViolations"][0]
            assert violation["field"] == "sudoku.puzzle"
            assert violation["description"].startswith("contradictory givens: digit 5 twice")
    finally:
        await rest.stop()
