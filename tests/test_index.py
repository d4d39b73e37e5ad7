"""The scoped index on real data: real MiniLM embeddings, real FAISS shards, real BM25."""

import json

import numpy as np
import pytest

from masdr_router import (
    Document,
    IndexConfig,
    ScopedIndex,
    SearchConfig,
    Taxonomy,
    TaxonomyMismatchError,
    UnknownScopeError,
)
from masdr_router.errors import MasdrError
from masdr_router.retrieval.dense import DenseShard


def test_one_shard_per_scope_plus_a_global_view(bbc_index):
    names = bbc_index.taxonomy.names
    assert sum(len(bbc_index.shard_rows[s]) for s in names) == len(bbc_index)  # BBC desks do not overlap
    for s in names:
        assert all(s in bbc_index.chunk_scopes[r] for r in bbc_index.shard_rows[s])
    assert len(bbc_index.shard_rows[None]) == len(bbc_index)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_scoped_search_returns_only_chunks_of_that_scope(bbc_index, mode):
    hits = bbc_index.search("shares fell after the profit warning", scopes=["tech"], k=10,
                            cfg=SearchConfig(mode=mode))
    assert hits and all("tech" in h.scopes for h in hits)


def test_a_headline_finds_its_own_article(bbc_small, bbc_index):
    q = bbc_small.queries[0]
    hits = bbc_index.search(q.query, k=5)
    assert q.relevant_ids[0] in {h.doc_id for h in hits}


def test_search_over_two_scopes_fuses_both(bbc_index):
    hits = bbc_index.search("the minister announced a new tax on gadgets", scopes=["politics", "tech"], k=10)
    assert {s for h in hits for s in h.scopes} <= {"politics", "tech"}
    assert len({h.row for h in hits}) == len(hits)


def test_unknown_scope_is_an_error(bbc_index):
    with pytest.raises(UnknownScopeError, match="unknown scope 'weather'"):
        bbc_index.search("rain", scopes=["weather"])


def test_a_chunk_in_several_scopes_sits_in_each_shard():
    tax = Taxonomy.from_dict({"name": "overlap", "scopes": [
        {"name": "sport", "description": "Sport.", "match": {"desk": "sport"}},
        {"name": "money", "description": "Money.", "match": {"topic": "money"}}]})
    docs = [Document("a", "the club paid a record transfer fee", {"desk": "sport", "topic": "money"}),
            Document("b", "the striker scored twice", {"desk": "sport", "topic": "play"}),
            Document("c", "banks raised interest rates", {"desk": "business", "topic": "money"})]
    idx = ScopedIndex.build(tax, docs)
    assert idx.shard_rows["sport"].tolist() == [0, 1] and idx.shard_rows["money"].tolist() == [0, 2]
    assert {h.doc_id for h in idx.search("transfer fee", scopes=["money"], k=5)} == {"a", "c"}


def test_save_load_round_trip_gives_identical_results(bbc_index, bbc_index_dir, bbc_small):
    loaded = ScopedIndex.load(bbc_index_dir, taxonomy=bbc_small.taxonomy)
    np.testing.assert_array_equal(loaded.embeddings, bbc_index.embeddings)
    for q in bbc_small.queries[:5]:
        assert [h.chunk_id for h in loaded.search(q.query, [q.scope])] == \
               [h.chunk_id for h in bbc_index.search(q.query, [q.scope])]
    manifest = json.loads((bbc_index_dir / "manifest.json").read_text())
    assert manifest["taxonomy"]["fingerprint"] == bbc_small.taxonomy.fingerprint
    assert manifest["counts"]["chunks"] == len(bbc_index)
    assert manifest["encoder"] == {"name": "minilm", "dim": 384, "max_length": 256, "pooling": "mean",
                                   "normalize": True, "prompts": {"query": "", "document": ""},
                                   "library": "sentence-transformers"}


def test_an_index_built_on_a_gpu_loads_and_searches_on_this_cpu(bbc_index_dir, bbc_small, tmp_path):
    import shutil

    gpu_built = tmp_path / "gpu-index"
    shutil.copytree(bbc_index_dir, gpu_built)
    manifest = json.loads((gpu_built / "manifest.json").read_text())
    manifest["config"]["device"] = "cuda"  # what an index built with --device cuda records
    (gpu_built / "manifest.json").write_text(json.dumps(manifest))
    q = bbc_small.queries[0].query
    loaded = ScopedIndex.load(gpu_built)  # the device is chosen here, at load: auto
    assert [h.chunk_id for h in loaded.search(q, k=5)] == [h.chunk_id for h in
                                                           ScopedIndex.load(bbc_index_dir).search(q, k=5)]
    assert ScopedIndex.load(gpu_built, device="cpu").config.device == "cpu"


def test_loading_for_another_taxonomy_is_refused(bbc_index_dir):
    other = Taxonomy.from_dict({"name": "other", "scopes": [{"name": "x", "description": "X", "match": {"a": 1}}]})
    with pytest.raises(TaxonomyMismatchError, match=r"was built for taxonomy 'bbc-news' \(sha256:\w+\), not for "
                                                    r"'other' \(sha256:\w+\); rebuild it"):
        ScopedIndex.load(bbc_index_dir, taxonomy=other)


def test_a_directory_without_manifest_is_not_an_index(tmp_path):
    with pytest.raises(MasdrError, match=r"is not a scoped index \(no manifest\.json\)"):
        ScopedIndex.load(tmp_path)


def test_failed_save_leaves_nothing_behind(bbc_index, tmp_path, monkeypatch):
    # A disk-full or kill in the middle of writing is simulated by failing the embeddings write.
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        bbc_index.save(tmp_path / "idx")
    assert list(tmp_path.iterdir()) == []


def test_faiss_and_torch_backends_agree(bbc_index):
    q = bbc_index.encode_queries(["new mobile phone sales", "election campaign"])
    rows = bbc_index.shard_rows["tech"]
    f_scores, f_rows = DenseShard(bbc_index.embeddings[rows], backend="faiss").search(q, 5)
    t_scores, t_rows = DenseShard(bbc_index.embeddings[rows], backend="torch").search(q, 5)
    np.testing.assert_array_equal(f_rows, t_rows)
    np.testing.assert_allclose(f_scores, t_scores, rtol=1e-5)


def test_index_config_rejects_unknown_keys_and_bad_values(tmp_path):
    from masdr_router.errors import ValidationError

    (tmp_path / "c.yaml").write_text("chunk_size: 100\nchunk_sise: 5\n")
    with pytest.raises(ValidationError, match=r"c\.yaml: unknown key\(s\) \['chunk_sise'\]"):
        IndexConfig.from_yaml(tmp_path / "c.yaml")
    with pytest.raises(ValueError, match="chunk_overlap < chunk_size"):
        IndexConfig(chunk_size=10, chunk_overlap=10)


def test_configs_dir_mirrors_the_typed_configs():
    from pathlib import Path

    root = Path(__file__).parent.parent / "configs"
    assert IndexConfig.from_yaml(root / "index" / "default.yaml") == IndexConfig()
    assert SearchConfig.from_yaml(root / "search" / "default.yaml") == SearchConfig()


@pytest.mark.gpu
def test_gpu_search_matches_cpu(bbc_index):
    q = bbc_index.encode_queries(["new mobile phone sales"])
    cpu = DenseShard(bbc_index.embeddings, backend="torch", device="cpu").search(q, 10)
    gpu = DenseShard(bbc_index.embeddings, backend="torch", device="cuda").search(q, 10)
    np.testing.assert_array_equal(cpu[1], gpu[1])


def test_recall_guard_keeps_the_global_head_in_scoped_results(bbc_index):
    q = "shares fell after the profit warning"
    top_global = bbc_index.search(q, k=10)[:2]
    guarded = bbc_index.search(q, scopes=["entertainment"], k=10, cfg=SearchConfig(global_head=2))
    assert [h.row for h in guarded[:2]] == [h.row for h in top_global]
    assert len(guarded) == 10 and len({h.row for h in guarded}) == 10
    assert all("entertainment" in h.scopes for h in guarded[2:])


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
def test_in_scope_guard_never_drops_an_in_scope_chunk_that_global_search_found(bbc_index, mode):
    cfg = SearchConfig(mode=mode, global_in_scope=True)
    for q in ["shares fell after the profit warning", "the band's new album tops the chart",
              "minister defends the election plan", "late goal wins the cup tie"]:
        top_global = bbc_index.search(q, k=10, cfg=SearchConfig(mode=mode))
        for scope in bbc_index.taxonomy.names:
            scoped = bbc_index.search(q, scopes=[scope], k=10, cfg=cfg)
            in_scope = [h.row for h in top_global if scope in h.scopes]
            # first, in global order; then the shard's own ranking fills the rest, all in scope
            assert [h.row for h in scoped[: len(in_scope)]] == in_scope
            plain = bbc_index.search(q, scopes=[scope], k=10, cfg=SearchConfig(mode=mode))
            assert {h.row for h in scoped} <= set(in_scope) | {h.row for h in plain}
            assert len({h.row for h in scoped}) == len(scoped) == min(10, len(set(in_scope) | {h.row for h in plain}))
            assert all(scope in h.scopes for h in scoped)


def test_prompts_are_recorded_and_applied_to_queries_and_chunks(bbc_small, tmp_path):
    from masdr_router.retrieval.embedder import Embedder

    docs = bbc_small.documents[:4]
    cfg = IndexConfig(chunk_size=120, chunk_overlap=20, query_prompt="query: ", document_prompt="passage: ")
    index = ScopedIndex.build(bbc_small.taxonomy, docs, cfg)
    index.save(tmp_path / "e5-style")
    manifest = json.loads((tmp_path / "e5-style" / "manifest.json").read_text())
    assert manifest["encoder"]["prompts"] == {"query": "query: ", "document": "passage: "}
    plain = Embedder("minilm", device="cpu")
    loaded = ScopedIndex.load(tmp_path / "e5-style")
    q = "who won the cup final?"
    np.testing.assert_allclose(loaded.encode_queries([q]), plain.encode(["query: " + q]), atol=1e-5)
    assert not np.allclose(loaded.encode_queries([q]), plain.encode([q]), atol=1e-3)
    np.testing.assert_allclose(index.embeddings[:1], plain.encode(["passage: " + index.chunks[0].text]), atol=1e-5)


def test_an_encoder_that_pools_by_cls_is_embedded_by_cls(tmp_path):
    import shutil

    import torch
    from transformers import AutoModel, AutoTokenizer

    from masdr_router.retrieval.embedder import Embedder, resolve_encoder_path

    cls_dir = tmp_path / "cls-encoder"  # MiniLM declared as a [CLS]-pooling model (as BGE is)
    shutil.copytree(resolve_encoder_path("minilm"), cls_dir)
    pooling = json.loads((cls_dir / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (cls_dir / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    emb = Embedder(str(cls_dir), device="cpu")
    assert emb.pooling == "cls"
    tok, model = AutoTokenizer.from_pretrained(cls_dir), AutoModel.from_pretrained(cls_dir).eval()
    with torch.no_grad():
        first = model(**tok(["a late goal"], return_tensors="pt")).last_hidden_state[:, 0]
    np.testing.assert_allclose(emb.encode(["a late goal"]), torch.nn.functional.normalize(first, dim=-1).numpy(),
                               atol=1e-5)


def test_no_chunk_is_longer_than_the_encoder_reads_and_bm25_sees_every_word(bbc_small):
    docs = bbc_small.documents[:5]
    cfg = IndexConfig(chunk_size=200, chunk_overlap=20, max_length=64)  # 200 words would far exceed 64 tokens
    index = ScopedIndex.build(bbc_small.taxonomy, docs, cfg)
    lengths = index.embedder.token_lengths([c.text for c in index.chunks])
    assert max(lengths) <= 64 and len(index.chunks) > len(docs)
    for d in docs:  # every word of every document is in some chunk, in order
        words = d.text.split()
        covered = [w for c in index.chunks if c.doc_id == d.id for w in c.text.split()]
        assert set(words) <= set(covered) and covered[:5] == words[:5] and covered[-5:] == words[-5:]
