"""The commands that run servers: `up` runs the whole mesh on loopback and keeps it running;
`serve` runs one service (what `up`, compose and Kubernetes start for each; the services are those
of the registry, `libs.services`); `mcp` runs an MCP server over the orchestrator."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from libs.services import BY_NAME

SERVICE_ENTRY = {name: (service.settings_class, service.entry_module)
                 for name, service in BY_NAME.items()}
"""service word -> (settings class as `module:Class`, entry-point module), from the registry."""


def load(path: str):
    """The object at `module:attribute` (or the module at `module`)."""
    module, _, attribute = path.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


def register(sub) -> None:
    """Adds `up`, `mcp` and `serve` to the command line's subparsers."""
    up = sub.add_parser("up", help="run all five services on loopback")
    up.add_argument("--port-base", type=int, default=50051,
                    help="orchestrator gRPC port; the others follow +1..+4 (0: free ports)")
    up.add_argument("--rest-port", type=int, default=8080)
    up.add_argument("--log-dir", default=None)
    up.add_argument("--log-format", choices=["json", "text"], default=None,
                    help="every service's log lines: JSON objects (default) or plain text")
    up.add_argument("--demo", action="store_true",
                    help="send the demo workload (Pons positions, SciFact claims) once up")
    up.add_argument("--demo-positions", type=int, default=20,
                    help="Pons positions per file in the demo")
    up.add_argument("--data-dir", default=None,
                    help="evaluation data folder searched before the repository's data/ "
                         "(default: MCTS_MESH_DATA_DIR, else ../shared/data beside the "
                         "repository)")
    _add_restart_arguments(up)
    up.set_defaults(func=cmd_up)

    mcp = sub.add_parser("mcp", help="an MCP server (tools solve, query, run_mcts, health) over "
                         "the orchestrator at --target")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                     help="stdio (the MCP client starts this command) or streamable HTTP on /mcp")
    mcp.add_argument("--host", default="127.0.0.1", help="http: address to bind")
    mcp.add_argument("--port", type=int, default=8765, help="http: port (0: a free one)")
    mcp.add_argument("--port-file", default=None, help="http: write the bound port as JSON here")
    mcp.set_defaults(func=cmd_mcp)

    serve = sub.add_parser("serve", help="run one service (its settings come from the environment)",
                           epilog=SERVE_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("service", choices=sorted(SERVICE_ENTRY))
    serve.add_argument("--host", default=None,
                       help="address the gRPC (and REST) server binds (default: <SERVICE>_HOST, "
                            "else 127.0.0.1; 0.0.0.0 listens on every interface)")
    serve.add_argument("--port", type=int, default=None,
                       help="gRPC port (default: <SERVICE>_PORT, else orchestrator 50051, mcts "
                            "50052, neural 50053, retrieval 50054, llm 50055; 0: a free one)")
    serve.add_argument("--port-file", default=None,
                       help="write the bound ports as JSON here once SERVING")
    serve.add_argument("--log-format", choices=["json", "text"], default=None,
                       help="log lines: JSON objects or plain text (default: the *_LOG_FORMAT "
                            "setting, json)")
    serve.set_defaults(func=cmd_serve)


SERVE_EPILOG = """\
Every setting of a service is an environment variable named after the service:
<SERVICE>_<SETTING> in capitals, e.g. MCTS_HOST, MCTS_PORT, MCTS_METRICS_PORT,
ORCHESTRATOR_REST_PORT (8080; -1 turns REST off). --host and --port override
<SERVICE>_HOST and <SERVICE>_PORT. Example:
  MCTS_HOST=0.0.0.0 MCTS_PORT=6000 mcts-mesh serve mcts
  mcts-mesh serve mcts --host 0.0.0.0 --port 6000
"""
"""`serve --help`'s closing text: where a service's address and its other settings come from."""


def _add_restart_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--fail-fast", action="store_true",
                    help="stop the whole mesh when one service exits (no restarts)")
    up.add_argument("--max-restarts", type=_non_negative_int, default=5,
                    help="restarts in a row of one service before the mesh gives up; a service "
                         "that stays up 60 s starts a fresh count (default %(default)s)")
    up.add_argument("--restart-backoff", type=_positive_float, default=0.5,
                    help="seconds before the first restart, doubled for each one in a row "
                         "(default %(default)s)")
    up.add_argument("--restart-backoff-max", type=_positive_float, default=30.0,
                    help="longest wait before a restart, in seconds (default %(default)s)")


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _write_port_file(path: str, content: dict) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(content))
    tmp.replace(path)


def cmd_serve(args) -> int:
    """Runs one service's entry point, `services.<name>.main.main(settings, on_listening)`.

    A start-up failure (a taken port, bad settings, a locked data directory) is one line on stderr,
    e.g. "mcts: cannot bind 127.0.0.1:50052: address already in use", written as {"error": ...} to
    the port file too (the launcher shows it), with the traceback in the log; exit status 1.
    A service started by `mcts-mesh up` stops when that launcher ends (`follow_launcher`)."""
    # No garbage collection until the service is ready (`libs.server.serve` collects once, freezes
    # what start-up made and turns it back on): importing torch, numba and the rest runs the
    # collector over every object made so far again and again, about a quarter of their CPU.
    gc.disable()
    from libs.server import BindError
    from mcts_mesh.launcher import follow_launcher

    follow_launcher()
    listening = False

    def on_listening(ports: dict[str, int]) -> None:
        nonlocal listening
        listening = True
        if args.port_file:
            _write_port_file(args.port_file, ports)

    try:
        settings_cls = load(SERVICE_ENTRY[args.service][0])
        main_module = load(SERVICE_ENTRY[args.service][1])
        overrides = {name: value for name, value in (("log_format", args.log_format),
                                                     ("host", args.host), ("port", args.port))
                     if value is not None}
        main_module.main(settings_cls(**overrides), on_listening=on_listening)
    except Exception as error:
        if listening:
            raise
        if isinstance(error, BindError):
            message = str(error)  # says it all; no traceback
        else:
            message = f"{args.service}: start-up failed: {type(error).__name__}: {error}"
            logging.getLogger("mcts_mesh.cli").exception("%s", message)
        print(message, file=sys.stderr, flush=True)
        if args.port_file:
            _write_port_file(args.port_file, {"error": message})
        return 1
    return 0


def supervise(mesh, args) -> int:
    """Keeps the mesh up until a signal: restarts services that exit (`Supervisor`), or with
    --fail-fast stops the mesh when one exits. Returns the exit status of `up`."""
    from mcts_mesh.launcher import GaveUp, RestartPolicy, Supervisor

    if args.fail_fast:
        while all(p.poll() is None for p in mesh.processes.values()):
            time.sleep(0.5)
        dead = [n for n, p in mesh.processes.items() if p.poll() is not None]
        print(f"service exited: {', '.join(dead)}; stopping the mesh (--fail-fast)",
              file=sys.stderr)
        return 1
    supervisor = Supervisor(mesh, RestartPolicy(
        max_restarts=args.max_restarts, backoff_initial_s=args.restart_backoff,
        backoff_max_s=args.restart_backoff_max))
    try:
        while True:
            supervisor.step()
            time.sleep(0.2)
    except GaveUp as error:
        print(f"{error}; stopping the mesh", file=sys.stderr)
        return 1


def _stop_on_signals() -> None:
    """SIGTERM and SIGINT both stop the mesh gracefully (a background job starts with SIGINT
    ignored; the services run in their own sessions, so only this process gets the signal).
    Only the first signal interrupts: a second one (a repeated Ctrl-C, or `make` and `timeout`
    both signalling) must not break into the drain with a traceback."""
    interrupted = False

    def interrupt(signum, frame):
        nonlocal interrupted
        if interrupted:
            return
        interrupted = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def _print_mesh(mesh, started: float) -> None:
    print(f"mesh up in {time.perf_counter() - started:.1f} s: " + ", ".join(
        f"{name} :{port}" for name, port in mesh.ports.items()) + f", REST :{mesh.rest_port}"
        f"  (logs in {next(iter(mesh.logs.values())).parent})", flush=True)
    print("metrics: " + ", ".join(f"{name} :{port}" for name, port in mesh.metrics_ports.items())
          + f" and REST :{mesh.rest_port}/metrics", flush=True)
    print(f"the backends require this run's mesh token (x-mesh-token), in {mesh.token_file}",
          flush=True)


def cmd_up(args) -> int:
    """`up`: starts the mesh (`launcher.start_mesh`), optionally sends the demo workload, then
    supervises it until SIGINT or SIGTERM, which stop it with a graceful drain."""
    from mcts_mesh.launcher import LaunchError, start_mesh

    _stop_on_signals()
    print(f"starting {', '.join(BY_NAME)} on loopback ...", flush=True)
    started = time.perf_counter()
    try:
        mesh = start_mesh(port_base=args.port_base, rest_port=args.rest_port,
                          log_dir=Path(args.log_dir) if args.log_dir else None,
                          log_format=args.log_format)
    except LaunchError as error:
        print(f"{error}; the mesh did not start", file=sys.stderr)
        return 1
    _print_mesh(mesh, started)
    try:
        if args.demo:
            from mcts_mesh.demo import run_demo

            run_demo(mesh.target, args)
        print("serving; Ctrl-C stops the mesh", flush=True)
        return supervise(mesh, args)
    except KeyboardInterrupt:
        print("\nstopping the mesh (graceful drain) ...", flush=True)
        return 0
    finally:
        mesh.stop()


def cmd_mcp(args) -> int:
    """Runs the MCP server (mcts_mesh/mcp_server.py) over the orchestrator at --target."""
    from mcts_mesh.mcp_server import serve, write_port_file

    # The global --api-key where the command has one, else $MCTS_MESH_API_KEY.
    api_key = getattr(args, "api_key", None) or os.environ.get("MCTS_MESH_API_KEY") or None
    serve(args.target, args.transport, host=args.host, port=args.port, deadline_s=args.deadline,
          api_key=api_key,
          on_listening=write_port_file(args.port_file) if args.port_file else None)
    return 0
