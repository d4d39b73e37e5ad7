"""The LLM side against a real OpenAI-compatible llama.cpp server on loopback (SmolLM2-135M),
plus faults a real server cannot be made to produce on demand (see `faulty_server`)."""

import http.server
import json
import socket
import threading
import time

import pytest

from masdr_router import Taxonomy, read_queries
from masdr_router.llm.client import LLMClient, LLMError, choice_constraint, parse_choice
from masdr_router.llm.config import LLMConfig
from masdr_router.routers.llm import LLMRouter, build_messages


def test_dialects_send_their_own_constraint_fields():
    assert choice_constraint("vllm", ["a", "b"]) == {"extra_body": {"structured_outputs": {"choice": ["a", "b"]}}}
    assert choice_constraint("vllm-legacy", ["a"]) == {"extra_body": {"guided_choice": ["a"]}}
    rf = choice_constraint("openai", ["a", "b"])["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert rf["json_schema"]["schema"]["properties"]["scope"]["enum"] == ["a", "b"]


@pytest.mark.parametrize("dialect, content, message", [
    ("openai", "not json", "not the requested JSON object"),
    ("openai", '{"scope": "weather"}', "'weather' is not one of the 2 allowed labels"),
    ("openai", '{"other": "a"}', "not the requested JSON object"),
    ("vllm", "weather", "'weather' is not one of the 2 allowed labels"),
])
def test_invalid_answers_are_errors(dialect, content, message):
    with pytest.raises(LLMError, match=message):
        parse_choice(dialect, content, ["a", "b"])
    assert parse_choice("vllm", ' "a"\n', ["a", "b"]) == "a"


def test_zero_shot_router_answers_only_valid_scope_names(client, bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    queries = read_queries(bbc_small_dir / "test.jsonl", tax)
    decisions = LLMRouter(tax, client).route_batch([q.query for q in queries])
    assert len(decisions) == len(queries) >= 5
    assert all(d.scope in tax.names for d in decisions)  # 100 %: constrained, never free text
    assert all(d.stage == "llm" and d.trace[0]["scope"] == d.scope for d in decisions)


def test_distribution_is_read_where_the_json_value_begins():
    from types import SimpleNamespace as NS

    from masdr_router.llm.client import choice_distribution

    def pos(token, alts):
        return NS(token=token, top_logprobs=[NS(token=t, logprob=lp) for t, lp in alts])

    content = [pos("{", [("The", -0.5), ("S", -1.0)]), pos('"', [('"', -0.1)]), pos("scope", [("scope", -0.2)]),
               pos('":', [('":', -0.1)]), pos(' "', [(' "', -0.1)]),
               pos("sport", [("sport", -0.4), ("Business", -1.4), ("te", -2.4), ("weather", -0.3)]),
               pos('"}', [('"}', -0.1)])]
    dist = choice_distribution(NS(content=content), ["business", "sport", "tech"], key="scope")
    # "weather" names no scope; case does not matter; the value's first token may be a fragment
    z = 2.718281828 ** -0.4 + 2.718281828 ** -1.4 + 2.718281828 ** -2.4
    assert dist == pytest.approx({"business": 2.718281828 ** -1.4 / z, "sport": 2.718281828 ** -0.4 / z,
                                  "tech": 2.718281828 ** -2.4 / z}, rel=1e-6)
    # before the value, a one-letter token ("S": Shares? sport?) names nothing
    assert choice_distribution(NS(content=content[:1]), ["business", "sport"], key="scope") is None


@pytest.mark.parametrize("labels", ["names", "letters"])
def test_logprob_scoring_gives_a_distribution_over_every_scope(client, bbc_small_dir, labels):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    queries = [q.query for q in read_queries(bbc_small_dir / "test.jsonl", tax)]
    router = LLMRouter(tax, client, scoring="logprobs", labels=labels)
    assert router.labels == labels
    decisions = router.route_batch(queries)
    scored = [d for d in decisions if d.confidence is not None]
    for d in scored:
        assert set(d.scores) == set(tax.names) and sum(d.scores.values()) == pytest.approx(1.0)
        assert d.scope == max(d.scores, key=d.scores.get) and d.confidence == d.scores[d.scope]
    for d in decisions:
        assert d.llm_calls == 1 and d.scope in tax.names
        if d.confidence is None:  # no scope among the top log-probabilities: the plain answer, said so
            assert d.trace[0]["distribution"] == "unavailable" and d.scores == {d.scope: 1.0}
    assert len(scored) >= len(decisions) / 2
    # a real distribution, not a one-hot vote: the small model is unsure about something
    assert min(d.confidence for d in scored) < 0.99


def test_logprob_router_abstains_below_its_threshold(client, bbc_small_dir):
    tax = Taxonomy.from_yaml(bbc_small_dir / "taxonomy.yaml")
    queries = [q.query for q in read_queries(bbc_small_dir / "test.jsonl", tax)]
    scored = LLMRouter(tax, client, scoring="logprobs").route_batch(queries)
    confs = sorted(d.confidence for d in scored if d.confidence is not None)
    # the threshold sits in the widest gap between two confidences, far from batching noise
    gap = max(range(len(confs) - 1), key=lambda i: confs[i + 1] - confs[i])
    cut = (confs[gap] + confs[gap + 1]) / 2
    gated = LLMRouter(tax, client, scoring="logprobs", threshold=cut).route_batch(queries)
    # llama.cpp's batched slots move log-probabilities by a few hundredths between runs, so the
    # threshold sits in the widest gap and the gating is checked on the gated run's own confidences
    for g in gated:
        if g.confidence is not None:
            assert g.abstained == (g.confidence < cut)
            assert set(g.scores) == set(tax.names)  # an abstention keeps the distribution for fallbacks
    assert any(g.abstained for g in gated) and not all(g.abstained for g in gated)


def test_logprob_scoring_refuses_more_scopes_than_letter_codes():
    from masdr_router.errors import MasdrError

    tax = Taxonomy.from_dict({"name": "big", "scopes": [
        {"name": f"s{i}", "description": "d", "match": {"c": i}} for i in range(27)]})
    with pytest.raises(MasdrError, match="at most 26 scopes"):
        LLMRouter(tax, client=object(), scoring="logprobs", labels="letters")
    # "auto" picks letters only when names share their first characters (news-sport, news-tech)
    assert LLMRouter(tax, client=object(), scoring="logprobs").labels == "names"
    shared = Taxonomy.from_dict({"name": "n", "scopes": [
        {"name": f"news-{t}", "description": "d", "match": {"c": t}} for t in ("sport", "tech")]})
    assert LLMRouter(shared, client=object(), scoring="logprobs").labels == "letters"


def test_streaming_yields_text(client):
    parts = list(client.stream([{"role": "user", "content": "Name one colour."}], max_tokens=8))
    assert parts and "".join(parts).strip()


def test_prompt_lists_every_scope_with_its_description(bbc_small):
    system = build_messages(bbc_small.taxonomy, "q")[0]["content"]
    for s in bbc_small.taxonomy.scopes:
        assert f"- {s.name}: {s.description}" in system


# ---- faults --------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "garbage"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "hang":
            time.sleep(5)
            return
        if self.mode == "garbage":
            body = b"<html>this is not json"
        else:  # a well-formed completion whose answer is not a scope
            body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": '{"scope": "weather"}'}}]
                               }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def faulty_server():
    """A fake endpoint, only for faults a real llama.cpp server cannot be made to produce on demand:
    hanging past the client's timeout, answering non-JSON, answering a label outside the enum."""
    servers = []

    def start(mode: str) -> str:
        handler = type("H", (_Handler,), {"mode": mode})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for s in servers:
        s.shutdown()


@pytest.mark.parametrize("fault, message", [
    ("down", "is unreachable"), ("hang", "timed out after 0.5 s"),
    ("garbage", "answered malformed data"), ("unknown-label", "'weather' is not one of"),
])
def test_endpoint_faults_become_abstentions_not_crashes(fault, message, faulty_server, bbc_small, caplog):
    url = f"http://127.0.0.1:{_closed_port()}/v1" if fault == "down" else faulty_server(fault)
    router = LLMRouter(bbc_small.taxonomy, LLMClient(LLMConfig(base_url=url, timeout_s=0.5, max_retries=0)))
    d = router.route("Shares slide as profits fall")
    assert d.abstained and d.stage == "llm"
    assert d.trace and "error" in d.trace[0]
    import re

    assert re.search(message, d.trace[0]["error"]), d.trace[0]["error"]
    assert "LLM router abstains" in caplog.text


def test_api_key_is_read_from_env_and_never_in_config(monkeypatch):
    monkeypatch.delenv("MASDR_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-value")
    assert LLMConfig().api_key() == "sk-openai-value"  # the SDK's own variable is honoured
    monkeypatch.setenv("MASDR_LLM_API_KEY", "sk-secret-value")
    cfg = LLMConfig()
    assert cfg.api_key() == "sk-secret-value"  # ours wins
    assert "sk-secret" not in json.dumps(cfg.to_dict()) and "sk-secret" not in repr(cfg)


def test_endpoint_comes_from_our_variables_then_the_openai_sdks(monkeypatch):
    for name in ("MASDR_LLM_BASE_URL", "OPENAI_BASE_URL", "MASDR_LLM_MODEL", "MASDR_LLM_DIALECT"):
        monkeypatch.delenv(name, raising=False)
    assert LLMConfig.from_env().base_url == "http://127.0.0.1:8080/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9000/v1")
    assert LLMConfig.from_env().base_url == "http://127.0.0.1:9000/v1"
    monkeypatch.setenv("MASDR_LLM_BASE_URL", "http://127.0.0.1:9001/v1")
    monkeypatch.setenv("MASDR_LLM_DIALECT", "vllm")
    cfg = LLMConfig.from_env()
    assert (cfg.base_url, cfg.dialect) == ("http://127.0.0.1:9001/v1", "vllm")


# ---- cascade -------------------------------------------------------------------------------------
def test_cascade_records_which_stage_decided(client, bbc_small):
    from masdr_router import RegexRouter
    from masdr_router.routers.cascade import CascadeRouter, Stage

    tax = bbc_small.taxonomy
    cascade = CascadeRouter(tax, [Stage(RegexRouter(tax), 0.6), Stage(LLMRouter(tax, client))])
    by_regex = cascade.route("Shares and profits slump as the bank bid fails")
    assert by_regex.stage == "regex" and by_regex.scope == "business"
    assert [t["stage"] for t in by_regex.trace] == ["regex"] and by_regex.trace[0]["accepted"]
    by_llm = cascade.route("What happened to the old railway station?")  # no regex pattern matches this
    assert by_llm.stage == "llm" and by_llm.scope in tax.names
    assert [t["stage"] for t in by_llm.trace] == ["regex", "llm"]
    assert not by_llm.trace[0]["accepted"] and by_llm.trace[1]["accepted"]
    assert by_llm.trace[1]["latency_ms"] > 1.0  # a real HTTP round trip to the LLM, timed per stage


def test_cascade_falls_back_to_global_search_when_every_stage_abstains(bbc_small):
    from masdr_router import RegexRouter
    from masdr_router.routers.cascade import CascadeRouter, Stage

    tax = bbc_small.taxonomy
    down = LLMClient(LLMConfig(base_url=f"http://127.0.0.1:{_closed_port()}/v1", timeout_s=1, max_retries=0))
    cascade = CascadeRouter(tax, [Stage(RegexRouter(tax)), Stage(LLMRouter(tax, down))])
    d = cascade.route("What happened to the old railway station?")
    assert d.abstained and d.stage == "global" and d.search_scopes is None
    assert [t["stage"] for t in d.trace] == ["regex", "llm", "global"]
    assert "unreachable" in d.trace[1]["error"]


def test_cascade_allows_at_most_one_llm_call(bbc_small):
    from masdr_router.errors import MasdrError
    from masdr_router.routers.cascade import CascadeRouter, Stage

    llm = LLMRouter(bbc_small.taxonomy, LLMClient(LLMConfig()))
    with pytest.raises(MasdrError, match="at most one LLM stage"):
        CascadeRouter(bbc_small.taxonomy, [Stage(llm), Stage(llm)])


def test_eval_router_cli_with_llm_and_cascade(llm_server, bbc_small_dir, tmp_path, monkeypatch):
    from conftest import masdr

    monkeypatch.setenv("MASDR_LLM_BASE_URL", llm_server.base_url)
    out = tmp_path / "r.json"
    p = masdr("eval", "router", "--router", "llm", "--router", "cascade", "--router", "regex", "--taxonomy",
              bbc_small_dir / "taxonomy.yaml", "--queries", bbc_small_dir / "test.jsonl", "--json", out)
    assert p.returncode == 0, p.stderr
    reports = json.loads(out.read_text())
    for name in ("llm", "cascade", "regex"):
        assert {"accuracy", "macro_f1", "per_scope", "abstain_rate", "latency_ms", "throughput_qps"} <= set(
            reports[name])
    assert reports["llm"]["llm_calls_per_query"] == 1.0 and reports["llm"]["abstain_rate"] == 0.0
    assert reports["regex"]["llm_calls_per_query"] == 0.0
    # the cascade calls the LLM exactly for the queries the rules abstain on
    assert reports["cascade"]["llm_calls_per_query"] == pytest.approx(reports["regex"]["abstain_rate"], abs=1e-3)


@pytest.mark.parametrize("name", ["local", "vllm"])
def test_llm_configs_mirror_the_dataclass_one_to_one(name):
    from dataclasses import fields
    from pathlib import Path

    import yaml

    path = Path(__file__).parent.parent / "configs" / "llm" / f"{name}.yaml"
    assert set(yaml.safe_load(path.read_text())) == {f.name for f in fields(LLMConfig)}
    assert LLMConfig.from_yaml(path).dialect in {"openai", "vllm"}
