"""The HRM / TRM trainer: optimizers, EMA, ACT carry replacement, losses, evaluation, a short run
that learns, and the checkpoint it writes. Tiny models (hidden 32, one block) on 4x4 Sudoku."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from libs.puzzles import maze as maze_lib
from libs.puzzles import sudoku as sudoku_lib
from services.neural.checkpoint import load_checkpoint
from services.neural.models.hrm import HRM, HRMConfig
from services.neural.models.reasoning_layers import IGNORE_LABEL_ID
from services.neural.models.reasoning_tokens import decode_maze, decode_sudoku
from services.neural.models.trm import TRM, TRMConfig
from training.reasoning.act import (
    SegmentResult,
    act_loss,
    initial_carry,
    replace_halted,
    run_segment,
)
from training.reasoning.data import (
    MazeTask,
    PuzzleBatch,
    PuzzleStream,
    SudokuTask,
    encode_sudoku,
    held_out_set,
)
from training.reasoning.ema import WeightEMA
from training.reasoning.evaluation import evaluate
from training.reasoning.loop import TrainingSettings, train
from training.reasoning.optim import AdamATan2, SparseSignSGD, warmup_constant
from training.reasoning.trainer import ReasoningConfig, task_for_preset, train_reasoning

TASK = SudokuTask(size=4, blanks=4)


def tiny_trm(halt_max_steps: int = 4) -> TRM:
    torch.manual_seed(0)
    return TRM(TRMConfig(vocab_size=TASK.vocab_size, seq_len=TASK.seq_len, hidden_size=32,
                         num_heads=2, layers=1, h_cycles=2, l_cycles=2, mlp_t=True,
                         pos_encodings="none", puzzle_emb_ndim=32, puzzle_emb_len=1,
                         halt_max_steps=halt_max_steps))


def tiny_hrm() -> HRM:
    torch.manual_seed(0)
    return HRM(HRMConfig(vocab_size=TASK.vocab_size, seq_len=TASK.seq_len, hidden_size=32,
                         num_heads=2, h_layers=1, l_layers=1, h_cycles=1, l_cycles=2,
                         puzzle_emb_ndim=32, halt_max_steps=4))


SETTINGS = TrainingSettings(steps=30, batch_size=32, seed=3, lr=3e-3, puzzle_emb_lr=3e-3,
                            warmup_steps=5, ema_rate=0.9, eval_every=15, eval_puzzles=40,
                            eval_segments=3, progress=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 30-step TRM run with EMA 0.9, written to a temporary directory."""
    torch.set_num_threads(1)
    output = tmp_path_factory.mktemp("trm_run")
    model = tiny_trm()
    held_out = held_out_set(TASK, 40, seed=11)
    result = train(model, "trm", TASK, SETTINGS, output, metadata={"preset": "tiny"},
                   held_out=held_out)
    return model, result, held_out, output


# --- optimizers and schedule ---------------------------------------------------------------


def test_adam_atan2_matches_hand_computed_steps():
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    lr, decay, beta1, beta2 = 0.1, 0.1, 0.9, 0.95
    optimizer = AdamATan2([param], lr=lr, betas=(beta1, beta2), weight_decay=decay)
    grads = [(0.5, -0.1), (0.2, 0.3)]
    expected = [1.0, -2.0]
    m, v = [0.0, 0.0], [0.0, 0.0]
    for t, grad in enumerate(grads, start=1):
        param.grad = torch.tensor(grad, dtype=torch.float64)
        optimizer.step()
        for i, g in enumerate(grad):
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            m_hat, v_hat = m[i] / (1 - beta1**t), v[i] / (1 - beta2**t)
            expected[i] = expected[i] * (1 - lr * decay) - lr * math.atan2(m_hat, math.sqrt(v_hat))
        assert param.detach().tolist() == pytest.approx(expected, abs=1e-12)
    # First step: atan2(g, |g|) = +-pi/4 whatever the gradient's scale.
    assert expected != [1.0, -2.0]


def test_adam_atan2_update_is_bounded_for_huge_gradients():
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = AdamATan2([param], lr=1.0, weight_decay=0.0)
    param.grad = torch.tensor([1e8, -1e-8, 0.0])
    optimizer.step()
    assert param.detach().tolist() == pytest.approx([-math.pi / 4, math.pi / 4, 0.0])


def test_sign_sgd_updates_only_used_rows_with_sign_of_summed_gradient():
    embedding = torch.nn.Embedding(5, 3, sparse=True)
    with torch.no_grad():
        embedding.weight.copy_(torch.arange(15, dtype=torch.float32).view(5, 3))
    before = embedding.weight.detach().clone()
    lr, decay = 0.5, 0.2
    optimizer = SparseSignSGD(embedding.parameters(), lr=lr, weight_decay=decay)
    rows = embedding(torch.tensor([1, 1, 3]))
    coefficients = torch.tensor([[1.0, -2.0, 0.5], [-3.0, 1.0, -0.5], [2.0, 0.0, -1.0]])
    (rows * coefficients).sum().backward()
    assert embedding.weight.grad.is_sparse
    optimizer.step()
    after = embedding.weight.detach()
    for untouched in (0, 2, 4):
        assert torch.equal(after[untouched], before[untouched])
    # Row 1 sums [-2, -1, 0] (sign -1, -1, 0); row 3 has [2, 0, -1].
    expected_1 = before[1] * (1 - lr * decay) - lr * torch.tensor([-1.0, -1.0, 0.0])
    expected_3 = before[3] * (1 - lr * decay) - lr * torch.tensor([1.0, 0.0, -1.0])
    assert torch.allclose(after[1], expected_1)
    assert torch.allclose(after[3], expected_3)


def test_warmup_then_constant():
    rates = [warmup_constant(step, 1e-3, 4) for step in range(6)]
    assert rates == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert warmup_constant(0, 1e-3, 0) == 1e-3


def test_weight_ema_update_and_copy():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ema = WeightEMA(model, rate=0.75)
    with torch.no_grad():
        model.weight.fill_(5.0)
    ema.update(model)
    averaged = ema.averaged_copy(model)
    assert averaged.weight.tolist() == [[2.0, 2.0]]  # 0.75 * 1 + 0.25 * 5
    assert model.weight.tolist() == [[5.0, 5.0]]
    assert not averaged.training and not averaged.weight.requires_grad


def test_weight_ema_warmup_follows_the_num_updates_schedule():
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    ema = WeightEMA(model, rate=0.999, warmup=True)
    assert [ema.decay(t) for t in (1, 2, 8991, 20000)] == pytest.approx(
        [2 / 11, 3 / 12, 0.999, 0.999])
    with torch.no_grad():
        model.weight.fill_(1.0)
    plain = WeightEMA(torch.nn.Linear(1, 1, bias=False).requires_grad_(False).apply(
        lambda m: m.weight.fill_(0.0) if isinstance(m, torch.nn.Linear) else None), rate=0.999)
    for _ in range(600):
        ema.update(model)
        plain.update(model)
    # The share of the initial 0.0 left after 600 updates toward 1.0: 0.999^600 = 55% without the
    # warm-up, the product of (1 + t) / (10 + t) (below 1e-6) with it.
    assert 1 - plain.averaged_copy(model).weight.item() == pytest.approx(0.999 ** 600, rel=1e-3)
    assert 1 - ema.averaged_copy(model).weight.item() < 1e-6


# --- data ----------------------------------------------------------------------------------


def test_sudoku_tokens_round_trip_and_stream_is_seeded_augmented_and_disjoint():
    shape = sudoku_lib.box_shape_for(6)
    puzzle, solution = sudoku_lib.generate(shape, 10, np.random.default_rng(0))
    tokens = encode_sudoku(puzzle)
    assert tokens.min() >= 1 and (tokens == 1).sum() == 10  # blank is 1, padding 0 is unused
    assert np.array_equal(decode_sudoku(tokens, 6), puzzle)
    task = SudokuTask(size=6, blanks=10)
    held = held_out_set(task, 20, seed=5)
    assert torch.equal(held.inputs, held_out_set(task, 20, seed=5).inputs)
    first, again = PuzzleStream(task, 1, held).take(8), PuzzleStream(task, 1, held).take(8)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.labels, again.labels)
    held_rows = {bytes(row.numpy().tobytes()) for row in held.inputs}
    for inputs, labels in zip(first.inputs, first.labels, strict=True):
        assert bytes(inputs.numpy().tobytes()) not in held_rows
        grid, answer = decode_sudoku(inputs, 6), decode_sudoku(labels, 6)
        assert (grid == 0).sum() == 10
        assert sudoku_lib.check_solution(grid, answer).valid


def test_worker_processes_generate_the_same_stream_as_the_training_process():
    task = SudokuTask(size=4, blanks=4)
    held = held_out_set(task, 30, seed=7)
    sizes = [5, 0, 23, 1, 40]  # across chunk boundaries (chunks of 8)
    with PuzzleStream(task, 2, held, workers=0, chunk_size=8) as inline, \
            PuzzleStream(task, 2, held, workers=2, chunk_size=8, prefetch_chunks=2) as pooled:
        for size in sizes:
            mine, theirs = inline.take(size), pooled.take(size)
            assert len(mine) == size
            assert torch.equal(mine.inputs, theirs.inputs)
            assert torch.equal(mine.labels, theirs.labels)
            assert mine.inputs.dtype == torch.int32 and mine.labels.dtype == torch.int64
        assert inline.generated == pooled.generated == sum(sizes)
    held_rows = {bytes(row.numpy().tobytes()) for row in held.inputs}
    assert not held_rows & {bytes(row.numpy().tobytes()) for row in mine.inputs}
    with pytest.raises(RuntimeError, match="closed"):
        pooled.take(1)
    other = PuzzleStream(task, 3, held, chunk_size=8).take(40)
    assert not torch.equal(other.inputs, mine.inputs)  # the seed matters


def test_a_worker_error_reaches_the_trainer():
    task = MazeTask(rows=1, cols=2, min_path_length=1)
    with PuzzleStream(task, seed=0, exclude=held_out_set(task, 2, 0), workers=1) as stream:
        with pytest.raises(ValueError, match="all held out"):
            stream.take(1)


def test_training_with_data_workers_equals_training_without():
    def run(workers: int) -> tuple[dict, dict]:
        settings = replace(SETTINGS, steps=4, batch_size=8, eval_every=0, eval_puzzles=10,
                           ema_rate=None, data_workers=workers)
        result = train(tiny_trm(), "trm", TASK, settings, None)
        metrics = dict(result.last_metrics)
        del metrics["step_time_s"], metrics["data_wait_s"]
        return metrics, result.paper.as_dict()

    inline, pooled = run(0), run(2)
    assert inline == pooled
    assert inline[0]["loss"] > 0 and inline[0]["halted"] >= 0


# --- ACT carry and losses ------------------------------------------------------------------


def _batch(seed: int, count: int) -> PuzzleBatch:
    return PuzzleStream(TASK, seed).take(count)


def test_carry_replacement_resets_halted_rows_and_keeps_the_others():
    model = tiny_trm()
    carry = initial_carry(model, _batch(0, 4))
    assert carry.halted.all()
    carry = replace_halted(model, carry, _batch(1, 4))
    carry, _ = run_segment(model, carry, halt_max_steps=4, halt_exploration_prob=0.0)
    carry, _ = run_segment(model, carry, halt_max_steps=4, halt_exploration_prob=0.0)
    assert carry.steps.tolist() == [2, 2, 2, 2] and not carry.halted.any()
    halted = torch.tensor([True, False, True, False])
    carry = replace(carry, halted=halted)
    fresh = _batch(2, 2)
    replaced = replace_halted(model, carry, fresh)
    assert torch.equal(replaced.batch.inputs[[0, 2]], fresh.inputs)
    assert torch.equal(replaced.batch.labels[[0, 2]], fresh.labels)
    assert torch.equal(replaced.batch.inputs[[1, 3]], carry.batch.inputs[[1, 3]])
    assert replaced.steps.tolist() == [0, 2, 0, 2] and not replaced.halted.any()
    start = model.initial_carry(1)
    for row in (0, 2):
        assert torch.equal(replaced.model_carry.y[row], start.y[0])
        assert torch.equal(replaced.model_carry.z[row], start.z[0])
    for row in (1, 3):
        assert torch.equal(replaced.model_carry.y[row], carry.model_carry.y[row])
        assert not torch.equal(replaced.model_carry.y[row], start.y[0])
    with pytest.raises(ValueError, match="halted slots"):
        replace_halted(model, carry, _batch(3, 3))


def test_examples_halt_at_halt_max_steps_and_hrm_gets_a_q_target():
    model = tiny_hrm()
    carry = replace_halted(model, initial_carry(model, _batch(0, 3)), _batch(1, 3))
    for step in range(1, 5):
        carry, result = run_segment(model, carry, halt_max_steps=4, halt_exploration_prob=0.0)
        # Q(halt) and Q(continue) both start at the bias -5: never halt before the maximum.
        assert carry.halted.tolist() == [step == 4] * 3
        assert result.target_q_continue is not None
        assert ((result.target_q_continue > 0) & (result.target_q_continue < 1)).all()
    trm_model = tiny_trm()
    carry = replace_halted(trm_model, initial_carry(trm_model, _batch(0, 3)), _batch(1, 3))
    with torch.no_grad():
        trm_model.q_head.bias.fill_(5.0)  # confident: halts after one segment while training
    carry, result = run_segment(trm_model, carry, halt_max_steps=4, halt_exploration_prob=0.0)
    assert carry.halted.all() and result.q_continue_logits is None


def _stablemax_nll(row: list[float], label: int) -> float:
    values = [x + 1 if x >= 0 else 1 / (1 - x) for x in row]
    return -math.log(values[label] / sum(values))


def test_act_loss_on_fixed_tensors():
    logits = torch.tensor([[[2.0, -1.0, 0.0], [0.5, 1.5, -2.0]],
                           [[-1.0, 3.0, 0.0], [0.0, 0.0, 1.0]]])
    labels = torch.tensor([[0, 1], [1, IGNORE_LABEL_ID]])
    q_halt = torch.tensor([0.3, -1.2])
    q_continue = torch.tensor([0.1, 0.4])
    target = torch.tensor([0.25, 0.9])
    loss = act_loss(SegmentResult(logits, q_halt, q_continue, target), labels)
    token = (( _stablemax_nll([2.0, -1.0, 0.0], 0) + _stablemax_nll([0.5, 1.5, -2.0], 1)) / 2
             + _stablemax_nll([-1.0, 3.0, 0.0], 1)) / 2
    assert loss.sequence_correct.tolist() == [True, True]

    def bce(x: float, y: float) -> float:
        p = 1 / (1 + math.exp(-x))
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    q_halt_loss = (bce(0.3, 1.0) + bce(-1.2, 1.0)) / 2
    q_continue_loss = (bce(0.1, 0.25) + bce(0.4, 0.9)) / 2
    assert float(loss.token) == pytest.approx(token, rel=1e-6)
    assert float(loss.q_halt) == pytest.approx(q_halt_loss, rel=1e-6)
    assert float(loss.q_continue) == pytest.approx(q_continue_loss, rel=1e-6)
    assert float(loss.total) == pytest.approx(token + 0.5 * (q_halt_loss + q_continue_loss),
                                              rel=1e-6)
    wrong = act_loss(SegmentResult(logits, q_halt, None, None), torch.tensor([[1, 1], [1, 0]]))
    assert wrong.sequence_correct.tolist() == [False, False]
    assert float(wrong.q_continue) == 0.0
    assert float(wrong.q_halt) == pytest.approx((bce(0.3, 0.0) + bce(-1.2, 0.0)) / 2, rel=1e-6)


# --- evaluation ----------------------------------------------------------------------------


def test_evaluate_paper_and_act_modes():
    model = tiny_trm()
    data = held_out_set(TASK, 10, seed=2)
    paper = evaluate(model, data, segments=3, mode="paper")
    assert paper.mean_segments == 3 and len(paper.exact_by_segment) == 3
    assert paper.cell_accuracy == pytest.approx(paper.cell_by_segment[-1])
    act_never = evaluate(model, data, segments=3, mode="act")  # bias -5: never halts early
    assert act_never.as_dict() | {"mode": "paper"} == paper.as_dict()
    with torch.no_grad():
        model.q_head.bias.fill_(5.0)
    act = evaluate(model, data, segments=3, mode="act")
    assert act.mean_segments == 1
    assert act.cell_accuracy == pytest.approx(act.cell_by_segment[0])
    assert model.training  # evaluation restores the mode
    with pytest.raises(ValueError, match="mode"):
        evaluate(model, data, segments=3, mode="fast")


# --- a short run, EMA at evaluation, checkpoint --------------------------------------------


def test_short_run_reduces_the_loss(trained):
    _, result, _, output = trained
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    assert len(train_records) == 30 == result.steps
    for key in ("loss", "cell_accuracy", "exact_accuracy", "mean_segments", "lr",
                "step_time_s", "train_cpu_seconds"):
        assert any(key in r for r in train_records), key
    first = np.mean([r["token_loss"] for r in train_records[:5]])
    last = np.mean([r["token_loss"] for r in train_records[-5:]])
    assert last < first - 0.1
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [15, 30, 30]
    assert {r["mode"] for r in evals if r.get("final")} == {"paper", "act"}


def test_evaluation_and_checkpoint_use_the_ema_weights(trained):
    model, result, held_out, _ = trained
    averaged = result.evaluated_model
    assert averaged is not model
    live = dict(model.named_parameters())
    differing = [name for name, p in averaged.named_parameters()
                 if not torch.equal(p, live[name])]
    assert differing  # EMA weights lag the live ones
    again = evaluate(averaged, held_out, 3, "paper")
    assert again.as_dict() == result.paper.as_dict()
    live_eval = evaluate(model, held_out, 3, "paper")
    assert live_eval.cell_by_segment != result.paper.cell_by_segment
    loaded = load_checkpoint(result.checkpoint)
    saved = dict(loaded.model.named_parameters())
    for name, p in averaged.named_parameters():
        assert torch.equal(saved[name], p)
    assert loaded.metadata["preset"] == "tiny" and loaded.metadata["ema"] is True
    assert loaded.metadata["task"] == {"size": 4, "blanks": 4}
    assert loaded.metadata["metrics"]["paper"]["exact_accuracy"] == result.paper.exact_accuracy
    # The training's CPU time (this process's, evaluations excluded) beside its wall time.
    assert 0 < loaded.metadata["metrics"]["train_cpu_seconds"]
    assert loaded.metadata["metrics"]["train_seconds"] == result.train_seconds


def test_checkpoint_reloads_and_evaluates_the_same(trained):
    _, result, held_out, _ = trained
    loaded = load_checkpoint(result.checkpoint)
    assert loaded.architecture == "trm"
    assert evaluate(loaded.model, held_out, 3, "paper").as_dict() == result.paper.as_dict()
    assert evaluate(loaded.model, held_out, 3, "act").as_dict() == result.act.as_dict()


def test_train_reasoning_rejects_mismatched_model_and_preset(tmp_path):
    with pytest.raises(ValueError, match="trm preset"):
        train_reasoning(ReasoningConfig("hrm", "trm-mlp-cpu-sudoku6", tmp_path, steps=1))
    with pytest.raises(ValueError, match="unknown model"):
        train_reasoning(ReasoningConfig("gpt", "trm-mlp-cpu-sudoku6", tmp_path, steps=1))


def test_maze_task_tokens_are_the_bfs_labels():
    task = MazeTask(rows=3, cols=3, extra_openings=1, min_path_length=3)
    held = held_out_set(task, 5, seed=0)
    assert held.inputs.shape == (5, 49) and task.vocab_size == 6
    for inputs, labels in zip(held.inputs, held.labels, strict=True):
        question = decode_maze(inputs, task.height, task.width)
        answer = decode_maze(labels, task.height, task.width)
        assert maze_lib.check_path(question, answer).optimal


def test_hrm_trains_without_ema_and_learns_q_continue():
    torch.set_num_threads(1)
    model = tiny_hrm()
    settings = replace(SETTINGS, steps=3, ema_rate=None, eval_every=0, eval_segments=2)
    result = train(model, "hrm", TASK, settings, None, held_out=held_out_set(TASK, 8, seed=4))
    assert result.evaluated_model is model and result.checkpoint is None
    assert result.steps == 3 and result.last_metrics["q_continue_loss"] > 0
    assert result.paper.puzzles == 8 and result.paper.mean_segments == 2


# --- the task of a preset, and a maze run -----------------------------------------------------


def test_presets_choose_their_task():
    assert task_for_preset("trm-mlp-cpu-sudoku6", blanks=22) == SudokuTask(size=6, blanks=22)
    assert task_for_preset("hrm-cpu-sudoku6") == SudokuTask(size=6, blanks=16)
    assert task_for_preset("trm-mlp-paper-sudoku") == SudokuTask(size=9, blanks=16)
    assert task_for_preset("trm-mlp-cpu-maze9") == MazeTask(rows=4, cols=4)
    assert task_for_preset("trm-mlp-cpu-maze9", "maze") == MazeTask(rows=4, cols=4)
    with pytest.raises(ValueError, match="is not a sudoku model"):
        task_for_preset("trm-mlp-cpu-maze9", "sudoku")
    with pytest.raises(ValueError, match="is not a maze model"):
        task_for_preset("trm-mlp-paper-sudoku", "maze")  # 9x9 grid, but 11 token ids
    for preset in ("trm-mlp-cpu-sudoku6", "trm-att-paper-maze"):  # 30x30: Maze-Hard's layout
        with pytest.raises(ValueError, match="not an odd square maze grid"):
            task_for_preset(preset, "maze")
    with pytest.raises(ValueError, match="unknown task"):
        task_for_preset("trm-mlp-cpu-maze9", "arc")


def test_train_reasoning_trains_a_maze_preset_on_mazes(tmp_path):
    torch.set_num_threads(1)
    summary = train_reasoning(ReasoningConfig(
        "trm", "trm-mlp-cpu-maze9", tmp_path, steps=2, batch_size=4, eval_every=0, eval_puzzles=6,
        eval_segments=2, progress=False))
    assert summary["task_kind"] == "MazeTask" and summary["task"]["rows"] == 4
    assert summary["paper"]["puzzles"] == 6 and summary["steps"] == 2
    by_length = summary["paper_exact_by_path_length"]
    held = held_out_set(MazeTask(), 6, seed=1)  # the trainer's: seed + 1
    lengths = ((held.labels == maze_lib.PATH).sum(-1) + 1).tolist()
    assert {length: group["puzzles"] for length, group in by_length.items()} == {
        length: lengths.count(length) for length in sorted(set(lengths))}
    loaded = load_checkpoint(summary["checkpoint"])
    assert loaded.metadata["task_kind"] == "MazeTask" and loaded.model.config.seq_len == 81


def test_train_reasoning_continues_from_a_checkpoint_of_the_same_preset(tmp_path):
    torch.set_num_threads(1)
    first = train_reasoning(ReasoningConfig(
        "trm", "trm-mlp-cpu-sudoku6", tmp_path / "a", steps=1, batch_size=2, eval_every=0,
        eval_puzzles=2, eval_segments=1, progress=False))
    start = load_checkpoint(first["checkpoint"])
    second = train_reasoning(ReasoningConfig(
        "trm", "trm-mlp-cpu-sudoku6", tmp_path / "b", steps=0, batch_size=2, eval_every=0,
        eval_puzzles=2, eval_segments=1, progress=False, init_from=first["checkpoint"]))
    continued = load_checkpoint(second["checkpoint"])
    # No step taken: the continued run holds exactly the weights it started from.
    for name, tensor in start.model.state_dict().items():
        assert torch.equal(tensor, continued.model.state_dict()[name]), name
    assert continued.metadata["init_from"] == first["checkpoint"]
    assert continued.metadata["init_version"] == start.version
    with pytest.raises(ValueError, match="another config"):
        train_reasoning(ReasoningConfig(
            "trm", "trm-mlp-cpu-maze9", tmp_path / "c", steps=0, eval_every=0, eval_puzzles=2,
            progress=False, init_from=first["checkpoint"]))


def test_an_hrm_continues_on_a_larger_grid_and_a_trm_mlp_cannot(tmp_path):
    """A curriculum over grid sizes: the HRM's weights do not depend on the length, so a 9x9-maze
    checkpoint starts an 11x11-maze run with exactly its weights; a TRM-MLP's token mixing does."""
    torch.set_num_threads(1)
    small = train_reasoning(ReasoningConfig(
        "hrm", "hrm-cpu-maze9", tmp_path / "a", steps=1, batch_size=2, eval_every=0,
        eval_puzzles=2, eval_segments=1, progress=False))
    larger = train_reasoning(ReasoningConfig(
        "hrm", "hrm-cpu-maze11", tmp_path / "b", steps=0, batch_size=2, eval_every=0,
        eval_puzzles=2, eval_segments=1, progress=False, init_from=small["checkpoint"]))
    start, continued = load_checkpoint(small["checkpoint"]), load_checkpoint(larger["checkpoint"])
    assert continued.model.config.seq_len == 121 and start.model.config.seq_len == 81
    for name, tensor in start.model.state_dict().items():
        assert torch.equal(tensor, continued.model.state_dict()[name]), name
    assert continued.metadata["init_from"] == small["checkpoint"]
    trm_small = train_reasoning(ReasoningConfig(
        "trm", "trm-mlp-cpu-maze9", tmp_path / "c", steps=0, batch_size=2, eval_every=0,
        eval_puzzles=2, eval_segments=1, progress=False))
    with pytest.raises(ValueError, match="weights of other shapes"):
        train_reasoning(ReasoningConfig(
            "trm", "trm-mlp-cpu-maze11", tmp_path / "d", steps=0, eval_every=0, eval_puzzles=2,
            progress=False, init_from=trm_small["checkpoint"]))


# --- CI-sized learning: a tiny TRM solves easy 6x6 Sudoku after a few dozen steps ---------------


def test_a_tiny_trm_learns_easy_six_by_six_sudoku():
    """60 steps (batch 32, lr 1e-2, no EMA) of a hidden-64 TRM-MLP on 6x6 Sudoku with 2 blanks:
    from 0% exact on 100 held-out puzzles to most of them (83% on the reference machine, where
    the curve reads 0.0 / 14.5% / 83% exact at steps 20 / 40 / 60)."""
    torch.set_num_threads(1)
    task = SudokuTask(size=6, blanks=2)
    torch.manual_seed(0)
    model = TRM(TRMConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, hidden_size=64,
                          num_heads=2, layers=1, h_cycles=2, l_cycles=2, mlp_t=True,
                          pos_encodings="none", puzzle_emb_ndim=64, puzzle_emb_len=1,
                          halt_max_steps=4))
    held_out = held_out_set(task, 100, seed=21)
    untrained = evaluate(model, held_out, 3, "paper")
    settings = TrainingSettings(steps=60, batch_size=32, seed=3, lr=1e-2, puzzle_emb_lr=1e-2,
                                warmup_steps=5, ema_rate=None, eval_every=0, eval_segments=3,
                                progress=False)
    result = train(model, "trm", task, settings, None, held_out=held_out)
    assert untrained.exact_accuracy == 0.0 and untrained.cell_accuracy < 0.3
    assert result.paper.exact_accuracy >= 0.5
    assert result.paper.cell_accuracy > 0.95


def test_a_task_with_too_few_distinct_puzzles_is_refused_not_looped_on():
    task = MazeTask(rows=2, cols=2, min_path_length=2)  # a few dozen distinct mazes in all
    with pytest.raises(ValueError, match="too few distinct puzzles for 1000"):
        held_out_set(task, 1000, seed=0)
    everything = held_out_set(task, 20, seed=0)
    stream = PuzzleStream(MazeTask(rows=1, cols=2, min_path_length=1), seed=0,
                          exclude=held_out_set(MazeTask(rows=1, cols=2, min_path_length=1), 2, 0))
    with pytest.raises(ValueError, match="all held out"):
        stream.take(1)
    assert len(everything) == 20


def test_ctrl_c_during_training_leaves_a_loadable_checkpoint(tmp_path, monkeypatch):
    from training.reasoning import loop as reasoning

    real, calls = reasoning.run_segment, []

    def interrupted_at_the_third_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(reasoning, "run_segment", interrupted_at_the_third_step)
    settings = replace(SETTINGS, steps=10, batch_size=4, eval_every=0, eval_puzzles=10)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_trm(), "trm", TASK, settings, tmp_path)
    loaded = load_checkpoint(tmp_path / "checkpoint")
    assert loaded.metadata["step"] == 2 and loaded.metadata["metrics"]["interrupted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "metrics.jsonl"]
