// SearchExternal driven from Node against a live mcts service: MCTS_TARGET is its host:port and
// MCTS_MESH_TOKEN the mesh token when it wants one (tests/e2e starts a mesh and sets both).
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const grpc = require("@grpc/grpc-js");
const {statusDetails} = require("../client.js");
const {searchExternal, evaluateLeaf, parseBoard} = require("../search_external.js");

const target = process.env.MCTS_TARGET;
const meshToken = process.env.MCTS_MESH_TOKEN;
const skip = !target && "MCTS_TARGET is not set";

for (const rule of ["SELECTION_RULE_PUCT", "SELECTION_RULE_GUMBEL"]) {
  test(`${rule} finds the winning move of tic-tac-toe`, {skip}, async () => {
    // X to move; X wins at cell 2 (top row), and must: O threatens the middle row.
    const root = parseBoard("XX.OO....");
    const result = await searchExternal(
      target, {numActions: 9, simulations: 300, batchSize: 8, rule, seed: 1},
      (path) => evaluateLeaf(root, path), {meshToken});
    assert.equal(result.bestAction, 2);
    assert.equal(result.policy.length, 9);
    assert.equal(Number(result.statistics.simulations), 300);
    // Only empty cells got children (actions are 0-based).
    assert.deepEqual(result.statistics.actions.map((a) => a.action).sort(), [2, 5, 6, 7, 8]);
  });
}

test("an option the rule ignores is INVALID_ARGUMENT naming the field", {skip}, async () => {
  const root = parseBoard(".........");
  await assert.rejects(
    searchExternal(target, {numActions: 9, simulations: 10, gumbelNumConsidered: 4},
                   (path) => evaluateLeaf(root, path), {meshToken}),
    (error) => {
      assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
      const violations = statusDetails(error).details.flatMap((d) => d.fieldViolations ?? []);
      assert.deepEqual(violations.map((v) => v.field), ["settings.gumbel_num_considered"]);
      return true;
    });
});
