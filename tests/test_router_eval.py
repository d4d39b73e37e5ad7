"""Router evaluation, routing policies, and the trained router through the CLI."""

import json
import math

import numpy as np
import pytest
from conftest import masdr, one_line_error

from masdr_router import RegexRouter, RouteDecision, evaluate_retrieval, evaluate_router
from masdr_router.errors import MasdrError
from masdr_router.routers.policy import search_plan


def test_router_report_has_the_stable_json_keys(bbc_small):
    r = evaluate_router(RegexRouter(bbc_small.taxonomy), bbc_small.queries)
    assert {"accuracy", "macro_f1", "per_scope", "ece", "abstain_rate", "latency_ms", "throughput_qps"} <= set(r)
    assert set(r["latency_ms"]) >= {"p50", "p95", "p99"}
    assert set(r["per_scope"]) == set(bbc_small.taxonomy.names)
    assert sum(map(sum, r["confusion"]["matrix"])) == len(bbc_small.queries)
    # abstentions count as misses, so accuracy can only be lower than accuracy-when-answered
    assert r["accuracy"] <= (r["accuracy_when_answered"] or 0) + 1e-9
    assert math.isclose(r["accuracy"], (1 - r["abstain_rate"]) * r["accuracy_when_answered"], abs_tol=1e-3)


def test_policies_turn_an_unsure_decision_into_searches():
    unsure = RouteDecision(scope=None, scores={"a": 0.6, "b": 0.3, "c": 0.1}, confidence=0.6)
    sure = RouteDecision(scope="a", scores={"a": 0.97, "b": 0.02, "c": 0.01}, confidence=0.97)
    assert search_plan(unsure, "abstain") == (None, None)
    assert search_plan(unsure, "hard") == (["a"], None)
    assert search_plan(unsure, "top2") == (["a", "b"], None)
    assert search_plan(unsure, "soft") == (["a", "b"], [0.6, 0.3])
    for policy in ("router", "hard", "abstain", "top2", "soft"):
        assert search_plan(sure, policy) == (["a"], None)
    with pytest.raises(MasdrError, match="unknown routing policy 'maybe'"):
        search_plan(unsure, "maybe")


def test_policies_in_retrieval_evaluation(bbc_small, bbc_index, small_router):
    from masdr_router import LoraRouter

    router = LoraRouter.from_pretrained(small_router)
    # above any probability: every decision is unsure, so the policy alone decides what is searched
    # (a trained router is confident enough that no threshold below 1 guarantees this)
    router.threshold = 1.01
    rep = evaluate_retrieval(bbc_index, bbc_small.queries,
                             {"abstain": (router, "abstain"), "top2": (router, "top2"), "hard": (router, "hard")})
    s = rep["systems"]
    assert s["abstain"]["searched_fraction"] == 1.0 and s["abstain"]["routed_rate"] == 0.0
    assert s["hard"]["searched_fraction"] < s["top2"]["searched_fraction"] < s["abstain"]["searched_fraction"]
    assert s["hard"]["gold_scope_searched"] <= s["top2"]["gold_scope_searched"] <= 1.0
    assert s["abstain"]["gold_scope_searched"] == 1.0


def test_cli_routes_and_evaluates_with_a_trained_router(bbc_small_dir, bbc_index_dir, small_router, tmp_path):
    p = masdr("route", "--router", small_router, "--taxonomy", bbc_small_dir / "taxonomy.yaml", "--json", "-",
              "Shares in the bank fell as profits slumped")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["stage"] == "lora" and set(d["scores"]) == {"business", "entertainment", "politics", "sport", "tech"}
    out = tmp_path / "router.json"
    p = masdr("eval", "router", "--router", small_router, "--taxonomy", bbc_small_dir / "taxonomy.yaml",
              "--queries", bbc_small_dir / "test.jsonl", "--json", out, "--plot", tmp_path / "router.png")
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())["bbc-router"]
    assert {"accuracy", "macro_f1", "per_scope", "ece", "abstain_rate", "latency_ms", "throughput_qps"} <= set(rep)
    assert (tmp_path / "router.png").stat().st_size > 10_000
    p = masdr("eval", "retrieval", "--index", bbc_index_dir, "--queries", bbc_small_dir / "test.jsonl",
              "--router", small_router, "--router", f"{small_router}:top2", "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr
    assert set(json.loads((tmp_path / "r.json").read_text())["systems"]) == {"bbc-router", "bbc-router:top2"}


def test_cli_refuses_a_router_for_another_taxonomy(small_router, write):
    from conftest import TAXONOMY_YAML

    line = one_line_error(masdr("route", "--router", small_router, "--taxonomy", write("t.yaml", TAXONOMY_YAML),
                                "a goal"))
    assert "was trained for taxonomy 'bbc-news'" in line and "not for 'tiny'" in line


def test_cli_train_rejects_bad_overrides(bbc_small_dir, tmp_path):
    line = one_line_error(masdr("train", "--taxonomy", bbc_small_dir / "taxonomy.yaml", "--train",
                                bbc_small_dir / "train.jsonl", "--out", tmp_path / "r", "--set", "epochz=2"))
    assert "unknown key(s) ['epochz']" in line
    assert not (tmp_path / "r").exists()


def test_retrieval_vote_combines_router_scores_with_the_global_neighbours(bbc_small, bbc_index, small_router):
    from masdr_router import GlobalRouter, LoraRouter
    from masdr_router.routers.vote import RetrievalVoteRouter

    texts = [q.query for q in bbc_small.queries]
    lora = LoraRouter.from_pretrained(small_router)
    neutral = RetrievalVoteRouter(lora, bbc_index, beta=0.0)  # beta 0: the router alone
    combined = np.array([[d.scores[s] for s in lora.labels] for d in neutral.route_batch(texts)])
    np.testing.assert_allclose(combined, lora.predict_proba(texts), atol=1e-5)
    votes_only = RetrievalVoteRouter(GlobalRouter(bbc_small.taxonomy), bbc_index, threshold=0.0)
    decisions = votes_only.route_batch(texts)  # no router scores: the neighbours' scopes decide
    assert all(abs(sum(d.scores.values()) - 1) < 1e-6 for d in decisions)
    assert sum(d.scope == q.scope for d, q in zip(decisions, bbc_small.queries)) / len(texts) > 0.6
    from masdr_router.training.calibration import fit_vote_threshold

    voted = RetrievalVoteRouter(lora, bbc_index)
    stats = fit_vote_threshold(voted, bbc_small.queries, target_accuracy=0.9)
    assert voted.threshold == stats["threshold"]
    assert stats["accuracy_when_answered"] >= 0.9 or stats["abstain_rate"] == 1.0


def test_eval_fits_thresholds_for_retrieval_on_held_out_queries(bbc_small_dir, bbc_index_dir, small_router, tmp_path):
    out = tmp_path / "r.json"
    p = masdr("eval", "retrieval", "--index", bbc_index_dir, "--queries", bbc_small_dir / "test.jsonl",
              "--router", small_router, "--router", f"{small_router}+vote", "--router", "regex",
              "--fit-thresholds", bbc_small_dir / "val.jsonl", "--global-in-scope", "--json", out)
    assert p.returncode == 0, p.stderr
    systems = json.loads(out.read_text())["systems"]
    assert "threshold_fit" not in systems["regex"]  # no threshold to fit
    for name in ("bbc-router", "bbc-router+vote"):
        fit = systems[name]["threshold_fit"]
        assert fit["n_queries"] == len((bbc_small_dir / "val.jsonl").read_text().splitlines())
        assert fit["router"]["r_at_k"] >= fit["router"]["global_r_at_k"]
        assert fit["search"]["global_in_scope"] is True and "previous_threshold" in fit
