"""The AlphaZero loop's commands: `train connect4-az`, `selfplay-actor`, `plot-history`.

Settings: `--set FIELD=VALUE` (repeatable) sets any field of
`mcts_mesh.training.az.settings.AZSettings`; a few common ones also have their own flags. The
values are validated by the settings object, so a bad one fails with the field's name.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_train_arguments(train: argparse.ArgumentParser) -> None:
    """The options `train connect4-az` adds to the `train` parser."""
    train.add_argument("--run-dir", default=None,
                       help="connect4-az: run directory (default runs/connect4-az)")
    train.add_argument("--generations", type=int, default=None, help="connect4-az")
    train.add_argument("--actors", type=int, default=None,
                       help="connect4-az: self-play actor processes to start (0: self-play in "
                            "the learner)")
    train.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="connect4-az: any AZSettings field, e.g. --set simulations=400")


def az_settings(args: argparse.Namespace):
    """The `AZSettings` of a `train connect4-az` command line.

    Raises:
        SystemExit: a malformed --set or an invalid value (the message names the field).
    """
    # Imported here, not at the top: every CLI command builds the parser that imports this module.
    from pydantic import ValidationError

    from mcts_mesh.training.az.settings import AZSettings

    values: dict[str, Any] = {}
    for item in args.set:
        field, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE")
        if field not in AZSettings.model_fields:
            raise SystemExit(f"--set {field}: no such setting; known: "
                             f"{', '.join(sorted(AZSettings.model_fields))}")
        values[field] = _parse(value)
    for flag, field in (("run_dir", "run_dir"), ("generations", "generations"),
                        ("actors", "actors"), ("device", "device")):
        if getattr(args, flag, None) is not None:
            values[field] = getattr(args, flag)
    if args.seed:
        values["seed"] = args.seed
    try:
        return AZSettings.model_validate(values)
    except ValidationError as error:
        raise SystemExit(f"train connect4-az: invalid settings:\n{error}") from None


def _parse(value: str) -> Any:
    """JSON when it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def train_connect4_az(args: argparse.Namespace) -> dict[str, Any]:
    from mcts_mesh.training.az.loop import train_connect4_az as run
    from mcts_mesh.training.az.replay import ReplayError
    from services.neural.checkpoint import CheckpointError

    try:
        report = run(az_settings(args))
    except (ReplayError, CheckpointError, FileNotFoundError, ValueError) as error:
        raise SystemExit(f"train connect4-az: {error}") from None
    report.pop("history")
    return report


def add_parsers(sub) -> None:
    """`selfplay-actor` and `plot-history`."""
    actor = sub.add_parser("selfplay-actor", help="play self-play games with a run's best "
                                                  "network and write replay shards")
    actor.add_argument("--run-dir", default="runs/connect4-az")
    actor.add_argument("--actor-id", default="0",
                       help="unique among the run's actors (a number, a pod name)")
    actor.add_argument("--torch-threads", type=int, default=1)
    actor.add_argument("--max-shards", type=int, default=None)
    actor.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                       help="default: the run's setting")
    actor.set_defaults(func=cmd_selfplay_actor)
    plot = sub.add_parser("plot-history", help="draw a connect4-az checkpoint's learning curve "
                                               "(arena score, Pons rates by generation)")
    plot.add_argument("checkpoint", help="a checkpoint folder, e.g. runs/connect4-az/"
                                         "checkpoints/gen-0010")
    plot.add_argument("--output", default="learning-curve.png")
    plot.set_defaults(func=cmd_plot_history)


def cmd_selfplay_actor(args: argparse.Namespace) -> int:
    from mcts_mesh.training.az.actor import run_actor
    from mcts_mesh.training.az.replay import ReplayError

    try:
        run_actor(args.run_dir, args.actor_id, args.torch_threads, args.max_shards, args.device)
    except (ReplayError, FileNotFoundError, ValueError) as error:
        raise SystemExit(f"selfplay-actor: {error}") from None
    return 0


def cmd_plot_history(args: argparse.Namespace) -> int:
    from mcts_mesh.training.az.plot import plot_history
    from services.neural.checkpoint import CheckpointError

    try:
        table = plot_history(Path(args.checkpoint), Path(args.output))
    except CheckpointError as error:
        raise SystemExit(f"plot-history: {error}") from None
    print(table)
    print(f"wrote {args.output}")
    return 0
