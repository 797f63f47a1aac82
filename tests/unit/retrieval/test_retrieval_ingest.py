"""Readers: text and markdown files, BEIR and plain JSONL, directories, batches."""

from __future__ import annotations

import json

import pytest

from libs.errors import InvalidArgument
from services.retrieval.ingest import batches, read_documents, read_path, read_paths


def test_markdown_file_is_one_document_titled_by_its_heading(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# Aspirin and stroke\n\nLow-dose aspirin lowers the risk.\n")
    (document,) = read_path(path)
    assert document.id == str(path) and document.source == str(path)
    assert document.title == "Aspirin and stroke"
    assert document.text == path.read_text()


def test_text_file_without_heading_is_titled_by_its_name(tmp_path):
    path = tmp_path / "claim.txt"
    path.write_text("Vitamin D does not prevent fractures.")
    (document,) = read_path(path)
    assert document.title == "claim"


def test_beir_jsonl_layout(data_dir):
    documents = list(read_paths([data_dir / "scifact-demo" / "corpus.jsonl"], limit=3))
    assert [d.id for d in documents] == ["4983", "5836", "7912"]
    first = documents[0]
    assert first.title.startswith("Microstructural development of human newborn cerebral")
    assert first.text.startswith("Alterations of the architecture of cerebral white matter")
    assert first.source.endswith("corpus.jsonl:1")


def test_plain_jsonl_layout_and_blank_lines(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": 7, "text": "seven"}) + "\n\n"
                    + json.dumps({"id": "b", "title": "Bee", "text": "bee"}) + "\n")
    documents = list(read_path(path))
    assert [(d.id, d.title, d.text) for d in documents] == [("7", "", "seven"), ("b", "Bee", "bee")]
    assert documents[1].source == f"{path}:3"


def test_jsonl_line_without_text_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "1", "text": "ok"}) + "\n" + json.dumps({"id": "2"}) + "\n")
    with pytest.raises(InvalidArgument) as error:
        list(read_path(path))
    assert error.value.field == "path" and f"{path}:2" in error.value.description


def test_directory_is_read_recursively_in_sorted_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.md").write_text("two")
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "c.jsonl").write_text(json.dumps({"_id": "x", "title": "", "text": "three"}) + "\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    assert [d.text for d in read_path(tmp_path)] == ["one", "two", "three"]


def test_missing_path_and_unsupported_file(tmp_path):
    with pytest.raises(InvalidArgument):
        list(read_path(tmp_path / "absent.md"))
    (tmp_path / "table.csv").write_text("a,b")
    with pytest.raises(InvalidArgument):
        list(read_path(tmp_path / "table.csv"))


def test_batches_and_read_documents(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text(f"document {i}")
    assert [len(b) for b in batches(read_path(tmp_path), batch_size=2)] == [2, 2, 1]
    assert [len(b) for b in read_documents([tmp_path], batch_size=3, limit=4)] == [3, 1]
    with pytest.raises(InvalidArgument):
        list(batches([], batch_size=0))
