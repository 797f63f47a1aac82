"""The offline provider: deterministic, extractive (quotes the passages verbatim), cites sources,
says what it is, and says plainly when it has no context."""

from __future__ import annotations

from services.llm.providers.offline_provider import (
    LABEL,
    MODEL,
    NO_CONTEXT,
    OfflineProvider,
    count_tokens,
    truncate_tokens,
)
from services.llm.providers.provider import GenerationRequest, Passage

PASSAGES = (
    Passage("The Eiffel Tower is in Paris. It was finished in 1889.", "doc-1", "Eiffel Tower"),
    Passage("Mitochondria produce ATP. The mitochondrion has its own DNA.", "doc-2", "Biology"),
    Passage("Paris is the capital of France. The Seine flows through Paris.", "doc-3"),
)


async def test_quotes_the_most_relevant_sentence_and_cites_its_source():
    request = GenerationRequest("Which organelle produces ATP?", PASSAGES)
    generation = await OfflineProvider().generate(request, timeout_s=1.0)
    assert generation.offline is True and generation.model == MODEL
    assert generation.text.startswith(LABEL)
    body, sources = generation.text.split("\n\nSources:\n")
    first_quote = body.splitlines()[1]
    assert first_quote.startswith("Mitochondria produce ATP. [2]")
    assert sources.splitlines() == ["[2] doc-2 - Biology"]


async def test_every_quote_is_verbatim_from_a_passage_with_the_right_number():
    request = GenerationRequest("When was the tower in Paris finished?", PASSAGES)
    text = (await OfflineProvider().generate(request, timeout_s=1.0)).text
    body = text.split("\n\nSources:\n")[0].splitlines()[1]
    quotes = [part.strip() for part in body.split("]") if part.strip()]
    assert quotes, text
    for quote in quotes:
        sentence, number = quote.rsplit(" [", 1)
        assert sentence in PASSAGES[int(number) - 1].text
    # "tower" + "paris" outweighs "finished" alone; "paris" alone (in three sentences) comes last.
    assert body == ("The Eiffel Tower is in Paris. [1] It was finished in 1889. [1] "
                    "Paris is the capital of France. [3]")
    assert "[1] doc-1 - Eiffel Tower" in text and "[3] doc-3" in text


async def test_is_deterministic():
    request = GenerationRequest("Where is the Seine?", PASSAGES, max_tokens=100)
    provider = OfflineProvider()
    first = await provider.generate(request, timeout_s=1.0)
    again = [await provider.generate(request, timeout_s=1.0) for _ in range(3)]
    assert again == [first] * 3
    assert "The Seine flows through Paris. [3]" in first.text


async def test_says_plainly_when_it_has_no_context():
    generation = await OfflineProvider().generate(GenerationRequest("Why?"), timeout_s=1.0)
    assert generation.text == NO_CONTEXT
    assert "no context" in generation.text and generation.offline


async def test_says_so_when_no_passage_shares_a_word_with_the_question():
    request = GenerationRequest("Quantum chromodynamics gluons?", PASSAGES)
    text = (await OfflineProvider().generate(request, timeout_s=1.0)).text
    assert "nothing to quote" in text and "Sources:" not in text


async def test_token_counts_are_counts_of_its_own_tokenization():
    request = GenerationRequest("Where is Paris?", PASSAGES, max_tokens=12)
    generation = await OfflineProvider().generate(request, timeout_s=1.0)
    assert generation.prompt_tokens == count_tokens("Where is Paris?") + sum(
        count_tokens(p.text) for p in PASSAGES)
    assert count_tokens("Where is Paris?") == 4
    assert generation.completion_tokens == 12 == count_tokens(generation.text)


def test_truncate_keeps_whole_tokens():
    assert truncate_tokens("Paris, France. Big city", 3) == "Paris, France"
    assert truncate_tokens("short", 10) == "short"
