"""The service, started for real on loopback: every endpoint over HTTP with the real LoRA router, the
real MiniLM + FAISS index and the embedded llama.cpp server; bad input, API keys and scope
entitlements, the LLM endpoint down, hot reload while requests keep coming."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

ADMIN, SPORT, FULL = "admin-key-0123456789", "sport-key-0123456789", "full-key-0123456789"
# a business headline: the router sends it to business, which the sport-only key may not see
BUSINESS_QUERY = "Shares in the bank fell after profits missed forecasts and the dollar weakened"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn server for ``app`` on a free loopback port, in a thread of this process."""

    def __init__(self, app, *, wait_ready: bool = True) -> None:
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait_ready = wait_ready

    def __enter__(self) -> LiveServer:
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                r = httpx.get(f"{self.url}/ready" if self.wait_ready else f"{self.url}/health", timeout=5)
                if r.status_code == 200 or (not self.wait_ready and r.status_code < 500):
                    return self
                if r.json().get("status") == "failed":
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError("the service did not become ready")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def keys_file(tmp: Path) -> Path:
    p = tmp / "keys.yaml"
    p.write_text(f"""keys:
  - name: ops
    key_sha256: {hashlib.sha256(ADMIN.encode()).hexdigest()}
    admin: true
  - name: sport-desk
    key_sha256: {hashlib.sha256(SPORT.encode()).hexdigest()}
    scopes: [sport]
  - name: newsroom
    key_sha256: {hashlib.sha256(FULL.encode()).hexdigest()}
""")
    return p


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def service(small_router, bbc_index_dir, llm_server, tmp_path_factory):
    from masdr_router.serve import ServeConfig, create_app

    tmp = tmp_path_factory.mktemp("serve")
    router_dir = tmp / "router"  # a copy: the reload tests replace it
    shutil.copytree(small_router, router_dir)
    cfg = ServeConfig(router=str(router_dir), index=str(bbc_index_dir), llm_base_url=llm_server.base_url,
                      api_keys_file=str(keys_file(tmp)), max_queries=8, max_body_bytes=20_000, max_wait_ms=20,
                      k=2)
    with LiveServer(create_app(cfg)) as srv:
        srv.tmp, srv.router_dir = tmp, router_dir
        yield srv


def post(srv, path, body, key=FULL, **kw):
    return httpx.post(f"{srv.url}{path}", json=body, headers=auth(key), timeout=300, **kw)


# ---- route ---------------------------------------------------------------------------------------------
def test_route_one_query_returns_the_routers_own_decision(service, small_router, bbc_small):
    from masdr_router.routers.lora import LoraRouter

    r = post(service, "/v1/route", {"query": BUSINESS_QUERY, "top_k": 2, "return_trace": True})
    assert r.status_code == 200, r.text
    res = r.json()["results"][0]
    local = LoraRouter.from_pretrained(small_router).route(BUSINESS_QUERY)
    assert res["scope"] == local.scope and res["stage"] == local.stage
    assert set(res["probabilities"]) == set(bbc_small.taxonomy.names)
    for s, p in local.scores.items():
        assert res["probabilities"][s] == pytest.approx(p, abs=1e-4)
    assert [t["scope"] for t in res["top_k"]] == sorted(local.scores, key=local.scores.get, reverse=True)[:2]
    assert "trace" in res and res["latency_ms"] >= 0


def test_concurrent_requests_are_micro_batched_with_unchanged_results(service, bbc_small):
    queries = [q.query for q in bbc_small.queries[:16]]
    before = len(service.server.config.app.state.service.batcher.batch_sizes)
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda q: post(service, "/v1/route", {"query": q}), queries))
    assert all(r.status_code == 200 for r in got)
    batch = post(service, "/v1/route", {"query": queries[:8]}).json()["results"]
    sizes = service.server.config.app.state.service.batcher.batch_sizes[before:]
    assert max(sizes) > 1, sizes  # 16 concurrent requests did not run one by one
    for r, b in zip(got[:8], batch):
        one = r.json()["results"][0]
        assert one["scope"] == b["scope"]
        for s in one["probabilities"]:
            assert one["probabilities"][s] == pytest.approx(b["probabilities"][s], abs=1e-4)


# ---- search and answer -------------------------------------------------------------------------------
def test_search_routes_then_searches_with_chunks_and_text(service):
    r = post(service, "/v1/search", {"query": BUSINESS_QUERY, "k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["decision"]["scope"] == "business"
    assert len(body["hits"]) == 5 and all(h["text"] and h["chunk_id"] for h in body["hits"])
    assert body["searched_scopes"] == ["business"]
    given = post(service, "/v1/search", {"query": BUSINESS_QUERY, "scope": "tech", "k": 3}).json()
    assert given["decision"] is None and given["searched_scopes"] == ["tech"]
    assert all("tech" in h["scopes"] for h in given["hits"])


def test_answer_cites_only_retrieved_chunks(service):
    r = post(service, "/v1/answer", {"query": BUSINESS_QUERY})
    assert r.status_code == 200, r.text
    body = r.json()
    retrieved = {h["chunk_id"] for h in body["retrieved"]}
    assert isinstance(body["answer"], str) and body["answer"]
    assert set(body["citations"]) <= retrieved
    assert body["llm_calls"] == 1


def test_answer_streams_server_sent_events(service):
    with httpx.stream("POST", f"{service.url}/v1/answer", json={"query": BUSINESS_QUERY, "stream": True},
                      headers=auth(FULL), timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [(block.split("\n")[0][len("event: "):], json.loads(block.split("\n")[1][len("data: "):]))
                  for block in r.read().decode().strip().split("\n\n")]
    kinds = [k for k, _ in events]
    assert kinds[0] == "decision" and kinds[-1] == "answer" and "delta" in kinds
    streamed = "".join(d["text"] for k, d in events if k == "delta")
    assert streamed == events[-1][1]["answer"]


# ---- OpenAI compatibility, with the official SDK ---------------------------------------------------------
def test_openai_sdk_chat_completion_plain_and_streaming(service):
    import openai

    client = openai.OpenAI(base_url=f"{service.url}/v1", api_key=FULL, max_retries=0, timeout=300)
    assert {m.id for m in client.models.list()} == {"masdr-router", "auto"}
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": BUSINESS_QUERY}])
    assert raw.headers["x-masdr-scope"] == "business" and raw.headers["x-masdr-stage"]
    float(raw.headers["x-masdr-confidence"])
    completion = raw.parse()
    assert completion.choices[0].message.content and completion.model == "masdr-router"
    extra = completion.model_extra["masdr"]
    assert set(extra["citations"]) <= {h["chunk_id"] for h in extra["retrieved"]}

    pieces, finish = [], None
    for chunk in client.chat.completions.create(model="masdr-router", stream=True,
                                                messages=[{"role": "user", "content": BUSINESS_QUERY}]):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces).strip() and finish == "stop"

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


# ---- TEI and KServe ------------------------------------------------------------------------------------
def test_tei_predict_single_batch_and_raw_scores(service, small_router):
    from masdr_router.routers.lora import LoraRouter

    one = post(service, "/predict", {"inputs": BUSINESS_QUERY})
    assert one.status_code == 200
    labels = one.json()
    assert labels[0]["label"] == "business" and [x["score"] for x in labels] == sorted(
        (x["score"] for x in labels), reverse=True)
    assert sum(x["score"] for x in labels) == pytest.approx(1.0, abs=1e-4)
    batch = post(service, "/predict", {"inputs": [BUSINESS_QUERY, "The striker scored twice"]}).json()
    assert len(batch) == 2 and all(len(row) == 5 for row in batch)
    raw = post(service, "/predict", {"inputs": BUSINESS_QUERY, "raw_scores": True}).json()
    router = LoraRouter.from_pretrained(small_router)
    logits = dict(zip(router.labels, router.logits([BUSINESS_QUERY])[0]))
    assert {x["label"]: x["score"] for x in raw} == pytest.approx(logits, abs=1e-4)
    pair = post(service, "/predict", {"inputs": [["a", "b"]]})
    assert pair.status_code == 422 and pair.json()["error_type"] == "Validation"


def test_kserve_v2_metadata_readiness_and_infer(service, bbc_small):
    names = bbc_small.taxonomy.names
    assert httpx.get(f"{service.url}/v2/health/live").status_code == 200
    assert httpx.get(f"{service.url}/v2/health/ready").status_code == 200
    meta = httpx.get(f"{service.url}/v2/models/masdr-router").json()
    assert meta["inputs"][0]["datatype"] == "BYTES" and meta["parameters"]["labels"] == names
    assert httpx.get(f"{service.url}/v2/models/masdr-router/ready").status_code == 200
    body = {"id": "r1", "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                    "data": [BUSINESS_QUERY, "The striker scored twice"]}]}
    r = post(service, "/v2/models/masdr-router/infer", body)
    assert r.status_code == 200, r.text
    out = {o["name"]: o for o in r.json()["outputs"]}
    assert r.json()["id"] == "r1" and out["probabilities"]["shape"] == [2, len(names)]
    assert len(out["probabilities"]["data"]) == 2 * len(names) and out["scope"]["data"][0] == "business"
    missing = post(service, "/v2/models/other/infer", body)
    assert missing.status_code == 404 and "error" in missing.json()
    wrong = post(service, "/v2/models/masdr-router/infer", {"inputs": [{"name": "x", "shape": [1],
                                                                        "datatype": "FP32", "data": [1.0]}]})
    assert wrong.status_code == 422 and "BYTES" in wrong.json()["error"]


# ---- bad input: a clear 4xx, never a crash ------------------------------------------------------------
@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/v1/route", {"query": "   "}, 422, "empty"),
    ("/v1/route", {"query": "x" * 4001}, 422, "limit"),
    ("/v1/route", {"query": 42}, 422, "string"),
    ("/v1/route", {"query": ["ok", ""]}, 422, "query[1]"),
    ("/v1/route", {"query": ["q"] * 9}, 413, "limit is 8"),
    ("/v1/route", {"query": "\ud800 lone surrogate"}, 422, "UTF-8"),
    ("/v1/route", {"quer": "typo"}, 422, "query"),
    ("/v1/search", {"query": "goal", "scope": "weather"}, 422, "weather"),
    ("/predict", {"inputs": ""}, 422, "empty"),
])
def test_bad_requests_get_a_4xx_with_a_message(service, path, body, status, words):
    raw = json.dumps(body).encode()  # json.dumps keeps a lone surrogate escaped, as a client would send it
    r = httpx.post(f"{service.url}{path}", content=raw, headers={**auth(FULL), "content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    message = err if isinstance(err, str) else err["message"]
    assert words in message


def test_invalid_utf8_and_oversized_bodies_are_refused(service):
    bad = httpx.post(f"{service.url}/v1/route", content=b'{"query": "caf\xe9"}',
                     headers={**auth(FULL), "content-type": "application/json"})
    assert bad.status_code in (400, 422) and "JSON" in bad.json()["error"]["message"]
    big = post(service, "/v1/route", {"query": "x" * 30_000})
    assert big.status_code == 413 and "20000 bytes" in big.json()["error"]["message"]
    assert httpx.get(f"{service.url}/health").status_code == 200


# ---- keys and entitlements ---------------------------------------------------------------------------------
def test_missing_or_wrong_keys_are_401(service):
    assert httpx.post(f"{service.url}/v1/route", json={"query": "goal"}).status_code == 401
    r = post(service, "/v1/route", {"query": "goal"}, key="not-a-key")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_a_scope_limited_key_never_sees_another_scopes_chunk(service):
    full = post(service, "/v1/search", {"query": BUSINESS_QUERY, "k": 10}).json()
    assert full["decision"]["scope"] == "business"  # the router picks a scope the sport key may not see
    assert any("sport" not in h["scopes"] for h in full["hits"])
    limited = post(service, "/v1/search", {"query": BUSINESS_QUERY, "k": 10}, key=SPORT).json()
    assert limited["hits"] and all("sport" in h["scopes"] for h in limited["hits"])
    assert limited["decision"]["scope"] is None and set(limited["decision"]["probabilities"]) == {"sport"}
    assert "business" not in json.dumps(limited)  # the router's pick is not disclosed either
    routed = post(service, "/v1/route", {"query": BUSINESS_QUERY}, key=SPORT).json()["results"][0]
    assert routed["scope"] is None and set(routed["probabilities"]) == {"sport"}
    asked = post(service, "/v1/search", {"query": BUSINESS_QUERY, "scope": "business"}, key=SPORT)
    assert asked.status_code == 403 and "business" in asked.json()["error"]["message"]
    ans = post(service, "/v1/answer", {"query": BUSINESS_QUERY}, key=SPORT).json()
    assert ans["retrieved"] and all("sport" in h["scopes"] for h in ans["retrieved"])


# ---- operations ----------------------------------------------------------------------------------------
def test_health_ready_and_metrics(service):
    assert httpx.get(f"{service.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{service.url}/ready").json()
    assert ready["status"] == "ready" and ready["router"] == "router" and ready["auth"] is True
    post(service, "/v1/route", {"query": "The striker scored twice"})
    text = httpx.get(f"{service.url}/metrics").text
    assert 'masdr_requests_total{endpoint="/v1/route",status="200"}' in text
    assert "masdr_route_decisions_total{" in text and "masdr_batch_size_bucket" in text
    assert 'masdr_request_latency_seconds_count{endpoint="/v1/route"}' in text


def test_reload_swaps_a_good_artifact_and_refuses_a_bad_one_without_dropping_requests(service, small_router):
    good = service.tmp / "router-v2"
    shutil.copytree(small_router, good, dirs_exist_ok=True)
    bad = service.tmp / "router-wrong-taxonomy"
    shutil.copytree(small_router, bad, dirs_exist_ok=True)
    cfg_path = bad / "router_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["taxonomy"]["fingerprint"] = "0" * len(cfg["taxonomy"]["fingerprint"])  # trained for another taxonomy
    cfg_path.write_text(json.dumps(cfg))

    assert post(service, "/admin/reload", {"router": str(good)}, key=FULL).status_code == 403  # not an admin key
    failures: list[int] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            r = post(service, "/v1/route", {"query": "The striker scored twice"})
            if r.status_code != 200:
                failures.append(r.status_code)

    with ThreadPoolExecutor(4) as pool:
        for _ in range(4):
            pool.submit(hammer)
        ok = post(service, "/admin/reload", {"router": str(good)}, key=ADMIN)
        refused = post(service, "/admin/reload", {"router": str(bad)}, key=ADMIN)
        time.sleep(0.5)
        stop.set()
    assert ok.status_code == 200 and ok.json()["router_spec"] == str(good)
    assert refused.status_code == 409 and "taxonomy" in refused.json()["error"]["message"]
    assert httpx.get(f"{service.url}/ready").json()["router_spec"] == str(good)  # the good one still serves
    assert failures == []
    back = post(service, "/admin/reload", {"router": str(service.router_dir)}, key=ADMIN)
    assert back.status_code == 200


# ---- the LLM endpoint down ----------------------------------------------------------------------------------
@pytest.mark.parametrize("llm_down", ["retrieval_only", "error"])
def test_llm_down_keeps_route_and_search_working(small_router, bbc_index_dir, llm_down):
    from masdr_router.serve import ServeConfig, create_app

    cfg = ServeConfig(router=str(small_router), index=str(bbc_index_dir), llm_down=llm_down,
                      llm_base_url=f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    with LiveServer(create_app(cfg)) as srv:
        assert httpx.post(f"{srv.url}/v1/route", json={"query": BUSINESS_QUERY}).status_code == 200
        assert httpx.post(f"{srv.url}/v1/search", json={"query": BUSINESS_QUERY}).status_code == 200
        r = httpx.post(f"{srv.url}/v1/answer", json={"query": BUSINESS_QUERY}, timeout=120)
        if llm_down == "retrieval_only":
            assert r.status_code == 200 and r.json()["answer"] is None and r.json()["retrieved"]
            assert "unreachable" in r.json()["llm_error"]
        else:
            assert r.status_code == 503 and r.json()["error"]["type"] == "llm_unavailable"
        metrics = httpx.get(f"{srv.url}/metrics").text
        assert 'masdr_llm_failures_total{where="synthesis"} 1.0' in metrics


def test_a_router_that_fails_to_load_leaves_the_service_unready(bbc_index_dir, tmp_path):
    from masdr_router.serve import ServeConfig, create_app

    cfg = ServeConfig(router=str(tmp_path / "no-such-router"), index=str(bbc_index_dir))
    with LiveServer(create_app(cfg)) as srv:
        ready = httpx.get(f"{srv.url}/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "failed"
        assert httpx.get(f"{srv.url}/health").status_code == 200
        r = httpx.post(f"{srv.url}/v1/route", json={"query": "goal"})
        assert r.status_code == 503 and "not ready" in r.json()["error"]["message"]


def test_a_request_over_the_timeout_is_a_504_and_the_service_stays_up(small_router, bbc_index_dir):
    from masdr_router.serve import ServeConfig, create_app

    # answering takes far longer than a millisecond; routing alone is quicker but not that quick
    cfg = ServeConfig(router=str(small_router), index=str(bbc_index_dir), request_timeout_s=0.001)
    with LiveServer(create_app(cfg)) as srv:
        r = httpx.post(f"{srv.url}/v1/search", json={"query": BUSINESS_QUERY})
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"
        assert httpx.get(f"{srv.url}/ready").status_code == 200
