"""The `masdr` command, run as a user runs it (a real subprocess): main flow and bad input.

Every bad input ends with one line on stderr that names what is wrong, a non-zero exit, and no
output directory left behind.
"""

import json
import re

import pytest
from conftest import TAXONOMY_YAML, masdr, one_line_error

STABLE_COMMANDS = {"data", "index", "search", "route", "train", "eval", "export", "ask", "llm", "demo",
                   "synth-queries", "serve"}


def test_help_lists_exactly_the_stable_commands():
    p = masdr("--help")
    assert p.returncode == 0
    # the command table's rows: a box border, the command name, its help
    listed = set(re.findall(r"^\S\s+([a-z][a-z-]*)\s{2,}\S", p.stdout, flags=re.MULTILINE))
    assert listed == STABLE_COMMANDS, p.stdout


def test_version():
    from masdr_router import __version__

    p = masdr("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"masdr {__version__}"


def test_build_then_evaluate_writes_the_json_contract(bbc_small_dir, tmp_path):
    idx = tmp_path / "idx"
    p = masdr("index", "build", "--taxonomy", bbc_small_dir / "taxonomy.yaml", "--corpus",
              bbc_small_dir / "corpus.jsonl", "--out", idx, "--chunk-size", 120, "--chunk-overlap", 20)
    assert p.returncode == 0, p.stderr
    assert (idx / "manifest.json").is_file()
    out = tmp_path / "r.json"
    (tmp_path / "search.yaml").write_text("mode: bm25\nglobal_head: 2\n")
    p = masdr("eval", "retrieval", "--index", idx, "--queries", bbc_small_dir / "test.jsonl",
              "--router", "global", "--router", "regex", "--router", "oracle", "--k", 5, "--json", out,
              "--search-config", tmp_path / "search.yaml", "--mode", "dense")
    assert p.returncode == 0, p.stderr
    assert "P@5" in p.stdout and "oracle" in p.stdout
    report = json.loads(out.read_text())
    # the file is read, and a flag overrides it
    assert (report["search"]["mode"], report["search"]["global_head"]) == ("dense", 2)
    assert set(report["systems"]) == {"global", "regex", "oracle"}
    for s in report["systems"].values():
        assert {"p_at_k", "r_at_k", "hit_at_k", "n_queries"} <= set(s)
    assert {"per_scope", "spearman_rho"} <= set(report["dilution"]) and "confusion" in report


def test_route_prints_the_decision(bbc_small_dir):
    p = masdr("route", "--router", "regex", "--taxonomy", bbc_small_dir / "taxonomy.yaml", "--json", "-",
              "Shares in the bank fell as profits slumped")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["scope"] == "business" and d["stage"] == "regex" and not d["abstained"]


def test_broken_taxonomy(write, tmp_path):
    bad = write("t.yaml", TAXONOMY_YAML.replace("name: tech", "name: Tech Desk"))
    corpus = write("c.jsonl", '{"id": "a", "text": "x", "metadata": {}}\n')
    line = one_line_error(masdr("index", "build", "--taxonomy", bad, "--corpus", corpus, "--out", tmp_path / "o"))
    assert "t.yaml: field 'scopes[1].name': must match" in line
    assert not (tmp_path / "o").exists()


def test_corpus_row_with_a_missing_field(write, tmp_path):
    tax = write("t.yaml", TAXONOMY_YAML)
    corpus = write("c.jsonl", '{"id": "a", "text": "x", "metadata": {}}\n{"id": "b", "metadata": {}}\n')
    line = one_line_error(masdr("index", "build", "--taxonomy", tax, "--corpus", corpus, "--out", tmp_path / "o"))
    assert line.endswith("c.jsonl:2: field 'text': missing required field")
    assert not (tmp_path / "o").exists()


def test_unknown_scope_in_queries(bbc_index_dir, write):
    q = write("q.jsonl", '{"query": "rain tomorrow?", "scope": "weather"}\n')
    line = one_line_error(masdr("eval", "retrieval", "--index", bbc_index_dir, "--queries", q, "--router", "global",
                                "--json", q.parent / "r.json"))
    assert "q.jsonl:1: field 'scope': unknown scope 'weather'; taxonomy 'bbc-news' has: business," in line
    assert not (q.parent / "r.json").exists()


def test_empty_query(bbc_small_dir):
    line = one_line_error(masdr("route", "--router", "regex", "--taxonomy", bbc_small_dir / "taxonomy.yaml", "  "))
    assert line == "error: query is empty"


def test_index_built_for_another_taxonomy(bbc_index_dir, write, tmp_path):
    other = write("other.yaml", TAXONOMY_YAML)
    q = write("q.jsonl", '{"query": "a goal", "scope": "sport"}\n')
    line = one_line_error(masdr("eval", "retrieval", "--index", bbc_index_dir, "--queries", q, "--router", "global",
                                "--taxonomy", other))
    assert "was built for taxonomy 'bbc-news'" in line and "not for 'tiny'" in line


def test_existing_output_is_not_clobbered(bbc_small_dir, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "keep.txt").write_text("mine")
    line = one_line_error(masdr("data", "prepare", "bbc", "--out", tmp_path / "o", "--max-docs-per-scope", 2))
    assert "already exists; pass --overwrite" in line
    assert (tmp_path / "o" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("name", ["nope"])
def test_unknown_dataset(name, tmp_path):
    line = one_line_error(masdr("data", "prepare", name, "--out", tmp_path / "o"))
    assert "'nope' is not one of 'bbc', '20ng', 'composite'" in line
    assert not (tmp_path / "o").exists()
