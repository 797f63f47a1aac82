"""The web console at /console/ in a real browser (Playwright driving Debian's chromium, never a
downloaded browser) against a real mesh with API keys required: the five services on free
loopback ports, the offline LLM provider, the run store in a temporary SQLite file.

The browser loads the console (no key needed for the page), sees the mesh's own refusal while no
key is entered, enters the key once, plays a Connect Four move and sees the mesh's reply with its
votes and streamed loop, solves a Sudoku generated in the page (checked here to have exactly one
solution, which must be the one shown) and a generated maze (a shortest path), sees a typed-in
bad Sudoku refused with the mesh's message, asks a question and sees the answer with its sources,
and lists and watches a durable run.

`CONSOLE_SCREENSHOTS=1` also saves each panel to docs/images/console-*.png. Skips, saying why,
where chromium is not installed or cannot start.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from libs.puzzles.maze import parse_maze, shortest_path
from libs.puzzles.sudoku import BoxShape, parse_puzzle, solve
from mcts_mesh.launcher import start_mesh
from services.orchestrator.access.keys import FileKeyStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES = REPO_ROOT / "docs" / "images"
JAEGER_UI = "http://jaeger.example:16686"
TIMEOUT_MS = 120_000
COLLECTION = "console-test"
DOCUMENTS = [
    {"id": "gothic", "title": "Gothic cathedrals",
     "text": "Flying buttresses let Gothic cathedrals carry tall walls with large windows."},
    {"id": "romanesque", "title": "Romanesque churches",
     "text": "Romanesque churches have thick walls, round arches and small windows."},
]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return path


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    with playwright_api.sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=executable, headless=True)
        except playwright_api.Error as error:
            pytest.skip(f"chromium at {executable} cannot start: {error.message.splitlines()[0]}")
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    data = tmp_path_factory.mktemp("console-mesh")
    keys = FileKeyStore(data / "api-keys.json")
    # In a thread of its own: Playwright's sync API may already run an event loop in this one.
    with ThreadPoolExecutor(1) as thread:
        key = thread.submit(asyncio.run, keys.create("console")).result()
    running = start_mesh(
        port_base=0, rest_port=0, metrics=False, log_dir=data / "logs", ready_timeout_s=600,
        env={"RETRIEVAL_DATA_DIR": str(data / "retrieval"), "LLM_FALLBACK_ORDER": '["offline"]',
             "ORCHESTRATOR_REQUIRE_API_KEY": "true",
             "ORCHESTRATOR_API_KEYS_FILE": str(keys.path),
             "ORCHESTRATOR_RUN_STORE_URL": f"sqlite:///{data / 'runs.db'}",
             "ORCHESTRATOR_REST_JAEGER_UI_URL": JAEGER_UI})
    base = f"http://127.0.0.1:{running.rest_port}"
    try:
        response = httpx.post(f"{base}/v1/collections/{COLLECTION}/documents:ingest",
                              json={"documents": DOCUMENTS}, headers={"X-Api-Key": key},
                              timeout=120)
        assert response.status_code == 200, response.text
        yield base, key
    finally:
        running.stop()


@pytest.fixture
def page(browser, mesh):
    base, _ = mesh
    context = browser.new_context(base_url=base, viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on("console", lambda message: problems.append(message.text)
              if message.type == "error" and "status of 401" not in message.text
              and "status of 400" not in message.text else None)
    opened.set_default_timeout(TIMEOUT_MS)
    yield opened
    context.close()
    assert not problems, f"the page reported errors: {problems}"


def _screenshot(page, name: str) -> None:
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / f"console-{name}.png"), full_page=True)


def _enter_key(page, key: str) -> None:
    page.fill("#api-key", key)
    page.click("form.key button[type=submit]")
    page.wait_for_selector("#key-state:has-text('key set')")


def test_pages_are_served_without_a_key_and_refuse_everything_else(mesh):
    base, _ = mesh
    with httpx.Client(base_url=base, timeout=30) as client:
        redirect = client.get("/console")
        assert redirect.status_code == 308 and redirect.headers["location"] == "/console/"
        index = client.get("/console/")
        assert index.status_code == 200 and "<title>mcts-mesh console</title>" in index.text
        assert "default-src 'none'" in index.headers["content-security-policy"]
        assert index.headers["x-content-type-options"] == "nosniff"
        script = client.get("/console/js/api.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith(("text/javascript",
                                                          "application/javascript"))
        assert client.get("/console/config.json").json() == {"jaeger_ui_url": JAEGER_UI}
        missing = client.get("/console/js/nope.js")
        assert missing.status_code == 404 and missing.json()["code"] == 5
        posted = client.post("/console/", json={})
        assert posted.status_code == 405 and posted.json()["code"] == 12
        # The API itself still wants the key.
        assert client.get("/v1/runs").status_code == 401


def test_connect_four_move_without_then_with_the_key(page, mesh):
    _, key = mesh
    page.goto("/console/")
    page.click("button[data-column='4']")
    refusal = page.wait_for_selector("#panel-connect-four .error")
    assert "UNAUTHENTICATED" in refusal.inner_text()

    _enter_key(page, key)
    page.click("text=New game")
    page.click("button[data-column='4']")
    card = page.wait_for_selector("#panel-connect-four section.card[data-answer]")
    column = int(card.get_attribute("data-answer"))
    assert 1 <= column <= 7
    assert page.locator("#panel-connect-four .cell.you").count() == 1
    assert page.locator("#panel-connect-four .cell.mesh").count() == 1
    votes = page.locator("#panel-connect-four table.votes tbody tr")
    assert votes.count() >= 1
    assert f"column {column}" in page.locator("#panel-connect-four table.votes").inner_text()
    streamed = page.locator("#panel-connect-four ol.events li")
    assert streamed.count() >= 3  # a round, an agent asked, an agent finished at least
    assert page.locator("#panel-connect-four li.round").count() >= 1
    link = page.locator(f"#panel-connect-four .trace a[href^='{JAEGER_UI}/trace/']")
    assert re.fullmatch(r"[0-9a-f]{32}", link.inner_text())
    page.wait_for_selector("#panel-connect-four .status:has-text('Your move')")
    _screenshot(page, "connect-four")


def test_generated_sudoku_is_solved_and_judged(page, mesh):
    _, key = mesh
    page.goto("/console/#puzzles")
    _enter_key(page, key)
    page.select_option("#panel-puzzles select", "sudoku-6")
    page.fill("#panel-puzzles input[type=number]", "7")
    page.click("#panel-puzzles >> text=Generate")
    puzzle = "".join(page.input_value("#panel-puzzles textarea").split())
    grid = parse_puzzle(puzzle, BoxShape(2, 3))
    assert (grid == 0).sum() == 22
    found = solve(grid, BoxShape(2, 3), limit=2)
    assert found.count == 1, "the page's generator must give a puzzle with one solution"

    page.click("#panel-puzzles >> text=Solve")
    card = page.wait_for_selector("#panel-puzzles section.card[data-answered-by]")
    assert card.get_attribute("data-answered-by") in ("solver", "hrm", "trm")
    shown = "".join(cell.inner_text() for cell in page.locator(
        "#panel-puzzles table.sudoku td").all())
    assert shown == "".join(str(d) for d in found.solution.reshape(-1))
    verdict = page.locator("#panel-puzzles .verdict").inner_text()
    assert verdict.startswith("Checker: ") and "valid" in verdict
    assert page.locator("#panel-puzzles ol.events li.checker").count() >= 1
    _screenshot(page, "puzzles")

    page.fill("#panel-puzzles textarea", "11..........")
    page.click("#panel-puzzles >> text=Solve")
    error = page.wait_for_selector("#panel-puzzles .error")
    assert "INVALID_ARGUMENT" in error.inner_text() and "sudoku.puzzle" in error.inner_text()


def test_text_answer_with_its_sources(page, mesh):
    _, key = mesh
    page.goto("/console/#ask")
    _enter_key(page, key)
    page.fill("#panel-ask textarea", "Why do Gothic cathedrals have large windows?")
    page.fill("#panel-ask input[aria-label=collection]", COLLECTION)
    page.click("#panel-ask >> text=Ask")
    shown = page.wait_for_selector("#panel-ask section.card, #panel-ask .error")
    assert "error" not in (shown.get_attribute("class") or ""), shown.inner_text()
    answer = page.locator("#panel-ask .answer-text")
    assert answer.inner_text().strip()
    streamed = "/v1/queries:streamAnswer" in httpx.get(f"{mesh[0]}/openapi.json").json()["paths"]
    assert answer.get_attribute("data-mode") == ("streamed" if streamed else "whole")
    assert "Gothic cathedrals" in page.locator("#panel-ask .source-list").inner_text()
    assert page.locator("#panel-ask .trace").count() == 1
    _screenshot(page, "ask")


def test_runs_are_listed_and_watched(page, mesh):
    base, key = mesh
    created = httpx.post(f"{base}/v1/runs", json={"solve": {"connectFour": {"moves": "4453"}}},
                         headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert created.status_code == 200, created.text
    name = created.json()["name"]
    page.goto("/console/#runs")
    _enter_key(page, key)
    page.click("#panel-runs >> text=Refresh")
    row = page.wait_for_selector(f"#panel-runs tr[data-run='{name}']")
    assert "solve" in row.inner_text()
    row.query_selector("text=Watch").click()
    page.wait_for_selector("#panel-runs .watch li:has-text('the run has ended')")
    assert page.locator("#panel-runs .watch li:has-text('succeeded')").count() == 1
    page.click("#panel-runs >> text=Refresh")
    page.wait_for_selector(f"#panel-runs tr[data-run='{name}'][data-state='succeeded']")
    _screenshot(page, "runs")


def test_generated_maze_is_solved_with_a_shortest_path(page, mesh):
    _, key = mesh
    page.goto("/console/#puzzles")
    _enter_key(page, key)
    page.select_option("#panel-puzzles select", "maze")
    page.fill("#panel-puzzles input[type=number]", "3")
    page.click("#panel-puzzles >> text=Generate")
    rows = page.input_value("#panel-puzzles textarea").split("\n")
    grid = parse_maze("".join(rows), width=len(rows[0]))
    length = len(shortest_path(grid)) - 1

    page.click("#panel-puzzles >> text=Solve")
    page.wait_for_selector("#panel-puzzles section.card[data-answered-by]")
    assert f"optimal: {length} steps" in page.locator("#panel-puzzles .verdict").inner_text()
    assert page.locator("#panel-puzzles pre.maze").inner_text().count("o") == length - 1


def test_a_running_run_is_cancelled(page, mesh):
    base, key = mesh
    # Ten million simulations from the empty board: a search of many seconds, cancelled at once.
    created = httpx.post(f"{base}/v1/runs", json={"solve": {
        "connectFour": {"moves": ""}, "simulations": "10000000", "agents": ["AGENT_MCTS"]}},
        headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert created.status_code == 200, created.text
    name = created.json()["name"]
    page.goto("/console/#runs")
    _enter_key(page, key)
    page.click("#panel-runs >> text=Refresh")
    row = f"#panel-runs tr[data-run='{name}']"
    page.click(f"{row} >> text=Cancel")
    # The panel lists the runs again every few seconds while one is active.
    page.wait_for_selector(f"{row}[data-state='cancelled']")
    ended = httpx.get(f"{base}/v1/{name}", headers={"X-Api-Key": key}, timeout=30).json()
    assert ended["state"] == "STATE_CANCELLED"
