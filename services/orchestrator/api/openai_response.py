"""What each choice of a chat completion reports beyond its text: the `mesh` extension field
and OpenAI's `usage`."""

from __future__ import annotations

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.rest.transcoding import message_to_json_value

_EXTENSION_FIELDS = ("sources", "agents", "votes", "failures", "confidence", "provider",
                     "offline", "role", "stopReason", "passagesOnly", "ungrounded",
                     "iterations", "threadId", "costUsd", "totalTokens")


def mesh_extension(response: pb.AnswerQueryResponse) -> dict[str, object]:
    """The `mesh` extension field of one choice: from the AnswerQueryResponse (proto3 JSON
    names): sources (document_id, title, text, score, source), agents, votes, failures,
    confidence in [0, 1], provider, offline, role, stopReason, passagesOnly, ungrounded,
    iterations, threadId, costUsd, totalTokens."""
    value = message_to_json_value(response)
    return {name: value[name] for name in _EXTENSION_FIELDS if name in value}


def finish_reason(response: pb.AnswerQueryResponse, stopped: bool) -> str:
    """OpenAI's `finish_reason` of one choice: "stop" when a stop sequence of the request cut
    the text (`stopped`), else the gateway's reason for the draft that is the answer ("length"
    when max_tokens cut it, "content_filter", ...), "stop" when the answer is not one draft's
    text (a vote, a role, the passages alone: each ended on its own)."""
    return "stop" if stopped else (response.finish_reason or "stop")


def usage(responses: list[pb.AnswerQueryResponse]) -> dict[str, int]:
    """OpenAI's `usage` over the choices' answers: prompt and completion tokens of every
    language-model call as the LLM gateway counted them (the providers' own counts)."""
    prompt = sum(int(r.prompt_tokens) for r in responses)
    completion = sum(int(r.completion_tokens) for r in responses)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}
