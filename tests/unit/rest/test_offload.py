"""The REST front's body decoder: a large body is decoded in a worker process into the same message
and the same errors as on the loop, and its workers end with the server process, SIGKILL
included."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap

import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import InvalidArgument
from libs.rest.limits import BodyTooDeep
from libs.rest.offload import BodyDecoder
from libs.rest.transcoding import MalformedBody

DOCUMENTS = json.dumps({"documents": [{"id": f"d{i}", "text": "t" * 50} for i in range(400)]})


@pytest.fixture
def decoders():
    on_loop, in_worker = BodyDecoder(10**9, 16), BodyDecoder(1, 16, workers=1)
    yield on_loop, in_worker
    in_worker.close()


async def test_a_worker_decodes_what_the_loop_decodes(decoders):
    on_loop, in_worker = decoders
    body = DOCUMENTS.encode()
    local = await on_loop.decode(pb.IngestDocumentsRequest(), "*", body)
    remote = await in_worker.decode(pb.IngestDocumentsRequest(), "*", body)
    assert remote == local and len(remote.documents) == 400
    assert in_worker._pool is not None and on_loop._pool is None


@pytest.mark.parametrize(("body", "error", "field"), [
    (b"{not json", MalformedBody, None),
    (b"[1]", MalformedBody, None),
    (b'{"documents": [{"id": "a"}, {"text": 3}]}', InvalidArgument, "documents[1].text"),
    (b'{"nope": 1}', InvalidArgument, "nope"),
    (b'{"documents": ' + b"[" * 40 + b"]" * 40 + b"}", BodyTooDeep, None),
])
async def test_a_worker_raises_what_the_loop_raises(decoders, body, error, field):
    for decoder in decoders:
        with pytest.raises(error) as raised:
            await decoder.decode(pb.IngestDocumentsRequest(), "*", body)
        if field is not None:
            assert raised.value.field == field


def test_the_workers_end_when_the_server_process_is_killed(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent("""
        import asyncio, os, signal
        from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
        from libs.rest.offload import BodyDecoder

        async def main():
            decoder = BodyDecoder(1, 16, workers=2)
            await decoder.decode(pb.IngestDocumentsRequest(), "*", b'{"collection": "c"}')
            print(*decoder._pool._processes, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        if __name__ == "__main__":
            asyncio.run(main())
    """))
    output, errors = tmp_path / "output", tmp_path / "errors"
    # files, not pipes: a worker left behind would hold a pipe open
    with output.open("w") as out, errors.open("w") as err:
        server = subprocess.run([sys.executable, str(script)], stdout=out, stderr=err,
                                timeout=120, cwd=os.getcwd(),
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert server.returncode == -9, errors.read_text()
    workers = [int(pid) for pid in output.read_text().split()]
    assert workers
    for pid in workers:
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # already gone
        try:
            ended, _, _ = select.select([handle], [], [], 10)
        finally:
            os.close(handle)
        assert ended, f"worker {pid} still runs 10 s after its server was killed"
