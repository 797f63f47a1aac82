"""Solve and ReloadModel on a real grpc.aio neural server on port 0, serving a TRM checkpoint
written by the trainer itself (`training.reasoning.trainer.train`, two steps on 6x6
Sudoku) beside a Connect Four network: the served rates equal `evaluate()` on the same held-out
puzzles in both halting modes, bad input is INVALID_ARGUMENT naming the field, a game network is
FAILED_PRECONDITION, and a corrupt reload is refused while the old model keeps serving."""

from __future__ import annotations

import asyncio
import shutil

import grpc
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.neural.v1 import neural_service_pb2 as pb
from mesh.neural.v1 import neural_service_pb2_grpc

from libs.server import start_server
from services.neural.checkpoint import WEIGHTS_FILE, load_checkpoint, save_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.main import build_servicers
from services.neural.models.connect4_pv import Connect4PV, Connect4PVConfig
from services.neural.models.trm import TRM, TRMConfig
from services.neural.reasoning_solver import ReasoningSolver
from services.neural.reasoning_task import parse_task_name
from services.neural.settings import NeuralSettings
from training.reasoning.data import SudokuTask, held_out_set
from training.reasoning.evaluation import evaluate
from training.reasoning.loop import CHECKPOINT_DIR, TrainingSettings, train

TIMEOUT_S = 30
TASK = SudokuTask(size=6, blanks=4)
SEGMENTS = 3
MODEL = "trm-sudoku6"


def _tiny_trm(seed: int) -> TRM:
    torch.manual_seed(seed)
    return TRM(TRMConfig(vocab_size=TASK.vocab_size, seq_len=TASK.seq_len, hidden_size=32,
                         num_heads=2, layers=1, h_cycles=2, l_cycles=2, mlp_t=True,
                         pos_encodings="none", puzzle_emb_ndim=32, puzzle_emb_len=1,
                         halt_max_steps=SEGMENTS))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(trainer output folder, held-out set): two optimizer steps, the trainer's checkpoint."""
    held_out = held_out_set(TASK, 16, seed=21)
    output = tmp_path_factory.mktemp("run")
    settings = TrainingSettings(steps=2, batch_size=8, seed=4, warmup_steps=1, eval_every=0,
                                eval_batch_size=16, progress=False)
    train(_tiny_trm(0), "trm", TASK, settings, output, held_out=held_out)
    return output / CHECKPOINT_DIR, held_out


@pytest.fixture
def models_dir(tmp_path, trained):
    root = tmp_path / "models"
    shutil.copytree(trained[0], root / MODEL)
    torch.manual_seed(3)
    save_checkpoint(root / "connect4-pv", Connect4PV(Connect4PVConfig(channels=8, blocks=1,
                                                                      value_hidden=16)),
                    "connect4_pv", {})
    return root


@pytest.fixture
async def stub(models_dir):
    settings = NeuralSettings(port=0, models_dir=models_dir, device="cpu", max_wait_ms=20)
    evaluator = PositionEvaluator(settings.default_model, settings.max_batch,
                                  settings.max_wait_ms)
    solver = ReasoningSolver(lambda: evaluator.registry, settings.max_batch,
                             settings.max_wait_ms)
    servicers, ready = await build_servicers(settings, evaluator, solver)
    server = await start_server("neural", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield neural_service_pb2_grpc.NeuralServiceStub(channel)
    await channel.close()
    await server.stop(0)
    await evaluator.close()
    await solver.close()


def _field(error: grpc.aio.AioRpcError) -> str:
    for detail in rpc_status.from_call(error).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    raise AssertionError(f"no BadRequest detail in {error}")


async def _solve(stub, grid, mode=pb.HALTING_MODE_PAPER, segments=SEGMENTS, model=MODEL):
    request = pb.SolveRequest(model=model, grid=grid, halting_mode=mode)
    if segments is not None:
        request.max_segments = segments
    return await stub.Solve(request, timeout=TIMEOUT_S)


async def test_solve_reproduces_the_trainers_held_out_evaluation(stub, models_dir, trained):
    _, held_out = trained
    checkpoint = load_checkpoint(models_dir / MODEL)
    task = parse_task_name("sudoku-6x6")
    puzzles = [task.decode(row) for row in held_out.inputs.numpy()]
    solutions = [task.decode(row) for row in held_out.labels.numpy()]
    for mode, enum in (("paper", pb.HALTING_MODE_PAPER), ("act", pb.HALTING_MODE_ACT)):
        expected = evaluate(checkpoint.model, held_out, SEGMENTS, mode)
        replies = await asyncio.gather(*(_solve(stub, p, enum) for p in puzzles))
        exact = sum(r.grid == s for r, s in zip(replies, solutions, strict=True))
        cells = sum(a == b for r, s in zip(replies, solutions, strict=True)
                    for a, b in zip(r.grid, s, strict=True))
        assert exact / len(puzzles) == pytest.approx(expected.exact_accuracy, abs=1e-12)
        assert cells / (len(puzzles) * task.cells) == pytest.approx(expected.cell_accuracy,
                                                                    abs=1e-12)
        assert sum(r.segments_used for r in replies) / len(puzzles) == pytest.approx(
            expected.mean_segments, abs=1e-12)
        for reply in replies:
            assert len(reply.segments) == reply.segments_used
            assert reply.grid == reply.segments[-1].grid and len(reply.grid) == 36
            assert reply.halt_probability == reply.segments[-1].halt_probability
            assert 0 <= reply.halt_probability <= 1 and reply.latency_ms > 0
            assert reply.model.name == MODEL and reply.model.version == checkpoint.version
            assert reply.model.task == "sudoku-6x6" and reply.model.architecture == "trm"
            if mode == "paper":
                assert reply.segments_used == SEGMENTS

    unset = await _solve(stub, puzzles[0], pb.HALTING_MODE_UNSPECIFIED, segments=None)
    assert unset.segments_used == SEGMENTS  # paper mode, the model's halt_max_steps
    listed = await stub.ListModels(pb.ListModelsRequest(), timeout=TIMEOUT_S)
    assert {m.name: m.task for m in listed.models} == {"connect4-pv": "", MODEL: "sudoku-6x6"}
    got = await stub.GetModel(pb.GetModelRequest(name=MODEL), timeout=TIMEOUT_S)
    assert got.model.metadata["task_kind"] == "SudokuTask"


@pytest.mark.parametrize("model, grid, segments, field", [
    ("", "." * 36, SEGMENTS, "model"),
    ("trm-sudoku9", "." * 36, SEGMENTS, "model"),
    (MODEL, "." * 35, SEGMENTS, "grid"),
    (MODEL, "", SEGMENTS, "grid"),
    (MODEL, "9" + "." * 35, SEGMENTS, "grid"),
    (MODEL, "." * 36, 0, "max_segments"),
    (MODEL, "." * 36, 65, "max_segments"),
], ids=["no-model", "unknown-model", "short-grid", "no-grid", "digit-9", "zero-segments",
        "65-segments"])
async def test_bad_solve_requests_name_the_field(stub, model, grid, segments, field):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _solve(stub, grid, segments=segments, model=model)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field(raised.value) == field
    assert (await _solve(stub, "." * 36)).segments_used == SEGMENTS


async def test_a_game_network_cannot_solve(stub):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _solve(stub, "." * 36, model="connect4-pv")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not a reasoning model" in raised.value.details()


async def test_reload_refuses_a_corrupt_checkpoint_and_keeps_serving(stub, models_dir):
    grid = "12" + "." * 34
    before = await _solve(stub, grid)
    weights = models_dir / MODEL / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ReloadModel(pb.ReloadModelRequest(name=MODEL), timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "SHA-256" in raised.value.details() and MODEL in raised.value.details()
    still = await _solve(stub, grid)
    assert still.model.version == before.model.version
    assert [s.grid for s in still.segments] == [s.grid for s in before.segments]

    version = save_checkpoint(models_dir / MODEL, _tiny_trm(9), "trm",
                              {"task_kind": "SudokuTask", "task": {"size": 6, "blanks": 4}})
    reloaded = await stub.ReloadModel(pb.ReloadModelRequest(name=MODEL), timeout=TIMEOUT_S)
    assert reloaded.model.version == version != before.model.version
    assert reloaded.model.task == "sudoku-6x6"
    assert (await _solve(stub, grid)).model.version == version

    save_checkpoint(models_dir / "trm-new", _tiny_trm(10), "trm", {"task": "sudoku-6x6"})
    added = await stub.ReloadModel(pb.ReloadModelRequest(name="trm-new"), timeout=TIMEOUT_S)
    assert added.model.name == "trm-new"
    assert (await _solve(stub, grid, model="trm-new")).model.name == "trm-new"


async def test_reload_names(stub):
    for name, code in (("", grpc.StatusCode.INVALID_ARGUMENT),
                       ("../models", grpc.StatusCode.INVALID_ARGUMENT),
                       ("absent", grpc.StatusCode.NOT_FOUND)):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.ReloadModel(pb.ReloadModelRequest(name=name), timeout=TIMEOUT_S)
        assert raised.value.code() == code
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            assert _field(raised.value) == "name"
    reloaded = await stub.ReloadModel(pb.ReloadModelRequest(name="connect4-pv"),
                                      timeout=TIMEOUT_S)
    assert reloaded.model.architecture == "connect4_pv" and reloaded.model.task == ""
