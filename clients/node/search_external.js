// A complete client of MctsService.SearchExternal in Node.js: the caller owns the problem and
// evaluates the leaves; the mesh's mcts service runs the tree search (PUCT or Gumbel MuZero).
//
// The problem here is tic-tac-toe from a position the caller chooses. The service streams
// batches of leaves, each leaf the actions from the root; the caller replays them on its own
// board and answers each batch with priors (0 for an illegal action), a value for the player to
// move, and whether the game has ended. The last message carries the best action.
//
// As a command:  node clients/node/search_external.js [--target host:port] [--mesh-token TOKEN]
//                     [--rule PUCT|GUMBEL] [--simulations N] BOARD
// BOARD is nine characters, row by row: 'X', 'O' or '.', X having moved as often as O or once
// more; the player to move is the one with fewer marks (X on a tie). Prints the result as JSON.
// The mcts service listens on 127.0.0.1:50052 under `mcts-mesh up`; a mesh started with a mesh
// token wants it as x-mesh-token (`--mesh-token`, or $MCTS_MESH_TOKEN).
"use strict";

const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const {INCLUDE_DIRS, channelOptions} = require("./client.js");

const LOAD_OPTIONS = {keepCase: false, longs: String, enums: String, defaults: true, oneofs: true,
                      includeDirs: INCLUDE_DIRS};
const LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8],
               [2, 4, 6]];

/** The MctsService client constructor, loaded from protos/. */
function mctsClass() {
  const definition = protoLoader.loadSync("mesh/mcts/v1/mcts_service.proto", LOAD_OPTIONS);
  return grpc.loadPackageDefinition(definition).mesh.mcts.v1.MctsService;
}

/** A board parsed from nine characters: cells 1 (X), -1 (O), 0 (empty), and the player to move. */
function parseBoard(text) {
  if (!/^[XO.]{9}$/.test(text)) throw new Error(`board ${JSON.stringify(text)}: nine of X, O, .`);
  const cells = [...text].map((c) => (c === "X" ? 1 : c === "O" ? -1 : 0));
  const xs = cells.filter((c) => c === 1).length;
  const os = cells.filter((c) => c === -1).length;
  if (xs !== os && xs !== os + 1) throw new Error("X moves first: X has as many marks as O or one more");
  return {cells, toMove: xs === os ? 1 : -1};
}

function winner(cells) {
  for (const [a, b, c] of LINES) {
    if (cells[a] !== 0 && cells[a] === cells[b] && cells[b] === cells[c]) return cells[a];
  }
  return 0;
}

/**
 * The evaluation of the leaf reached by `path` (actions 0..8) from `root`: a terminal leaf's
 * exact value for the player to move there (-1: the opponent just won, 0: a draw), otherwise
 * uniform priors over the empty cells and value 0 (a real caller would ask its own model).
 */
function evaluateLeaf(root, path) {
  const cells = [...root.cells];
  let player = root.toMove;
  for (const action of path) {
    cells[action] = player;
    player = -player;
  }
  const won = winner(cells);
  if (won !== 0) return {priors: [], value: won === player ? 1 : -1, terminal: true};
  if (cells.every((c) => c !== 0)) return {priors: [], value: 0, terminal: true};
  const empty = cells.filter((c) => c === 0).length;
  return {priors: cells.map((c) => (c === 0 ? 1 / empty : 0)), value: 0, terminal: false};
}

/**
 * Runs one SearchExternal search: sends `settings` (ExternalSearchSettings, lowerCamelCase), then
 * answers each LeafBatch with `evaluate(path)` for each of its leaves, in order and with the
 * batch's id. Resolves with the ExternalSearchResult; rejects with the gRPC error (its details
 * decode with client.js `statusDetails`).
 *
 * @param {string} target "host:port" of the mcts service.
 * @param {Object} settings ExternalSearchSettings, e.g. {numActions: 9, simulations: 200}.
 * @param {function(number[]): Object} evaluate a path's LeafEvaluation {priors, value, terminal}.
 * @param {{deadlineSeconds?: number, meshToken?: string}} [options] the whole search's deadline
 *     (without one the service's reply timeout, 60 s by default, bounds each wait), and the
 *     mesh token sent as x-mesh-token.
 */
function searchExternal(target, settings, evaluate, options = {}) {
  const Mcts = mctsClass();
  const client = new Mcts(target, grpc.credentials.createInsecure(), channelOptions());
  const metadata = new grpc.Metadata();
  if (options.meshToken) metadata.set("x-mesh-token", options.meshToken);
  const deadline = new Date(Date.now() + (options.deadlineSeconds ?? 60) * 1000);
  const call = client.SearchExternal(metadata, {deadline});
  return new Promise((resolve, reject) => {
    let result = null;
    call.on("data", (response) => {
      if (response.message === "batch") {
        const leaves = response.batch.leaves.map((leaf) => evaluate(leaf.path));
        call.write({evaluations: {batchId: response.batch.batchId, leaves}});
      } else {
        result = response.result;
        call.end();
      }
    });
    call.on("error", (error) => {
      client.close();
      reject(error);
    });
    call.on("end", () => {
      client.close();
      if (result !== null) resolve(result);
      else reject(new Error("the stream ended without a result"));
    });
    call.write({settings});
  });
}

function option(args, name, fallback) {
  const at = args.indexOf(name);
  if (at < 0) return fallback;
  const [, value] = args.splice(at, 2);
  return value;
}

async function main(argv) {
  const args = [...argv];
  const target = option(args, "--target", "127.0.0.1:50052");
  const meshToken = option(args, "--mesh-token", process.env.MCTS_MESH_TOKEN);
  const rule = `SELECTION_RULE_${option(args, "--rule", "PUCT")}`;
  const simulations = Number(option(args, "--simulations", "400"));
  const root = parseBoard(args[0] ?? ".........");
  try {
    const result = await searchExternal(target, {numActions: 9, simulations, batchSize: 8, rule},
                                        (path) => evaluateLeaf(root, path), {meshToken});
    console.log(JSON.stringify({bestAction: result.bestAction, policy: result.policy,
                                simulations: result.statistics.simulations}));
  } catch (error) {
    if (error.code === undefined) throw error;
    const {statusDetails} = require("./client.js");
    console.log(JSON.stringify({error: grpc.status[error.code], message: error.details,
                                status: statusDetails(error)}));
    process.exitCode = 1;
  }
}

module.exports = {searchExternal, evaluateLeaf, parseBoard, mctsClass};

if (require.main === module) {
  main(process.argv.slice(2)).catch((error) => {
    console.error(error.message);
    process.exitCode = 2;
  });
}
