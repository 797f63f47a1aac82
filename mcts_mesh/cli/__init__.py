"""`mcts-mesh`: the one command line of the project.

`up` and `serve` run services; `train` runs a training job; `puzzles` writes puzzle files; every
other command is a client of the orchestrator's public gRPC API (`--target`), never an in-process
shortcut.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from libs.data import MissingDataset
from libs.errors import MeshError
from mcts_mesh.cli import keys, models, puzzles, query, runs, serve, solve, train
from mcts_mesh.cli.common import DEFAULT_TARGET
from mcts_mesh.client import API_KEY_ENV

COMMAND_GROUPS = (serve, solve, runs, query, train, puzzles, keys, models)
"""The modules that add the commands, each by its `register(subparsers)`, in the order `--help`
lists them: up, mcp, serve; solve, eval; runs; ingest, query; train, selfplay-actor,
plot-history; puzzles; keys; models."""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global options, then each group's commands."""
    parser = argparse.ArgumentParser(prog="mcts-mesh", description=__doc__)
    parser.add_argument("--target", default=DEFAULT_TARGET,
                        help="the orchestrator's gRPC address (default %(default)s)")
    parser.add_argument("--deadline", type=float, default=120.0,
                        help="deadline of each call in seconds (default %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None,
                        help=f"API key sent to the orchestrator as x-api-key (default: "
                             f"${API_KEY_ENV})")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs one command line (`argv`, default sys.argv[1:]); returns its exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except MissingDataset as error:
        print(f"mcts-mesh: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of stdout went away (`mcts-mesh query ... | head -1`): stop quietly, and keep
        # the interpreter's final flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except MeshError as error:
        # A domain error raised in this process (a checkpoint that does not load, a bad file
        # a command parsed itself): its message says it all.
        print(f"mcts-mesh: {error.message}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as error:
        print(f"mcts-mesh: {_input_file(args)}: not UTF-8 text (byte {error.start}: "
              f"{error.reason})", file=sys.stderr)
        return 2
    except OSError as error:
        if error.filename is None:
            raise
        # A file named on the command line that is missing or unreadable: one line, no traceback.
        print(f"mcts-mesh: {error.filename}: {error.strerror}", file=sys.stderr)
        return 2


def _input_file(args: argparse.Namespace) -> str:
    """The file a command was reading: the one existing file among its arguments, else "an
    input file"."""
    files = {value for value in vars(args).values()
             if isinstance(value, str) and os.path.isfile(value)}
    return files.pop() if len(files) == 1 else "an input file"
