"""Retrieval evaluation on a real index: the metrics mean what DESIGN.md says."""

import math

import pytest

from masdr_router import GlobalRouter, OracleRouter, RegexRouter, evaluate_retrieval


@pytest.fixture(scope="module")
def report(bbc_small, bbc_index):
    return evaluate_retrieval(bbc_index, bbc_small.queries,
                              {"global": GlobalRouter(bbc_small.taxonomy), "regex": RegexRouter(bbc_small.taxonomy),
                               "oracle": OracleRouter(bbc_small.taxonomy)}, k=10)


def test_report_has_the_stable_json_keys(report):
    for name in ("global", "regex", "oracle"):
        s = report["systems"][name]
        assert {"p_at_k", "r_at_k", "hit_at_k", "n_queries"} <= set(s)
        assert s["n_queries"] == 30
    assert {"per_scope", "spearman_rho"} <= set(report["dilution"])
    assert set(report["confusion"]) == {"global", "regex", "oracle"}


def test_oracle_scoping_is_perfectly_precise_and_global_is_not(report):
    assert report["systems"]["oracle"]["p_at_k"] == 1.0
    assert report["systems"]["global"]["p_at_k"] < 1.0
    assert report["systems"]["oracle"]["searched_fraction"] < 0.5


def test_dilution_matches_its_definition(report):
    # with P_oracle = 1, delta = 1 - P_global, so the mean delta is 1 - global P@k
    d = report["dilution"]
    assert math.isclose(d["mean_delta"], 1 - report["systems"]["global"]["p_at_k"], abs_tol=0.01)
    assert set(d["per_scope"]) == {"business", "entertainment", "politics", "sport", "tech"}


def test_confusion_rows_are_distributions(report):
    for name, c in report["confusion"].items():
        for row in c["matrix"]:
            assert math.isclose(sum(row), 1.0, abs_tol=1e-3), name
    assert report["confusion"]["oracle"]["diagonal_mean"] == 1.0
    assert math.isclose(report["confusion"]["global"]["diagonal_mean"], report["systems"]["global"]["p_at_k"],
                        abs_tol=0.01)


def test_routing_accuracy_counts_abstentions_as_misses(report):
    r = report["systems"]["regex"]
    assert r["routing_accuracy"] <= r["routed_rate"]
