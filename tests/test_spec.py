"""Router specs: the grammar every command, benchmark and the service use to name a router, and the
one function that builds it."""

import pytest

from masdr_router import (
    CascadeRouter,
    LLMClient,
    LLMConfig,
    LLMRouter,
    LoraRouter,
    RegexRouter,
    RetrievalVoteRouter,
    SearchConfig,
    build_router,
    build_systems,
    parse_router_spec,
)
from masdr_router.routers import GlobalRouter, RouterSpecError


def stages(text):
    return [(s.base, s.vote, s.threshold) for s in parse_router_spec(text).stages]


# ---- grammar: every form the README shows ------------------------------------------------------------
@pytest.mark.parametrize(("text", "want_stages", "policy"), [
    ("regex", [("regex", False, None)], "router"),
    ("global", [("global", False, None)], "router"),
    ("oracle", [("oracle", False, None)], "router"),
    ("llm-logprobs", [("llm-logprobs", False, None)], "router"),
    ("cascade", [("cascade", False, None)], "router"),
    ("checkpoints/bbc-router", [("checkpoints/bbc-router", False, None)], "router"),
    ("checkpoints/bbc-router+vote", [("checkpoints/bbc-router", True, None)], "router"),
    ("checkpoints/bbc-router:top2", [("checkpoints/bbc-router", False, None)], "top2"),
    ("checkpoints/bbc-router+vote:abstain", [("checkpoints/bbc-router", True, None)], "abstain"),
    ("regex,checkpoints/bbc-router,llm",
     [("regex", False, None), ("checkpoints/bbc-router", False, None), ("llm", False, None)], "router"),
    ("regex@0.6,checkpoints/bbc-router+vote@0.9,llm:soft",
     [("regex", False, 0.6), ("checkpoints/bbc-router", True, 0.9), ("llm", False, None)], "soft"),
    ("  regex  ", [("regex", False, None)], "router"),
])
def test_the_grammar(text, want_stages, policy):
    spec = parse_router_spec(text)
    assert stages(text) == want_stages and spec.policy == policy


def test_names_in_reports_use_the_artifacts_last_path_component():
    assert parse_router_spec("runs/x/bbc-router+vote").name == "bbc-router+vote"
    assert parse_router_spec("regex,runs/x/bbc-router@0.9,llm:top2").name == "regex,bbc-router@0.9,llm:top2"
    assert parse_router_spec("global").name == "global"


def test_what_a_spec_needs():
    assert parse_router_spec("regex,llm").needs_llm and parse_router_spec("cascade").needs_llm
    assert not parse_router_spec("regex,DIR").needs_llm
    assert parse_router_spec("DIR+vote").needs_index and not parse_router_spec("DIR:top2").needs_index


def test_an_existing_path_is_taken_whole_even_with_grammar_characters(tmp_path):
    odd = tmp_path / "router,v2@0.5:top2"
    odd.mkdir()
    assert stages(str(odd)) == [(str(odd), False, None)]
    assert parse_router_spec(str(odd)).policy == "router"


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty router spec"),
    ("   ", "empty router spec"),
    ("regex:sometimes", "unknown routing policy 'sometimes' in 'regex:sometimes'; expected one of router, hard"),
    ("regex,", "empty stage in router spec 'regex,'"),
    (",regex", "empty stage in router spec ',regex'"),
    ("regex,,llm", "empty stage"),
    ("regex@1.5", "threshold 1.5 is outside \\[0, 1\\]"),
    ("regex@-0.1", "threshold -0.1 is outside"),
    ("regex@nan", "threshold nan is outside"),
    ("regex@high", "'@high' is not a confidence threshold"),
    ("+vote", "stage '\\+vote' of '\\+vote' names no router"),
    ("@0.5", "stage '@0.5' of '@0.5' names no router"),
])
def test_bad_specs_are_clear_errors(text, message):
    with pytest.raises(RouterSpecError, match=message):
        parse_router_spec(text)


# ---- building ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    return LLMClient(LLMConfig(base_url="http://127.0.0.1:9/v1"))  # never called: building makes no request


def test_registered_routers_are_built_through_the_registry_with_the_given_client(bbc_small, client):
    tax = bbc_small.taxonomy
    assert isinstance(build_router("regex", taxonomy=tax), RegexRouter)
    assert isinstance(build_router("global", taxonomy=tax), GlobalRouter)
    llm = build_router("llm", taxonomy=tax, llm=client)
    assert isinstance(llm, LLMRouter) and llm.client is client and llm.scoring == "choice"
    scored = build_router("llm-logprobs", taxonomy=tax, llm=client)
    assert scored.client is client and scored.scoring == "logprobs"
    hybrid = build_router("cascade", taxonomy=tax, llm=client)
    assert [type(s.router) for s in hybrid.stages] == [RegexRouter, LLMRouter]
    assert hybrid.stages[1].router.client is client


def test_a_comma_list_is_a_cascade_with_its_stage_thresholds(bbc_small, client, small_router):
    tax = bbc_small.taxonomy
    cascade = build_router(f"regex@0.6,{small_router}@0.9,llm", taxonomy=tax, llm=client)
    assert isinstance(cascade, CascadeRouter)
    assert [type(s.router) for s in cascade.stages] == [RegexRouter, LoraRouter, LLMRouter]
    assert [s.threshold for s in cascade.stages] == [0.6, 0.9, None]
    assert cascade.max_llm_calls == 1
    with pytest.raises(Exception, match="at most one LLM stage"):
        build_router("llm,regex,llm-logprobs", taxonomy=tax, llm=client)


def test_a_gated_single_router_abstains_below_its_threshold(bbc_small, small_router):
    gated = build_router(f"{small_router}@1.0", taxonomy=bbc_small.taxonomy)
    plain = build_router(str(small_router), taxonomy=bbc_small.taxonomy)
    texts = [q.query for q in bbc_small.queries]
    assert all(d.abstained for d in gated.route_batch(texts))  # calibrated probabilities stay below 1
    assert not all(d.abstained for d in plain.route_batch(texts))


def test_a_stage_threshold_replaces_the_routers_own_in_both_directions(bbc_small, small_router):
    tax, texts = bbc_small.taxonomy, [q.query for q in bbc_small.queries]
    own = build_router(str(small_router), taxonomy=tax).route_batch(texts)
    assert any(d.abstained for d in own) and not all(d.abstained for d in own)
    for gate in (0.0, 0.5, 0.9):
        gated = build_router(f"{small_router}@{gate}", taxonomy=tax)
        got = [gated.route(t) for t in texts]
        assert [d.abstained for d in got] == [o.confidence < gate for o in own]
        assert [d.scope for d in got if not d.abstained] == [
            max(o.scores, key=o.scores.__getitem__) for o in own if o.confidence >= gate]
        assert all(d.stage == "lora" for d in got if not d.abstained)


def test_a_stage_threshold_does_not_break_a_rule_tie_or_answer_without_a_match():
    from masdr_router import Taxonomy

    tax = Taxonomy.from_dict({"name": "t", "scopes": [
        {"name": "sport", "description": "Sport.", "match": {"c": "s"}, "patterns": [r"\bgoal"]},
        {"name": "business", "description": "Business.", "match": {"c": "b"}, "patterns": [r"\bmarket"]}]})
    gated = build_router("regex@0", taxonomy=tax)
    assert gated.route("a late goal").scope == "sport"
    assert gated.route("goal for the market").abstained  # a tie: the rules cannot tell
    assert gated.route("weather today").abstained


def test_vote_needs_an_index_and_searches_like_the_evaluation(bbc_small, bbc_index, small_router):
    with pytest.raises(RouterSpecError, match="'\\+vote' votes with a global search and needs an index"):
        build_router(f"{small_router}+vote", taxonomy=bbc_small.taxonomy)
    bm25 = SearchConfig(mode="bm25")
    voted = build_router(f"{small_router}+vote", index=bbc_index, search=bm25)
    assert isinstance(voted, RetrievalVoteRouter) and isinstance(voted.base, LoraRouter)
    assert voted.search is bm25 and voted.taxonomy == bbc_index.taxonomy


def test_unknown_names_and_non_artifact_directories(bbc_small, tmp_path):
    tax = bbc_small.taxonomy
    with pytest.raises(RouterSpecError, match="unknown router 'magic': expected one of cascade, global, llm"):
        build_router("magic", taxonomy=tax)
    with pytest.raises(RouterSpecError, match="is a directory but not a router artifact"):
        build_router(str(tmp_path), taxonomy=tax)
    with pytest.raises(RouterSpecError, match="needs a taxonomy or an index"):
        build_router("regex")


def test_systems_that_differ_only_in_policy_share_one_router(bbc_small, small_router):
    systems = build_systems([str(small_router), f"{small_router}:top2", "regex"], taxonomy=bbc_small.taxonomy)
    assert list(systems) == ["bbc-router", "bbc-router:top2", "regex"]
    assert systems["bbc-router"][0] is systems["bbc-router:top2"][0]
    assert [p for _, p in systems.values()] == ["router", "top2", "router"]
    with pytest.raises(RouterSpecError, match="given twice"):
        build_systems(["regex", " regex "], taxonomy=bbc_small.taxonomy)
