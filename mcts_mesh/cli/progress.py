"""Live progress in the terminal: `mcts-mesh solve ... --progress` watches the consensus loop
through StreamSolveProblem, and `mcts-mesh eval` shows a progress bar with a total and an ETA.

Both draw on stderr with `rich` (stdout keeps only the answer, or the JSON lines of `--json`).
When stderr is not a terminal (a pipe, a log file, a test), `solve --progress` prints one plain
line per event instead of a live table, and `eval` prints a line every `every` items.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from mcts_mesh.cli.common import agent_name


def describe(event) -> str:
    """One line for a StreamSolveProblemResponse, e.g.
    "[  12 ms] iteration 1: mcts proposes 4 (confidence 0.81, 35 ms: visits 812/2000)"."""
    kind = event.WhichOneof("event")
    head = f"[{event.elapsed_ms:6.0f} ms] iteration {event.iteration}:"
    if kind == "iteration_started":
        started = event.iteration_started
        agents = ", ".join(agent_name(agent) for agent in started.agents)
        return f"{head} asking {agents} ({started.simulations} simulations; {started.reason})"
    if kind == "agent_started":
        return f"{head} {agent_name(event.agent_started.agent)} started"
    if kind == "agent_finished":
        done = event.agent_finished
        name = agent_name(done.agent)
        if done.error_code:
            return f"{head} {name} failed after {done.latency_ms:.0f} ms: {done.error_code}: " \
                   f"{done.error_message}"
        if not done.HasField("vote"):
            return f"{head} {name} abstained after {done.latency_ms:.0f} ms: {done.abstain_reason}"
        vote = done.vote
        return (f"{head} {name} proposes {_short(vote.proposal)} (confidence "
                f"{vote.confidence:.2f}, {done.latency_ms:.0f} ms: {vote.rationale})")
    if kind == "tally":
        tally = event.tally
        state = "verified" if tally.verified else "agreed" if tally.agreed else "split"
        return (f"{head} tally {_short(tally.answer)} (confidence {tally.confidence:.2f}, "
                f"consensus {tally.consensus_score:.2f}, {state}, {len(tally.votes)} votes)")
    return f"{head} answered after {event.response.iterations} iteration(s)"


def _short(text: str, limit: int = 24) -> str:
    flat = text.replace("\n", "/")
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


class SolveView:
    """The live table of one solve: a row per agent call, then the latest tally."""

    def __init__(self) -> None:
        self._rows: dict[tuple[int, int], list[str]] = {}
        self._tally = ""
        self._elapsed_ms = 0.0

    def add(self, event) -> None:
        """Takes one StreamSolveProblemResponse into the view."""
        self._elapsed_ms = event.elapsed_ms
        kind = event.WhichOneof("event")
        if kind == "agent_started":
            key = (event.iteration, event.agent_started.agent)
            self._rows[key] = [str(event.iteration), agent_name(event.agent_started.agent),
                               "running", "", "", "", ""]
        elif kind == "agent_finished":
            done = event.agent_finished
            row = self._rows.setdefault((event.iteration, done.agent),
                                        [str(event.iteration), agent_name(done.agent)] + [""] * 5)
            row[5] = f"{done.latency_ms:.0f}"
            if done.error_code:
                row[2], row[6] = "failed", f"{done.error_code}: {done.error_message}"
            elif not done.HasField("vote"):
                row[2], row[6] = "abstained", done.abstain_reason
            else:
                row[2:5] = ["proposed", _short(done.vote.proposal), f"{done.vote.confidence:.2f}"]
                row[6] = done.vote.rationale
        elif kind == "tally":
            self._tally = describe(event).split(": ", 1)[1]
        elif kind == "response":
            answered = describe(event).split(": ", 1)[1]
            self._tally = f"{self._tally}; {answered}" if self._tally else answered

    def render(self) -> Table:
        table = Table(title=f"consensus loop, {self._elapsed_ms:.0f} ms", caption=self._tally,
                      expand=False)
        for column in ("iter", "agent", "state", "proposal", "conf", "ms", "why"):
            table.add_column(column, overflow="fold")
        for row in self._rows.values():
            table.add_row(*row)
        return table


class StreamingSolveStub:
    """Stands in for the orchestrator stub where `solve` calls SolveProblem: calls
    StreamSolveProblem instead, shows each event on `console` as it arrives, and returns the last
    message's SolveProblemResponse, so the answer prints exactly as without `--progress`.

    Raises (from SolveProblem):
        grpc.RpcError: the call failed (before or after some events).
        RuntimeError: the stream ended without an answer (a server that breaks the contract).
    """

    def __init__(self, stub, console: Console) -> None:
        self._stub = stub
        self._console = console

    def SolveProblem(self, request, timeout: float | None = None):  # noqa: N802 - the RPC's name
        from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

        stream_request = pb.StreamSolveProblemRequest.FromString(request.SerializeToString())
        events = self._stub.StreamSolveProblem(stream_request, timeout=timeout)
        response = None
        if self._console.is_terminal:
            view = SolveView()
            with Live(view.render(), console=self._console, refresh_per_second=12) as live:
                for event in events:
                    view.add(event)
                    live.update(view.render())
                    if event.HasField("response"):
                        response = event.response
        else:
            for event in events:
                self._console.print(describe(event), markup=False, highlight=False,
                                   soft_wrap=True)
                if event.HasField("response"):
                    response = event.response
        if response is None:
            raise RuntimeError("the orchestrator's stream ended without an answer")
        return response


@contextlib.contextmanager
def eval_progress(total: int, what: str, every: int, lines: bool = True,
                  console: Console | None = None) -> Iterator[Callable[[int, str], None]]:
    """Yields `update(done, note)`: a rich progress bar on stderr (done/total, percentage,
    `note` such as "kept 97.0%", elapsed time, ETA) when stderr is a terminal; otherwise, when
    `lines`, a plain line "done/total: note" every `every` items and at the last one (nothing
    when not `lines`: `--json` runs keep a piped stderr quiet)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        def update_lines(done: int, note: str) -> None:
            if lines and (done % every == 0 or done == total):
                console.print(f"{done}/{total}: {note}", markup=False, highlight=False,
                              soft_wrap=True)

        yield update_lines
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TaskProgressColumn(), TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(what, total=total, note="")

        def update_bar(done: int, note: str) -> None:
            progress.update(task, completed=done, note=note)

        yield update_bar
