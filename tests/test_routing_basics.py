"""Regex router, reference routers, query validation, RRF fusion, splits."""

import pytest
from conftest import TAXONOMY_YAML

from masdr_router import GlobalRouter, LabelledQuery, QueryError, RegexRouter, Taxonomy, build_router
from masdr_router.datasets.splits import stratified_split
from masdr_router.errors import MasdrError
from masdr_router.retrieval.fusion import rrf_fuse


@pytest.fixture
def tax(write):
    return Taxonomy.from_yaml(write("t.yaml", TAXONOMY_YAML))


def test_regex_router_picks_the_scope_with_most_matching_patterns(tax):
    d = RegexRouter(tax).route("A late GOAL decides the match")
    assert d.scope == "sport" and d.stage == "regex"
    assert d.scores == {"sport": 1.0, "tech": 0.0, "all-news": 0.0}
    assert d.latency_ms > 0  # measured, not left at its default


def test_regex_router_abstains_on_no_match_and_on_ties(tax):
    r = RegexRouter(tax)
    assert r.route("what is the weather like").abstained
    tie = r.route("a goal scored on a phone")  # one sport pattern, one tech pattern
    assert tie.abstained and tie.scores["sport"] == tie.scores["tech"] == 0.5


@pytest.mark.parametrize("query, message", [("", "query is empty"), ("   \n", "query is empty"),
                                            ("x" * 5000, "query is 5000 characters long; the limit is 4000")])
def test_empty_and_huge_queries_are_rejected(tax, query, message):
    with pytest.raises(QueryError, match=message):
        RegexRouter(tax).route(query)


def test_global_router_always_abstains(tax):
    assert GlobalRouter(tax).route("a goal").abstained


def test_build_router_by_name_and_unknown_names(tax):
    assert isinstance(build_router("regex", taxonomy=tax), RegexRouter)
    with pytest.raises(MasdrError, match="unknown router 'magic': expected one of "
                                         "cascade, global, llm, llm-logprobs, oracle, regex"):
        build_router("magic", taxonomy=tax)


def test_rrf_known_answer_and_weights():
    assert rrf_fuse([[1, 2, 3], [3, 1]], k=0) == [(1, 1.5), (3, 1 / 3 + 1), (2, 0.5)]
    # a zero weight removes a ranking; -1 is padding
    assert rrf_fuse([[1, 2], [2, -1]], [1.0, 0.0], k=0) == [(1, 1.0), (2, 0.5)]


def test_stratified_split_is_seeded_and_keeps_every_scope_in_every_split():
    qs = [LabelledQuery(f"q{i}", "a" if i < 30 else "b") for i in range(40)]
    s1, s2, s3 = (stratified_split(qs, seed=s) for s in (7, 7, 8))
    assert s1 == s2 and s1 != s3
    for split in s1.values():
        assert {q.scope for q in split} == {"a", "b"}
    assert sorted(q.query for v in s1.values() for q in v) == sorted(q.query for q in qs)
    assert len(s1["test"]) == 8 and len(s1["val"]) == 4  # 20 % / 10 % of 30 and of 10
