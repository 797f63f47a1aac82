"""Every command the README and the docs mark runnable runs against a real mesh, and its shown
output is checked where the page shows one.

Convention (also in docs/development.md): a fenced block preceded by the line `<!-- run -->` is
run; `bash` blocks in bash (`set -euo pipefail`) in a scratch folder that links every entry of the
repository root (so `data/...` and `.venv/bin/...` resolve and written files stay out of the
repository) with `.venv/bin` first on PATH, `python` blocks with the project's Python, in the same
folder. Ports 21000 (the orchestrator's gRPC) and 21080 (REST) in a block are this test's mesh's
ports; 22000 and 22080, for a block that starts a
service of its own, are two free ports. A fenced block right after it, preceded by
`<!-- output -->`, must equal the output line for line; `<!-- output: contains -->`, each of its
lines must appear within some line of the output; in both, `...` inside a line matches any text.
One mesh serves every block of the module (the five services on free ports, offline LLM
provider).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcts_mesh.launcher import start_mesh

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("docs/index.md", "docs/changelog.md")  # copies of README.md and CHANGELOG.md
RUN, OUTPUT, CONTAINS = "<!-- run -->", "<!-- output -->", "<!-- output: contains -->"
LANGUAGES = ("bash", "python")
GRPC_PORT, REST_PORT = "21000", "21080"
SPARE_PORTS = ("22000", "22080")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    expected: tuple[str, ...] | None = None
    contains: bool = False


def _fence(lines: list[str], start: int) -> tuple[str, list[str], int]:
    """(language, body, index after the closing fence) of the fence opening at `start`."""
    opening = lines[start].strip()
    if not opening.startswith("```"):
        raise ValueError(f"line {start + 1}: a marker must be followed by a fenced block")
    end = start + 1
    while end < len(lines) and lines[end].strip() != "```":
        end += 1
    return opening[3:].strip(), lines[start + 1:end], end + 1


def blocks_of(page: Path) -> list[Block]:
    """The runnable blocks of one Markdown page."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, index = [], 0
    relative = str(page.relative_to(REPO_ROOT))
    while index < len(lines):
        if lines[index].strip() != RUN:
            index += 1
            continue
        language, body, index = _fence(lines, index + 1)
        expected, contains = None, False
        ahead = index
        while ahead < len(lines) and not lines[ahead].strip():
            ahead += 1
        if ahead < len(lines) and lines[ahead].strip() in (OUTPUT, CONTAINS):
            contains = lines[ahead].strip() == CONTAINS
            _, shown, index = _fence(lines, ahead + 1)
            expected = tuple(shown)
        out.append(Block(relative, index, language, "\n".join(body), expected, contains))
    return out


def all_blocks() -> list[Block]:
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    return [block for page in pages if str(page.relative_to(REPO_ROOT)) not in GENERATED
            for block in blocks_of(page)]


BLOCKS = all_blocks()


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.rstrip().split("...")))


def check_output(block: Block, output: str) -> None:
    """Asserts that `output` shows what `block` promises."""
    got = [line.rstrip() for line in output.rstrip("\n").splitlines()]
    wanted = [line for line in block.expected or () if line.strip() or not block.contains]
    if block.contains:
        missing = [line for line in wanted if not any(_pattern(line).search(g) for g in got)]
        assert not missing, f"not in the output: {missing}\noutput:\n{output}"
        return
    assert len(got) == len(wanted) and all(
        _pattern(w).fullmatch(g) for w, g in zip(wanted, got, strict=True)), (
        "output differs from the page\nshown:\n" + "\n".join(wanted) + "\ngot:\n" + output)


def test_markers_are_well_formed():
    assert BLOCKS, "no runnable block found"
    wrong = [f"{b.page}:{b.line} ({b.language!r})" for b in BLOCKS if b.language not in LANGUAGES]
    assert not wrong, f"runnable blocks must be one of {LANGUAGES}: {wrong}"


def test_output_check_can_fail():
    block = Block("x", 1, "bash", "", ("play column 4  (value ...)",))
    check_output(block, "play column 4  (value +0.157)\n")
    with pytest.raises(AssertionError):
        check_output(block, "play column 5  (value +0.157)\n")
    with pytest.raises(AssertionError):
        check_output(Block("x", 1, "bash", "", ("a", "b"), contains=True), "a\n")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    data = tmp_path_factory.mktemp("doc-examples")
    running = start_mesh(port_base=0, rest_port=0, metrics=False, log_dir=data / "logs",
                         ready_timeout_s=600,
                         env={"RETRIEVAL_DATA_DIR": str(data / "retrieval"),
                              "LLM_FALLBACK_ORDER": '["offline"]'})
    yield running
    running.stop()


def _scratch(tmp_path: Path) -> Path:
    """A folder beside the test's TMPDIR that links every entry of the repository root but .git."""
    folder = tmp_path / "repo"
    folder.mkdir()
    for entry in REPO_ROOT.iterdir():
        if entry.name != ".git":
            (folder / entry.name).symlink_to(entry)
    return folder


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_example_runs_as_shown(block, mesh, tmp_path):
    code = block.code.replace(GRPC_PORT, str(mesh.ports["orchestrator"])).replace(
        REST_PORT, str(mesh.rest_port))
    for spare in SPARE_PORTS:
        code = code.replace(spare, str(_free_port()))
    env = {**os.environ, "PATH": f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "TMPDIR": str(tmp_path)}
    env.pop("MCTS_MESH_API_KEY", None)
    command = (["bash", "-c", "set -euo pipefail\n" + code] if block.language == "bash"
               else [sys.executable, "-c", code])
    result = subprocess.run(command, cwd=_scratch(tmp_path), env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{block.page}:{block.line} failed:\n{result.stderr[-3000:]}"
    if block.expected is not None:
        check_output(block, result.stdout)
