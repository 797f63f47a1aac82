// Sudoku and mazes: typed in or generated here, solved by the mesh through StreamSolveProblem,
// with each proposal and the checker's verdict on it as they stream, then who answered.

import { stream } from "./api.js";
import { BOXES, generateMaze, generateSudoku } from "./generate.js";
import {
  agentName, clear, errorBox, failuresList, h, loopEventLine, percent, traceLink, votesTable,
} from "./ui.js";

const KINDS = {
  "sudoku-4": { label: "Sudoku 4x4", n: 4, blanks: 10 },
  "sudoku-6": { label: "Sudoku 6x6", n: 6, blanks: 22 },
  "sudoku-9": { label: "Sudoku 9x9", n: 9, blanks: 50 },
  maze: { label: "Maze", rows: 6, cols: 10 },
};

// A long proposal (a Sudoku solution, a maze grid) shortened for one line.
function shorten(proposal) {
  const flat = String(proposal || "").replace(/\n/g, "/");
  return flat.length > 24 ? `${flat.slice(0, 24)}…` : flat;
}

export function puzzlesPanel(root) {
  const kind = h("select", { "aria-label": "puzzle kind" },
    Object.entries(KINDS).map(([value, { label }]) => h("option", { value }, label)));
  const seed = h("input", { type: "number", min: 0, placeholder: "random", "aria-label": "seed" });
  const text = h("textarea", { rows: 13, cols: 28, spellcheck: "false", "aria-label": "puzzle",
    placeholder: "a Sudoku: N*N characters, '.' for a blank\nor a maze: rows of '#', ' ', 'S', 'G'" });
  const solveButton = h("button", { class: "primary", onclick: () => solve() }, "Solve");
  const log = h("ol", { class: "events", "aria-label": "consensus loop" });
  const answer = h("div", { class: "answer" });
  let controller = null;

  const generate = () => {
    const value = seed.value ? Number(seed.value) : Math.floor(Math.random() * 1e9);
    const spec = KINDS[kind.value];
    text.value = spec.n ? formatSudoku(generateSudoku(spec.n, spec.blanks, value).puzzle, spec.n)
      : generateMaze(spec.rows, spec.cols, value);
    text.dataset.seed = String(value);
    clear(log);
    clear(answer, h("p", { class: "muted" }, `generated with seed ${value}`));
  };

  const solve = async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    const isMaze = /[#SG]/.test(text.value);
    const body = isMaze ? { maze: { grid: text.value.replace(/\n+$/, "") } }
      : { sudoku: { puzzle: text.value.replace(/\s+/g, "") } };
    clear(log);
    clear(answer, h("p", { class: "muted" }, "solving…"));
    solveButton.disabled = true;
    let traceId = "";
    try {
      for await (const event of stream("v1/problems:streamSolve", body, {
        signal: controller.signal, onStart: (id) => { traceId = id; },
      })) {
        if (event.response) clear(answer, answerCard(event.response, body, traceId));
        else {
          const line = loopEventLine(event, shorten);
          if (line) log.append(line);
        }
      }
    } catch (error) {
      clear(answer, errorBox(error));
    } finally {
      solveButton.disabled = false;
    }
  };

  clear(root,
    h("div", { class: "toolbar" }, kind, h("label", {}, "seed ", seed),
      h("button", { onclick: generate }, "Generate"), solveButton),
    h("div", { class: "split" },
      h("div", {}, text),
      h("div", {}, h("h3", {}, "Proposals and the checker's verdicts"), log, answer)));
}

function formatSudoku(puzzle, n) {
  const rows = [];
  for (let r = 0; r < n; r += 1) rows.push(puzzle.slice(r * n, (r + 1) * n));
  return rows.join("\n");
}

function answerCard(response, body, traceId) {
  const checker = (response.votes || []).find((vote) => vote.agent === "AGENT_CHECKER");
  const verdict = checker ? checker.rationale : "the checker cast no vote";
  let shown;
  if (response.sudoku) shown = sudokuGrid(body.sudoku.puzzle, response.sudoku.solution);
  else shown = h("pre", { class: "maze" }, response.maze.grid);
  const detail = response.sudoku
    ? `valid: ${response.sudoku.valid}`
    : `path of ${response.maze.pathLength} steps, shortest: ${response.maze.optimal}`;
  return h("section", { class: "card", "data-answered-by": agentName(response.answeredBy) },
    h("h3", {}, `Answered by ${agentName(response.answeredBy)}`),
    h("p", { class: "verdict" }, `Checker: ${verdict}`),
    h("p", {}, `${detail}; confidence ${percent(response.confidence)}; `,
      `${response.iterations} round(s)`),
    traceLink(traceId), shown,
    h("h4", {}, "Votes"), votesTable(response.votes, shorten),
    failuresList(response.failures));
}

function sudokuGrid(puzzle, solution) {
  const n = Math.round(Math.sqrt(solution.length));
  const [boxRows, boxCols] = BOXES[n] || [n, n];
  return h("table", { class: "sudoku", "aria-label": "solved Sudoku" },
    Array.from({ length: n }, (_, r) => h("tr", {}, Array.from({ length: n }, (_, c) => {
      const i = r * n + c;
      const given = puzzle[i] !== "." && puzzle[i] !== "0";
      const edges = [(c + 1) % boxCols === 0 && c < n - 1 ? "box-right" : "",
        (r + 1) % boxRows === 0 && r < n - 1 ? "box-bottom" : ""];
      return h("td", { class: [given ? "given" : "filled", ...edges].join(" ").trim() },
        solution[i]);
    }))));
}
