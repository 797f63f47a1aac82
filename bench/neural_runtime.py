"""CPU cost of one forward pass of the shipped Connect Four network: torch against onnxruntime.

Loads `models/connect4-pv` (or `--model DIR`), builds the neural service's two runners (torch's
`connect4_pv.predict` and `OnnxPolicyValue`) with one intra-op thread each (the service's default
`NEURAL_TORCH_THREADS=1`), checks that they agree, then times them alternately on real positions
(Pons' Test_L2_R1, repeated to fill the batch) at batch sizes 1, 8 and 64, and prints the process
CPU time per forward pass (median of `--rounds` rounds) and the ratio torch / onnxruntime.

    .venv/bin/python bench/neural_runtime.py [--rounds 5] [--passes 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from libs.connect4.board import Position, encode, legal_mask
from services.neural.checkpoint import load_checkpoint
from services.neural.models.connect4_onnx import OnnxPolicyValue
from services.neural.models.connect4_pv import predict

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "connect4-pons" / "Test_L2_R1"


def _positions(rows: int) -> tuple[np.ndarray, np.ndarray]:
    moves = [line.split()[0] for line in DATA.read_text().splitlines() if line.strip()]
    boards = [Position.from_moves(moves[i % len(moves)]) for i in range(rows)]
    return (np.stack([encode(b) for b in boards]).astype(np.float32),
            np.stack([legal_mask(b) for b in boards]))


def _cpu_ms(run, planes, legal, passes: int) -> float:
    started = time.process_time()
    for _ in range(passes):
        run(planes, legal)
    return (time.process_time() - started) * 1e3 / passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "connect4-pv")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    network = load_checkpoint(args.model).model.eval()
    runners = {"torch": lambda p, m: predict(network, p, m),
               "onnxruntime": OnnxPolicyValue(network, threads=1).predict}
    print(f"model {args.model.name}; process CPU ms per forward pass, median of {args.rounds} "
          f"rounds of {args.passes} passes; one intra-op thread")
    print("| batch | torch ms | onnxruntime ms | torch / onnxruntime | max |policy diff| |")
    print("|---|---|---|---|---|")
    for rows in (1, 8, 64):
        planes, legal = _positions(rows)
        diff = float(np.abs(runners["torch"](planes, legal)[0]
                            - runners["onnxruntime"](planes, legal)[0]).max())
        passes = max(10, args.passes // rows)
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, run in runners.items():
                run(planes, legal)
                times[name].append(_cpu_ms(run, planes, legal, passes))
        slow, fast = statistics.median(times["torch"]), statistics.median(times["onnxruntime"])
        print(f"| {rows} | {slow:.3f} | {fast:.3f} | {slow / fast:.1f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
