"""Readers that turn files into `mesh.common.v1.Document` messages for IngestDocuments.

- text and markdown files (.txt, .md, .markdown, .rst): one document per file; id and source are the
  path, the title is the first markdown heading or else the file name;
- JSONL (.jsonl): one document per line, in BEIR's layout (`_id`, `title`, `text`; Thakur et al.,
  "BEIR", NeurIPS 2021 Datasets and Benchmarks) or the plain one (`id`, `text`, optional `title`);
  the source is `<path>:<line number>`;
- directories: every readable file below them, in sorted order.

`load_documents()` reads and checks every document before anything is sent (what `mcts-mesh ingest`
does, so a bad line late in a file stops the run before the first batch is stored); `batches()`
groups documents for the 10,000-per-call limit of IngestDocuments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from mesh.common.v1 import common_pb2
from tqdm import tqdm

from libs.errors import InvalidArgument
from services.retrieval.resources import MAX_DOCUMENT_ID_CHARS, MAX_SOURCE_CHARS, MAX_TITLE_CHARS

TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst"})
JSONL_SUFFIXES = frozenset({".jsonl"})


def read_text_file(path: Path) -> common_pb2.Document:
    """One document for a text or markdown file: id and source are the path as given."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InvalidArgument("path", f"{path}: not UTF-8 text (byte {error.start})") from None
    return common_pb2.Document(id=str(path), title=_title_of(text, path), text=text,
                               source=str(path))


def _title_of(text: str, path: Path) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
        if stripped:
            break
    return path.stem


def read_jsonl(path: Path) -> Iterator[common_pb2.Document]:
    """Documents of a JSONL file, BEIR (`_id`, `title`, `text`) or plain (`id`, `text`) layout.

    Raises:
        InvalidArgument("path"): a line that is not a JSON object with an id and a text.
    """
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(_lines(handle, path), start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidArgument("path", f"{where}: not JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise InvalidArgument("path", f"{where}: not a JSON object")
            doc_id = record.get("_id", record.get("id"))
            text = record.get("text")
            if doc_id is None or not isinstance(text, str):
                raise InvalidArgument("path", f"{where}: needs '_id' or 'id', and 'text'")
            yield common_pb2.Document(id=str(doc_id), title=str(record.get("title") or ""),
                                      text=text, source=where)


def _lines(handle, path: Path) -> Iterator[str]:
    number = 0
    try:
        for number, line in enumerate(handle, start=1):  # noqa: B007 - read in the handler
            yield line
    except UnicodeDecodeError:
        raise InvalidArgument("path", f"{path}:{number + 1}: not UTF-8 text") from None


def read_path(path: str | os.PathLike[str]) -> Iterator[common_pb2.Document]:
    """Documents of a file or of every supported file below a directory (sorted, recursive).

    Raises:
        InvalidArgument("path"): the path does not exist, or a file's type is not supported.
    """
    path = Path(path)
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            if child.suffix.lower() in TEXT_SUFFIXES | JSONL_SUFFIXES:
                yield from read_path(child)
        return
    if not path.is_file():
        raise InvalidArgument("path", f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        yield from read_jsonl(path)
    elif suffix in TEXT_SUFFIXES:
        yield read_text_file(path)
    else:
        supported = sorted(TEXT_SUFFIXES | JSONL_SUFFIXES)
        raise InvalidArgument("path", f"{path}: unsupported type {suffix!r} (use {supported})")


def read_paths(paths: Iterable[str | os.PathLike[str]], limit: int | None = None,
               progress: bool = False) -> Iterator[common_pb2.Document]:
    """Documents of every path in order, at most `limit`, with a tqdm bar when `progress`."""
    def documents() -> Iterator[common_pb2.Document]:
        count = 0
        for path in paths:
            for document in read_path(path):
                if limit is not None and count >= limit:
                    return
                count += 1
                yield document

    if not progress:
        yield from documents()
        return
    with tqdm(total=limit, unit="doc", desc="documents") as bar:
        for document in documents():
            bar.update(1)
            yield document


def batches(documents: Iterable[common_pb2.Document],
            batch_size: int = 256) -> Iterator[list[common_pb2.Document]]:
    """`documents` in lists of at most `batch_size` (1..10,000, the IngestDocuments limit)."""
    if not 1 <= batch_size <= 10_000:
        raise InvalidArgument("batch_size", f"{batch_size} is outside 1..10000")
    batch: list[common_pb2.Document] = []
    for document in documents:
        batch.append(document)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def read_documents(paths: Iterable[str | os.PathLike[str]], batch_size: int = 256,
                   progress: bool = False,
                   limit: int | None = None) -> Iterator[list[common_pb2.Document]]:
    """Batches of the documents of `paths` (what `mcts-mesh ingest` sends, one call per batch)."""
    return batches(read_paths(paths, limit=limit, progress=progress), batch_size)


def load_documents(paths: Iterable[str | os.PathLike[str]], limit: int | None = None,
                   max_document_chars: int | None = None) -> list[common_pb2.Document]:
    """Every document of `paths` (at most `limit`), read and checked in full first.

    Raises:
        InvalidArgument("path"): a missing path, an unsupported file, a line that is not a JSON
            object with an id and a text, a file that is not UTF-8, a document without text or
            longer than `max_document_chars`, an id, title or source longer than the service
            takes (1,024, 1,024, 2,048 characters), or an id that repeats an earlier one; the
            description names the file and line (and the field).
        InvalidArgument("limit"): `limit` below 1.
    """
    if limit is not None and limit < 1:
        raise InvalidArgument("limit", f"{limit} must be at least 1")
    documents: list[common_pb2.Document] = []
    first_source: dict[str, str] = {}
    try:
        for document in read_paths(paths, limit=limit):
            where = document.source or document.id
            if not document.text.strip():
                raise InvalidArgument("path", f"{where}: document {document.id!r} has no text")
            if max_document_chars is not None and len(document.text) > max_document_chars:
                raise InvalidArgument("path", f"{where}: document {document.id!r} has "
                                      f"{len(document.text)} characters; at most "
                                      f"{max_document_chars}")
            _check_lengths(document, where)
            if document.id in first_source:
                raise InvalidArgument("path", f"{where}: id {document.id!r} repeats "
                                      f"{first_source[document.id]}")
            first_source[document.id] = where
            documents.append(document)
    except OSError as error:
        raise InvalidArgument("path", f"{error.filename}: {error.strerror}") from None
    return documents


def _check_lengths(document: common_pb2.Document, where: str) -> None:
    """Raises InvalidArgument("path") naming the file, line and field of an id, title or source
    longer than the retrieval service takes."""
    for field, limit in (("id", MAX_DOCUMENT_ID_CHARS), ("title", MAX_TITLE_CHARS),
                         ("source", MAX_SOURCE_CHARS)):
        length = len(getattr(document, field))
        if length > limit:
            raise InvalidArgument("path", f"{where[:200]}: the document's {field} has {length} "
                                  f"characters; at most {limit}")
