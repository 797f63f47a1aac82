// Connect Four against the mesh: the user clicks a column, the mesh answers through
// StreamSolveProblem, and its consensus loop is shown as it streams (rounds, each agent's
// proposal, the checker's verdict, the tallies), then the answer's votes and search statistics.

import { stream } from "./api.js";
import {
  agentName, clear, errorBox, failuresList, h, loopEventLine, ms, percent, table, traceLink,
  votesTable,
} from "./ui.js";

const COLUMNS = 7, ROWS = 6;
const YOU = "you", MESH = "mesh";

// The column heights and the winner of a move sequence ("1".."7" per move).
export function position(moves) {
  const grid = Array.from({ length: COLUMNS }, () => []);
  let winner = null;
  [...moves].forEach((move, index) => {
    const column = Number(move) - 1;
    grid[column].push(index % 2);
    if (!winner && connects(grid, column)) winner = index % 2;
  });
  return { grid, winner, full: moves.length === COLUMNS * ROWS };
}

function connects(grid, column) {
  const row = grid[column].length - 1, player = grid[column][row];
  const at = (c, r) => (c >= 0 && c < COLUMNS ? grid[c][r] : undefined);
  for (const [dc, dr] of [[1, 0], [0, 1], [1, 1], [1, -1]]) {
    let count = 1;
    for (const sign of [1, -1]) {
      let c = column + sign * dc, r = row + sign * dr;
      while (at(c, r) === player) { count += 1; c += sign * dc; r += sign * dr; }
    }
    if (count >= 4) return true;
  }
  return false;
}

export function connectFourPanel(root) {
  const state = { moves: "", meshFirst: false, busy: false, controller: null };
  const board = h("div", { class: "board", role: "grid", "aria-label": "Connect Four board" });
  const status = h("p", { class: "status", "aria-live": "polite" });
  const simulations = h("input", { type: "number", min: 1, max: 10000000, placeholder: "default",
    "aria-label": "simulations" });
  const log = h("ol", { class: "events", "aria-label": "consensus loop" });
  const answer = h("div", { class: "answer" });
  const moves = h("code", { class: "moves" });

  const mover = () => (state.moves.length % 2 === (state.meshFirst ? 1 : 0) ? YOU : MESH);
  const draw = () => {
    const { grid, winner, full } = position(state.moves);
    clear(board, Array.from({ length: COLUMNS }, (_, column) => h("button", {
      class: "column", "data-column": column + 1, "aria-label": `column ${column + 1}`,
      disabled: state.busy || winner !== null || full || grid[column].length === ROWS
        || mover() !== YOU,
      onclick: () => play(column + 1),
    }, Array.from({ length: ROWS }, (_, r) => {
      const stone = grid[column][ROWS - 1 - r];
      const who = stone === undefined ? "" : (stone === 0) !== state.meshFirst ? YOU : MESH;
      return h("span", { class: `cell ${who}` });
    }))));
    moves.textContent = state.moves || "(empty board)";
    if (winner !== null) {
      status.textContent = (winner === 0) !== state.meshFirst ? "You win." : "The mesh wins.";
    } else if (full) status.textContent = "Draw: the board is full.";
    else if (state.busy) status.textContent = "The mesh is thinking…";
    else status.textContent = mover() === YOU ? "Your move: click a column." : "";
  };

  const play = async (column) => {
    state.moves += String(column);
    draw();
    const { winner, full } = position(state.moves);
    if (winner === null && !full) await meshMove();
  };

  const meshMove = async () => {
    state.busy = true;
    state.controller = new AbortController();
    draw();
    clear(log);
    clear(answer);
    const body = { connectFour: { moves: state.moves } };
    if (simulations.value) body.simulations = simulations.value;
    let traceId = "";
    try {
      for await (const event of stream("v1/problems:streamSolve", body, {
        signal: state.controller.signal, onStart: (id) => { traceId = id; },
      })) {
        if (event.response) {
          state.moves += String(event.response.connectFour.column);
          clear(answer, answerCard(event.response, traceId));
        } else {
          const line = loopEventLine(event, (p) => (p ? `column ${p}` : p));
          if (line) log.append(line);
        }
      }
    } catch (error) {
      clear(answer, errorBox(error));
    } finally {
      state.busy = false;
      state.controller = null;
      draw();
    }
  };

  const newGame = (meshFirst) => {
    if (state.controller) state.controller.abort();
    Object.assign(state, { moves: "", meshFirst, busy: false });
    clear(log);
    clear(answer);
    draw();
    if (meshFirst) meshMove();
  };

  clear(root,
    h("div", { class: "toolbar" },
      h("button", { onclick: () => newGame(false) }, "New game"),
      h("button", { onclick: () => newGame(true) }, "New game, mesh first"),
      h("label", {}, "simulations ", simulations)),
    h("div", { class: "split" },
      h("div", {}, board, status, h("p", { class: "muted" }, "moves: ", moves)),
      h("div", {}, h("h3", {}, "Consensus loop"), log, answer)));
  draw();
}

function answerCard(response, traceId) {
  const move = response.connectFour;
  const outcome = move.outcome && move.outcome !== "OUTCOME_UNSPECIFIED"
    ? `, ${move.outcome.replace("OUTCOME_", "").toLowerCase()} for the mesh` : "";
  return h("section", { class: "card", "data-answer": move.column },
    h("h3", {}, `The mesh plays column ${move.column}`),
    h("p", {},
      `value ${Number(move.value).toFixed(3)}${outcome}; confidence ${percent(response.confidence)}; `,
      `answered by ${agentName(response.answeredBy)}; ${response.iterations} round(s), `,
      response.consensusReached ? "consensus reached" : "budget ended before consensus"),
    traceLink(traceId),
    h("h4", {}, "Votes"), votesTable(response.votes, (p) => `column ${p}`),
    searchStatistics(response.searchStatistics),
    failuresList(response.failures),
    h("h4", {}, "Timings"),
    table(["step", "round", "time"], (response.timings || []).map((timing) =>
      [timing.step, String(timing.iteration), ms(timing.elapsedMs)]), { class: "timings" }));
}

function searchStatistics(stats) {
  if (!stats || !Number(stats.simulations)) return null;
  const actions = (stats.actions || []).slice().sort((a, b) => a.action - b.action);
  const most = Math.max(1, ...actions.map((a) => Number(a.visits)));
  return h("div", { class: "search" },
    h("h4", {}, "Search statistics"),
    h("p", {}, `${stats.simulations} simulations in ${ms(stats.elapsedMs)} `,
      `(${Math.round(stats.simulationsPerSecond)}/s), tree of ${stats.treeSize} nodes, `,
      `depth ${stats.maxDepth}, root value ${Number(stats.rootValue).toFixed(3)}`),
    table(["column", "visits", "value", "prior"], actions.map((a) => [
      String(a.action),
      h("span", {}, bar((100 * Number(a.visits)) / most), ` ${a.visits}`),
      Number(a.value).toFixed(3), Number(a.prior).toFixed(3)]), { class: "actions" }));
}

// A bar `width` pixels wide, 100 at most (set through the CSSOM: the page's policy forbids inline styles).
function bar(width) {
  const element = h("span", { class: "bar" });
  element.style.width = `${Math.round(width)}px`;
  return element;
}
