"""Pseudo-queries from the corpus (masdr_router.querygen, `masdr synth-queries`), on the real BBC
subset: extraction, balancing, deduplication, ambiguity, the contamination check against the test
headlines, provenance, seeded determinism, the CLI, and the LLM path against the real embedded
llama.cpp server (format and provenance only: a 135M model's content proves nothing)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import random
import socket
from pathlib import Path

import pytest
from conftest import masdr, one_line_error

from masdr_router.data import Document, LabelledQuery, read_queries
from masdr_router.errors import ConfigError, UsageError
from masdr_router.llm.client import LLMClient
from masdr_router.llm.config import LLMConfig
from masdr_router.querygen import METHODS, SynthConfig, synthesize_queries, write_pseudo_queries
from masdr_router.querygen.contamination import HeldOutQueries
from masdr_router.querygen.dedup import near_duplicate_groups
from masdr_router.querygen.extract import headings, lead, title
from masdr_router.querygen.keyphrases import keyphrases
from masdr_router.querygen.similarity import JaccardIndex
from masdr_router.querygen.text import contains_phrase, jaccard, normalise, tokens

RULES = ["title", "heading", "lead", "keyphrase"]


def run(ds, docs=None, held_out=(), **cfg):
    return synthesize_queries(ds.taxonomy, ds.documents if docs is None else docs,
                              config=SynthConfig(**{"per_scope": None, **cfg}), held_out=held_out)


def texts_by_doc(result):
    out = {}
    for c in result.candidates:
        out.setdefault(c.doc_id, []).append(c.text)
    return out


# ---- extraction ------------------------------------------------------------------------------------
MARKDOWN = """\
# Replacing the coolant pump

Before you start, drain the cooling circuit. The pump sits behind the left panel.

## Introduction

Nothing here.

Wiring the control panel
========================

Connect the three-phase supply first.

=========================
Commissioning the system
=========================

Run the self-test.
"""


def test_extractors_read_titles_headings_and_the_lead_sentence():
    assert headings(MARKDOWN) == ["Replacing the coolant pump", "Wiring the control panel",
                                  "Commissioning the system"]  # "Introduction" is generic, one word
    assert lead(MARKDOWN) == "Before you start, drain the cooling circuit"
    assert title(MARKDOWN) is None  # a heading line is left to headings()
    assert title("body text", {"title": "Coolant pump manual"}) == "Coolant pump manual"
    assert title("Coolant pump manual\nDrain the circuit first. Then open the panel.") == "Coolant pump manual"
    # a first line that is a sentence, or the only line, is no title
    assert title("Drain the circuit first.\nThen open the panel.") is None
    assert title("Coolant pump manual") is None
    long_lead = lead("One two three four five six seven eight nine ten eleven twelve. Next.", max_words=5)
    assert long_lead == "One two three four five"
    # the title line is not the lead
    assert lead("Coolant pump manual\nDrain the circuit first. Then open the panel.") == "Drain the circuit first"


def test_keyphrases_are_short_phrases_of_their_own_document(bbc_small):
    kp = keyphrases(bbc_small.documents, per_doc=3, min_words=2, max_words=4)
    assert set(kp) == {d.id for d in bbc_small.documents}
    for doc in bbc_small.documents:
        picks = kp[doc.id]
        assert len(picks) == 3, (doc.id, picks)
        for p in picks:
            assert 2 <= len(p.split()) <= 4, p
            assert contains_phrase(doc.text, p), (doc.id, p)  # in the document's own words
        for a, b in itertools.combinations(picks, 2):  # no variant of an earlier pick
            assert not contains_phrase(a, b) and not contains_phrase(b, a), picks
    # ranked against the corpus: a phrase that many documents use is nobody's best keyphrase
    tops = [kp[d.id][0].lower() for d in bbc_small.documents]
    assert len(set(tops)) == len(tops), tops


# ---- balancing -------------------------------------------------------------------------------------
def test_every_scope_gets_its_share_capped_by_what_it_has(bbc_small):
    # tech keeps one article: a small scope next to four of six
    tech = [d for d in bbc_small.documents if d.metadata["category"] == "tech"]
    docs = [d for d in bbc_small.documents if d.metadata["category"] != "tech"] + tech[:1]
    res = run(bbc_small, docs, per_scope=8, methods=["lead", "keyphrase"])
    per = res.report["per_scope"]
    for scope, r in per.items():
        assert r["kept"] == min(8, r["available"]), (scope, r)
        assert r["kept"] == sum(1 for c in res.candidates if c.scope == scope)
    assert 0 < per["tech"]["kept"] == per["tech"]["available"] < 8  # all it has, not nothing, no repeats
    for scope in ("business", "sport"):
        assert per[scope]["kept"] == 8 and per[scope]["unsampled"] == per[scope]["available"] - 8
        # round-robin over documents: 8 picks from 6 articles touch every article, each with its
        # best candidate (the lead) first, and only then a second one (a keyphrase)
        picks = [c for c in res.candidates if c.scope == scope]
        assert len({c.doc_id for c in picks}) == 6
        assert [c.method for c in picks].count("lead") == 6
    assert len({(c.text, c.doc_id) for c in res.candidates}) == len(res.candidates)
    # every candidate is accounted for exactly once
    for r in per.values():
        assert r["generated"] == r["ambiguous"] + r["contaminated"] + r["duplicate"] + r["unsampled"] + r["kept"]
    # no target keeps everything that survived the checks
    assert all(r["kept"] == r["available"] for r in run(bbc_small, docs).report["per_scope"].values())


# ---- deduplication and ambiguity -------------------------------------------------------------------
def test_jaccard_index_finds_exactly_the_brute_force_pairs(bbc_small):
    sentences = [s for d in bbc_small.documents for s in d.text.split(". ")[:6]]
    rng = random.Random(0)
    # near-duplicates to find: a word dropped, or case and punctuation changed
    sentences += [" ".join(w for i, w in enumerate(s.split()) if i != 3) for s in rng.sample(sentences, 20)]
    sentences += [s.upper() + "!" for s in rng.sample(sentences, 10)]
    sets = [tokens(s) for s in sentences]
    for t in (0.5, 0.8, 0.9):
        brute = {(i, j) for i, j in itertools.combinations(range(len(sets)), 2) if jaccard(sets[i], sets[j]) >= t}
        assert set(JaccardIndex(sets, t).pairs()) == brute
        if t == 0.9:  # the planted near-duplicates are there to be found
            assert len(brute) >= 30


def test_near_duplicates_group_by_normalised_text_and_word_jaccard():
    base = "Shares in Cairn Energy have jumped after the firm said an Indian oilfield was larger than thought"
    one_word_more = base + " today"          # 17/18 words shared: Jaccard 0.94
    reworded = base.replace("jumped", "risen").replace("larger", "bigger")  # 15/19: 0.79
    texts = [base, "SHARES in  cairn energy have jumped, after the firm said an Indian oilfield was larger than "
                   "thought!", one_word_more, reworded, "Cup final tonight"]
    assert near_duplicate_groups(texts, 0.9) == [[0, 1, 2], [3], [4]]
    assert jaccard(tokens(base), tokens(reworded)) < 0.9


def test_copies_of_articles_are_kept_once_as_their_first_copy(bbc_small):
    docs = list(bbc_small.documents)
    originals = [docs[0], docs[7]]
    copies = [dataclasses.replace(d, id=d.id + "-copy") for d in originals]
    base = run(bbc_small, methods=["lead", "keyphrase"])
    res = run(bbc_small, docs + copies, methods=["lead", "keyphrase"])
    kept = texts_by_doc(res)
    for orig, copy in zip(originals, copies):
        assert copy.id not in kept, kept.get(copy.id)  # every text of the copy is a duplicate
        assert kept[orig.id] == texts_by_doc(base)[orig.id]  # the first copy keeps its queries
    assert res.report["dropped"]["duplicate"] >= base.report["dropped"]["duplicate"] + 2 * 4
    normalised = [normalise(c.text) for c in res.candidates]
    assert len(set(normalised)) == len(normalised)
    for a, b in itertools.combinations(res.candidates, 2):
        assert jaccard(tokens(a.text), tokens(b.text)) < 0.9, (a.text, b.text)


def test_queries_from_documents_of_two_scopes_are_dropped_as_ambiguous(bbc_small):
    sport = next(d for d in bbc_small.documents if d.metadata["category"] == "sport")
    moved = Document(sport.id + "-as-tech", sport.text, {**sport.metadata, "category": "tech"})
    res = run(bbc_small, [*bbc_small.documents, moved], methods=["lead", "keyphrase"])
    kept = texts_by_doc(res)
    assert sport.id not in kept and moved.id not in kept
    per = res.report["per_scope"]
    assert per["sport"]["ambiguous"] >= 4 and per["tech"]["ambiguous"] >= 4
    assert res.report["dropped"]["ambiguous"] == sum(r["ambiguous"] for r in per.values())
    # a document in two scopes (every article is also "all-bbc") cannot be one label at all
    from masdr_router.taxonomy import Taxonomy

    nested = Taxonomy.from_dict({"name": "nested", "scopes": [
        *bbc_small.taxonomy.to_dict()["scopes"],
        {"name": "all-bbc", "description": "Everything", "match": {"source": "bbc"}}]})
    res = synthesize_queries(nested, bbc_small.documents, config=SynthConfig(methods=["lead"]))
    assert res.candidates == []
    assert res.report["multi_scope"]["ambiguous"] == res.report["generated"] == 30
    with pytest.raises(UsageError, match="no pseudo-query is left"):
        write_pseudo_queries(Path("/nonexistent/never-written.jsonl"), res.candidates)


# ---- contamination ---------------------------------------------------------------------------------
def test_held_out_matching_names_how_a_text_leaks():
    h = HeldOutQueries(["Cairn shares up on new oil find", "Federer claims Dubai crown"], 0.8)
    assert h.match("CAIRN shares up on new oil-find") == "equal"
    assert h.match("Federer claims Dubai crown again") == "contains"
    assert h.match("new oil find") == "contained"
    assert h.match("Cairn shares up on new oil find in India") == "contains"
    assert h.match("shares up on new oil find Cairn") == "similar"  # same words, another order
    assert h.match("Cairn shares down on new oil find") is None      # Jaccard 6/8 = 0.75
    assert h.match("il find") is None                                # words, not characters


def test_no_pseudo_query_leaks_a_test_headline(bbc_small, bbc_small_dir):
    test = read_queries(bbc_small_dir / "test.jsonl", bbc_small.taxonomy)
    test_docs = {i for q in test for i in q.relevant_ids}
    assert len(test) == 5 and len(test_docs) == 5
    res = run(bbc_small, held_out=test)
    assert res.candidates
    for c in res.candidates:
        assert c.doc_id not in test_docs
        for q in test:
            assert normalise(c.text) != normalise(q.query)
            assert not contains_phrase(c.text, q.query) and not contains_phrase(q.query, c.text), (c.text, q.query)
            assert jaccard(tokens(c.text), tokens(q.query)) < 0.8
    rep = res.report
    assert rep["held_out"] == {"queries": 5, "exclude_relevant_docs": True, "excluded_documents": 5}
    # each test article gives at least its lead sentence and keyphrases, all dropped
    assert rep["contaminated_by"]["document"] >= 5 * 2
    assert rep["dropped"]["contaminated"] == sum(rep["contaminated_by"].values())

    # without the document rule, BBC's test articles feed queries again (the text checks still hold)
    leaky = run(bbc_small, held_out=test, exclude_relevant_docs=False)
    assert leaky.report["held_out"]["exclude_relevant_docs"] is False
    assert {c.doc_id for c in leaky.candidates} & test_docs


def test_held_out_texts_are_dropped_even_without_relevant_ids(bbc_small):
    first = run(bbc_small, methods=["lead"])
    leads = [c.text for c in first.candidates[:6]]
    held = [LabelledQuery(leads[0], "business"), LabelledQuery(leads[1] + " says report", "business"),
            LabelledQuery(" ".join(leads[2].split()[:-1]), "business")]
    # the first lead equals a held-out query, the second is contained in one, the third contains one
    res = run(bbc_small, held_out=held, methods=["lead"])
    assert res.report["held_out"]["exclude_relevant_docs"] is False  # auto: no relevant_ids to go by
    kept = {c.text for c in res.candidates}
    assert not kept & set(leads[:3])
    assert set(leads[3:]) <= kept
    assert res.report["contaminated_by"] == {"contained": 1, "contains": 1, "equal": 1}


# ---- provenance, files, determinism -----------------------------------------------------------------
def test_rows_carry_provenance_and_read_back_as_labelled_queries(bbc_small, tmp_path):
    res = run(bbc_small, per_scope=6)
    path = tmp_path / "pseudo.jsonl"
    write_pseudo_queries(path, res.candidates)
    assert read_queries(path, bbc_small.taxonomy) == res.queries  # the extra field is tolerated
    docs = {d.id: d for d in bbc_small.documents}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 30 and {r["scope"] for r in rows} == set(bbc_small.taxonomy.names)
    for r in rows:
        prov = r["provenance"]
        assert set(prov) == {"doc_id", "scope", "method"}
        assert r["relevant_ids"] == [prov["doc_id"]] and r["scope"] == prov["scope"]
        doc = docs[prov["doc_id"]]
        assert bbc_small.taxonomy.scopes_of(doc.metadata) == [r["scope"]]
        assert prov["method"] in {"lead", "keyphrase"}  # BBC bodies have no title line and no headings
        assert contains_phrase(doc.text, r["query"]), r  # extracted, not invented
    assert {m: v["generated"] for m, v in res.report["per_method"].items()} == {
        "title": 0, "heading": 0, "lead": 30, "keyphrase": 90}


def test_same_seed_same_queries_other_seed_other_sample(bbc_small):
    a, b = run(bbc_small, per_scope=5, seed=7), run(bbc_small, per_scope=5, seed=7)
    assert [c.to_row() for c in a.candidates] == [c.to_row() for c in b.candidates]
    c = run(bbc_small, per_scope=5, seed=8)
    assert [x.to_row() for x in c.candidates] != [x.to_row() for x in a.candidates]
    assert c.report["per_scope"] == a.report["per_scope"]  # the same counts, another sample


def test_synth_config_mirrors_its_yaml_and_checks_values(write):
    import yaml

    path = Path(__file__).parent.parent / "configs" / "synth" / "default.yaml"
    assert set(yaml.safe_load(path.read_text())) == {f.name for f in dataclasses.fields(SynthConfig)}
    assert SynthConfig.from_yaml(path) == SynthConfig()
    with pytest.raises(ConfigError, match=r"s\.yaml: field 'methods': unknown method\(s\) \['headline'\]"):
        SynthConfig.from_yaml(write("s.yaml", "methods: [lead, headline]\n"))
    with pytest.raises(ConfigError, match=r"per_scope.*must be >= 1"):
        SynthConfig(per_scope=0)
    with pytest.raises(UsageError, match="method 'llm' needs an LLM endpoint"):
        synthesize_queries(None, [], config=SynthConfig(methods=["llm"]))


# ---- the command line ------------------------------------------------------------------------------
def test_cli_writes_queries_and_a_provenance_report(bbc_small_dir, tmp_path):
    out = tmp_path / "pseudo.jsonl"
    args = ["synth-queries", "--taxonomy", bbc_small_dir / "taxonomy.yaml", "--corpus", bbc_small_dir / "corpus.jsonl",
            "--exclude", bbc_small_dir / "test.jsonl", "--out", out, "--per-scope", 3, "--methods", "lead,keyphrase"]
    p = masdr(*args, "--json", "-", env={"PYTHONHASHSEED": "1"})
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert "pseudo-queries ->" in p.stderr and "kept/generated by method" in p.stderr  # tables on stderr
    corpus_bytes = (bbc_small_dir / "corpus.jsonl").read_bytes()
    assert rep["source"]["corpus_sha256"] == "sha256:" + hashlib.sha256(corpus_bytes).hexdigest()
    assert rep["source"]["held_out_files"][0]["path"].endswith("test.jsonl")
    assert rep["out"] == str(out) and rep["queries"] == 15 and rep["seed"] == 0
    assert rep["config"]["methods"] == ["lead", "keyphrase"] and rep["llm"] == {"used": False}
    assert {s: r["kept"] for s, r in rep["per_scope"].items()} == dict.fromkeys(
        ["business", "entertainment", "politics", "sport", "tech"], 3)
    first = out.read_bytes()
    assert len(read_queries(out)) == 15
    # the same output in another process, whatever its hash seed
    p = masdr(*args, "--overwrite", env={"PYTHONHASHSEED": "12345"})
    assert p.returncode == 0, p.stderr
    assert "contam." in p.stdout and out.read_bytes() == first


def test_cli_bad_input_is_one_error_line(bbc_small_dir, tmp_path, write):
    tax, corpus = bbc_small_dir / "taxonomy.yaml", bbc_small_dir / "corpus.jsonl"
    out = tmp_path / "q.jsonl"
    base = ["synth-queries", "--taxonomy", tax, "--corpus", corpus, "--out", out]
    assert "corpus.jsonl: file not found" in one_line_error(masdr(*base[:4], tmp_path / "corpus.jsonl", *base[5:]))
    assert "unknown method(s) ['bogus']" in one_line_error(masdr(*base, "--methods", "lead,bogus"))
    assert "--per-scope" in one_line_error(masdr(*base, "--per-scope", 0))
    assert "--llm-url given but no LLM is used" in one_line_error(
        masdr(*base, "--llm-url", "http://127.0.0.1:9/v1"))
    bad = write("held.jsonl", '{"query": "Cup final", "scope": "weather"}\n')
    assert "held.jsonl:1: field 'scope': unknown scope 'weather'" in one_line_error(masdr(*base, "--exclude", bad))
    out.write_text("keep me\n")
    assert "already exists" in one_line_error(masdr(*base))
    assert out.read_text() == "keep me\n"
    # an exported endpoint variable alone does not switch the LLM on (no server is there)
    p = masdr(*base, "--overwrite", "--per-scope", 1, env={"MASDR_LLM_BASE_URL": "http://127.0.0.1:9/v1"})
    assert p.returncode == 0, p.stderr
    assert len(read_queries(out)) == 5


# ---- the LLM path ----------------------------------------------------------------------------------
SMALL_LLM = {"llm_max_docs_per_scope": 1, "llm_batch_size": 3, "llm_questions_per_doc": 1, "llm_doc_words": 60,
             "max_words": 12}


def test_llm_questions_come_in_format_with_provenance(bbc_small, bbc_small_dir, client):
    test = read_queries(bbc_small_dir / "test.jsonl", bbc_small.taxonomy)
    test_docs = {i for q in test for i in q.relevant_ids}
    res = synthesize_queries(bbc_small.taxonomy, bbc_small.documents, client=client, held_out=test,
                             config=SynthConfig(per_scope=None, methods=["lead", "llm"], **SMALL_LLM))
    llm = res.report["llm"]
    assert llm["used"] and llm["base_url"] == client.endpoint[0]
    assert llm["documents"] == 5 and llm["batches"] == 2  # one article per desk, three per call
    assert llm["batches_failed"] == 0, llm["errors"]      # the constrained answer always parses
    assert llm["questions"] + llm["questions_rejected"] >= 5  # at least one string per document
    assert res.report["per_method"]["llm"]["generated"] == llm["questions"]
    docs = {d.id: d for d in bbc_small.documents}
    llm_rows = [c.to_row() for c in res.candidates if c.method == "llm"]
    for r in llm_rows:
        assert 2 <= len(r["query"].split()) <= 12
        assert r["provenance"]["method"] == "llm" and r["relevant_ids"] == [r["provenance"]["doc_id"]]
        assert r["provenance"]["doc_id"] not in test_docs  # held-out articles are never sent
        assert bbc_small.taxonomy.scopes_of(docs[r["provenance"]["doc_id"]].metadata) == [r["scope"]]
    assert len({r["provenance"]["doc_id"] for r in llm_rows}) <= 5


def test_llm_endpoint_down_skips_its_batches_not_the_run(bbc_small, bbc_small_dir, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = LLMClient(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", timeout_s=1, max_retries=0))
    test = read_queries(bbc_small_dir / "test.jsonl", bbc_small.taxonomy)
    with caplog.at_level(logging.WARNING, logger="masdr_router.querygen"):
        res = synthesize_queries(bbc_small.taxonomy, bbc_small.documents, client=down, held_out=test,
                                 config=SynthConfig(methods=["lead", "keyphrase", "llm"],
                                                    **{**SMALL_LLM, "llm_max_docs_per_scope": None}))
    llm = res.report["llm"]
    # every article but the 5 held-out ones is sent (no call is spent on questions dropped anyway)
    assert llm["documents"] == 25 and llm["batches"] == 9
    assert llm["batches_failed"] == 9 and llm["questions"] == 0
    assert llm["errors"] == [f"LLM endpoint http://127.0.0.1:{port}/v1 is unreachable"]
    assert sum("skipped" in r.message for r in caplog.records) == 9
    assert res.candidates and {c.method for c in res.candidates} <= {"lead", "keyphrase"}
    assert set(res.report["per_method"]) == {"lead", "keyphrase", "llm"}
    assert res.report["per_method"]["llm"]["generated"] == 0


def test_cli_llm_flag_uses_the_given_endpoint(bbc_small_dir, llm_server, tmp_path, write):
    cfg = write("synth.yaml", "llm_max_docs_per_scope: 1\nllm_batch_size: 5\nllm_questions_per_doc: 1\n"
                              "llm_doc_words: 50\nmax_words: 12\n")
    out = tmp_path / "pseudo.jsonl"
    p = masdr("synth-queries", "--taxonomy", bbc_small_dir / "taxonomy.yaml", "--corpus",
              bbc_small_dir / "corpus.jsonl", "--out", out, "--methods", "lead", "--llm", "--llm-url",
              llm_server.base_url, "--llm-timeout", 300, "--config", cfg, "--json", "-")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["config"]["methods"] == ["lead", "llm"] and rep["config"]["llm_batch_size"] == 5
    assert rep["llm"]["used"] and rep["llm"]["base_url"] == llm_server.base_url and rep["llm"]["batches"] == 1
    assert "LLM:" in p.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["provenance"]["method"] for r in rows} <= {"lead", "llm"}
    assert all(set(r["provenance"]) == {"doc_id", "scope", "method"} for r in rows)
    assert set(METHODS) >= set(rep["per_method"])
