"""`runs`: durable runs and batches (the orchestrator's RunService) from the command line.

`runs submit FILE` sends a JSON Lines file (one `{"solve": {...}}` or `{"answer": {...}}` request
per line, as CreateBatch's items in proto3 JSON) as one batch and prints its name; `runs list`,
`runs get NAME`, `runs cancel NAME`; `runs watch NAME` follows a run's events (the consensus
loop's rounds, its state changes) or a batch's progress (a bar with its counts by state) until
it ends, reconnecting after a dropped connection or a passed deadline from the last event
received, so nothing is missed or shown twice; `runs results NAME` writes a batch's (or a run's)
results as JSON Lines, one `{"name", "index", "state", "response" | "error"}` per run, as the REST
front's download does. `run_batch` is what `eval --batch` uses.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from rich.console import Console

from mcts_mesh.cli.common import fail
from mcts_mesh.cli.progress import describe, eval_progress

RESUMABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""A watch that fails with these is opened again after its last event."""
MAX_RETRIES = 8
"""Consecutive reconnections without a new event before a watch gives up."""
STATES = ("queued", "running", "succeeded", "failed", "cancelled")


def register(sub) -> None:
    """Adds `runs` and its subcommands to the command line's subparsers."""
    runs = sub.add_parser("runs", help="durable runs and batches: submit, list, get, watch, "
                          "cancel, results")
    actions = runs.add_subparsers(dest="runs_command", required=True)
    submit = actions.add_parser("submit", help="submit a JSON Lines file of requests (one "
                                '{"solve": {...}} or {"answer": {...}} per line) as one batch; '
                                "prints the batch's name")
    submit.add_argument("file")
    submit.add_argument("--display-name", default="", help="a label for the batch")
    submit.add_argument("--request-id", default=None,
                        help="idempotency key (a UUID): a retried submit with the same one "
                             "creates nothing new (default: a new UUID)")
    submit.add_argument("--watch", action="store_true", help="then watch the batch to its end")
    submit.set_defaults(func=cmd_submit)
    listing = actions.add_parser("list", help="list your runs (or --batches), newest first")
    listing.add_argument("--state", choices=STATES, default=None)
    listing.add_argument("--batch", default=None, help="only the runs of batches/...")
    listing.add_argument("--batches", action="store_true", help="list batches instead of runs")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=cmd_list)
    for verb, function, text in (
            ("get", cmd_get, "print a run or a batch (runs/... or batches/...) as JSON"),
            ("watch", cmd_watch, "follow a run's rounds or a batch's progress until it ends"),
            ("cancel", cmd_cancel, "cancel a run or every unfinished run of a batch"),
            ("results", cmd_results, "a batch's (or a run's) results as JSON Lines on stdout")):
        parser = actions.add_parser(verb, help=text)
        parser.add_argument("name", help="runs/{run} or batches/{batch}")
        parser.set_defaults(func=function)


def run_stub(target: str, api_key: str | None = None):
    """(channel, RunServiceStub) to `target`, sending `api_key`; the caller closes the channel."""
    from mesh.orchestrator.v1 import run_service_pb2_grpc

    from mcts_mesh.client import open_channel

    channel = open_channel(target, api_key)
    return channel, run_service_pb2_grpc.RunServiceStub(channel)


def _kind(name: str) -> str | None:
    """"run" or "batch" for a resource name; None, said on stderr in one line, for neither."""
    for prefix, kind in (("runs/", "run"), ("batches/", "batch")):
        if name.startswith(prefix) and len(name) > len(prefix):
            return kind
    print(f"mcts-mesh: {name!r} is not a run (runs/...) or a batch (batches/...)", file=sys.stderr)
    return None


def _with_stub(args, action: Callable) -> int:
    """Runs `action(stub)` on a RunService channel; a failed call prints as `fail` does."""
    channel, stub = run_stub(args.target, args.api_key)
    try:
        return action(stub)
    except grpc.RpcError as error:
        return fail(error)
    finally:
        channel.close()


def read_items(path: Path) -> list | None:
    """The BatchItems of a JSON Lines file, one per non-blank line; None, said on stderr in one
    line naming its number and field, for a bad line.

    Raises:
        OSError: the file is missing or unreadable.
    """
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    from libs.rest.jsonl import InvalidLine, LinesUpload, decode_lines

    body = path.read_bytes()
    request = pb.CreateBatchRequest()
    try:
        decode_lines(request, LinesUpload("items", sys.maxsize, len(body)), body, max_depth=64)
    except InvalidLine as error:
        print(f"mcts-mesh: {path}: {error.message}", file=sys.stderr)
        return None
    return list(request.items)


def cmd_submit(args) -> int:
    """`runs submit FILE`: CreateBatch of the file's lines; prints the batch's name (then, with
    `--watch`, follows it as `runs watch` does)."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    items = read_items(Path(args.file))
    if items is None:
        return 2

    def submit(stub) -> int:
        batch = stub.CreateBatch(pb.CreateBatchRequest(
            batch=pb.Batch(display_name=args.display_name), items=items,
            request_id=args.request_id or str(uuid.uuid4())), timeout=args.deadline)
        print(batch.name, flush=True)
        return _watch_batch(stub, batch.name, args.deadline) if args.watch else 0

    return _with_stub(args, submit)


def cmd_list(args) -> int:
    """`runs list`: a page-by-page listing of the key's runs (or batches), `--limit` at most."""
    from google.protobuf import json_format
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    restrictions = []
    if args.state:
        restrictions.append(f"state = {args.state.upper()}")
    if args.batch:
        restrictions.append(f'batch = "{args.batch}"')

    def listing(stub) -> int:
        if args.batches:
            method, request, field = stub.ListBatches, pb.ListBatchesRequest(), "batches"
        else:
            method, field = stub.ListRuns, "runs"
            request = pb.ListRunsRequest(filter=" AND ".join(restrictions))
        shown = 0
        while shown < args.limit:
            request.page_size = min(args.limit - shown, 1000)
            page = method(request, timeout=args.deadline)
            for item in getattr(page, field)[:args.limit - shown]:
                print(json.dumps(json_format.MessageToDict(item)) if args.json else _row(item))
                shown += 1
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        return 0

    return _with_stub(args, listing)


def _state_word(state: int) -> str:
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    return pb.Run.State.Name(state).removeprefix("STATE_").lower()


def _row(item) -> str:
    """One line of `runs list` for a Run or a Batch."""
    created = item.create_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
    if item.DESCRIPTOR.name == "Batch":
        counts = ", ".join(f"{word} {getattr(item.state_counts, word)}" for word in STATES
                           if getattr(item.state_counts, word))
        return f"{item.name}  {_state_word(item.state):<9}  {created}  {item.run_count} runs" \
               f" ({counts})  {item.display_name}"
    return f"{item.name}  {_state_word(item.state):<9}  {created}  attempts {item.attempts}" \
           f"  {item.batch}"


def cmd_get(args) -> int:
    """`runs get NAME`: GetRun or GetBatch, printed as proto3 JSON."""
    from google.protobuf import json_format
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    kind = _kind(args.name)
    if kind is None:
        return 2

    def get(stub) -> int:
        if kind == "run":
            resource = stub.GetRun(pb.GetRunRequest(name=args.name), timeout=args.deadline)
        else:
            resource = stub.GetBatch(pb.GetBatchRequest(name=args.name), timeout=args.deadline)
        print(json_format.MessageToJson(resource, indent=2))
        return 0

    return _with_stub(args, get)


def cmd_cancel(args) -> int:
    """`runs cancel NAME`: CancelRun or CancelBatch; prints the resource's state after it."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    kind = _kind(args.name)
    if kind is None:
        return 2

    def cancel(stub) -> int:
        if kind == "run":
            run = stub.CancelRun(pb.CancelRunRequest(name=args.name), timeout=args.deadline)
            pending = " (cancel requested; it stops at its next renewal)" \
                if run.cancel_requested and run.state == pb.Run.STATE_RUNNING else ""
            print(f"{run.name}: {_state_word(run.state)}{pending}")
        else:
            batch = stub.CancelBatch(pb.CancelBatchRequest(name=args.name),
                                     timeout=args.deadline)
            print(f"{batch.name}: {_state_word(batch.state)} ({_counts_text(batch.state_counts)})")
        return 0

    return _with_stub(args, cancel)


def follow(open_stream: Callable, request, deadline: float,
           console: Console | None = None) -> Iterator:
    """The events of a watch (`open_stream(request, timeout=...)`: WatchRun or WatchBatch),
    opened again after its last event (`request.after_sequence`) when the connection drops or
    the deadline passes, until the stream ends; `MAX_RETRIES` reconnections in a row without a
    new event give up. Reconnections are noted on `console` (stderr).

    Raises:
        grpc.RpcError: a failure that is not `RESUMABLE`, or too many in a row.
    """
    console = console or Console(stderr=True)
    failures = 0
    while True:
        try:
            for event in open_stream(request, timeout=deadline):
                failures = 0
                request.after_sequence = event.sequence
                yield event
            return
        except grpc.RpcError as error:
            if error.code() not in RESUMABLE or failures >= MAX_RETRIES:
                raise
            failures += 1
            console.print(f"reconnecting after event {request.after_sequence} "
                          f"({error.code().name})", markup=False, highlight=False)
            time.sleep(min(0.25 * 2 ** failures, 5.0))


def cmd_watch(args) -> int:
    """`runs watch NAME`: a run's events as lines, or a batch's progress bar, to the end; exit
    status 0 when it succeeded, 1 when it failed or was cancelled."""
    kind = _kind(args.name)
    if kind is None:
        return 2
    return _with_stub(args, lambda stub: (_watch_run if kind == "run" else _watch_batch)(
        stub, args.name, args.deadline))


def _watch_run(stub, name: str, deadline: float) -> int:
    """Prints each event of the run as a line, then its outcome."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    for event in follow(stub.WatchRun, pb.WatchRunRequest(name=name), deadline):
        print(f"{event.sequence:>4} {_describe(event)}", flush=True)
    run = stub.GetRun(pb.GetRunRequest(name=name), timeout=deadline)
    ended = _state_word(run.state)
    detail = f": {run.error.message}" if run.HasField("error") else ""
    print(f"{run.name}: {ended} after {run.attempts} attempt(s){detail}")
    return 0 if run.state == pb.Run.STATE_SUCCEEDED else 1


def _describe(event) -> str:
    """One line for a RunEvent: the consensus loop's step, or the state change."""
    if event.HasField("solve_progress"):
        return describe(event.solve_progress)
    change = event.state_changed
    before = _state_word(change.previous_state) if change.previous_state else "new"
    why = f": {change.error.message}" if change.HasField("error") else ""
    return f"{before} -> {_state_word(change.state)} (attempt {change.attempt}){why}"


def _counts_text(counts) -> str:
    return ", ".join(f"{word} {getattr(counts, word)}" for word in STATES)


def _watch_batch(stub, name: str, deadline: float, lines: bool = True) -> int:
    """A progress bar of the batch on stderr (ended runs of all, counts by state) until every
    run has ended, then its counts on stdout."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    batch = stub.GetBatch(pb.GetBatchRequest(name=name), timeout=deadline)
    counts = {word: getattr(batch.state_counts, word) for word in STATES}
    request = pb.WatchBatchRequest(name=name, after_sequence=batch.last_event_sequence)
    with eval_progress(batch.run_count, name, every=max(1, batch.run_count // 20),
                       lines=lines) as update:
        ended = _ended(counts)
        update(ended, _counts_note(counts))
        if batch.state in (pb.Run.STATE_QUEUED, pb.Run.STATE_RUNNING):
            for event in follow(stub.WatchBatch, request, deadline):
                change = event.state_changed
                if change.previous_state:
                    word = _state_word(change.previous_state)
                    counts[word] = max(0, counts[word] - 1)
                counts[_state_word(change.state)] += 1
                if _ended(counts) != ended:
                    ended = _ended(counts)
                    update(ended, _counts_note(counts))
    batch = stub.GetBatch(pb.GetBatchRequest(name=name), timeout=deadline)
    print(f"{batch.name}: {_state_word(batch.state)} ({_counts_text(batch.state_counts)})",
          file=sys.stdout if lines else sys.stderr)
    return 1 if batch.state == pb.Run.STATE_CANCELLED else 0


def _ended(counts: dict[str, int]) -> int:
    return counts["succeeded"] + counts["failed"] + counts["cancelled"]


def _counts_note(counts: dict[str, int]) -> str:
    return " ".join(f"{word} {counts[word]}" for word in STATES if counts[word])


def result_record(run) -> dict[str, object]:
    """A run's JSON Lines record: name, index, state, and response or error (proto3 JSON)."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    from libs.rest.transcoding import message_to_json_value

    record: dict[str, object] = {"name": run.name, "index": run.batch_index,
                                 "state": pb.Run.State.Name(run.state)}
    kind = run.WhichOneof("result")
    if kind == "error":
        record["error"] = message_to_json_value(run.error)
    elif kind is not None:
        record["response"] = message_to_json_value(getattr(run, kind))
    return record


def batch_runs(stub, name: str, deadline: float) -> Iterator:
    """Every run of batch `name`, in item order, a ListRuns page at a time."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    request = pb.ListRunsRequest(filter=f'batch = "{name}"', page_size=1000)
    while True:
        page = stub.ListRuns(request, timeout=deadline)
        yield from page.runs
        if not page.next_page_token:
            return
        request.page_token = page.next_page_token


def cmd_results(args) -> int:
    """`runs results NAME`: one JSON line per run of the batch (or the one run)."""
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    kind = _kind(args.name)
    if kind is None:
        return 2

    def results(stub) -> int:
        if kind == "run":
            runs: Iterator = iter([stub.GetRun(pb.GetRunRequest(name=args.name),
                                               timeout=args.deadline)])
        else:
            stub.GetBatch(pb.GetBatchRequest(name=args.name), timeout=args.deadline)
            runs = batch_runs(stub, args.name, args.deadline)
        for run in runs:
            sys.stdout.write(json.dumps(result_record(run), ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return 0

    return _with_stub(args, results)


def run_batch(args, requests: list, label: str = "") -> list:
    """Submits SolveProblem `requests` as one batch, shows its progress on stderr until it ends
    and returns its runs in item order (`eval --batch`).

    Raises:
        grpc.RpcError: a call failed (the batch may exist: its name was printed on stderr).
    """
    from mesh.orchestrator.v1 import run_service_pb2 as pb

    channel, stub = run_stub(args.target, args.api_key)
    try:
        batch = stub.CreateBatch(pb.CreateBatchRequest(
            batch=pb.Batch(display_name=label),
            items=[pb.BatchItem(solve=request) for request in requests],
            request_id=str(uuid.uuid4())), timeout=args.deadline)
        print(f"submitted {batch.name} ({batch.run_count} runs)", file=sys.stderr, flush=True)
        _watch_batch(stub, batch.name, args.deadline, lines=False)
        return list(batch_runs(stub, batch.name, args.deadline))
    finally:
        channel.close()
