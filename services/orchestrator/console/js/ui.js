// DOM helpers shared by the panels. Text from the mesh is always set as text, never as HTML.

let config = {};

export function setConfig(value) {
  config = value || {};
}

// An element: h("div", { class: "x", onclick: f }, child, "text", ...).
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function clear(element, ...children) {
  element.replaceChildren();
  for (const child of children.flat()) if (child) element.append(child);
}

// "AGENT_MCTS" -> "mcts"
export function agentName(agent) {
  return String(agent || "").replace(/^AGENT_/, "").toLowerCase();
}

export function percent(value) {
  return `${Math.round((Number(value) || 0) * 100)}%`;
}

export function ms(value) {
  return `${(Number(value) || 0).toFixed(0)} ms`;
}

// The trace of an answer: its id, linked to the Jaeger UI when one is configured.
export function traceLink(traceId) {
  if (!traceId) return null;
  const label = h("span", { class: "muted" }, "trace ");
  if (config.jaeger_ui_url) {
    return h("span", { class: "trace", "data-trace-id": traceId }, label,
      h("a", { href: `${config.jaeger_ui_url}/trace/${traceId}`, target: "_blank",
        rel: "noopener noreferrer" }, traceId));
  }
  return h("span", { class: "trace", "data-trace-id": traceId }, label, h("code", {}, traceId));
}

// An error as the mesh gave it: its code, message and the fields it names.
export function errorBox(error) {
  if (error && error.name === "AbortError") return h("div", { class: "muted" }, "stopped");
  const code = error && error.code ? `${error.code}: ` : "";
  const fields = error && error.fields && error.fields.length
    ? h("div", { class: "muted" }, `field: ${error.fields.join(", ")}`) : null;
  return h("div", { class: "error", role: "alert" },
    h("strong", {}, code), error && error.message ? error.message : String(error), fields,
    error && error.traceId ? h("div", {}, traceLink(error.traceId)) : null);
}

// A table: headers and rows of cells (strings or nodes).
export function table(headers, rows, attributes = {}) {
  return h("table", attributes,
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", {}, name)))),
    h("tbody", {}, rows.map((row) => h("tr", row.attributes || {},
      (row.cells || row).map((cell) => h("td", {}, cell))))));
}

// The votes of an answer: agent, proposal, confidence, time, round and why.
export function votesTable(votes, shorten = (proposal) => proposal) {
  return table(["agent", "proposal", "confidence", "time", "round", "why"],
    (votes || []).map((vote) => ({
      attributes: { class: vote.agent === "AGENT_CHECKER" ? "checker" : "" },
      cells: [agentName(vote.agent), shorten(vote.proposal), percent(vote.confidence),
        ms(vote.latencyMs), String(vote.iteration), vote.rationale],
    })), { class: "votes" });
}

// One line of a streamed consensus loop (StreamSolveProblemResponse or the loop events of
// StreamAnswerQueryResponse); null for events shown elsewhere.
export function loopEventLine(event, shorten = (proposal) => proposal) {
  const at = h("span", { class: "muted" }, `${ms(event.elapsedMs)} `);
  if (event.iterationStarted) {
    const started = event.iterationStarted;
    const simulations = Number(started.simulations) ? `, ${started.simulations} simulations` : "";
    return h("li", { class: "round" }, at,
      `round ${event.iteration}: ${(started.agents || []).map(agentName).join(", ")}${simulations}`,
      started.reason ? h("span", { class: "muted" }, ` (${started.reason})`) : null);
  }
  if (event.agentStarted) {
    return h("li", {}, at, `${agentName(event.agentStarted.agent)} asked`);
  }
  if (event.agentFinished) return agentFinishedLine(at, event.agentFinished, shorten);
  if (event.tally) {
    const tally = event.tally;
    return h("li", { class: "tally" }, at,
      `tally: ${shorten(tally.answer) || "no answer"}, consensus ${percent(tally.consensusScore)}`,
      tally.agreed ? ", agreed" : ", not agreed", tally.verified ? ", verified" : "");
  }
  return null;
}

function agentFinishedLine(at, finished, shorten) {
  const name = agentName(finished.agent);
  const checker = finished.agent === "AGENT_CHECKER";
  const took = h("span", { class: "muted" }, ` (${ms(finished.latencyMs)})`);
  if (finished.vote) {
    const vote = finished.vote;
    return h("li", { class: checker ? "checker" : "vote" }, at,
      `${name} proposed ${shorten(vote.proposal)} at ${percent(vote.confidence)}`, took,
      vote.rationale ? `: ${vote.rationale}` : "");
  }
  if (finished.errorCode) {
    return h("li", { class: "failed" }, at, `${name} failed ${finished.errorCode}: `,
      finished.errorMessage, took);
  }
  return h("li", { class: checker ? "checker" : "abstained" }, at,
    `${name} abstained: ${finished.abstainReason || "no reason given"}`, took);
}

// The failures of an answer (agents whose service failed).
export function failuresList(failures) {
  if (!failures || !failures.length) return null;
  return h("ul", { class: "failures" }, failures.map((failure) =>
    h("li", {}, `${agentName(failure.agent)} failed ${failure.code}: ${failure.message}`)));
}
