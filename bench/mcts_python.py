"""A plain object-per-node pure-Python UCT for Connect Four, the baseline of bench/mcts.py.

One object per node with a list of children, Python-int bitboards (7 columns of 7 bits, the top
bit of each a sentinel), UCB1 `Q + c * sqrt(ln N / n)` with unvisited children first, the
expansion rule of `services.mcts.rollout.engine` (the root at once, other leaves on their second
visit, then one step into the first new child), one rollout per simulation, negamax backup.
Rollouts are uniformly random (`decisive=False`, as OpenSpiel's RandomRolloutEvaluator) or take
immediate wins and block immediate losses (`decisive=True`, Teytaud & Teytaud 2010, as our default).
"""

from __future__ import annotations

import math
import random

WIDTH, HEIGHT, H1 = 7, 6, 7
CELLS = WIDTH * HEIGHT
BOTTOM = sum(1 << (c * H1) for c in range(WIDTH))
BOARD = BOTTOM * ((1 << HEIGHT) - 1)


def completing(stones: int) -> int:
    """Cells completing four in a row for `stones` (occupied or not)."""
    r = (stones << 1) & (stones << 2) & (stones << 3)
    for shift in (H1, HEIGHT, HEIGHT + 2):
        p = (stones << shift) & (stones << 2 * shift)
        r |= p & (stones << 3 * shift)
        r |= p & (stones >> shift)
        p = (stones >> shift) & (stones >> 2 * shift)
        r |= p & (stones << shift)
        r |= p & (stones >> 3 * shift)
    return r & BOARD


def playable(mask: int) -> list[int]:
    """Single-bit moves: the lowest empty cell of each non-full column, left to right."""
    cells = (mask + BOTTOM) & BOARD
    return [cells & (((1 << HEIGHT) - 1) << (c * H1)) for c in range(WIDTH)
            if cells & (((1 << HEIGHT) - 1) << (c * H1))]


class Node:
    __slots__ = ("parent", "move", "children", "visits", "value_sum", "won", "drawn")

    def __init__(self, parent: Node | None, move: int, won: bool, drawn: bool) -> None:
        self.parent = parent
        self.move = move
        self.children: list[Node] = []
        self.visits = 0
        self.value_sum = 0.0
        self.won = won
        self.drawn = drawn


def rollout(position: int, mask: int, num_moves: int, rng: random.Random,
            decisive: bool = True) -> float:
    """Result of one random game from the position (`position`: stones of the player to move),
    for the player to move: +1 win, -1 loss, 0 draw."""
    sign = 1.0
    mine, theirs = position, position ^ mask
    while num_moves < CELLS:
        moves = playable(mask)
        if decisive:
            cells = sum(moves)
            if completing(mine) & cells:
                return sign
            threats = completing(theirs) & cells
            move = threats & -threats if threats else rng.choice(moves)
        else:
            move = rng.choice(moves)
            if completing(mine) & move:
                return sign
        mine |= move
        mask |= move
        mine, theirs = theirs, mine
        num_moves += 1
        sign = -sign
    return 0.0


def python_uct(simulations: int, exploration: float, seed: int, decisive: bool = True) -> Node:
    """Pure-Python UCT from the empty board with `simulations` simulations; returns the root
    (`root.visits == simulations`)."""
    rng = random.Random(seed)
    root = Node(None, 0, False, False)
    for _ in range(simulations):
        node, position, mask, num_moves = root, 0, 0, 0
        while node.children:
            log_n = math.log(node.visits)
            best, best_score = node.children[0], -math.inf
            for child in node.children:
                if child.visits == 0:
                    best = child
                    break
                score = child.value_sum / child.visits + exploration * math.sqrt(
                    log_n / child.visits)
                if score > best_score:
                    best, best_score = child, score
            node = best
            position, mask = position ^ mask, mask | node.move
            num_moves += 1
        if not (node.won or node.drawn) and (node is root or node.visits > 0):
            wins = completing(position)
            node.children = [Node(node, move, bool(wins & move), num_moves + 1 == CELLS)
                             for move in playable(mask)]
            node = node.children[0]
            position, mask = position ^ mask, mask | node.move
            num_moves += 1
        if node.won:
            value = 1.0
        elif node.drawn:
            value = 0.0
        else:
            value = -rollout(position, mask, num_moves, rng, decisive)
        while node is not None:
            node.visits += 1
            node.value_sum += value
            value = -value
            node = node.parent
    return root


