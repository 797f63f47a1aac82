"""First version of the Connect Four policy/value network, AlphaZero style: self-play games of the
numba UCT search, then supervised training on what they produced.

Reference: Silver et al., "Mastering Chess and Shogi by Self-Play with a General Reinforcement
Learning Algorithm" (2017) and the AlphaGo Zero paper (Nature 2017): each position's policy target
is the search's root visit distribution, its value target the game's final outcome for the player
to move, and the loss is cross-entropy plus mean squared error. This first version distils UCT with
random rollouts (`services.mcts.rollout.connect4.uct_search`) instead of a search guided by the
previous network; it is the network that PUCT-guided self-play starts from.

Games run in parallel threads: the search is a numba kernel that releases the GIL. Moves follow the
visit distribution (temperature 1) for the first `temperature_moves` plies, for diverse openings,
then the most visited column. The board's left-right mirror doubles the data. Games, not
positions, are split into training and validation sets, so no game leaks across.

The board is a setting (`SelfPlayConfig.board`, 7x6 by default): on another size the network's
planes and policy follow it, and the checkpoint records, instead of Pons' 7x6 benchmark, the exact
rates of `training.az.exact` (the same judgement as the AlphaZero loop's, so this method is the
loop's baseline on the small boards).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from libs.connect4.board import Position, encode, legal_mask
from libs.connect4.geometry import STANDARD, Board
from services.mcts.rollout.connect4 import uct_search
from services.neural.checkpoint import save_checkpoint
from services.neural.models.connect4_pv import (
    ARCHITECTURE,
    Connect4PV,
    Connect4PVConfig,
    parameter_count,
)
from training.az.boards import ConnectFourBoards
from training.az.exact import exact_rates, judged_set
from training.az.learner import evaluator
from training.config import CONFIG_KEY, config_json
from training.pons import BENCHMARK_FILES, DEFAULT_PONS_DIR, evaluate_on_pons


@dataclass(frozen=True)
class GameRecord:
    """One self-play game.

    Attributes:
        moves: the whole game as a Pons move string.
        policies: float32 [T, 7], the root visit distribution of the search at each of the T
            positions played from (T = len(moves)).
        winner: 0 first player, 1 second player, -1 draw.
    """

    moves: str
    policies: np.ndarray
    winner: int


@dataclass(frozen=True)
class Examples:
    """Training examples, one row per position.

    planes float32 [N, 2, 6, 7], legal bool [N, 7], policy float32 [N, 7] (visit distribution),
    value float32 [N] (outcome for the player to move: 1 win, 0 draw, -1 loss), game int64 [N]
    (index of the game the row comes from).
    """

    planes: np.ndarray
    legal: np.ndarray
    policy: np.ndarray
    value: np.ndarray
    game: np.ndarray

    def __len__(self) -> int:
        return len(self.value)

    def select(self, rows: np.ndarray) -> Examples:
        """The examples at `rows` (indices or a boolean mask)."""
        return Examples(self.planes[rows], self.legal[rows], self.policy[rows], self.value[rows],
                        self.game[rows])

    def mirrored(self) -> Examples:
        """The left-right mirror image of every example (Connect Four is symmetric)."""
        return Examples(self.planes[..., ::-1].copy(), self.legal[:, ::-1].copy(),
                        self.policy[:, ::-1].copy(), self.value.copy(), self.game.copy())

    @staticmethod
    def concatenate(parts: list[Examples]) -> Examples:
        return Examples(*(np.concatenate([getattr(p, f.name) for p in parts])
                          for f in dataclasses.fields(Examples)))


def play_game(game_index: int, simulations: int, seed: int, temperature_moves: int,
              exploration: float = 2.0, board: Board = STANDARD) -> GameRecord:
    """Plays one game of UCT against itself.

    Args:
        game_index: mixed into the seed; games with different indices differ.
        simulations: UCT simulations per move.
        seed: the run's seed; the same (seed, game_index) replays the same game.
        temperature_moves: plies at whose positions the move is sampled from the visit
            distribution; afterwards the most visited column is played.
        exploration: UCT exploration constant.
        board: the board size.
    """
    rng = np.random.default_rng([seed, game_index])
    position = Position.from_moves("", board)
    policies = []
    while not position.is_finished:
        result = uct_search(position.moves, simulations, exploration=exploration,
                            seed=int(rng.integers(2**31 - 1)), board=board)
        visits = np.asarray(result.visits, dtype=np.float64)
        policy = visits / visits.sum()
        policies.append(policy.astype(np.float32))
        if position.num_moves < temperature_moves:
            column = int(rng.choice(board.columns, p=policy))
        else:
            column = int(result.best_action) - 1
        position = position.play(column)
    winner = (position.num_moves - 1) % 2 if position.won else -1
    return GameRecord(position.moves, np.stack(policies), winner)


def play_games(games: int, simulations: int, seed: int, workers: int, temperature_moves: int = 8,
               progress: bool = True, board: Board = STANDARD) -> list[GameRecord]:
    """Plays `games` self-play games on `board` in `workers` threads; returned in game order."""
    records: list[GameRecord | None] = [None] * games
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="selfplay") as pool:
        futures = {pool.submit(play_game, index, simulations, seed, temperature_moves, 2.0,
                               board): index for index in range(games)}
        with tqdm(total=games, desc="self-play games", unit="game", disable=not progress) as bar:
            for future in as_completed(futures):
                records[futures[future]] = future.result()
                bar.update(1)
    return records


def game_examples(records: list[GameRecord], board: Board = STANDARD) -> Examples:
    """Every position of every game on `board` as an example (mirrors not included)."""
    planes, legal, policy, value, game = [], [], [], [], []
    for index, record in enumerate(records):
        position = Position.from_moves("", board)
        for ply, char in enumerate(record.moves):
            planes.append(encode(position))
            legal.append(legal_mask(position))
            policy.append(record.policies[ply])
            to_move = ply % 2
            value.append(0.0 if record.winner < 0 else (1.0 if record.winner == to_move else -1.0))
            game.append(index)
            position = position.play(int(char) - 1)
    return Examples(np.stack(planes), np.stack(legal), np.stack(policy),
                    np.asarray(value, dtype=np.float32), np.asarray(game, dtype=np.int64))


@dataclass(frozen=True)
class Losses:
    """Mean losses over a set: policy cross-entropy (nats) against the visit distribution, value
    MSE against the outcome, and the share of decisive positions whose value has the outcome's
    sign."""

    policy_cross_entropy: float
    value_mse: float
    value_sign_accuracy: float
    examples: int

    @property
    def total(self) -> float:
        return self.policy_cross_entropy + self.value_mse


def _loss_terms(model: Connect4PV, planes, legal, policy, value):
    logits, predicted = model(planes, legal)
    cross_entropy = -(policy * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()
    mse = F.mse_loss(predicted, value)
    return cross_entropy, mse, predicted


def evaluate_losses(model: Connect4PV, examples: Examples, batch_size: int = 1024) -> Losses:
    """`Losses` of `model` (in eval mode) on `examples`."""
    model.eval()
    ce_sum = mse_sum = 0.0
    correct = decisive = 0
    with torch.inference_mode():
        for start in range(0, len(examples), batch_size):
            rows = slice(start, start + batch_size)
            value = torch.from_numpy(examples.value[rows])
            ce, mse, predicted = _loss_terms(
                model, torch.from_numpy(examples.planes[rows]),
                torch.from_numpy(examples.legal[rows]),
                torch.from_numpy(examples.policy[rows]), value)
            n = len(value)
            ce_sum += ce.item() * n
            mse_sum += mse.item() * n
            nonzero = value != 0
            decisive += int(nonzero.sum())
            correct += int((torch.sign(predicted[nonzero]) == value[nonzero]).sum())
    n = max(len(examples), 1)
    return Losses(ce_sum / n, mse_sum / n, correct / decisive if decisive else float("nan"),
                  len(examples))


def fit(model: Connect4PV, train: Examples, epochs: int, seed: int, batch_size: int = 256,
        learning_rate: float = 2e-3, weight_decay: float = 1e-4, progress: bool = True
        ) -> list[float]:
    """Trains `model` with AdamW (Adam, decoupled weight decay) on cross-entropy(policy) +
    MSE(value), with a cosine learning-rate schedule over shuffled minibatches.

    Returns:
        The mean training loss of each epoch.
    """
    generator = torch.Generator().manual_seed(seed)
    steps_per_epoch = math.ceil(len(train) / batch_size)
    total_steps = epochs * steps_per_epoch
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(total_steps, 1))
    tensors = [torch.from_numpy(a) for a in (train.planes, train.legal, train.policy, train.value)]
    history: list[float] = []
    with tqdm(total=total_steps, desc="training", unit="step", disable=not progress) as bar:
        for _ in range(epochs):
            model.train()
            order = torch.randperm(len(train), generator=generator)
            losses = []
            for start in range(0, len(train), batch_size):
                rows = order[start:start + batch_size]
                ce, mse, _ = _loss_terms(model, *(t[rows] for t in tensors))
                loss = ce + mse
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
            history.append(float(np.mean(losses)))
    model.eval()
    return history


def split_by_game(examples: Examples, games: int, validation_fraction: float, seed: int
                  ) -> tuple[Examples, Examples]:
    """Train and validation examples, with whole games on one side (at least one validation game
    when there are two games or more)."""
    rng = np.random.default_rng(seed)
    held = max(1, round(games * validation_fraction)) if games > 1 else 0
    validation_games = rng.permutation(games)[:held]
    is_validation = np.isin(examples.game, validation_games)
    return examples.select(~is_validation), examples.select(is_validation)


@dataclass(frozen=True)
class SelfPlayConfig:
    """One run of `train_connect4_pv` (`mcts-mesh train connect4-pv`).

    output_dir: checkpoint directory, e.g. models/connect4-pv. games: self-play games.
    simulations: UCT simulations per move. epochs: passes over the training positions (mirrors
    included). seed: seeds games, the split, initialisation and shuffling. workers: self-play
    threads. network: the network's sizes. temperature_moves: plies whose move is sampled from
    the visit distribution. pons_dir: folder of Pons' benchmark files; the first `pons_lines`
    lines of Test_L3_R1 and Test_L2_R1 measure value-sign agreement and how often the argmax move
    keeps the game-theoretic outcome; None uses the repository's copy (`training.pons`).
    torch_threads: intra-op threads while training. One is the default because on a shared
    2-core machine it was the faster (0.27 s against 0.74 s per step of 256 positions with two
    threads, which wait on each other when the cores are busy). board: 'WxH' (7x6 by default);
    on another size `exact_max_positions`, `exact_sample`, `exact_puct_positions` and
    `exact_simulations` size the exact evaluation (`training.az.exact`) that replaces Pons'
    benchmark.
    """

    output_dir: Path | str
    games: int = 1000
    simulations: int = 3000
    epochs: int = 4
    seed: int = 0
    workers: int = 2
    network: Connect4PVConfig = field(default_factory=Connect4PVConfig)
    temperature_moves: int = 8
    batch_size: int = 256
    learning_rate: float = 2e-3
    validation_fraction: float = 0.1
    pons_dir: Path | str | None = None
    pons_lines: int = 200
    torch_threads: int = 1
    progress: bool = True
    board: str = STANDARD.name
    exact_max_positions: int = 200_000
    exact_sample: int = 5_000
    exact_puct_positions: int = 5_000
    exact_simulations: int = 200


def train_connect4_pv(config: SelfPlayConfig) -> dict[str, Any]:
    """Self-play, training, evaluation; writes the checkpoint `config.output_dir`
    (model.safetensors and config.json, whose metadata holds `config` whole under
    `training.config.CONFIG_KEY`) and returns the metadata recorded in it.

    Returns:
        The metadata (games, simulations, epochs, losses, Pons metrics, wall times, date), plus
        "version" and "output_dir".
    Raises:
        ValueError: games < 2, or simulations, epochs, workers or torch_threads < 1.
        FileNotFoundError: a Pons benchmark file is missing (checked before any work).
    """
    if (config.games < 2 or config.simulations < 1 or config.epochs < 1 or config.workers < 1
            or config.torch_threads < 1):
        raise ValueError("need games >= 2 and simulations, epochs, workers, torch_threads >= 1")
    pons_dir = Path(config.pons_dir) if config.pons_dir else DEFAULT_PONS_DIR
    for name in BENCHMARK_FILES if Board.parse(config.board) == STANDARD else ():
        if not (pons_dir / name).is_file():
            raise FileNotFoundError(f"Pons benchmark file {pons_dir / name} not found")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.torch_threads)
    try:
        return _train(config, pons_dir)
    finally:
        torch.set_num_threads(previous_threads)


def _train(config: SelfPlayConfig, pons_dir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    board = Board.parse(config.board)
    records = play_games(config.games, config.simulations, config.seed, config.workers,
                         config.temperature_moves, config.progress, board)
    selfplay_s = time.perf_counter() - started

    examples = game_examples(records, board)
    train, validation = split_by_game(examples, config.games, config.validation_fraction,
                                      config.seed)
    train = Examples.concatenate([train, train.mirrored()])

    torch.manual_seed(config.seed)
    model = Connect4PV(dataclasses.replace(config.network, columns=board.columns,
                                           rows=board.rows))
    fit_started = time.perf_counter()
    history = fit(model, train, config.epochs, config.seed, batch_size=config.batch_size,
                  learning_rate=config.learning_rate, progress=config.progress)
    fit_s = time.perf_counter() - fit_started
    losses = {"train": _losses_dict(evaluate_losses(model, train)),
              "validation": _losses_dict(evaluate_losses(model, validation))}
    pons = evaluate_on_pons(model, pons_dir, config.pons_lines) if board == STANDARD else {}
    sizes = {"positions": len(examples), "train_examples_with_mirrors": len(train),
             "validation_positions": len(validation)}
    walls = {"selfplay_wall_s": round(selfplay_s, 1), "training_wall_s": round(fit_s, 1),
             "wall_s": round(time.perf_counter() - started, 1)}
    metadata = _metadata(config, records, sizes, model, history, losses, pons, walls)
    if board != STANDARD:
        clock = time.process_time()
        metadata["exact"] = _exact(model, board, config)
        metadata["exact"]["cpu_s"] = round(time.process_time() - clock, 1)
    version = save_checkpoint(config.output_dir, model, ARCHITECTURE, metadata)
    return {**metadata, "version": version, "output_dir": str(config.output_dir)}


def _exact(model: Connect4PV, board: Board, config: SelfPlayConfig) -> dict[str, Any]:
    """The exact rates of `model` on `board` (`training.az.exact`, PUCT with 8 leaves per call
    and c_puct 2 as the AlphaZero loop's defaults)."""
    game = ConnectFourBoards(board)
    judged = judged_set(game, config.exact_max_positions, config.exact_sample, config.seed)
    return exact_rates(evaluator(model.eval(), "cpu"), judged, game, config.exact_simulations,
                       config.exact_puct_positions, 8, 2.0, config.seed)


def _metadata(config: SelfPlayConfig, records: list[GameRecord], sizes: dict[str, int],
              model: Connect4PV, history: list[float], losses: dict[str, dict[str, float]],
              pons: dict[str, Any], walls: dict[str, float]) -> dict[str, Any]:
    """What the checkpoint records: the run's facts in the order the CLI prints them, then the
    config whole."""
    wins = sum(r.winner == 0 for r in records)
    draws = sum(r.winner < 0 for r in records)
    return {
        "trainer": "training.connect4_selfplay.train_connect4_pv",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "games": config.games,
        "simulations_per_move": config.simulations,
        "search": "uct_search (UCT, random rollouts), exploration 2.0",
        "temperature_moves": config.temperature_moves,
        "selfplay_outcomes": {"first_player_wins": wins, "draws": draws,
                              "second_player_wins": config.games - wins - draws},
        "mean_game_length": float(np.mean([len(r.moves) for r in records])),
        **sizes,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "learning_rate": config.learning_rate,
        "optimizer": "AdamW, cosine schedule, weight decay 1e-4",
        "seed": config.seed,
        "workers": config.workers,
        "parameters": parameter_count(model),
        "epoch_train_loss": [round(x, 4) for x in history],
        **losses,
        "pons": pons,
        **walls,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} "
                   f"torch threads, {config.workers} self-play threads",
        "network": {"architecture": ARCHITECTURE, **dataclasses.asdict(model.config)},
        CONFIG_KEY: config_json(config),
    }


def _losses_dict(losses: Losses) -> dict[str, float]:
    return {"policy_cross_entropy": round(losses.policy_cross_entropy, 4),
            "value_mse": round(losses.value_mse, 4),
            "value_sign_accuracy": round(losses.value_sign_accuracy, 4),
            "examples": losses.examples}
