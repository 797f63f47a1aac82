// Durable runs (RunService): the caller's runs and batches with their state and progress, a
// run's events watched live (Server-Sent Events), cancel, and a new Connect Four run.

import { call, events } from "./api.js";
import { agentName, clear, errorBox, h, loopEventLine, table, traceLink } from "./ui.js";

const ACTIVE = new Set(["STATE_QUEUED", "STATE_RUNNING"]);
const REFRESH_MS = 2000;

function stateName(state) {
  return String(state || "").replace(/^STATE_/, "").toLowerCase();
}

function when(timestamp) {
  return timestamp ? new Date(timestamp).toLocaleTimeString() : "";
}

export function runsPanel(root) {
  const runs = h("div", { class: "runs" });
  const batches = h("div", { class: "batches" });
  const watch = h("div", { class: "watch" });
  const message = h("div", {});
  const moves = h("input", { type: "text", value: "4453", size: 10, "aria-label": "moves" });
  let watching = null, timer = null;

  // Lists the runs and batches; again every few seconds while one is active and the tab shown.
  const refresh = async () => {
    clearTimeout(timer);
    try {
      const [runList, batchList] = await Promise.all([
        call("GET", "v1/runs?page_size=50"), call("GET", "v1/batches?page_size=20")]);
      const found = [...(runList.data.runs || []), ...(batchList.data.batches || [])];
      clear(runs, runTable(runList.data.runs || [], { cancel, watchRun }));
      clear(batches, batchTable(batchList.data.batches || [], { cancel }));
      if (found.some((item) => ACTIVE.has(item.state)) && !root.hidden) {
        timer = setTimeout(refresh, REFRESH_MS);
      }
    } catch (error) {
      clear(message, errorBox(error));
    }
  };

  const cancel = async (name) => {
    clear(message);
    try {
      await call("POST", `v1/${name}:cancel`, {});
      await refresh();
    } catch (error) {
      clear(message, errorBox(error));
    }
  };

  const submit = async () => {
    try {
      const { data, traceId } = await call("POST", "v1/runs",
        { solve: { connectFour: { moves: moves.value } } });
      clear(message, h("p", {}, `created ${data.name} `, traceLink(traceId)));
      await refresh();
      watchRun(data.name);
    } catch (error) {
      clear(message, errorBox(error));
    }
  };

  const watchRun = async (name) => {
    if (watching) watching.abort();
    watching = new AbortController();
    const log = h("ol", { class: "events" });
    clear(watch, h("h3", {}, `Events of ${name}`), log);
    try {
      for await (const event of events(`v1/${name}:watch`, { signal: watching.signal })) {
        log.append(runEventLine(event));
      }
      log.append(h("li", { class: "muted" }, "the run has ended"));
      await refresh();
    } catch (error) {
      log.append(h("li", {}, errorBox(error)));
    }
  };

  clear(root,
    h("div", { class: "toolbar" },
      h("button", { onclick: () => { clear(message); refresh(); } }, "Refresh"),
      h("label", {}, "new Connect Four run, moves ", moves),
      h("button", { onclick: submit }, "Submit run")),
    message,
    h("h3", {}, "Runs"), runs,
    h("h3", {}, "Batches"), batches,
    watch);
  return { refresh };
}

function runEventLine(event) {
  const sequence = h("span", { class: "muted" }, `#${event.sequence} `);
  if (event.stateChanged) {
    const change = event.stateChanged;
    return h("li", { class: "round" }, sequence,
      `${stateName(change.previousState) || "created"} → ${stateName(change.state)}`,
      change.error ? `: ${change.error.message}` : "");
  }
  const progress = event.solveProgress;
  if (progress && progress.response) {
    const answer = progress.response.connectFour ? `column ${progress.response.connectFour.column}`
      : `answered by ${agentName(progress.response.answeredBy)}`;
    return h("li", { class: "tally" }, sequence, `answer: ${answer}`);
  }
  const line = progress ? loopEventLine(progress) : null;
  if (line) line.prepend(sequence);
  return line || h("li", {}, sequence, "event");
}

function result(run) {
  if (run.error) return `error: ${run.error.message}`;
  if (run.solveResponse) {
    const response = run.solveResponse;
    if (response.connectFour) return `column ${response.connectFour.column}`;
    return `answered by ${agentName(response.answeredBy)}`;
  }
  if (run.answerResponse) return String(run.answerResponse.answer || "").slice(0, 60);
  return "";
}

function runTable(items, { cancel, watchRun }) {
  if (!items.length) return h("p", { class: "muted" }, "No runs.");
  return table(["run", "kind", "state", "attempts", "created", "events", "result", "trace", ""],
    items.map((run) => ({
      attributes: { "data-run": run.name, "data-state": stateName(run.state) },
      cells: [
        h("code", {}, run.name.replace(/^runs\//, "").slice(0, 8)),
        run.solve ? "solve" : "answer", stateName(run.state), String(run.attempts),
        when(run.createTime), String(run.lastEventSequence), result(run),
        (run.traceIds || []).length ? traceLink(run.traceIds[run.traceIds.length - 1]) : "",
        h("span", {},
          h("button", { onclick: () => watchRun(run.name) }, "Watch"),
          ACTIVE.has(run.state) ? h("button", { onclick: () => cancel(run.name) }, "Cancel")
            : null),
      ],
    })), { class: "run-table" });
}

function batchTable(items, { cancel }) {
  if (!items.length) return h("p", { class: "muted" }, "No batches.");
  return table(["batch", "label", "state", "progress", "created", ""], items.map((batch) => {
    const counts = batch.stateCounts || {};
    const done = (counts.succeeded || 0) + (counts.failed || 0) + (counts.cancelled || 0);
    return {
      attributes: { "data-batch": batch.name },
      cells: [
        h("code", {}, batch.name.replace(/^batches\//, "").slice(0, 8)), batch.displayName,
        stateName(batch.state),
        h("span", {}, h("progress", { max: batch.runCount || 1, value: done }),
          ` ${done}/${batch.runCount} (${counts.failed || 0} failed)`),
        when(batch.createTime),
        ACTIVE.has(batch.state) && !batch.cancelRequested
          ? h("button", { onclick: () => cancel(batch.name) }, "Cancel") : "",
      ],
    };
  }), { class: "batch-table" });
}
