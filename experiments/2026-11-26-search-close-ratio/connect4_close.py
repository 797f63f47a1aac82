"""Does another round of search bring agreement with the network? The measurement behind
`ORCHESTRATOR_SEARCH_CLOSE_RATIO` (`services.orchestrator.agents.mcts`, the CLOSE criterion).

For every Pons position with at most `--max-moves` moves, this script asks a running mesh's mcts
and neural services what the consensus loop's first three rounds would: the network's column, and
searches of S, S and 2S simulations with seeds 0, 1, 2 merged at the root (`merge_at_root`), as
the mcts agent continues its search. Where round one disagrees with the network, it records the
network column's visits as a share of the best column's. Per threshold it prints how many
disagreements would stop after round one, on how many continuing reached agreement, on how many
it changed the answer, and, judged by the exact solver (`keeps_outcome`), how many kept outcomes
continuing gained and lost.

    .venv/bin/mcts-mesh up --port-base 21000 --rest-port 21080 &
    .venv/bin/python experiments/2026-11-26-search-close-ratio/connect4_close.py \\
        --mcts 127.0.0.1:21001 --neural 127.0.0.1:21002 \\
        [--simulations 2000] [--max-moves 13]

Judging an opening's move can take the exact solver a minute (Begin-Hard).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-24-checker-budget"))
from connect4_checker_budget import pons_dir  # noqa: E402

from libs.connect4.board import Position  # noqa: E402
from libs.connect4.outcome import keeps_outcome  # noqa: E402
from libs.connect4.pons import read_pons  # noqa: E402
from services.orchestrator.agents.mcts import merge_at_root, most_visited  # noqa: E402

FILES = ["Test_L1_R1", "Test_L1_R2", "Test_L1_R3", "Test_L2_R1", "Test_L2_R2"]
THRESHOLDS = [0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]


@dataclass(frozen=True)
class Disagreement:
    moves: str
    score: int
    network: int
    answers: tuple[int, int, int]
    share: float


def rounds(mcts, moves: str, simulations: int) -> tuple[tuple[int, int, int], dict[int, int]]:
    """The best column after each of three rounds, and round one's visits per column."""
    merged = None
    answers, first = [], {}
    for seed, count in enumerate((simulations, simulations, 2 * simulations)):
        response = mcts.Search(mcts_service_pb2.SearchRequest(
            game=mcts_service_pb2.GAME_CONNECT_FOUR,
            connect_four=common_pb2.ConnectFourPosition(moves=moves),
            simulations=count, seed=seed))
        merged = response.statistics if merged is None else merge_at_root(merged,
                                                                            response.statistics)
        answers.append(most_visited(merged))
        if seed == 0:
            first = {action.action: action.visits for action in merged.actions}
    return (answers[0], answers[1], answers[2]), first


def network_column(neural, moves: str) -> int:
    evaluation = neural.EvaluatePositions(neural_service_pb2.EvaluatePositionsRequest(
        positions=[common_pb2.ConnectFourPosition(moves=moves)])).evaluations[0]
    position = Position.from_moves(moves)
    legal = [col for col in range(7) if position.can_play(col)]
    return max(legal, key=lambda col: (evaluation.policy[col], -abs(col - 3))) + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mcts", required=True, help="mcts service HOST:PORT")
    parser.add_argument("--neural", required=True, help="neural service HOST:PORT")
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--max-moves", type=int, default=13)
    parser.add_argument("--data", default=None)
    args = parser.parse_args()
    mcts = mcts_service_pb2_grpc.MctsServiceStub(grpc.insecure_channel(args.mcts))
    neural = neural_service_pb2_grpc.NeuralServiceStub(grpc.insecure_channel(args.neural))
    positions, found = 0, []
    for name in FILES:
        for moves, score in read_pons(pons_dir(args.data) / name, None):
            if len(moves) > args.max_moves:
                continue
            positions += 1
            network = network_column(neural, moves)
            answers, visits = rounds(mcts, moves, args.simulations)
            if answers[0] != network:
                share = visits.get(network, 0) / max(1, visits.get(answers[0], 0))
                found.append(Disagreement(moves, score, network, answers, share))
    print(f"{positions} positions, {len(found)} disagree after round one "
          f"({args.simulations} simulations)\n")
    judged = {d.moves: (keeps_outcome(d.moves, d.answers[0], d.score),
                        keeps_outcome(d.moves, d.answers[2], d.score))
              for d in found if d.share < max(THRESHOLDS) and d.answers[2] != d.answers[0]}
    print("| share below | stop after round one | agreement if continued | answer changed "
          "| kept gained by continuing | kept lost |")
    print("|---|---|---|---|---|---|")
    for threshold in THRESHOLDS:
        stopped = [d for d in found if d.share < threshold]
        agreed = sum(d.network in d.answers[1:] for d in stopped)
        changed = [judged[d.moves] for d in stopped if d.moves in judged]
        gained = sum(last and not first for first, last in changed)
        lost = sum(first and not last for first, last in changed)
        print(f"| {threshold} | {len(stopped)} | {agreed} | {len(changed)} | {gained} | {lost} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
