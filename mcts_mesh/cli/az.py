"""The AlphaZero loop's commands: `train connect4-az`, `selfplay-actor`, `plot-history`.

Settings: `--set FIELD=VALUE` (repeatable) sets any field of
`training.az.settings.AZSettings`; a few common ones also have their own flags. The
values are validated by the settings object, so a bad one fails with the field's name.

Stopping: Ctrl-C (SIGINT) or SIGTERM stops `train connect4-az` within seconds, with one line naming
the last complete generation (its checkpoint is what the same command resumes from) and the
status 128 + the signal's number (130, 143); `selfplay-actor` stops on SIGINT the same way, and on
SIGTERM after its shard (a Kubernetes pod's grace period). Both hold to this when the shell started
them with SIGINT ignored (a background job `&`), where Python would not see Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
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
    # Imported here, not at the top: every command line imports this module to build its parser.
    from pydantic import ValidationError

    from training.az.settings import AZSettings

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


class StopSignals:
    """A context manager under which each of `signals` raises KeyboardInterrupt in the main
    thread (the first one; later ones are ignored while the program stops), whatever the
    signal's disposition was, and which puts the previous handlers back on exit. `received` is
    the first signal's number (None: none came).

    A signal other than SIGINT goes through SIGINT's handler of the moment, so code that holds
    Ctrl-C off for a moment (the renames of `services.neural.checkpoint.replace_checkpoint`) holds
    it off too. Only the main thread can set handlers (ValueError elsewhere).
    """

    def __init__(self, *signals: signal.Signals) -> None:
        self._signals = signals
        self._previous: dict[signal.Signals, Any] = {}
        self._raised = False
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        self._previous = {number: signal.signal(number, self._handle) for number in self._signals}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = number
        if number != signal.SIGINT:
            current = signal.getsignal(signal.SIGINT)
            if callable(current) and current != self._handle:  # Ctrl-C is held off just now
                current(signal.SIGINT, frame)
                return
        if not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    @property
    def name(self) -> str:
        """The first signal's name ("SIGINT" when none came: a KeyboardInterrupt of its own)."""
        return signal.Signals(self.received or signal.SIGINT).name

    def exit_status(self) -> int:
        """128 + the first signal's number (130 for SIGINT, the shell's convention)."""
        return 128 + (self.received or signal.SIGINT)


def cmd_train_connect4_az(args: argparse.Namespace) -> int:
    """`train connect4-az`: runs the loop and prints its summary (JSON); 0, or on SIGINT or
    SIGTERM one line on stderr and 128 + the signal's number (see the module doc).

    Raises:
        SystemExit: bad settings, an unreadable replay directory or checkpoint, a missing Pons
            file (one line naming it).
    """
    settings = az_settings(args)
    with StopSignals(signal.SIGINT, signal.SIGTERM) as stop:
        try:
            # Imported here, not at the top: every CLI command builds the parser (see az_settings).
            from services.neural.checkpoint import CheckpointError
            from training.az.loop import train_connect4_az as run
            from training.az.replay import ReplayError

            try:
                report = run(settings)
            except (ReplayError, CheckpointError, FileNotFoundError, ValueError) as error:
                raise SystemExit(f"train connect4-az: {error}") from None
        except KeyboardInterrupt as interrupted:  # the loop's RunInterrupted, or in the imports
            checkpoint = getattr(interrupted, "checkpoint", None)
            done = (f"generation {interrupted.generation} ({checkpoint}) is the last complete "
                    "one; the same command resumes from it" if checkpoint is not None
                    else "no generation was complete")
            print(f"train connect4-az: interrupted ({stop.name}); {done}", file=sys.stderr)
            return stop.exit_status()
    report.pop("history")
    print(json.dumps(report, indent=2, default=str))
    return 0


def register(sub) -> None:
    """Adds `selfplay-actor` and `plot-history` to the command line's subparsers."""
    actor = sub.add_parser("selfplay-actor", help="play self-play games with a run's best "
                                                  "network and write replay shards")
    actor.add_argument("--run-dir", default="runs/connect4-az")
    actor.add_argument("--actor-id", default=None,
                       help="unique among the run's actors (default: this host's name, which "
                            "on Kubernetes is the pod's name)")
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
    """`selfplay-actor`: 0 when it stops by itself (max shards, the run finished, SIGTERM
    between shards); on SIGINT one line on stderr and 130, the shard in progress not written."""
    args.actor_id = args.actor_id or socket.gethostname()
    print(f"selfplay-actor {args.actor_id}: run directory {args.run_dir}", flush=True)
    with StopSignals(signal.SIGINT) as stop:
        try:
            from training.az.actor import run_actor
            from training.az.replay import ReplayError

            try:
                run_actor(args.run_dir, args.actor_id, args.torch_threads, args.max_shards,
                          args.device)
            except (ReplayError, FileNotFoundError, ValueError) as error:
                raise SystemExit(f"selfplay-actor: {error}") from None
        except KeyboardInterrupt:
            print(f"selfplay-actor {args.actor_id}: interrupted ({stop.name}); the shard in "
                  "progress is not written", file=sys.stderr)
            return stop.exit_status()
    return 0


def cmd_plot_history(args: argparse.Namespace) -> int:
    from services.neural.checkpoint import CheckpointError
    from training.az.plot import plot_history

    try:
        table = plot_history(Path(args.checkpoint), Path(args.output))
    except CheckpointError as error:
        raise SystemExit(f"plot-history: {error}") from None
    print(table)
    print(f"wrote {args.output}")
    return 0
