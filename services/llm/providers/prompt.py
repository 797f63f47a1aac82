"""The prompt the language-model providers get: a system prompt that asks for an answer grounded
in numbered passages with [n] citations, and a user message that lists the passages and the
question."""

from __future__ import annotations

from services.llm.providers.provider import GenerationRequest

SYSTEM_PROMPT = (
    "You answer questions using only the numbered passages given with the question. "
    "Cite every claim with the number of the passage it comes from, in square brackets, "
    "for example [1] or [2][3]. If the passages do not contain the answer, say so plainly "
    "instead of guessing. Be concise."
)

SYSTEM_PROMPT_NO_CONTEXT = (
    "No passages were retrieved for this question. Answer from general knowledge, say that "
    "no sources were given, and say plainly when you are unsure. Be concise."
)


def system_prompt(request: GenerationRequest) -> str:
    """The system prompt for `request`: grounded with citations when it has passages."""
    return SYSTEM_PROMPT if request.context else SYSTEM_PROMPT_NO_CONTEXT


def user_message(request: GenerationRequest) -> str:
    """The passages numbered from 1 (each with its source and title) followed by the question."""
    if not request.context:
        return f"Question: {request.prompt}"
    blocks = []
    for number, passage in enumerate(request.context, start=1):
        label = passage.source + (f" - {passage.title}" if passage.title else "")
        blocks.append(f"[{number}] ({label})\n{passage.text.strip()}")
    passages = "\n\n".join(blocks)
    return f"Passages:\n\n{passages}\n\nQuestion: {request.prompt}"
