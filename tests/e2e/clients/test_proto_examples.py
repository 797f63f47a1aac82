"""Every example value the protos' comments give is true of the running mesh.

The comments are read from protos/ (`for example "X"`, `e.g. "X"`, `Example ...: "X"`); each
example is keyed by the element it documents (a field, an enum value, an rpc). Examples of request
fields are sent to the real service and must be accepted (or, where the comment says so, refused
with the documented code); examples of response fields must look like what the service returns.
A new example in the protos fails `test_every_example_is_checked` until a check is added here.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import grpc
import pytest
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as mcts_pb
from mesh.mcts.v1 import mcts_service_pb2_grpc
from mesh.neural.v1 import neural_service_pb2 as neural_pb
from mesh.neural.v1 import neural_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.mesh_auth import with_token
from libs.puzzles import sudoku as sudoku_rules

MARKER = re.compile(r'(?:for example|e\.g\.|Example[^:"]*:)\s*((?:"[^"]*"(?:\s*(?:or|,)\s*)?)+)')
DECLARATION = re.compile(
    r"^\s*(?:(?P<kind>message|enum|service)\s+(?P<block>\w+)\s*\{"
    r"|rpc\s+(?P<rpc>\w+)\s*\("
    r"|(?:optional\s+|repeated\s+)?[\w.<>, ]+?\s+(?P<field>\w+)\s*=\s*\d+"
    r"|(?P<value>[A-Z][A-Z0-9_]*)\s*=\s*\d+)")


def proto_examples(protos_dir) -> dict[str, list[str]]:
    """{"package.Block.element": [example, ...]} for every example in the protos' comments."""
    found: dict[str, list[str]] = {}
    for path in sorted(protos_dir.rglob("*.proto")):
        text = path.read_text()
        package = re.search(r"^package\s+([\w.]+);", text, re.M).group(1)
        # One entry per open brace: the name of a message, enum or service, or None.
        stack: list[str | None] = []
        comment: list[str] = []
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("//"):
                comment.append(stripped[2:].strip())
                continue
            match = DECLARATION.match(line)
            if match and comment:
                name = next(match.group(g) for g in ("block", "rpc", "field", "value")
                            if match.group(g))
                values = [v for group in MARKER.findall(" ".join(comment))
                          for v in re.findall(r'"([^"]*)"', group)]
                if values:
                    owner = ".".join([package, *(b for b in stack if b)])
                    found[f"{owner}.{name}"] = values
            code = re.sub(r'"[^"]*"', "", line.split("//")[0])
            for char in code:
                if char == "{":
                    stack.append(match.group("block") if match and match.group("block") else None)
                    match = None
                elif char == "}":
                    stack.pop()
            comment = []
    return found


def _shape(example: str) -> re.Pattern:
    """The example with every run of digits generalised to \\d+, matched as a prefix."""
    return re.compile("".join(r"\d+" if part.isdigit() else re.escape(part)
                              for part in re.split(r"(\d+)", example)))


# --- the checks, one per documented element ---------------------------------------------------

def _sudoku_puzzle(mesh, example):
    with grpc.insecure_channel(mesh.target) as channel:
        reply = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel).SolveProblem(
            pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=example)), timeout=60)
    assert reply.sudoku.valid
    puzzle = sudoku_rules.parse_puzzle(example)
    check = sudoku_rules.check_solution(puzzle, sudoku_rules.parse_puzzle(reply.sudoku.solution))
    assert check.valid, check


def _rationale(mesh, example, data_dir):
    if example.startswith("visits"):
        request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                                         agents=[pb.AGENT_MCTS], simulations=2000)
    else:
        # Pons Test_L3_R1, second line: score +1 with 34 moves played, solved by the checker.
        moves = (data_dir / "connect4-pons" / "Test_L3_R1").read_text().splitlines()[1].split()[0]
        request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves=moves),
                                         agents=[pb.AGENT_CHECKER])
    with grpc.insecure_channel(mesh.target) as channel:
        reply = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel).SolveProblem(
            request, timeout=120)
    rationales = [vote.rationale for vote in reply.votes]
    assert any(_shape(example).match(r) for r in rationales), (example, rationales)


def _backend(mesh, name: str) -> grpc.Channel:
    """A channel to one of the mesh's backends, with the mesh token they require."""
    return with_token(grpc.insecure_channel(f"127.0.0.1:{mesh.ports[name]}"), mesh.token)


def _neural_models(mesh) -> list:
    with _backend(mesh, "neural") as channel:
        return list(neural_service_pb2_grpc.NeuralServiceStub(channel).ListModels(
            neural_pb.ListModelsRequest(), timeout=30).models)


def _model_name(mesh, example):
    assert example in {m.name for m in _neural_models(mesh)}


def _task(mesh, example):
    assert example in {m.task for m in _neural_models(mesh)}


def _architecture(mesh, example):
    assert example in {m.architecture for m in _neural_models(mesh)}


def _device(mesh, example):
    devices = {m.device for m in _neural_models(mesh)}
    # This machine has no GPU: "cuda:0" is checked for its shape against what torch names a device.
    assert example in devices or re.fullmatch(r"cuda:\d+", example), (example, devices)


def _evaluate_model(mesh, example):
    with _backend(mesh, "neural") as channel:
        reply = neural_service_pb2_grpc.NeuralServiceStub(channel).EvaluatePositions(
            neural_pb.EvaluatePositionsRequest(
                model=example, positions=[common_pb2.ConnectFourPosition(moves="44")]),
            timeout=30)
    assert reply.model.name == example and len(reply.evaluations[0].policy) == 7


def _evaluate_other_board(mesh, example):
    # The comment: FAILED_PRECONDITION naming the board when the named model plays another one.
    columns, rows = (int(n) for n in example.split("x"))
    position = common_pb2.ConnectFourPosition(
        moves="11", board=common_pb2.ConnectFourBoard(columns=columns, rows=rows))
    with _backend(mesh, "neural") as channel:
        with pytest.raises(grpc.RpcError) as error:
            neural_service_pb2_grpc.NeuralServiceStub(channel).EvaluatePositions(
                neural_pb.EvaluatePositionsRequest(model="connect4-pv", positions=[position]),
                timeout=30)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert example in error.value.details(), error.value.details()


def _solve_model(mesh, example):
    puzzle = ".4.635365.24.16.424....1.52..3.3...6"  # a held-out 6x6 Sudoku (README)
    with _backend(mesh, "neural") as channel:
        reply = neural_service_pb2_grpc.NeuralServiceStub(channel).Solve(
            neural_pb.SolveRequest(model=example, grid=puzzle), timeout=60)
    assert reply.model.name == example and len(reply.grid) == 36


def _reload_name(mesh, example):
    with _backend(mesh, "neural") as channel:
        reply = neural_service_pb2_grpc.NeuralServiceStub(channel).ReloadModel(
            neural_pb.ReloadModelRequest(name=example), timeout=60)
    assert reply.model.name == example


def _solve_not_reasoning(mesh, example):
    # The comment: FAILED_PRECONDITION when the model is not a reasoning model (for example ...).
    with _backend(mesh, "neural") as channel:
        with pytest.raises(grpc.RpcError) as error:
            neural_service_pb2_grpc.NeuralServiceStub(channel).Solve(
                neural_pb.SolveRequest(model=example, grid="." * 36), timeout=30)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def _search_model(mesh, example):
    with _backend(mesh, "mcts") as channel:
        reply = mcts_service_pb2_grpc.MctsServiceStub(channel).Search(mcts_pb.SearchRequest(
            game=mcts_pb.GAME_CONNECT_FOUR, connect_four=common_pb2.ConnectFourPosition(moves="44"),
            simulations=64, rule=mcts_pb.SELECTION_RULE_PUCT,
            evaluator=mcts_pb.LEAF_EVALUATOR_NEURAL, model=example), timeout=60)
    assert reply.statistics.simulations == 64
    assert 0 <= reply.best_action < 7


def _predict_route(mesh, example: str, model: str = "router-connect4"):
    with _backend(mesh, "neural") as channel:
        return neural_service_pb2_grpc.NeuralServiceStub(channel).PredictRoute(
            neural_pb.PredictRouteRequest(model=model,
                                          steps=[neural_pb.RoutingStep(features=[0.5] * 10)]),
            timeout=30)


def _router_model(mesh, example):
    reply = _predict_route(mesh, example, model=example)
    assert reply.model.name == example and reply.routes
    assert abs(sum(route.probability for route in reply.routes) - 1.0) < 1e-3


def _route_name(mesh, example):
    assert example in {route.route for route in _predict_route(mesh, example).routes}


def _provider(mesh, example):
    from services.llm.settings import LlmSettings

    names = set(typing.get_args(typing.get_args(
        LlmSettings.model_fields["fallback_order"].annotation)[0]))
    assert example in names, names


def _status_code_name(mesh, example):
    assert example in grpc.StatusCode.__members__, example


CHECKS = {
    "mesh.orchestrator.v1.AgentFailure.code": _status_code_name,
    "mesh.orchestrator.v1.SudokuProblem.puzzle": _sudoku_puzzle,
    "mesh.orchestrator.v1.AgentVote.rationale": _rationale,
    "mesh.orchestrator.v1.Agent.AGENT_HRM": _task,
    "mesh.neural.v1.NeuralService.Solve": _solve_not_reasoning,
    "mesh.neural.v1.EvaluatePositionsRequest.model": _evaluate_model,
    "mesh.neural.v1.NeuralService.EvaluatePositions": _evaluate_other_board,
    "mesh.neural.v1.SolveRequest.model": _solve_model,
    "mesh.neural.v1.ReloadModelRequest.name": _reload_name,
    "mesh.neural.v1.Model.name": _model_name,
    "mesh.neural.v1.Model.architecture": _architecture,
    "mesh.neural.v1.Model.device": _device,
    "mesh.neural.v1.Model.task": _task,
    "mesh.mcts.v1.SearchRequest.model": _search_model,
    "mesh.neural.v1.PredictRouteRequest.model": _router_model,
    "mesh.neural.v1.RouteProbability.route": _route_name,
    "mesh.llm.v1.ProviderAttempt.provider": _provider,
}


def test_every_example_is_checked(repo_root):
    examples = proto_examples(repo_root / "protos")
    assert "mesh.orchestrator.v1.SudokuProblem.puzzle" in examples  # the parser finds them
    assert set(examples) == set(CHECKS), (
        f"examples without a check: {sorted(set(examples) - set(CHECKS))}; "
        f"checks without an example: {sorted(set(CHECKS) - set(examples))}")


def _cases():
    protos = Path(__file__).resolve().parents[3] / "protos"
    return [(key, value) for key, values in sorted(proto_examples(protos).items())
            for value in values]


@pytest.mark.parametrize(("element", "example"), _cases())
def test_proto_example_holds(mesh, data_dir, element, example):
    check = CHECKS[element]
    if check is _rationale:
        check(mesh, example, data_dir)
    else:
        check(mesh, example)
