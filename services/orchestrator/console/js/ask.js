// A text question: the answer streams in (StreamAnswerQuery: sources first, then the answer's
// text as it is written, the loop's steps, and the final response), with its sources. A mesh
// without the streamed form is asked through AnswerQuery instead, the answer shown whole.

import { call, stream } from "./api.js";
import {
  agentName, clear, errorBox, failuresList, h, loopEventLine, percent, traceLink, votesTable,
} from "./ui.js";

export function askPanel(root) {
  const question = h("textarea", { rows: 3, cols: 60, "aria-label": "question",
    placeholder: "Ask a question…" });
  const collection = h("input", { type: "text", placeholder: "none", "aria-label": "collection",
    size: 12 });
  const drafts = h("input", { type: "number", min: 1, max: 20, value: 1, size: 3,
    "aria-label": "drafts" });
  const askButton = h("button", { class: "primary", onclick: () => ask() }, "Ask");
  const text = h("div", { class: "answer-text", "aria-live": "polite" });
  const sources = h("div", { class: "sources" });
  const log = h("ol", { class: "events", "aria-label": "answer steps" });
  const summary = h("div", { class: "answer" });
  let controller = null;

  const ask = async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    const body = { query: question.value };
    if (collection.value.trim()) body.collection = collection.value.trim();
    if (drafts.value) body.sampleCount = Number(drafts.value);
    for (const element of [text, sources, log, summary]) clear(element);
    delete text.dataset.mode;
    text.classList.add("streaming");
    askButton.disabled = true;
    try {
      await streamed(body, controller.signal, { text, sources, log, summary });
    } catch (error) {
      // A mesh without the streamed form: no such route, or the method not implemented.
      if ((error.status === 404 && error.message === "Not Found") || error.status === 501) {
        await whole(body, controller.signal, { text, sources, summary });
      } else clear(summary, errorBox(error));
    } finally {
      text.classList.remove("streaming");
      askButton.disabled = false;
    }
  };

  clear(root,
    h("div", { class: "toolbar" }, question),
    h("div", { class: "toolbar" }, h("label", {}, "collection ", collection),
      h("label", { title: "one draft streams its text as it is written; more vote on the answer" },
        "drafts ", drafts), askButton),
    h("div", { class: "split even" },
      h("div", {}, h("h3", {}, "Answer"), text, summary),
      h("div", {}, h("h3", {}, "Sources"), sources, log)));
}

async function streamed(body, signal, { text, sources, log, summary }) {
  let traceId = "";
  for await (const event of stream("v1/queries:streamAnswer", body, {
    signal, onStart: (id) => { traceId = id; },
  })) {
    text.dataset.mode = "streamed";
    if (event.sources) clear(sources, sourceList(event.sources.sources));
    else if (event.answerDelta) text.append(event.answerDelta);
    else if (event.response) show(event.response, traceId, { text, sources, summary });
    else {
      const line = loopEventLine(event);
      if (line) log.append(line);
    }
  }
}

async function whole(body, signal, { text, sources, summary }) {
  try {
    const { data, traceId } = await call("POST", "v1/queries:answer", body, signal);
    text.dataset.mode = "whole";
    show(data, traceId, { text, sources, summary });
  } catch (error) {
    clear(summary, errorBox(error));
  }
}

function show(response, traceId, { text, sources, summary }) {
  text.textContent = response.answer
    || (response.passagesOnly ? "(no answer could be written: the passages alone)" : "");
  clear(sources, sourceList(response.sources));
  const cost = response.costKnown ? `, $${Number(response.costUsd).toFixed(4)}` : "";
  clear(summary, h("section", { class: "card" },
    h("p", {}, `confidence ${percent(response.confidence)}; provider ${response.provider || "none"}`,
      response.offline ? " (offline, extractive)" : "",
      `; agents ${(response.agents || []).map(agentName).join(", ") || "none"}`,
      `; ${response.totalTokens || 0} tokens${cost}`),
    response.stopReason ? h("p", { class: "muted" }, response.stopReason) : null,
    traceLink(traceId),
    response.votes && response.votes.length ? votesTable(response.votes, shorten) : null,
    failuresList(response.failures)));
}

function shorten(proposal) {
  const flat = String(proposal || "").replace(/\s+/g, " ");
  return flat.length > 60 ? `${flat.slice(0, 60)}…` : flat;
}

function sourceList(items) {
  if (!items || !items.length) {
    return h("p", { class: "muted no-sources" }, "No sources: answered without retrieval.");
  }
  return h("ol", { class: "source-list" }, items.map((source) => h("li", {},
    h("strong", {}, source.title || source.documentId),
    h("span", { class: "muted" }, ` score ${Number(source.score).toFixed(3)}`),
    h("blockquote", {}, source.text))));
}
