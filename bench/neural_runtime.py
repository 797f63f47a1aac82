"""CPU cost of one forward pass of the shipped Connect Four network: torch against onnxruntime.

Loads `models/connect4-pv` (or `--model DIR`), builds the neural service's two runners (torch's
`connect4_pv.predict` and `OnnxPolicyValue`) with one intra-op thread each (the service's default
`NEURAL_TORCH_THREADS=1`), checks that they agree, then times them alternately on real positions
(Pons' Test_L2_R1, repeated to fill the batch) at batch sizes 1, 8 and 64, and prints the process
CPU time per forward pass (median of `--rounds` rounds) and the ratio torch / onnxruntime.

Where torch sees a GPU, a second table times the network there: eager torch (`predict`, one
kernel launch at a time) against `GraphedPolicyValue` (one CUDA graph replay per padded batch
size, what the service runs with `NEURAL_CUDA_GRAPHS=true`), wall-clock milliseconds per call,
numpy in and out (the host copies included, as in the service), at batch 1, 8, 64 and 256.

    .venv/bin/python bench/neural_runtime.py [--rounds 5] [--passes 300] [--devices cpu cuda]
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
from services.neural.cuda_graphs import GraphedPolicyValue
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


def _wall_ms(run, planes, legal, passes: int) -> float:
    started = time.perf_counter()
    for _ in range(passes):
        run(planes, legal)  # numpy out: each call waits for the GPU
    return (time.perf_counter() - started) * 1e3 / passes


def cuda_table(model_dir: Path, rounds: int, passes: int) -> None:
    """Eager torch against CUDA graphs on the GPU (see the module doc)."""
    network = load_checkpoint(model_dir, device="cuda").model.eval()
    graphed = GraphedPolicyValue(network, max_batch=256)
    graphed.capture_all()
    runners = {"eager": lambda p, m: predict(network, p, m), "graphs": graphed.predict}
    print(f"\n{torch.cuda.get_device_name()}: wall ms per call (numpy in and out), median of "
          f"{rounds} rounds")
    print("| batch | eager torch ms | CUDA graphs ms | eager / graphs | max |policy diff| |")
    print("|---|---|---|---|---|")
    _compare(runners, (1, 8, 64, 256), rounds, lambda rows: passes, _wall_ms)


def _compare(runners: dict, sizes, rounds: int, passes_of, timer) -> None:
    """Prints one row per batch size: the two runners' median ms (the first is the baseline),
    their ratio and the largest policy difference; rounds interleave the runners."""
    baseline, candidate = runners
    for rows in sizes:
        planes, legal = _positions(rows)
        diff = float(np.abs(runners[baseline](planes, legal)[0]
                            - runners[candidate](planes, legal)[0]).max())
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(rounds):
            for name, run in runners.items():
                run(planes, legal)
                times[name].append(timer(run, planes, legal, passes_of(rows)))
        slow, fast = statistics.median(times[baseline]), statistics.median(times[candidate])
        print(f"| {rows} | {slow:.3f} | {fast:.3f} | {slow / fast:.1f}x | {diff:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "connect4-pv")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], default=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.passes = 1, 5
    if "cpu" in args.devices:
        cpu_table(args.model, args.rounds, args.passes)
    if "cuda" in args.devices:
        if torch.cuda.is_available():
            cuda_table(args.model, args.rounds, args.passes)
        else:
            print(f"\nCUDA rows not measured: torch {torch.__version__} sees no CUDA device")


def cpu_table(model_dir: Path, rounds: int, passes_per_round: int) -> None:
    """torch against onnxruntime on the CPU, process CPU ms per pass (see the module doc)."""
    torch.set_num_threads(1)
    network = load_checkpoint(model_dir).model.eval()
    runners = {"torch": lambda p, m: predict(network, p, m),
               "onnxruntime": OnnxPolicyValue(network, threads=1).predict}
    print(f"model {model_dir.name}; process CPU ms per forward pass, median of {rounds} "
          f"rounds of {passes_per_round} passes; one intra-op thread")
    print("| batch | torch ms | onnxruntime ms | torch / onnxruntime | max |policy diff| |")
    print("|---|---|---|---|---|")
    _compare(runners, (1, 8, 64), rounds, lambda rows: max(10, passes_per_round // rows), _cpu_ms)


if __name__ == "__main__":
    main()
