"""`mcts-mesh runs ...` and `mcts-mesh eval connect4 --batch` against a RunService on a real
grpc.aio server on port 0, over gRPC.

The RunService is a test double whose behaviour is obvious: a created batch's runs are executed by
a background task, one after the other, each answered by `_answer` (the first legal column of
4, 3, 5, 2, 6, 1, 7), with the state changes stored as batch events; OrchestratorService's
SolveProblem answers with the same `_answer`, so `eval` with and without `--batch` must judge the
same moves. Watches drop the connection once (UNAVAILABLE) after a few events, to check that the
command resumes from the last event without losing or repeating one.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2 as opb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as opb_grpc
from mesh.orchestrator.v1 import run_service_pb2 as pb
from mesh.orchestrator.v1 import run_service_pb2_grpc as pb_grpc

from libs.data import REPO_DATA
from libs.errors import FailedPrecondition, NotFound
from libs.server import Servicer, start_server
from libs.settings import ServiceSettings
from mcts_mesh import cli

PONS = REPO_DATA / "connect4-pons" / "Test_L3_R1"
RUN = "runs/r1"


def _answer(request: opb.SolveProblemRequest) -> opb.SolveProblemResponse:
    moves = request.connect_four.moves
    heights = {column: moves.count(str(column)) for column in range(1, 8)}
    column = next(column for column in (4, 3, 5, 2, 6, 1, 7) if heights[column] < 6)
    return opb.SolveProblemResponse(connect_four=opb.ConnectFourAnswer(column=column))


class _Runs(pb_grpc.RunServiceServicer):
    def __init__(self) -> None:
        self.batch: pb.Batch | None = None
        self.runs: list[pb.Run] = []
        self.batch_events: list[pb.RunEvent] = []
        self.run_events: list[pb.RunEvent] = []
        self.changed = asyncio.Condition()
        self.created: list[pb.CreateBatchRequest] = []
        self.dropped: set[str] = set()
        self.worker: asyncio.Task | None = None
        self.go = asyncio.Event()
        """Set by the first WatchBatch (or the test): the batch's runs execute only then, so a
        watch sees them change."""

    def _ended(self) -> bool:
        return all(run.state >= pb.Run.STATE_SUCCEEDED for run in self.runs)

    async def CreateBatch(self, request, context):
        self.created.append(request)
        self.batch = pb.Batch(name="batches/b1", display_name=request.batch.display_name,
                              run_count=len(request.items), state=pb.Run.STATE_QUEUED)
        self.batch.state_counts.queued = len(request.items)
        self.runs = [pb.Run(name=f"runs/b1-{index}", batch="batches/b1", batch_index=index,
                            solve=item.solve, state=pb.Run.STATE_QUEUED)
                     for index, item in enumerate(request.items)]
        self.worker = asyncio.ensure_future(self._execute())
        return self.batch

    async def _execute(self) -> None:
        await self.go.wait()
        for run in self.runs:
            for state in (pb.Run.STATE_RUNNING, pb.Run.STATE_SUCCEEDED):
                async with self.changed:
                    self._change(run, state)
                    self.changed.notify_all()
                await asyncio.sleep(0)  # let the watch read

    def _change(self, run: pb.Run, state: int) -> None:
        counts = self.batch.state_counts
        for word, value in ((_word(run.state), -1), (_word(state), 1)):
            setattr(counts, word, getattr(counts, word) + value)
        self.batch_events.append(pb.RunEvent(
            sequence=len(self.batch_events) + 1, run=run.name,
            state_changed=pb.StateChanged(previous_state=run.state, state=state, attempt=1)))
        self.batch.last_event_sequence = len(self.batch_events)
        run.state, run.attempts = state, 1
        if state == pb.Run.STATE_RUNNING:
            run.start_time.FromMilliseconds(1000)
        else:
            run.end_time.FromMilliseconds(1012)
            run.solve_response.CopyFrom(_answer(run.solve))
        if self._ended():
            self.batch.state = pb.Run.STATE_SUCCEEDED

    async def GetBatch(self, request, context):
        if self.batch is None or request.name != self.batch.name:
            raise NotFound(f"{request.name} not found")
        return self.batch

    async def ListRuns(self, request, context):
        assert request.filter == 'batch = "batches/b1"'
        start = int(request.page_token or 0)
        end = start + 3  # small pages: the command must follow the tokens
        return pb.ListRunsResponse(runs=self.runs[start:end],
                                   next_page_token=str(end) if end < len(self.runs) else "")

    async def WatchBatch(self, request, context):
        self.go.set()
        seen = request.after_sequence
        while True:
            async with self.changed:
                after = seen
                await self.changed.wait_for(
                    lambda: len(self.batch_events) > after or self._ended())  # noqa: B023
                pending, done = self.batch_events[seen:], self._ended()
            for event in pending:
                if event.sequence == 3 and "batch" not in self.dropped:
                    self.dropped.add("batch")
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "connection dropped")
                yield event
                seen = event.sequence
            if done:
                return

    async def WatchRun(self, request, context):
        if request.name != RUN:
            raise NotFound(f"{request.name} not found")
        for event in self.run_events[request.after_sequence:]:
            if event.sequence == 4 and "run" not in self.dropped:
                self.dropped.add("run")
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed")
            yield event

    async def GetRun(self, request, context):
        if request.name != RUN:
            raise NotFound(f"{request.name} not found")
        return pb.Run(name=RUN, state=pb.Run.STATE_SUCCEEDED, attempts=2,
                      last_event_sequence=len(self.run_events))

    async def CancelRun(self, request, context):
        raise FailedPrecondition(f"{request.name} has already ended (SUCCEEDED)")


def _word(state: int) -> str:
    return pb.Run.State.Name(state).removeprefix("STATE_").lower()


class _Solver(opb_grpc.OrchestratorServiceServicer):
    async def SolveProblem(self, request, context):
        return _answer(request)


@pytest.fixture
async def service():
    runs = _Runs()
    server = await start_server("orchestrator", ServiceSettings(port=0), [
        Servicer(pb_grpc.add_RunServiceServicer_to_server, runs,
                 "mesh.orchestrator.v1.RunService"),
        Servicer(opb_grpc.add_OrchestratorServiceServicer_to_server, _Solver(),
                 "mesh.orchestrator.v1.OrchestratorService")])
    yield f"127.0.0.1:{server.port}", runs
    if runs.worker is not None:
        runs.go.set()
        await runs.worker
    await server.stop(0)


async def _cli(target: str, *argv: str) -> int:
    return await asyncio.to_thread(cli.main, ["--target", target, "--deadline", "20", *argv])


async def test_submit_sends_the_file_as_one_batch_and_watch_follows_it(service, tmp_path,
                                                                        capsys):
    target, runs = service
    file = tmp_path / "positions.jsonl"
    file.write_text("\n".join(json.dumps({"solve": {"connectFour": {"moves": moves}}})
                              for moves in ("4", "44", "444", "4444")) + "\n\n")
    capsys.readouterr()
    assert await _cli(target, "runs", "submit", str(file), "--display-name", "four",
                      "--watch") == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "batches/b1"
    assert lines[-1] == ("batches/b1: succeeded (queued 0, running 0, succeeded 4, failed 0, "
                         "cancelled 0)")
    assert "reconnecting after event 2 (UNAVAILABLE)" in err
    (request,) = runs.created
    assert request.batch.display_name == "four" and len(request.request_id) == 36
    assert [item.solve.connect_four.moves for item in request.items] == ["4", "44", "444", "4444"]


async def test_results_are_json_lines_in_item_order_across_pages(service, tmp_path, capsys):
    target, runs = service
    file = tmp_path / "p.jsonl"
    file.write_text("".join(json.dumps({"solve": {"connectFour": {"moves": "4" * n}}}) + "\n"
                            for n in range(7)))
    assert await _cli(target, "runs", "submit", str(file)) == 0
    runs.go.set()
    await runs.worker
    capsys.readouterr()
    assert await _cli(target, "runs", "results", "batches/b1") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [record["index"] for record in records] == list(range(7))
    assert [record["response"]["connectFour"]["column"] for record in records] == \
        [4, 4, 4, 4, 4, 4, 3]
    assert {record["state"] for record in records} == {"STATE_SUCCEEDED"}


async def test_watch_of_a_run_resumes_after_a_dropped_stream_showing_each_event_once(
        service, capsys):
    target, runs = service
    runs.run_events = [pb.RunEvent(sequence=1, run=RUN, state_changed=pb.StateChanged(
        previous_state=pb.Run.STATE_QUEUED, state=pb.Run.STATE_RUNNING, attempt=1))]
    for iteration in (1, 2, 3):
        runs.run_events.append(pb.RunEvent(
            sequence=len(runs.run_events) + 1, run=RUN,
            solve_progress=opb.StreamSolveProblemResponse(
                iteration=iteration, tally=opb.RoundTally(answer="4", confidence=0.9))))
    runs.run_events.append(pb.RunEvent(sequence=5, run=RUN, state_changed=pb.StateChanged(
        previous_state=pb.Run.STATE_RUNNING, state=pb.Run.STATE_SUCCEEDED, attempt=2)))
    assert await _cli(target, "runs", "watch", RUN) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [int(line.split()[0]) for line in lines[:-1]] == [1, 2, 3, 4, 5]
    assert "queued -> running (attempt 1)" in lines[0]
    assert [line.split("iteration ")[1][0] for line in lines[1:4]] == ["1", "2", "3"]
    assert lines[-1] == "runs/r1: succeeded after 2 attempt(s)"
    assert "reconnecting after event 3 (DEADLINE_EXCEEDED)" in err


async def test_refusals_print_one_line_and_exit_2(service, tmp_path, capsys):
    target, runs = service
    assert await _cli(target, "runs", "cancel", RUN) == 2
    assert "FAILED_PRECONDITION" in capsys.readouterr().err
    assert await _cli(target, "runs", "get", "runs/nope") == 2
    assert "NOT_FOUND" in capsys.readouterr().err
    assert await _cli(target, "runs", "watch", "nope") == 2
    assert "is not a run (runs/...) or a batch" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"solve": {"connectFour": {"moves": "4"}}}\n{"solve": {"moves": "4"}}\n')
    assert await _cli(target, "runs", "submit", str(bad)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{bad}: line 2: items[1].solve.moves: unknown field" in err
    assert await _cli(target, "runs", "submit", str(tmp_path / "missing.jsonl")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.jsonl: No such file or directory" in err
    assert runs.created == []


async def test_eval_batch_scores_the_same_moves_as_eval(service, capsys):
    target, runs = service
    argv = ["eval", "connect4", str(PONS), "--limit", "6", "--json"]
    assert await _cli(target, *argv) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert await _cli(target, *argv, "--batch") == 0
    out, err = capsys.readouterr()
    batched = [json.loads(line) for line in out.splitlines()]
    assert "submitted batches/b1 (6 runs)" in err
    assert [record["move"] for record in batched[:-1]] == [record["move"] for record in plain[:-1]]
    assert [record["keeps_outcome"] for record in batched[:-1]] == \
        [record["keeps_outcome"] for record in plain[:-1]]
    assert batched[-1]["kept"] == plain[-1]["kept"] and batched[-1]["positions"] == 6
    assert batched[0]["latency_ms"] == 12.0 and batched[0]["run"] == "runs/b1-0"
    assert len(runs.created[0].items) == 6
