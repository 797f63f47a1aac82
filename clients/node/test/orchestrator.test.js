// Runs against a live mesh: MESH_TARGET is the orchestrator's host:port (tests/e2e starts one).
// The keepalive test needs none (a bare HTTP/2 server on port 0).
"use strict";

const http2 = require("node:http2");
const test = require("node:test");
const assert = require("node:assert/strict");
const grpc = require("@grpc/grpc-js");
const {connect, call, channelOptions, statusDetails, KEEPALIVE_OPTIONS} = require("../client.js");

const target = process.env.MESH_TARGET;

test("the channel pings an idle connection, at the interval the caller sets", async () => {
  assert.deepEqual(channelOptions(), {"grpc.keepalive_time_ms": 1000,
                                      "grpc.keepalive_timeout_ms": 2000,
                                      "grpc.keepalive_permit_without_calls": 1});
  assert.deepEqual(channelOptions({"grpc.keepalive_time_ms": 30000}),
                   {...KEEPALIVE_OPTIONS, "grpc.keepalive_time_ms": 30000});
  const server = http2.createServer();
  const sessions = [];
  let pings = 0;
  const twoPings = new Promise((resolve) => server.on("session", (session) => {
    sessions.push(session);
    session.on("ping", () => { if (++pings === 2) resolve(); });
  }));
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  // No call is made: only the default 'grpc.keepalive_permit_without_calls' lets it ping.
  const client = connect(`127.0.0.1:${server.address().port}`, {"grpc.keepalive_time_ms": 100});
  let timer;
  try {
    await new Promise((resolve, reject) => client.waitForReady(Date.now() + 5000,
                                                               (error) => (error ? reject(error) : resolve())));
    await Promise.race([twoPings, new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${pings} ping(s) in 5 s`)), 5000);
    })]);
  } finally {
    clearTimeout(timer);
    client.close();
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

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
