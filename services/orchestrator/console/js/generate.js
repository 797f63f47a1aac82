// Puzzles generated in the browser, from a seed (the same seed gives the same puzzle), in the
// formats SolveProblem takes.
//
// Sudoku: a random full grid (a depth-first search trying digits in a shuffled order), then the
// cells in a shuffled order, each blanked when the grid still has exactly one solution (counted by
// a search that stops at two), as libs/puzzles/sudoku.py's `generate` does.
// Maze: a recursive backtracker carves a perfect maze on a lattice; S is a random cell and G the
// cell farthest from it.

// mulberry32: a small seeded generator of floats in [0, 1).
export function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffled(items, rand) {
  const out = items.slice();
  for (let i = out.length - 1; i > 0; i -= 1) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

export const BOXES = { 4: [2, 2], 6: [2, 3], 8: [2, 4], 9: [3, 3] };

// Solutions of `grid` (N*N numbers, 0 blank) counted up to `limit`: { count, solution }.
export function solveSudoku(grid, n, limit = 2, rand = null) {
  const [boxRows, boxCols] = BOXES[n];
  const cells = grid.slice();
  const unitsOf = (i) => {
    const r = Math.floor(i / n), c = i % n;
    return [r, n + c, 2 * n + Math.floor(r / boxRows) * (n / boxCols) + Math.floor(c / boxCols)];
  };
  const used = new Array(3 * n).fill(0);
  for (let i = 0; i < n * n; i += 1) {
    if (!cells[i]) continue;
    const bit = 1 << (cells[i] - 1);
    if (unitsOf(i).some((u) => used[u] & bit)) return { count: 0, solution: null };
    for (const u of unitsOf(i)) used[u] |= bit;
  }
  let count = 0, solution = null;
  const search = () => {
    let best = -1, bestOptions = 0, bestSize = n + 1;
    for (let i = 0; i < n * n; i += 1) {
      if (cells[i]) continue;
      const [a, b, c] = unitsOf(i);
      const options = ~(used[a] | used[b] | used[c]) & ((1 << n) - 1);
      let size = 0;
      for (let m = options; m; m &= m - 1) size += 1;
      if (size < bestSize) { best = i; bestOptions = options; bestSize = size; }
      if (size === 0) return;
    }
    if (best < 0) {
      count += 1;
      if (!solution) solution = cells.slice();
      return;
    }
    let digits = [];
    for (let d = 1; d <= n; d += 1) if (bestOptions & (1 << (d - 1))) digits.push(d);
    if (rand) digits = shuffled(digits, rand);
    const units = unitsOf(best);
    for (const d of digits) {
      const bit = 1 << (d - 1);
      cells[best] = d;
      for (const u of units) used[u] |= bit;
      search();
      for (const u of units) used[u] &= ~bit;
      cells[best] = 0;
      if (count >= limit) return;
    }
  };
  search();
  return { count, solution };
}

// A Sudoku with `blanks` empty cells (fewer when no more can go) and a unique solution:
// { puzzle: "..3.4..", solution: "1234..." }.
export function generateSudoku(n, blanks, seed) {
  const rand = random(seed);
  const { solution } = solveSudoku(new Array(n * n).fill(0), n, 1, rand);
  const puzzle = solution.slice();
  let removed = 0;
  for (const cell of shuffled([...Array(n * n).keys()], rand)) {
    if (removed === blanks) break;
    const digit = puzzle[cell];
    puzzle[cell] = 0;
    if (solveSudoku(puzzle, n, 2).count === 1) removed += 1;
    else puzzle[cell] = digit;
  }
  const text = (cells) => cells.map((d) => (d ? String(d) : ".")).join("");
  return { puzzle: text(puzzle), solution: text(solution) };
}

// A maze of `rows` x `cols` lattice cells: rows of '#', ' ', 'S', 'G' joined by '\n'.
export function generateMaze(rows, cols, seed) {
  const rand = random(seed);
  const height = 2 * rows + 1, width = 2 * cols + 1;
  const grid = Array.from({ length: height }, () => new Array(width).fill("#"));
  const visited = Array.from({ length: rows }, () => new Array(cols).fill(false));
  const steps = [[-1, 0], [1, 0], [0, -1], [0, 1]];
  const stack = [[Math.floor(rand() * rows), Math.floor(rand() * cols)]];
  visited[stack[0][0]][stack[0][1]] = true;
  grid[2 * stack[0][0] + 1][2 * stack[0][1] + 1] = " ";
  while (stack.length) {
    const [r, c] = stack[stack.length - 1];
    const options = steps.map(([dr, dc]) => [r + dr, c + dc]).filter(([nr, nc]) =>
      nr >= 0 && nr < rows && nc >= 0 && nc < cols && !visited[nr][nc]);
    if (!options.length) { stack.pop(); continue; }
    const [nr, nc] = options[Math.floor(rand() * options.length)];
    visited[nr][nc] = true;
    grid[r + nr + 1][c + nc + 1] = " ";
    grid[2 * nr + 1][2 * nc + 1] = " ";
    stack.push([nr, nc]);
  }
  const start = [2 * Math.floor(rand() * rows) + 1, 2 * Math.floor(rand() * cols) + 1];
  const goal = farthest(grid, start);
  grid[start[0]][start[1]] = "S";
  grid[goal[0]][goal[1]] = "G";
  return grid.map((row) => row.join("")).join("\n");
}

function farthest(grid, start) {
  const seen = new Set([start.join()]);
  let frontier = [start], last = start;
  while (frontier.length) {
    const next = [];
    for (const [r, c] of frontier) {
      last = [r, c];
      for (const [dr, dc] of [[-1, 0], [1, 0], [0, -1], [0, 1]]) {
        const cell = [r + dr, c + dc];
        if (grid[cell[0]][cell[1]] !== "#" && !seen.has(cell.join())) {
          seen.add(cell.join());
          next.push(cell);
        }
      }
    }
    frontier = next;
  }
  return last;
}
