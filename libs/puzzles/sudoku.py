"""N x N Sudoku: parsing, an exact solver, the solution check and a generator.

A grid is an `np.ndarray` of shape `[N, N]`, dtype int8, row-major, with 0 for a blank cell and
1..N for a digit. The box shape is `BoxShape(box_rows, box_cols)` with `N = box_rows * box_cols`:
3x3 boxes for N = 9, 2x3 boxes (2 rows, 3 columns) for N = 6.

Solver: candidate bitmasks (bit `d - 1` for digit `d`) with constraint propagation (naked and
hidden singles to a fixed point) and depth-first search on the cell with the fewest candidates
(MRV), as in Norvig's "Solving Every Sudoku Puzzle" (norvig.com/sudoku.html). It counts solutions
up to a limit, so `limit=2` is the uniqueness check.

Augmentations (HRM's `shuffle_sudoku`) are in `libs.puzzles.sudoku_augment`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache

import numpy as np

MAX_STRING_SIZE = 9
"""Puzzle strings use one character per cell, so N is at most 9 there."""

BLANK_CHARS = ".0"


class PuzzleError(Exception):
    """Base of the Sudoku input errors; `message` is readable by a user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MalformedPuzzle(PuzzleError):
    """A puzzle string or grid of the wrong size, or with a character or value out of range.

    `index` is the 0-based offending cell (row-major) when one cell is at fault, else None.
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ContradictoryGivens(PuzzleError):
    """Two givens break a rule: the same digit twice in one row, column or box.

    Distinct from a puzzle whose givens are consistent but which has no solution (the solver then
    reports `count == 0`). `unit` is "row", "column" or "box", `unit_index` its 0-based number,
    `digit` the repeated digit and `cells` the `(row, col)` pairs that hold it.
    """

    def __init__(
        self, unit: str, unit_index: int, digit: int, cells: tuple[tuple[int, int], ...]
    ) -> None:
        where = ", ".join(f"r{r + 1}c{c + 1}" for r, c in cells)
        super().__init__(f"digit {digit} appears twice in {unit} {unit_index + 1} ({where})")
        self.unit = unit
        self.unit_index = unit_index
        self.digit = digit
        self.cells = cells


class GenerationFailed(PuzzleError):
    """The generator could not reach the requested number of blanks with a unique solution."""


@dataclass(frozen=True)
class BoxShape:
    """Box of `box_rows` rows by `box_cols` columns; the grid side is `box_rows * box_cols`."""

    box_rows: int
    box_cols: int

    @property
    def size(self) -> int:
        return self.box_rows * self.box_cols

    @property
    def bands(self) -> int:
        """Number of horizontal bands (groups of `box_rows` rows)."""
        return self.size // self.box_rows

    @property
    def stacks(self) -> int:
        """Number of vertical stacks (groups of `box_cols` columns)."""
        return self.size // self.box_cols

    def box_of(self, row: int, col: int) -> int:
        """0-based box number of a cell, boxes numbered row-major."""
        return (row // self.box_rows) * self.stacks + col // self.box_cols


def box_shape_for(size: int) -> BoxShape:
    """The usual box shape for an N x N grid: the most square `box_rows x box_cols` factorisation
    with `box_rows <= box_cols` (9 -> 3x3, 6 -> 2x3, 4 -> 2x2, 8 -> 2x4, 12 -> 3x4).

    Raises:
        MalformedPuzzle: N < 4 or N prime (no proper box).
    """
    rows = max((d for d in range(2, int(size**0.5) + 1) if size % d == 0), default=0)
    if size < 4 or rows == 0:
        raise MalformedPuzzle(f"no Sudoku box shape for a {size}x{size} grid")
    return BoxShape(rows, size // rows)


@dataclass(frozen=True)
class _Layout:
    """Cell groups of one box shape: `units[u]` is the cells of unit u (rows, then columns, then
    boxes); `peers[c]` the cells sharing a unit with cell c."""

    units: tuple[tuple[int, ...], ...]
    peers: tuple[tuple[int, ...], ...]


@cache
def _layout(shape: BoxShape) -> _Layout:
    n = shape.size
    rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
    cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
    boxes: list[list[int]] = [[] for _ in range(n)]
    for r in range(n):
        for c in range(n):
            boxes[shape.box_of(r, c)].append(r * n + c)
    units = tuple(rows + cols + [tuple(b) for b in boxes])
    peers = []
    for cell in range(n * n):
        r, c = divmod(cell, n)
        group = set(rows[r]) | set(cols[c]) | set(boxes[shape.box_of(r, c)])
        group.discard(cell)
        peers.append(tuple(sorted(group)))
    return _Layout(units=units, peers=tuple(peers))


def parse_puzzle(text: str, shape: BoxShape | None = None) -> np.ndarray:
    """Parse a puzzle string of N*N characters, row-major, '.' or '0' for a blank, '1'..'N' digits.

    Surrounding whitespace is stripped. `shape` defaults to `box_shape_for(N)`.

    Returns:
        `[N, N]` int8 grid, 0 for blanks.
    Raises:
        MalformedPuzzle: length not a square of 4..9 (or not matching `shape`), or a character
            outside the vocabulary (`index` names the cell).
    """
    text = text.strip()
    size = int(round(len(text) ** 0.5))
    if size * size != len(text) or not 4 <= size <= MAX_STRING_SIZE:
        raise MalformedPuzzle(
            f"expected N*N characters with N in 4..{MAX_STRING_SIZE}, got {len(text)}"
        )
    if shape is None:
        shape = box_shape_for(size)
    elif shape.size != size:
        raise MalformedPuzzle(f"expected {shape.size**2} characters, got {len(text)}")
    values = np.zeros(size * size, dtype=np.int8)
    for index, char in enumerate(text):
        if char in BLANK_CHARS:
            continue
        if not ("1" <= char <= "9") or int(char) > size:
            raise MalformedPuzzle(
                f"cell {index}: {char!r} is not '.', '0' or a digit 1..{size}", index=index
            )
        values[index] = int(char)
    return values.reshape(size, size)


def format_grid(grid: np.ndarray, blank: str = ".") -> str:
    """The puzzle string of a grid (inverse of `parse_puzzle`), `blank` for 0 cells."""
    return "".join(blank if v == 0 else str(int(v)) for v in np.asarray(grid).ravel())


def _default_shape(grid: np.ndarray) -> BoxShape:
    if grid.ndim != 2 or grid.shape[0] != grid.shape[1]:
        raise MalformedPuzzle(f"expected a square grid, got shape {grid.shape}")
    return box_shape_for(grid.shape[0])


def _check_grid(grid: np.ndarray, shape: BoxShape) -> np.ndarray:
    grid = np.asarray(grid)
    n = shape.size
    if grid.shape != (n, n):
        raise MalformedPuzzle(f"expected a {n}x{n} grid, got shape {grid.shape}")
    flat = grid.ravel()
    bad = np.flatnonzero((flat < 0) | (flat > n))
    if bad.size:
        index = int(bad[0])
        raise MalformedPuzzle(f"cell {index}: value {int(flat[index])} outside 0..{n}", index)
    return grid.astype(np.int8)


def find_conflict(grid: np.ndarray, shape: BoxShape) -> ContradictoryGivens | None:
    """The first repeated digit in a row, column or box of `grid` (blanks ignored), or None."""
    grid = _check_grid(grid, shape)
    n = shape.size
    for kind, base in (("row", 0), ("column", n), ("box", 2 * n)):
        for k in range(n):
            seen: dict[int, int] = {}
            for cell in _layout(shape).units[base + k]:
                digit = int(grid.flat[cell])
                if digit == 0:
                    continue
                if digit in seen:
                    cells = tuple(divmod(c, n) for c in (seen[digit], cell))
                    return ContradictoryGivens(kind, k, digit, cells)
                seen[digit] = cell
    return None


@dataclass(frozen=True)
class SolveResult:
    """Outcome of `solve`.

    Attributes:
        solution: the first solution found, `[N, N]` int8, or None when there is none.
        count: solutions found, capped at the `limit` passed to `solve` (0: unsolvable).
        nodes: search nodes visited (1 when propagation alone solves it).
    """

    solution: np.ndarray | None
    count: int
    nodes: int

    @property
    def unique(self) -> bool:
        return self.count == 1


class SearchStopped(Exception):
    """`solve` ran out of its node budget or was stopped (`stop` set) before it finished."""

    def __init__(self, nodes: int, reason: str) -> None:
        super().__init__(f"search stopped after {nodes} nodes: {reason}")
        self.nodes = nodes
        self.reason = reason


class _Search:
    """Depth-first search over candidate bitmasks; one instance per `solve` call."""

    def __init__(self, shape: BoxShape, limit: int, rng: np.random.Generator | None,
                 max_nodes: int | None = None, stop: threading.Event | None = None) -> None:
        self.max_nodes = max_nodes
        self.stop = stop
        layout = _layout(shape)
        self.units = layout.units
        self.peers = layout.peers
        self.full = (1 << shape.size) - 1
        self.limit = limit
        self.rng = rng
        self.solutions: list[list[int]] = []
        self.nodes = 0

    def propagate(self, cand: list[int], placed: list[bool]) -> bool:
        """Naked and hidden singles to a fixed point, in place. False on a contradiction."""
        peers = self.peers
        changed = True
        while changed:
            changed = False
            for cell, mask in enumerate(cand):
                if placed[cell] or mask & (mask - 1):
                    continue
                if mask == 0:
                    return False
                placed[cell] = True
                changed = True
                for peer in peers[cell]:
                    if cand[peer] & mask:
                        cand[peer] &= ~mask
                        if cand[peer] == 0:
                            return False
            for unit in self.units:
                once = twice = 0
                for cell in unit:
                    mask = cand[cell]
                    twice |= once & mask
                    once |= mask
                if once != self.full:
                    return False
                hidden = once & ~twice
                if not hidden:
                    continue
                for cell in unit:
                    mask = cand[cell] & hidden
                    if mask and cand[cell] != mask:
                        if mask & (mask - 1):
                            return False  # two digits can only go in this one cell
                        cand[cell] = mask
                        changed = True
        return True

    def run(self, cand: list[int], placed: list[bool]) -> None:
        self.nodes += 1
        if self.max_nodes is not None and self.nodes > self.max_nodes:
            raise SearchStopped(self.nodes - 1, f"node budget of {self.max_nodes}")
        if self.stop is not None and self.nodes % 64 == 0 and self.stop.is_set():
            raise SearchStopped(self.nodes, "stopped by the caller (time budget)")
        if not self.propagate(cand, placed):
            return
        best, best_count = -1, 1 << 30
        for cell, mask in enumerate(cand):
            if not placed[cell]:
                count = mask.bit_count()
                if count < best_count:
                    best, best_count = cell, count
                    if count == 2:
                        break
        if best < 0:
            self.solutions.append(cand)
            return
        mask = cand[best]
        bits = [1 << d for d in range(mask.bit_length()) if mask >> d & 1]
        if self.rng is not None:
            bits = [bits[i] for i in self.rng.permutation(len(bits))]
        for bit in bits:
            child = cand.copy()
            child[best] = bit
            self.run(child, placed.copy())
            if len(self.solutions) >= self.limit:
                return


def solve(
    puzzle: np.ndarray,
    shape: BoxShape | None = None,
    limit: int = 2,
    rng: np.random.Generator | None = None,
    max_nodes: int | None = None,
    stop: threading.Event | None = None,
) -> SolveResult:
    """Solve exactly, counting solutions up to `limit` (2 decides uniqueness).

    Args:
        puzzle: `[N, N]` integer grid, 0 for blanks.
        shape: box shape; defaults to `box_shape_for(N)`.
        limit: stop after this many solutions (>= 1).
        rng: when given, digits are tried in a random order (the generator uses it to draw a
            random full grid); otherwise in increasing order, so results are deterministic.
        max_nodes: search nodes at most (None: no limit).
        stop: set from another thread to stop the search (a time budget); checked every 64 nodes.
    Returns:
        `SolveResult`; `count == 0` means consistent givens with no solution.
    Raises:
        MalformedPuzzle: wrong shape or values out of 0..N.
        ContradictoryGivens: two givens repeat a digit in a row, column or box.
        SearchStopped: the node budget ran out, or `stop` was set, before the search finished.
    """
    puzzle = np.asarray(puzzle)
    if shape is None:
        shape = _default_shape(puzzle)
    if limit < 1:
        raise ValueError("limit must be at least 1")
    conflict = find_conflict(puzzle, shape)
    if conflict is not None:
        raise conflict
    n = shape.size
    search = _Search(shape, limit, rng, max_nodes, stop)
    cand = [search.full] * (n * n)
    for cell, digit in enumerate(puzzle.ravel().tolist()):
        if digit:
            cand[cell] = 1 << (digit - 1)
    search.run(cand, [False] * (n * n))
    solution = None
    if search.solutions:
        digits = [mask.bit_length() for mask in search.solutions[0]]
        solution = np.array(digits, dtype=np.int8).reshape(n, n)
    return SolveResult(solution=solution, count=len(search.solutions), nodes=search.nodes)


@dataclass(frozen=True)
class SolutionCheck:
    """Result of `check_solution`.

    Attributes:
        blanks: cells of the candidate that are 0.
        violations: `(unit, index)` pairs ("row" | "column" | "box", 0-based) that do not hold each
            digit 1..N exactly once.
        changed_givens: `(row, col)` cells where the candidate differs from a given of the puzzle.
    """

    blanks: int
    violations: tuple[tuple[str, int], ...]
    changed_givens: tuple[tuple[int, int], ...]

    @property
    def valid(self) -> bool:
        return self.blanks == 0 and not self.violations and not self.changed_givens


def check_solution(
    puzzle: np.ndarray, candidate: np.ndarray, shape: BoxShape | None = None
) -> SolutionCheck:
    """Check a proposed solution against the rules and the puzzle's givens.

    A candidate that passes is *a* solution; for a puzzle with a unique solution it is *the* one.

    Raises:
        MalformedPuzzle: either grid has the wrong shape or values out of 0..N.
    """
    puzzle = np.asarray(puzzle)
    if shape is None:
        shape = _default_shape(puzzle)
    puzzle = _check_grid(puzzle, shape)
    candidate = _check_grid(candidate, shape)
    n = shape.size
    flat = candidate.ravel()
    violations = []
    names = ("row", "column", "box")
    for u, unit in enumerate(_layout(shape).units):
        if sorted(flat[list(unit)].tolist()) != list(range(1, n + 1)):
            violations.append((names[u // n], u % n))
    changed = np.argwhere((puzzle != 0) & (puzzle != candidate))
    return SolutionCheck(
        blanks=int((flat == 0).sum()),
        violations=tuple(violations),
        changed_givens=tuple((int(r), int(c)) for r, c in changed),
    )


def random_solution(shape: BoxShape, rng: np.random.Generator) -> np.ndarray:
    """A uniformly shuffled search's first full grid: `[N, N]` int8, every unit 1..N once."""
    n = shape.size
    result = solve(np.zeros((n, n), dtype=np.int8), shape, limit=1, rng=rng)
    if result.solution is None:
        raise RuntimeError(f"the solver found no solution of an empty {n}x{n} grid "
                           "(an empty grid always has one)")
    return result.solution


def generate(
    shape: BoxShape, blanks: int, rng: np.random.Generator, attempts: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """A puzzle with exactly `blanks` empty cells and a unique solution.

    Draws a random full grid, then visits the cells in random order and blanks each one whose
    removal keeps the solution unique, stopping at `blanks`. Starts over with a fresh grid (up to
    `attempts` times) when the removal gets stuck first.

    Returns:
        `(puzzle, solution)`, both `[N, N]` int8; the puzzle has 0 in exactly `blanks` cells.
    Raises:
        ValueError: `blanks` outside 0..N*N.
        GenerationFailed: no grid reached `blanks` within `attempts` (too many blanks asked).
    """
    n = shape.size
    if not 0 <= blanks <= n * n:
        raise ValueError(f"blanks must be in 0..{n * n}, got {blanks}")
    for _ in range(attempts):
        solution = random_solution(shape, rng)
        puzzle = solution.copy()
        flat = puzzle.reshape(-1)
        removed = 0
        for cell in rng.permutation(n * n):
            if removed == blanks:
                break
            digit = flat[cell]
            flat[cell] = 0
            if _only_solution_keeps(puzzle, shape, int(cell), int(digit)):
                removed += 1
            else:
                flat[cell] = digit
        if removed == blanks:
            return puzzle, solution
    raise GenerationFailed(
        f"no {n}x{n} puzzle with {blanks} blanks and a unique solution in {attempts} attempts"
    )


def _only_solution_keeps(puzzle: np.ndarray, shape: BoxShape, cell: int, digit: int) -> bool:
    """True when the solution (with `digit` at the just-blanked `cell`) is still the only one:
    no other digit at that cell leads to a solution."""
    flat = puzzle.reshape(-1)
    for other in range(1, shape.size + 1):
        if other == digit:
            continue
        flat[cell] = other
        try:
            found = solve(puzzle, shape, limit=1).count
        except ContradictoryGivens:
            found = 0
        if found:
            flat[cell] = 0
            return False
    flat[cell] = 0
    return True
