// A Node.js client of the mcts-mesh orchestrator's gRPC API.
//
// The contracts are loaded at run time from the repository's protos/ and the vendored googleapis
// protos (third_party/googleapis) with @grpc/proto-loader; no generated code is needed. Error
// details (google.rpc.Status in the `grpc-status-details-bin` trailer) are decoded with protobufjs
// from the same vendored google/rpc protos.
//
// As a command:  node clients/node/client.js [--target host:port] solve-connect4 MOVES
//                node clients/node/client.js [--target host:port] answer QUERY [COLLECTION]
// Each prints the response (or the error with its decoded details) as one JSON object.
"use strict";

const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");

const REPO = path.resolve(__dirname, "..", "..");
const INCLUDE_DIRS = [path.join(REPO, "protos"), path.join(REPO, "third_party", "googleapis")];

// Fields in lowerCamelCase (as in the REST JSON), enums as their names, 64-bit integers as strings.
const LOAD_OPTIONS = {keepCase: false, longs: String, enums: String, defaults: true, oneofs: true,
                      includeDirs: INCLUDE_DIRS};

/** The OrchestratorService client constructor, loaded from protos/. */
function orchestratorClass() {
  const definition = protoLoader.loadSync("mesh/orchestrator/v1/orchestrator_service.proto",
                                          LOAD_OPTIONS);
  return grpc.loadPackageDefinition(definition).mesh.orchestrator.v1.OrchestratorService;
}

/**
 * HTTP/2 keepalive of a client's channel, the values of the mesh's other long-lived channels
 * (mcts_mesh/client.py `client_options`; libs/channels.py `Keepalive` says why these): a ping
 * every 1000 ms, also while no call is in flight, and the connection closed when a ping has no
 * answer within 2000 ms. A call to an orchestrator that froze, or whose connection went away
 * without a word, then fails UNAVAILABLE within about 3 s instead of at its deadline. The mesh's
 * servers accept pings this often.
 */
const KEEPALIVE_OPTIONS = Object.freeze({
  "grpc.keepalive_time_ms": 1000,
  "grpc.keepalive_timeout_ms": 2000,
  "grpc.keepalive_permit_without_calls": 1,
});

/**
 * The grpc-js channel options of a client: `KEEPALIVE_OPTIONS`, then `overrides` (which win).
 *
 * @param {Object<string, (number|string)>} [overrides] grpc-js channel options.
 * @returns {Object<string, (number|string)>} a new object.
 */
function channelOptions(overrides = {}) {
  return {...KEEPALIVE_OPTIONS, ...overrides};
}

/**
 * A client of the orchestrator at `target`, over plaintext HTTP/2, whose channel has the mesh's
 * keepalive (`KEEPALIVE_OPTIONS`) unless `options` says otherwise.
 *
 * @param {string} target "host:port" of the orchestrator.
 * @param {Object<string, (number|string)>} [options] grpc-js channel options over the defaults,
 *     e.g. {"grpc.keepalive_time_ms": 30000} to ping every 30 s, or
 *     {"grpc.keepalive_permit_without_calls": 0} to ping only while a call is in flight.
 * @returns {grpc.Client} an OrchestratorService client; close it with `client.close()`.
 */
function connect(target, options = {}) {
  const Orchestrator = orchestratorClass();
  return new Orchestrator(target, grpc.credentials.createInsecure(), channelOptions(options));
}

let rpcRoot = null;
function rpcTypes() {
  if (rpcRoot === null) {
    rpcRoot = new protobuf.Root();
    rpcRoot.resolvePath = (_origin, target) => {
      for (const dir of INCLUDE_DIRS) {
        const candidate = path.join(dir, target);
        if (require("node:fs").existsSync(candidate)) return candidate;
      }
      return target; // google/protobuf/*: protobufjs's bundled well-known types
    };
    rpcRoot.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"]);
  }
  return rpcRoot;
}

/**
 * The google.rpc.Status of a failed call, with each detail decoded when it is a google.rpc type
 * (BadRequest, ErrorInfo, RetryInfo, ...): {code, message, details: [{"@type", ...fields}]}.
 * Null when the error carries no details trailer.
 */
function statusDetails(error) {
  const raw = error && error.metadata && error.metadata.get("grpc-status-details-bin")[0];
  if (!raw) return null;
  const root = rpcTypes();
  const status = root.lookupType("google.rpc.Status").decode(raw);
  const details = status.details.map((any) => {
    const name = any.type_url.slice(any.type_url.lastIndexOf("/") + 1);
    const type = root.lookupType(name);
    return {"@type": any.type_url, ...type.toObject(type.decode(any.value), {enums: String})};
  });
  return {code: status.code, message: status.message, details};
}

/**
 * Calls `method` of `client` with `request`; resolves with the response, rejects with the error.
 * An API key ($MCTS_MESH_API_KEY unless `apiKey` is given) is sent as x-api-key.
 */
function call(client, method, request, deadlineSeconds = 120, apiKey = process.env.MCTS_MESH_API_KEY) {
  const deadline = new Date(Date.now() + deadlineSeconds * 1000);
  const metadata = new grpc.Metadata();
  if (apiKey) metadata.set("x-api-key", apiKey);
  return new Promise((resolve, reject) => {
    client[method](request, metadata, {deadline},
                   (error, response) => (error ? reject(error) : resolve(response)));
  });
}

async function main(argv) {
  let target = "127.0.0.1:50051";
  const args = [...argv];
  const at = args.indexOf("--target");
  if (at >= 0) {
    target = args[at + 1];
    args.splice(at, 2);
  }
  const [command, ...rest] = args;
  const client = connect(target);
  try {
    let response;
    if (command === "solve-connect4") {
      response = await call(client, "SolveProblem", {connectFour: {moves: rest[0] ?? ""}});
    } else if (command === "answer") {
      response = await call(client, "AnswerQuery", {query: rest[0], collection: rest[1] ?? ""});
    } else {
      throw new Error(`unknown command ${JSON.stringify(command)}: solve-connect4 MOVES | answer QUERY [COLLECTION]`);
    }
    console.log(JSON.stringify(response));
  } catch (error) {
    if (error.code === undefined) throw error;
    console.log(JSON.stringify({error: grpc.status[error.code], message: error.details,
                                status: statusDetails(error)}));
    process.exitCode = 1;
  } finally {
    client.close();
  }
}

module.exports = {connect, call, channelOptions, statusDetails, INCLUDE_DIRS, KEEPALIVE_OPTIONS};

if (require.main === module) {
  main(process.argv.slice(2)).catch((error) => {
    console.error(error.message);
    process.exitCode = 2;
  });
}
