"""The offline provider: needs no key and no network, deterministic, extractive.

It answers from the passages given, never from a language model: it splits the passages into
sentences, scores each sentence by the inverse-document-frequency-weighted overlap of its words with
the prompt's content words (document = sentence, as in BM25's idf without length normalisation),
and returns the best sentences verbatim, each cited as [n] (the passage's number in the request,
from 1), followed by the cited sources with their labels. Every answer says that it is extractive.

Token counts are real counts of this provider's own tokenization, `TOKEN_PATTERN`: a token is a run
of word characters or a single punctuation mark. `prompt_tokens` counts the prompt and every
passage's text (what it read); `completion_tokens` counts the answer text.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.llm.providers.provider import Generation, GenerationRequest, StreamItem

MODEL = "offline-extractive"
LABEL = "Offline extractive answer (no language model was used; sentences quoted from the sources):"
NO_CONTEXT = (
    "Offline provider (no language model was used): no context passages were given, "
    "so there is no context to answer from."
)

STREAM_WORDS = 4
"""Words per streamed chunk."""
_CHUNK = re.compile(r"\s*\S+\s*")
TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Function words carry no evidence of relevance; they are left out of the overlap.
_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in "
    "into is it its may might not of on or our should so than that the their them then there "
    "these they this those to was we were what when where which while who whom whose why will "
    "with would you your about also any some such".split()
)


@dataclass(frozen=True)
class _Sentence:
    passage: int
    position: int
    text: str
    words: frozenset[str]


class OfflineProvider:
    """Extractive answers from the request's passages.

    Args:
        name: "offline".
        max_sentences: most sentences quoted in one answer.
    """

    def __init__(self, name: str = "offline", max_sentences: int = 3) -> None:
        self.name = name
        self.max_sentences = max_sentences

    async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
        """The extractive answer; `timeout_s` is unused (no I/O). Never raises."""
        full = self.answer(request)
        text = truncate_tokens(full, request.max_tokens)
        read = [request.prompt, *(passage.text for passage in request.context)]
        return Generation(
            text=text,
            model=MODEL,
            prompt_tokens=sum(count_tokens(part) for part in read),
            completion_tokens=count_tokens(text),
            offline=True,
            finish_reason="stop" if text == full else "length",
        )

    async def stream(self, request: GenerationRequest,
                     timeout_s: float) -> AsyncIterator[StreamItem]:
        """The extractive answer of `generate` in chunks of `STREAM_WORDS` words (each with the
        whitespace after it), then its Generation. Never raises."""
        generation = await self.generate(request, timeout_s)
        words = _CHUNK.findall(generation.text)
        for start in range(0, len(words), STREAM_WORDS):
            yield "".join(words[start:start + STREAM_WORDS])
        yield generation

    async def aclose(self) -> None:
        """Nothing to release: no connections."""

    def answer(self, request: GenerationRequest) -> str:
        """The full answer text before the `max_tokens` cut."""
        if not request.context:
            return NO_CONTEXT
        sentences = _split(request)
        query = _content_words(request.prompt)
        chosen = _best(sentences, query, self.max_sentences)
        if not chosen:
            return (
                f"{LABEL} none of the {len(request.context)} passages given shares a content "
                "word with the question, so there is nothing to quote."
            )
        body = " ".join(f"{sentence.text} [{sentence.passage}]" for sentence in chosen)
        cited = sorted({sentence.passage for sentence in chosen})
        sources = "\n".join(
            f"[{number}] {_label(request, number)}" for number in cited
        )
        return f"{LABEL}\n{body}\n\nSources:\n{sources}"


def count_tokens(text: str) -> int:
    """Tokens of `text` under `TOKEN_PATTERN`."""
    return sum(1 for _ in TOKEN_PATTERN.finditer(text))


def truncate_tokens(text: str, max_tokens: int) -> str:
    """`text` cut after its `max_tokens`-th token (whole text when it has no more)."""
    for index, match in enumerate(TOKEN_PATTERN.finditer(text), start=1):
        if index == max_tokens:
            return text[: match.end()]
    return text


def _content_words(text: str) -> frozenset[str]:
    return frozenset(
        word for word in (w.lower() for w in _WORD.findall(text)) if word not in _STOPWORDS
    )


def _split(request: GenerationRequest) -> list[_Sentence]:
    sentences = []
    seen: set[str] = set()
    for number, passage in enumerate(request.context, start=1):
        for position, raw in enumerate(_SENTENCE_END.split(passage.text.strip())):
            text = " ".join(raw.split())
            if not text or text in seen:
                continue
            seen.add(text)
            sentences.append(_Sentence(number, position, text, _content_words(text)))
    return sentences


def _best(sentences: list[_Sentence], query: frozenset[str], k: int) -> list[_Sentence]:
    """The `k` sentences with the highest idf-weighted overlap with `query`; ties go to the
    earlier passage, then the earlier sentence. Sentences with no overlap are never chosen."""
    count = len(sentences)
    frequency = {word: sum(word in s.words for s in sentences) for word in query}
    idf = {word: math.log(1 + count / df) for word, df in frequency.items() if df}
    scored = [(sum(idf.get(word, 0.0) for word in s.words & query), s) for s in sentences]
    ranked = sorted(
        (item for item in scored if item[0] > 0),
        key=lambda item: (-item[0], item[1].passage, item[1].position),
    )
    return [sentence for _, sentence in ranked[:k]]


def _label(request: GenerationRequest, number: int) -> str:
    passage = request.context[number - 1]
    return passage.source + (f" - {passage.title}" if passage.title else "")
