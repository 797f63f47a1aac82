"""Chunking keeps exact character offsets, respects the size, overlaps, prefers sentence ends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.errors import InvalidArgument
from services.retrieval.chunking import chunk_text

ABSTRACT = (
    "Alterations of the architecture of cerebral white matter in the developing human brain can "
    "affect cortical development. A line scan diffusion-weighted MRI sequence was applied to "
    "measure the apparent diffusion coefficient. Relative anisotropy was higher closer to birth! "
    "Was the effect seen in preterm infants? Yes, at term equivalent age.\nA final paragraph "
    "follows the line break and ends here."
)


def test_offsets_index_the_original_text():
    chunks = chunk_text(ABSTRACT, size=120, overlap=30)
    assert len(chunks) > 2
    for index, chunk in enumerate(chunks):
        assert chunk.index == index
        assert ABSTRACT[chunk.start:chunk.end] == chunk.text
        assert 0 < len(chunk.text) <= 120


def test_chunks_end_at_sentence_ends_when_one_is_in_the_second_half_of_the_window():
    # 29-character sentences: every 100-character window has a sentence end past its middle.
    text = " ".join(f"Sentence number {i:03d} is here." for i in range(20))
    chunks = chunk_text(text, size=100, overlap=20)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.text.endswith("is here."), chunk.text


def test_consecutive_chunks_overlap_and_cover_the_text():
    chunks = chunk_text(ABSTRACT, size=120, overlap=30)
    assert chunks[0].start == 0
    assert chunks[-1].end == len(ABSTRACT)
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start < before.end, "overlap expected"
        assert after.start > before.start
        # Starts at a word start, never mid-word.
        assert ABSTRACT[after.start - 1].isspace()


def test_short_text_is_one_chunk_without_surrounding_whitespace():
    text = "  A short claim about  aspirin.  \n"
    (chunk,) = chunk_text(text, size=1000, overlap=200)
    assert chunk.text == "A short claim about  aspirin."
    assert text[chunk.start:chunk.end] == chunk.text


def test_blank_text_has_no_chunks():
    assert chunk_text("   \n\t ", size=100, overlap=10) == []
    assert chunk_text("", size=100, overlap=10) == []


def test_a_word_longer_than_the_size_is_cut():
    text = "x" * 250
    chunks = chunk_text(text, size=100, overlap=20)
    assert [c.text for c in chunks] == ["x" * 100, "x" * 100, "x" * 50]


@pytest.mark.parametrize(("size", "overlap", "field"), [
    (0, 0, "chunk_size"), (100, 50, "chunk_overlap"), (100, -1, "chunk_overlap")])
def test_bad_sizes_name_the_setting(size, overlap, field):
    with pytest.raises(InvalidArgument) as error:
        chunk_text("some text", size=size, overlap=overlap)
    assert error.value.field == field


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab .!?\n"), max_size=400),
       size=st.integers(1, 60), overlap_share=st.floats(0, 0.49))
def test_any_text_chunks_exactly(text, size, overlap_share):
    overlap = min(int(size * overlap_share), (size + 1) // 2 - 1)
    chunks = chunk_text(text, size=size, overlap=max(overlap, 0))
    for chunk in chunks:
        assert text[chunk.start:chunk.end] == chunk.text
        assert 1 <= len(chunk.text) <= size
        assert not chunk.text[0].isspace() and not chunk.text[-1].isspace()
    # Every non-space character is in some chunk.
    covered = set()
    for chunk in chunks:
        covered.update(range(chunk.start, chunk.end))
    assert all(i in covered for i, c in enumerate(text) if not c.isspace())
