"""Mazes: a seeded generator, BFS shortest-path labels, the path check, HRM's token encoding.

A maze is an `np.ndarray` `[H, W]` uint8 of token ids, as in HRM's `dataset/build_maze_dataset.py`
(sapientinc/HRM), which maps the characters of `CHARSET = "# SGo"` to 1..5 and keeps 0 for padding:
wall '#' = 1, open ' ' = 2, start 'S' = 3, goal 'G' = 4, path 'o' = 5. A question has no path
cells; its answer marks the cells of a shortest path strictly between S and G with 'o'. Moves are
4-connected. HRM's Maze-Hard puzzles are 30x30 with shortest paths of length >= 110.

Generator: the recursive backtracker (randomised depth-first search) on a `rows x cols` lattice of
cells, drawn on a `(2 rows + 1) x (2 cols + 1)` grid where odd coordinates are cells and the walls
between them are knocked down as the search carves; the result is a perfect maze (one path between
any two cells). `extra_openings` then removes more interior walls, which creates loops, so shortest
paths need not be unique and the checker accepts any path of optimal length.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

CHARSET = "# SGo"
PAD, WALL, OPEN, START, GOAL, PATH = range(6)
"""Token ids: `CHARSET[i]` has id `i + 1`; 0 is padding."""

_STEPS = ((-1, 0), (1, 0), (0, -1), (0, 1))


class MalformedMaze(Exception):
    """A maze string or grid that is not a maze: wrong size, unknown character, not exactly one
    'S' and one 'G'."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_maze(text: str, width: int | None = None) -> np.ndarray:
    """Parse a row-major string over `CHARSET` into an `[H, W]` uint8 token grid.

    `width` defaults to the square root of the length (HRM's mazes are square).

    Raises:
        MalformedMaze: the length is not a multiple of `width` (or not a square), or a character
            is outside "# SGo".
    """
    if width is None:
        width = int(round(len(text) ** 0.5))
        if width * width != len(text) or width == 0:
            raise MalformedMaze(f"length {len(text)} is not a square")
    if width <= 0 or len(text) % width:
        raise MalformedMaze(f"length {len(text)} is not a multiple of width {width}")
    lookup = np.zeros(256, dtype=np.uint8)
    lookup[np.frombuffer(CHARSET.encode(), dtype=np.uint8)] = np.arange(1, len(CHARSET) + 1)
    try:
        raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    except UnicodeEncodeError as error:
        raise MalformedMaze("non-ASCII character in maze") from error
    tokens = lookup[raw]
    bad = np.flatnonzero(tokens == PAD)
    if bad.size:
        raise MalformedMaze(f"cell {int(bad[0])}: {text[int(bad[0])]!r} is not one of {CHARSET!r}")
    return tokens.reshape(-1, width)


def format_maze(grid: np.ndarray) -> str:
    """The row-major `CHARSET` string of a token grid (inverse of `parse_maze`)."""
    return "".join(CHARSET[int(t) - 1] for t in np.asarray(grid).ravel())


def _endpoint(grid: np.ndarray, token: int) -> tuple[int, int]:
    found = np.argwhere(grid == token)
    if len(found) != 1:
        name = CHARSET[token - 1]
        raise MalformedMaze(f"expected exactly one {name!r}, found {len(found)}")
    return int(found[0][0]), int(found[0][1])


def distances_from(grid: np.ndarray, source: tuple[int, int]) -> np.ndarray:
    """BFS step counts from `source` to every non-wall cell: `[H, W]` int32, -1 where unreachable
    or wall."""
    height, width = grid.shape
    dist = np.full((height, width), -1, dtype=np.int32)
    dist[source] = 0
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for dr, dc in _STEPS:
            nr, nc = r + dr, c + dc
            if 0 <= nr < height and 0 <= nc < width and dist[nr, nc] < 0 and grid[nr, nc] != WALL:
                dist[nr, nc] = dist[r, c] + 1
                queue.append((nr, nc))
    return dist


def shortest_path(grid: np.ndarray) -> list[tuple[int, int]] | None:
    """A shortest S-to-G path as `(row, col)` cells, S first and G last, or None if G is
    unreachable. Ties (mazes with loops) go to the first neighbour in up, down, left, right order
    walking back from G.

    Raises:
        MalformedMaze: not exactly one 'S' and one 'G'.
    """
    grid = np.asarray(grid)
    start, goal = _endpoint(grid, START), _endpoint(grid, GOAL)
    dist = distances_from(grid, start)
    if dist[goal] < 0:
        return None
    path = [goal]
    r, c = goal
    while (r, c) != start:
        for dr, dc in _STEPS:
            nr, nc = r + dr, c + dc
            if (
                0 <= nr < grid.shape[0]
                and 0 <= nc < grid.shape[1]
                and dist[nr, nc] == dist[r, c] - 1
            ):
                r, c = nr, nc
                break
        path.append((r, c))
    return path[::-1]


def solve_maze(question: np.ndarray) -> np.ndarray:
    """The answer grid: `question` with 'o' on the cells of `shortest_path` strictly between S
    and G.

    Raises:
        MalformedMaze: not exactly one 'S' and one 'G', or G unreachable.
    """
    path = shortest_path(question)
    if path is None:
        raise MalformedMaze("goal unreachable from start")
    answer = np.array(question, dtype=np.uint8, copy=True)
    for cell in path[1:-1]:
        answer[cell] = PATH
    return answer


@dataclass(frozen=True)
class PathCheck:
    """Result of `check_path`.

    Attributes:
        valid: the answer keeps the question's walls, S and G, marks only open cells, and the
            marked cells with S and G form one simple 4-connected path from S to G.
        length: steps of the marked path (marked cells + 1), or -1 when not valid.
        shortest: the BFS shortest-path length of the question (-1 if G is unreachable).
    """

    valid: bool
    length: int
    shortest: int

    @property
    def optimal(self) -> bool:
        return self.valid and self.length == self.shortest


def check_path(question: np.ndarray, answer: np.ndarray) -> PathCheck:
    """Check a proposed answer (token grid with 'o' path cells) against a question.

    Raises:
        MalformedMaze: the question has not exactly one 'S' and one 'G'.
    """
    question = np.asarray(question)
    answer = np.asarray(answer)
    start, goal = _endpoint(question, START), _endpoint(question, GOAL)
    shortest = int(distances_from(question, start)[goal])
    invalid = PathCheck(valid=False, length=-1, shortest=shortest)
    if answer.shape != question.shape:
        return invalid
    marked = answer == PATH
    if np.any(marked & (question != OPEN)) or np.any(~marked & (answer != question)):
        return invalid
    on_path = marked.copy()
    on_path[start] = on_path[goal] = True
    padded = np.pad(on_path, 1)
    neighbours = (
        padded[:-2, 1:-1].astype(int) + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]
    )
    if neighbours[start] != 1 or neighbours[goal] != 1 or np.any(neighbours[marked] != 2):
        return invalid
    # Degrees 1, 2, ..., 2, 1 make a path plus possibly separate cycles; connectivity rules
    # the cycles out.
    reach = distances_from(np.where(on_path, OPEN, WALL).astype(np.uint8), start)
    if np.any(on_path & (reach < 0)):
        return invalid
    return PathCheck(valid=True, length=int(on_path.sum()) - 1, shortest=shortest)


def generate_maze(
    rows: int,
    cols: int,
    rng: np.random.Generator,
    extra_openings: int = 0,
    min_path_length: int = 0,
    attempts: int = 50,
) -> tuple[np.ndarray, np.ndarray]:
    """A random maze with start and goal and its shortest-path label.

    Args:
        rows, cols: lattice cells; the grid is `[2 rows + 1, 2 cols + 1]`.
        rng: the only source of randomness (same seed, same maze).
        extra_openings: interior walls removed after carving (loops; 0 gives a perfect maze).
        min_path_length: S and G are drawn among lattice cells at least this many steps apart.
        attempts: redraws of the maze before giving up on `min_path_length`.
    Returns:
        `(question, answer)` uint8 token grids; `answer = solve_maze(question)`.
    Raises:
        ValueError: `rows` or `cols` < 1, or no maze met `min_path_length` within `attempts`.
    """
    if rows < 1 or cols < 1:
        raise ValueError("rows and cols must be at least 1")
    for _ in range(attempts):
        grid = _carve(rows, cols, rng)
        _open_extra_walls(grid, extra_openings, rng)
        cells = [(2 * r + 1, 2 * c + 1) for r in range(rows) for c in range(cols)]
        start = cells[int(rng.integers(len(cells)))]
        dist = distances_from(grid, start)
        far = [cell for cell in cells if dist[cell] >= max(min_path_length, 1)]
        if not far:
            continue
        goal = far[int(rng.integers(len(far)))]
        grid[start], grid[goal] = START, GOAL
        return grid, solve_maze(grid)
    raise ValueError(f"no {rows}x{cols} maze with a path of {min_path_length} steps")


def _carve(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Recursive backtracker with an explicit stack; returns the grid of walls and open cells."""
    grid = np.full((2 * rows + 1, 2 * cols + 1), WALL, dtype=np.uint8)
    visited = np.zeros((rows, cols), dtype=bool)
    first = (int(rng.integers(rows)), int(rng.integers(cols)))
    visited[first] = True
    grid[2 * first[0] + 1, 2 * first[1] + 1] = OPEN
    stack = [first]
    while stack:
        r, c = stack[-1]
        options = [
            (r + dr, c + dc)
            for dr, dc in _STEPS
            if 0 <= r + dr < rows and 0 <= c + dc < cols and not visited[r + dr, c + dc]
        ]
        if not options:
            stack.pop()
            continue
        nr, nc = options[int(rng.integers(len(options)))]
        visited[nr, nc] = True
        grid[r + nr + 1, c + nc + 1] = OPEN  # the wall between the two cells
        grid[2 * nr + 1, 2 * nc + 1] = OPEN
        stack.append((nr, nc))
    return grid


def _open_extra_walls(grid: np.ndarray, count: int, rng: np.random.Generator) -> None:
    """Open `count` (at most all) closed walls that separate two lattice cells."""
    height, width = grid.shape
    walls = [
        (r, c)
        for r in range(1, height - 1)
        for c in range(1, width - 1)
        if grid[r, c] == WALL and (r % 2) != (c % 2)
    ]
    for index in rng.permutation(len(walls))[:count]:
        grid[walls[int(index)]] = OPEN
