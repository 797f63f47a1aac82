"""The network side of the loop: building, evaluating, training and checkpointing Connect4PV.

Training minimises `cross_entropy(policy target, softmax(logits)) + MSE(value target, value)`
with AdamW's decoupled weight decay (Silver et al. 2018 use L2 regularisation; AdamW's decay is its
usual stand-in), on minibatches drawn uniformly from the replay window. On CUDA the forward passes
run under bf16 autocast; the parameters and the optimizer stay float32.

Checkpoints: one directory per generation, `checkpoints/gen-GGGG/` (model.safetensors +
config.json, `services.neural.checkpoint`), written to a hidden temporary directory and renamed,
so an interrupted run (Ctrl-C, kill) never leaves half a checkpoint. `best.json` names the best
generation (written the same way).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from services.neural.checkpoint import CheckpointError, load_checkpoint, replace_checkpoint
from services.neural.models.connect4_pv import ARCHITECTURE, Connect4PV, Connect4PVConfig
from training.az.replay import Examples

BEST_FILE = "best.json"


def autocast(device: str):
    """bf16 autocast on CUDA; nothing on the CPU."""
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def evaluator(model: Connect4PV, device: str):
    """A `games.Evaluator` running `model` (eval mode) on `device`."""

    def evaluate(planes: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode(), autocast(device):
            logits, value = model(torch.from_numpy(planes).to(device),
                                  torch.from_numpy(legal).to(device))
            policy = torch.softmax(logits.float(), dim=-1)
        return policy.cpu().numpy(), value.float().cpu().numpy()

    model.eval()
    return evaluate


def train_steps(model: Connect4PV, data: Examples, steps: int, batch_size: int,
                learning_rate: float, weight_decay: float, device: str,
                rng: np.random.Generator) -> dict[str, float]:
    """`steps` AdamW steps on minibatches drawn from `data` (with replacement across steps).

    Returns:
        mean policy cross-entropy (nats), value MSE and total loss over the steps.
    Raises:
        ValueError: `data` is empty.
    """
    if len(data) == 0:
        raise ValueError("the replay window holds no positions")
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    pin = device.startswith("cuda")
    tensors = [torch.from_numpy(a) for a in (data.planes, data.legal, data.policy, data.value)]
    if pin:
        tensors = [t.pin_memory() for t in tensors]
    model.train()
    sums = np.zeros(2)
    for _ in range(steps):
        rows = torch.from_numpy(rng.integers(len(data), size=min(batch_size, len(data))))
        planes, legal, policy, value = (t[rows].to(device, non_blocking=pin) for t in tensors)
        with autocast(device):
            logits, predicted = model(planes, legal)
        cross_entropy = -(policy * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1).mean()
        mse = F.mse_loss(predicted.float(), value)
        loss = cross_entropy + mse
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sums += (cross_entropy.item(), mse.item())
    model.eval()
    ce, mse = sums / steps
    return {"policy_cross_entropy": round(float(ce), 4), "value_mse": round(float(mse), 4),
            "total": round(float(ce + mse), 4)}


def new_model(network: dict[str, int], seed: int, device: str) -> Connect4PV:
    torch.manual_seed(seed)
    return Connect4PV(Connect4PVConfig(**network)).to(device).eval()


def generation_dir(run_dir: Path, generation: int) -> Path:
    return run_dir / "checkpoints" / f"gen-{generation:04d}"


def save_generation(run_dir: Path, generation: int, model: Connect4PV,
                    metadata: dict[str, Any]) -> Path:
    """Writes `checkpoints/gen-GGGG` atomically (`replace_checkpoint`: a temporary directory,
    then renamed, Ctrl-C held off during the renames)."""
    target = generation_dir(run_dir, generation)
    replace_checkpoint(target, model, ARCHITECTURE, metadata)
    return target


def load_generation(path: Path, network: dict[str, int], device: str) -> tuple[Connect4PV, dict]:
    """Loads a connect4_pv checkpoint of the sizes `network` (its board, columns and rows, and
    policy width included).

    Raises:
        CheckpointError: unreadable, another architecture, or other sizes or board; names the
            path.
    """
    checkpoint = load_checkpoint(path, device=device)
    if checkpoint.architecture != ARCHITECTURE:
        raise CheckpointError(f"{path / 'config.json'}: architecture {checkpoint.architecture!r}, "
                              f"expected {ARCHITECTURE!r}")
    sizes = dataclasses.asdict(checkpoint.model.config)  # fields a config.json lacks: defaults
    if {key: sizes.get(key) for key in network} != network:
        raise CheckpointError(f"{path / 'config.json'}: network {checkpoint.config}, but the run "
                              f"trains {network}")
    return checkpoint.model, checkpoint.metadata


def write_best(run_dir: Path, generation: int, iteration: int) -> None:
    """Points `best.json` at the best `generation` and says which generation the learner is
    collecting self-play for (`iteration`; actors tag their shards with it). Atomic."""
    handle, temporary = tempfile.mkstemp(dir=run_dir, prefix=f".{BEST_FILE}.")
    with open(handle, "w") as out:
        json.dump({"generation": generation, "iteration": iteration,
                   "checkpoint": str(generation_dir(run_dir, generation).relative_to(run_dir))},
                  out)
    Path(temporary).chmod(0o644)
    Path(temporary).replace(run_dir / BEST_FILE)


def read_best(run_dir: Path) -> tuple[int, int] | None:
    """(best generation, iteration) from `best.json`; None when there is none yet.

    Raises:
        CheckpointError: `best.json` is unreadable (names the file).
    """
    path = run_dir / BEST_FILE
    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text())
        return int(document["generation"]), int(document["iteration"])
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: unreadable ({error!r})") from error
