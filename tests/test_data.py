"""Corpus / query JSONL contracts and chunking."""

import json

import pytest
from conftest import TAXONOMY_YAML

from masdr_router import (
    Document,
    LabelledQuery,
    Taxonomy,
    ValidationError,
    chunk_document,
    read_corpus,
    read_queries,
    write_corpus,
    write_queries,
)


def jsonl(*rows):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


GOOD_DOC = {"id": "d1", "text": "a goal in the last minute", "metadata": {"category": "sport"}}


def test_corpus_round_trip(tmp_path):
    docs = [Document("d1", "hello world", {"category": "sport", "year": 2005}), Document("d2", "bye", {})]
    write_corpus(tmp_path / "c.jsonl", docs)
    assert read_corpus(tmp_path / "c.jsonl") == docs


@pytest.mark.parametrize("rows, message", [
    ([GOOD_DOC, {"id": "d2", "metadata": {}}], r"c\.jsonl:2: field 'text': missing required field"),
    ([GOOD_DOC, "{not json"], r"c\.jsonl:2: invalid JSON"),
    ([GOOD_DOC, {**GOOD_DOC}], r"c\.jsonl:2: field 'id': duplicate document id 'd1' \(first seen on line 1\)"),
    ([{**GOOD_DOC, "metadata": {"tags": ["a"]}}], r"c\.jsonl:1: field 'metadata\.tags': must be a scalar"),
    ([{**GOOD_DOC, "text": "   "}], r"c\.jsonl:1: field 'text': must be a non-empty string"),
    (["[1, 2]"], r"c\.jsonl:1: expected a JSON object, got list"),
])
def test_bad_corpus_rows_name_file_line_and_field(write, rows, message):
    with pytest.raises(ValidationError, match=message):
        read_corpus(write("c.jsonl", jsonl(*rows)))


def test_queries_round_trip_and_scope_check(write, tmp_path):
    tax = Taxonomy.from_yaml(write("t.yaml", TAXONOMY_YAML))
    qs = [LabelledQuery("who scored?", "sport", ("d1",)), LabelledQuery("new phone", "tech", answer="x")]
    write_queries(tmp_path / "q.jsonl", qs)
    assert read_queries(tmp_path / "q.jsonl", tax) == qs
    bad = write("bad.jsonl", jsonl({"query": "q", "scope": "sport"}, {"query": "rain?", "scope": "weather"}))
    with pytest.raises(ValidationError, match=r"bad\.jsonl:2: field 'scope': unknown scope 'weather'"):
        read_queries(bad, tax)


def test_query_rows_need_query_and_scope(write):
    with pytest.raises(ValidationError, match=r"q\.jsonl:1: field 'scope': missing required field"):
        read_queries(write("q.jsonl", jsonl({"query": "anything"})))
    with pytest.raises(ValidationError, match=r"q\.jsonl:1: field 'relevant_ids': must be a list"):
        read_queries(write("q.jsonl", jsonl({"query": "a", "scope": "b", "relevant_ids": "d1"})))


def test_empty_files_are_errors_not_empty_results(write):
    with pytest.raises(ValidationError, match="corpus has no documents"):
        read_corpus(write("c.jsonl", "\n"))


def test_chunks_overlap_and_inherit_id_and_metadata():
    doc = Document("d", " ".join(f"w{i}" for i in range(300)), {"category": "tech"})
    chunks = chunk_document(doc, size=100, overlap=20)
    assert [c.id for c in chunks] == ["d#0", "d#1", "d#2", "d#3"]
    assert chunks[1].text.split()[0] == "w80"  # stride 80
    assert chunks[0].text.split()[-20:] == chunks[1].text.split()[:20]
    assert chunks[-1].text.split()[-1] == "w299"  # nothing lost at the end
    assert all(c.doc_id == "d" and c.metadata == {"category": "tech"} for c in chunks)


def test_short_tail_is_merged_not_left_as_a_stub():
    doc = Document("d", " ".join(["w"] * 210))
    assert [len(c.text.split()) for c in chunk_document(doc, size=100, overlap=0)] == [100, 110]


def test_chunking_rejects_overlap_not_smaller_than_size():
    with pytest.raises(ValueError, match="overlap < size"):
        chunk_document(Document("d", "x"), size=10, overlap=10)
