"""OpenAI's official Python SDK (`openai`) against the orchestrator's OpenAI-compatible routes,
on a real orchestrator whose LLM gateway's provider is a scripted OpenAI-compatible server
(`openai_mesh`): models, a completion and its `mesh` extension, streamed chunks ending with
[DONE], `n`, `stop`, the error bodies (400 naming the param, 413, 401, 403, 429), and a client
that leaves while its answer is being written, whose work stops."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from openai_mesh import EMBEDDER, start_openai_mesh

QUESTION = "How many chambers does the heart have?"
MESSAGES = [{"role": "user", "content": QUESTION}]


_CLIENTS: list[openai.AsyncOpenAI] = []


@pytest.fixture
async def mesh(tmp_path):
    if not EMBEDDER.exists():
        pytest.skip(f"{EMBEDDER} is absent: `make setup` exports the retrieval embedder")
    running = await start_openai_mesh(tmp_path, rest_max_body_bytes=64 * 1024)
    yield running
    while _CLIENTS:
        await _CLIENTS.pop().close()
    await running.close()


def _client(mesh, key: str | None = None) -> openai.AsyncOpenAI:
    """An SDK client (closed after the test), no retries."""
    _CLIENTS.append(openai.AsyncOpenAI(base_url=mesh.base_url, api_key=key or mesh.key,
                                       max_retries=0, timeout=60))
    return _CLIENTS[-1]


async def test_models_are_listed_with_descriptions(mesh):
    client = _client(mesh)
    models = [model async for model in client.models.list()]
    ids = [model.id for model in models]
    assert ids == ["mesh", "mesh-draft", "mesh-self-consistency", "mesh-step-search",
                   "mesh-decompose", "mesh-refine"]
    assert all(model.owned_by == "mcts-mesh" and model.model_extra["description"]
               for model in models)
    refine = await client.models.retrieve("mesh-refine")
    assert "critique" in refine.model_extra["description"]
    with pytest.raises(openai.NotFoundError) as missing:
        await client.models.retrieve("gpt-4o")
    assert missing.value.body["code"] == "model_not_found"


async def test_the_openapi_document_describes_the_routes_and_the_mesh_field(mesh):
    async with httpx.AsyncClient(timeout=60) as http:
        document = (await http.get(mesh.base_url.removesuffix("/v1") + "/openapi.json")).json()
    chat = document["paths"]["/v1/chat/completions"]["post"]
    schema = chat["requestBody"]["content"]["application/json"]["schema"]
    assert {"model", "messages", "temperature", "max_tokens", "n", "stop", "stream",
            "mesh"} <= set(schema["properties"])
    assert {"collection", "top_k", "token_budget", "max_cost_usd"} <= \
        set(schema["properties"]["mesh"]["properties"])
    extension = chat["responses"]["200"]["content"]["application/json"]["schema"]
    assert "mesh" in extension["properties"]["choices"]["items"]["properties"]
    assert {"/v1/models", "/v1/models/{model}"} <= set(document["paths"])


async def test_a_completion_carries_the_answer_usage_and_the_mesh_extension(mesh):
    completion = await _client(mesh).chat.completions.create(
        model="mesh", messages=MESSAGES, temperature=0.2)
    (choice,) = completion.choices
    assert choice.message.role == "assistant" and choice.message.content == "Four chambers [1]."
    assert choice.finish_reason == "stop"
    assert completion.object == "chat.completion" and completion.model == "mesh"
    usage = completion.usage  # the scripted provider's 30 + 5 per call
    assert usage.prompt_tokens % 30 == 0 and usage.completion_tokens % 5 == 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    extension = choice.model_extra["mesh"]
    assert [source["documentId"] for source in extension["sources"]] == ["heart"]
    assert "AGENT_LLM" in extension["agents"] and extension["provider"] == "local"
    assert mesh.provider.requests > 0


async def test_n_choices_stop_max_tokens_and_mesh_options(mesh):
    completion = await _client(mesh).chat.completions.create(
        model="mesh-self-consistency", messages=MESSAGES, n=2, stop=["chambers"],
        max_tokens=77, extra_body={"mesh": {"sample_count": 2, "top_k": 1}})
    assert len(mesh.provider.bodies) == 4  # 2 choices of 2 drafts
    assert {body["max_tokens"] for body in mesh.provider.bodies} == {77}
    assert [choice.index for choice in completion.choices] == [0, 1]
    assert all(choice.message.content == "Four " for choice in completion.choices)
    assert all(len(choice.model_extra["mesh"]["sources"]) == 1 for choice in completion.choices)


async def test_a_draft_cut_by_max_tokens_finishes_with_length(mesh):
    mesh.provider.reset("length", "length")  # the provider's draft ends at max_tokens
    completion = await _client(mesh).chat.completions.create(
        model="mesh-draft", messages=MESSAGES, max_tokens=5)
    assert completion.choices[0].finish_reason == "length"
    stream = await _client(mesh).chat.completions.create(
        model="mesh-draft", messages=MESSAGES, max_tokens=5, stream=True)
    finals = [chunk.choices[0].finish_reason async for chunk in stream
              if chunk.choices and chunk.choices[0].finish_reason]
    assert finals == ["length"]
    assert mesh.provider.requests == 2
    stream = await _client(mesh).chat.completions.create(  # the provider ended on its own
        model="mesh-draft", messages=MESSAGES, stream=True)
    assert [chunk.choices[0].finish_reason async for chunk in stream
            if chunk.choices and chunk.choices[0].finish_reason] == ["stop"]


async def test_streamed_chunks_end_with_done_and_usage(mesh):
    stream = await _client(mesh).chat.completions.create(
        model="mesh", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Four chambers [1]."
    finals = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert [chunk.choices[0].finish_reason for chunk in finals] == ["stop"]
    assert finals[0].choices[0].model_extra["mesh"]["sources"][0]["documentId"] == "heart"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0

    stream = await _client(mesh).chat.completions.create(  # one draft: token by token
        model="mesh-draft", messages=MESSAGES, stream=True, stop="[")
    deltas = [chunk.choices[0].delta.content async for chunk in stream
              if chunk.choices and chunk.choices[0].delta.content]
    assert deltas == ["Four", " chambers", " "]

    stream = await _client(mesh).chat.completions.create(  # two choices, interleaved
        model="mesh-draft", messages=MESSAGES, stream=True, n=2)
    texts = ["", ""]
    async for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == ["Four chambers [1]."] * 2

    async with httpx.AsyncClient(timeout=60) as http:  # the raw framing
        reply = await http.post(f"{mesh.base_url}/chat/completions",
                                headers={"Authorization": f"Bearer {mesh.key}"},
                                json={"model": "mesh", "messages": MESSAGES, "stream": True})
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [line for line in reply.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(event.startswith(("data: {", ": ")) for event in events[:-1])
    # the loop's progress as comments (skipped by the SDKs) before the voted answer
    assert ": iteration_started" in events and ": agent_finished" in events


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "mesh", "messages": []}, "messages"),
    ({"model": "mesh"}, "messages"),
    ({"model": "mesh", "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"model": "mesh", "messages": [{"role": "user", "content": 42}]}, "messages[0].content"),
    ({"model": "mesh", "messages": MESSAGES, "temperature": "hot"}, "temperature"),
    ({"model": "mesh", "messages": MESSAGES, "temperature": 3}, "temperature"),
    ({"model": "mesh", "messages": MESSAGES, "n": 0}, "n"),
    ({"model": "mesh", "messages": MESSAGES, "stream": "yes"}, "stream"),
    ({"model": "gpt-4o", "messages": MESSAGES}, "model"),
    ({"model": "mesh", "messages": MESSAGES, "mesh": {"top_k": "four"}}, "mesh.top_k"),
    ({"model": "mesh", "messages": MESSAGES, "mesh": {"top_k": 99}}, "mesh.top_k"),
    ({"model": "mesh", "messages": MESSAGES, "mesh": {"colour": 1}}, "mesh.colour"),
    ({"model": "mesh", "messages": [*MESSAGES, {"role": "assistant", "content": "4"}]},
     "messages[1].role"),
    ({"model": "mesh", "messages": MESSAGES, "tools": [{"type": "function"}]}, "tools"),
])
async def test_a_malformed_request_is_400_naming_its_param(mesh, body, param):
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{mesh.base_url}/chat/completions", json=body,
                                headers={"Authorization": f"Bearer {mesh.key}"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert set(error) == {"message", "type", "param", "code"}


async def test_oversize_conversations_are_413(mesh):
    client = _client(mesh)
    long_turns = [{"role": "user", "content": "x" * 6_000},
                  {"role": "assistant", "content": "y" * 6_000}, *MESSAGES]
    with pytest.raises(openai.APIStatusError) as too_long:
        await client.chat.completions.create(model="mesh", messages=long_turns)
    assert too_long.value.status_code == 413
    assert too_long.value.body["param"] == "messages"
    assert too_long.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.APIStatusError) as too_big:  # over rest_max_body_bytes
        await client.chat.completions.create(
            model="mesh", messages=[{"role": "user", "content": "z" * 70_000}])
    assert too_big.value.status_code == 413 and too_big.value.body["code"] == "body_too_large"


async def test_keys_scopes_and_rate_limits_apply(mesh):
    async with httpx.AsyncClient(timeout=60) as http:
        reply = await http.post(f"{mesh.base_url}/chat/completions",
                                json={"model": "mesh", "messages": MESSAGES})
    assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        await _client(mesh, "not-a-key").chat.completions.create(model="mesh",
                                                                 messages=MESSAGES)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await _client(mesh, mesh.solve_only).chat.completions.create(model="mesh",
                                                                     messages=MESSAGES)
    assert refused.value.body["type"] == "permission_error"
    slow = _client(mesh, mesh.slow_key)
    await slow.chat.completions.create(model="mesh", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as limited:
        await slow.chat.completions.create(model="mesh", messages=MESSAGES)
    assert limited.value.response.headers.get("retry-after")
    assert limited.value.body["type"] == "rate_limit_error"


async def test_without_required_keys_an_unknown_key_is_served_as_none(tmp_path):
    """OpenAI's SDKs always send a key: where keys are optional, a made-up one is served as no
    key on these routes (a known key keeps its scopes); the mesh's own routes still refuse it."""
    if not EMBEDDER.exists():
        pytest.skip(f"{EMBEDDER} is absent: `make setup` exports the retrieval embedder")
    mesh = await start_openai_mesh(tmp_path, require_api_key=False)
    try:
        async with openai.AsyncOpenAI(base_url=mesh.base_url, api_key="anything",
                                      max_retries=0) as client:
            completion = await client.chat.completions.create(model="mesh", messages=MESSAGES)
            assert completion.choices[0].message.content == "Four chambers [1]."
        async with openai.AsyncOpenAI(base_url=mesh.base_url, api_key=mesh.solve_only,
                                      max_retries=0) as client:
            with pytest.raises(openai.PermissionDeniedError):
                await client.chat.completions.create(model="mesh", messages=MESSAGES)
        async with httpx.AsyncClient(timeout=60) as http:
            reply = await http.post(mesh.base_url + "/queries:answer", json={"query": QUESTION},
                                    headers={"Authorization": "Bearer anything"})
        assert reply.status_code == 401
    finally:
        await mesh.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_stops_the_work(mesh, stream):
    """The provider hangs until its client leaves; the chat client gives up; the orchestrator's
    call is cancelled, which closes the gateway's request to the provider (a disconnect
    there)."""
    mesh.provider.reset(default="hang")
    async with httpx.AsyncClient(timeout=60) as http:
        request = asyncio.ensure_future(http.post(
            f"{mesh.base_url}/chat/completions", headers={"Authorization": f"Bearer {mesh.key}"},
            json={"model": "mesh", "messages": MESSAGES, "stream": stream}))
        await _until(lambda: mesh.provider.requests > 0)
        assert mesh.provider.disconnects == 0
        request.cancel()
    await _until(lambda: mesh.provider.disconnects > 0)
    mesh.provider.reset()


async def _until(condition, limit_s: float = 20.0) -> None:
    """Polls `condition` every 10 ms until it holds or `limit_s` passes (then fails)."""
    async with asyncio.timeout(limit_s):
        while not condition():
            await asyncio.sleep(0.01)
