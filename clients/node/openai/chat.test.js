// OpenAI's official Node SDK against the mesh's OpenAI-compatible routes. Needs a live
// orchestrator REST front: OPENAI_BASE_URL (".../v1"), OPENAI_API_KEY (a key with the query
// scope), MESH_SOLVE_ONLY_KEY (a key without it); tests/integration/orchestrator starts one
// whose language model answers "Four chambers [1].".
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const OpenAI = require("openai");

const baseURL = process.env.OPENAI_BASE_URL;
const messages = [{role: "user", content: "How many chambers does the heart have?"}];

function client(apiKey = process.env.OPENAI_API_KEY) {
  return new OpenAI({baseURL, apiKey, maxRetries: 0, timeout: 60000});
}

test("models are listed, each with a description", {skip: !baseURL}, async () => {
  const ids = [];
  for await (const model of client().models.list()) {
    assert.ok(model.description, model.id);
    ids.push(model.id);
  }
  assert.deepEqual(ids, ["mesh", "mesh-draft", "mesh-self-consistency", "mesh-step-search", "mesh-decompose",
                         "mesh-refine"]);
});

test("a completion carries the answer, usage and the mesh extension", {skip: !baseURL}, async () => {
  const completion = await client().chat.completions.create({model: "mesh", messages});
  const [choice] = completion.choices;
  assert.equal(choice.message.content, "Four chambers [1].");
  assert.equal(choice.finish_reason, "stop");
  assert.ok(completion.usage.total_tokens > 0);
  assert.equal(choice.mesh.sources[0].documentId, "heart");
});

test("a streamed completion arrives as chunks", {skip: !baseURL}, async () => {
  const stream = await client().chat.completions.create({
    model: "mesh-draft", messages, stream: true, stream_options: {include_usage: true}});
  let text = "";
  let deltas = 0;
  const finishes = [];
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? "";
      if (choice.delta.content) deltas += 1;
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, "Four chambers [1].");
  assert.equal(deltas, 3);  // the provider's words, as they came
  assert.deepEqual(finishes, ["stop"]);
  assert.ok(usage.total_tokens > 0);
});

test("errors are OpenAI's: 400 naming the param, 401, 403", {skip: !baseURL}, async () => {
  await assert.rejects(client().chat.completions.create({model: "gpt-4o", messages}),
                       (error) => error.status === 400 && error.param === "model" &&
                                  error.code === "model_not_found");
  await assert.rejects(
    client().chat.completions.create({model: "mesh", messages: [{role: "wizard", content: "x"}]}),
    (error) => error.status === 400 && error.param === "messages[0].role");
  await assert.rejects(client("not-a-key").chat.completions.create({model: "mesh", messages}),
                       (error) => error instanceof OpenAI.AuthenticationError);
  await assert.rejects(
    client(process.env.MESH_SOLVE_ONLY_KEY).chat.completions.create({model: "mesh", messages}),
    (error) => error instanceof OpenAI.PermissionDeniedError);
});
