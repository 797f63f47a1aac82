"""Splitting document text into overlapping chunks that keep their character offsets.

A chunk is at most `size` characters. It ends at the last sentence end (".", "!", "?" or a line
break, followed by whitespace) in the second half of its window, else at the last whitespace
there, else mid-word when a single word fills the window. The next chunk starts about `overlap`
characters before that end, moved forward to the start of a word. Leading and trailing whitespace
is left out of every chunk, so `text[chunk.start:chunk.end] == chunk.text` and no chunk is blank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from libs.errors import InvalidArgument

_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s|\n")
_WHITESPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Chunk:
    """Characters `start` (inclusive) to `end` (exclusive) of the document text."""

    index: int
    start: int
    end: int
    text: str


def chunk_text(text: str, size: int, overlap: int) -> list[Chunk]:
    """Chunks of `text`, in order, each of 1..`size` characters; [] for blank text.

    Args:
        size: maximum characters per chunk (about 4 characters per word piece for English; the
            embedder reads 256 word pieces).
        overlap: characters repeated from the end of one chunk at the start of the next,
            0 <= overlap < size / 2 (so each chunk moves forward by at least half its window).
    Raises:
        InvalidArgument("chunk_size" / "chunk_overlap"): sizes out of range.
    """
    if size < 1:
        raise InvalidArgument("chunk_size", f"{size} must be at least 1")
    if not 0 <= overlap < (size + 1) // 2:
        raise InvalidArgument("chunk_overlap", f"{overlap} must be in [0, {size} / 2)")
    chunks: list[Chunk] = []
    start = _skip_space(text, 0, len(text))
    while start < len(text):
        end = _chunk_end(text, start, size)
        stripped_end = end
        while stripped_end > start and text[stripped_end - 1].isspace():
            stripped_end -= 1
        chunks.append(Chunk(len(chunks), start, stripped_end, text[start:stripped_end]))
        if end >= len(text):
            break
        start = _next_start(text, start, end, overlap)
    return chunks


def _chunk_end(text: str, start: int, size: int) -> int:
    """End (exclusive) of the chunk that starts at `start`."""
    limit = start + size
    if limit >= len(text):
        return len(text)
    half = start + (size + 1) // 2
    window = text[half:limit + 1]
    sentence_ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    if sentence_ends:
        return half + sentence_ends[-1]
    spaces = [m.end() for m in _WHITESPACE.finditer(window)]
    if spaces:
        return half + spaces[-1]
    return limit


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Start of the chunk after [start, end): `overlap` characters back, at a word start."""
    position = max(end - overlap, start + 1)
    if position < end and position > 0 and not text[position - 1].isspace():
        # Mid-word: move to the next word so no chunk starts with a fragment.
        match = _WHITESPACE.search(text, position, end)
        position = match.start() if match else end
    return _skip_space(text, position, len(text))


def _skip_space(text: str, position: int, stop: int) -> int:
    while position < stop and text[position].isspace():
        position += 1
    return position
