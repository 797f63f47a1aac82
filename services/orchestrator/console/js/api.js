// Calls of the mesh's REST API from the console: the API key (kept in sessionStorage, sent as
// `Authorization: Bearer`), a W3C `traceparent` per call (so the console knows each answer's trace
// id), unary calls, newline-delimited JSON streams (server-streaming RPCs) and Server-Sent Events
// (run watches), and the mesh's errors (google.rpc.Status bodies) as `MeshError`s.

const KEY_ITEM = "mcts-mesh.api-key";
// The API is served beside the console: /console/ -> /
const API_ROOT = new URL("../", document.baseURI);

export function apiKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

// An error of the mesh (or of reaching it): `message` as the mesh wrote it, `code` the gRPC status
// name, `fields` the fields a BadRequest detail names, `status` the HTTP status (0: none).
export class MeshError extends Error {
  constructor(message, { code = "", status = 0, fields = [], traceId = "" } = {}) {
    super(message);
    this.code = code;
    this.status = status;
    this.fields = fields;
    this.traceId = traceId;
  }
}

const CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
  "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
  "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"];

// A MeshError from a google.rpc.Status object (as JSON).
export function statusError(status, httpStatus = 0, traceId = "") {
  const fields = [];
  for (const detail of status.details || []) {
    for (const violation of detail.fieldViolations || []) fields.push(violation.field);
  }
  const code = typeof status.code === "number" ? CODES[status.code] || String(status.code)
    : String(status.code || "");
  return new MeshError(status.message || `the mesh answered ${code || httpStatus}`,
    { code, status: httpStatus, fields, traceId });
}

function hex(bytes) {
  return Array.from(crypto.getRandomValues(new Uint8Array(bytes)),
    (b) => b.toString(16).padStart(2, "0")).join("");
}

// A new trace for one call: its id and the headers that start it (sampled, so the trace is
// recorded wherever the mesh exports traces).
function newTrace() {
  const traceId = hex(16);
  return { traceId, header: `00-${traceId}-${hex(8)}-01` };
}

function headers(traceHeader, json) {
  const out = { traceparent: traceHeader };
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  if (json) out["Content-Type"] = "application/json";
  return out;
}

async function send(method, path, body, signal) {
  const trace = newTrace();
  let response;
  try {
    response = await fetch(new URL(path, API_ROOT), {
      method, signal, headers: headers(trace.header, body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new MeshError(`the mesh cannot be reached (${error.message})`, { code: "UNAVAILABLE" });
  }
  if (!response.ok) throw await responseError(response, trace.traceId);
  return { response, traceId: trace.traceId };
}

async function responseError(response, traceId) {
  const text = await response.text();
  try {
    const status = JSON.parse(text);
    if (status && typeof status === "object" && "message" in status) {
      return statusError(status, response.status, traceId);
    }
  } catch {
    // not a google.rpc.Status: a proxy's page, say
  }
  return new MeshError(`HTTP ${response.status} ${response.statusText}`.trim(),
    { status: response.status, traceId });
}

// One unary call: { data, traceId }.
export async function call(method, path, body, signal) {
  const { response, traceId } = await send(method, path, body, signal);
  const text = await response.text();
  return { data: text ? JSON.parse(text) : {}, traceId };
}

async function* lines(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      yield buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
    }
  }
  if (buffer) yield buffer;
}

// A server-streaming call over REST (newline-delimited JSON): calls `onStart(traceId)`, then
// yields each message; an `{"error": Status}` line is thrown as a MeshError.
export async function* stream(path, body, { signal, onStart } = {}) {
  const { response, traceId } = await send("POST", path, body, signal);
  if (onStart) onStart(traceId);
  for await (const line of lines(response)) {
    if (!line.trim()) continue;
    const item = JSON.parse(line);
    if (item.error) throw statusError(item.error, 200, traceId);
    yield item.result;
  }
}

// A Server-Sent Events watch (fetch, so that it carries the key): yields each message's data
// until the `end` event; an `error` event is thrown as a MeshError.
export async function* events(path, { signal } = {}) {
  const { response, traceId } = await send("GET", path, undefined, signal);
  let event = "", data = [];
  for await (const line of lines(response)) {
    if (line === "" || line === "\r") {
      if (event === "end") return;
      if (event === "error") throw statusError(JSON.parse(data.join("\n")), 200, traceId);
      if (data.length) yield JSON.parse(data.join("\n"));
      event = "";
      data = [];
    } else if (line.startsWith("data:")) {
      data.push(line.slice(5).trimStart());
    } else if (line.startsWith("event:")) {
      event = line.slice(6).trim();
    }
  }
}

// The server's settings the console uses ({ jaeger_ui_url }).
export async function consoleConfig() {
  try {
    const response = await fetch(new URL("config.json", document.baseURI));
    return response.ok ? await response.json() : {};
  } catch {
    return {};
  }
}
