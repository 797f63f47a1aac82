// Runs against a live mesh: MESH_TARGET is the orchestrator's host:port (tests/e2e starts one).
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const grpc = require("@grpc/grpc-js");
const {connect, call, statusDetails} = require("../client.js");

const target = process.env.MESH_TARGET;

test("SolveProblem answers a Connect Four position", {skip: !target && "MESH_TARGET is not set"}, async () => {
  const client = connect(target);
  try {
    // An end-game position of Pons' Test_L3_R1 with Pons score -1: the checker solves it exactly.
    const reply = await call(client, "SolveProblem", {
      connectFour: {moves: "2252576253462244111563365343671351441"}, agents: ["AGENT_CHECKER"]});
    assert.equal(reply.answer, "connectFour");
    assert.ok(reply.connectFour.column >= 1 && reply.connectFour.column <= 7);
    assert.equal(reply.connectFour.outcome, "OUTCOME_LOSS");
    assert.equal(reply.connectFour.score, -1);
    assert.deepEqual(reply.agents, ["AGENT_CHECKER"]);
  } finally {
    client.close();
  }
});

test("AnswerQuery answers from ingested documents with its sources", {skip: !target && "MESH_TARGET is not set"}, async () => {
  const client = connect(target);
  try {
    const ingested = await call(client, "IngestDocuments", {collection: "node", documents: [
      {id: "heart", title: "Hearts", text: "The human heart has four chambers that pump blood.", source: "node"},
      {id: "moon", title: "The Moon", text: "The Moon orbits the Earth about every 27 days.", source: "node"},
    ]});
    assert.equal(ingested.documentCount, 2);
    const reply = await call(client, "AnswerQuery", {
      query: "How many chambers does the human heart have?", collection: "node"});
    assert.equal(reply.sources[0].documentId, "heart");
    assert.match(reply.answer, /four chambers/);
  } finally {
    client.close();
  }
});

test("a bad field is INVALID_ARGUMENT with a google.rpc.BadRequest naming it", {skip: !target && "MESH_TARGET is not set"}, async () => {
  const client = connect(target);
  try {
    await assert.rejects(call(client, "SolveProblem", {connectFour: {moves: "4489"}}), (error) => {
      assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
      const status = statusDetails(error);
      assert.equal(status.code, grpc.status.INVALID_ARGUMENT);
      const badRequest = status.details.find((d) => d["@type"].endsWith("google.rpc.BadRequest"));
      assert.ok(badRequest, JSON.stringify(status));
      assert.ok(badRequest.fieldViolations.some((v) => v.field === "connect_four.moves"),
                JSON.stringify(badRequest));
      return true;
    });
  } finally {
    client.close();
  }
});
