"""The error contract, case by case: each bad input, run through the real `masdr` command in a
subprocess, ends with exit status 2, exactly one ``error: …`` line on stderr that says what is wrong
(the fragment each case pins), no traceback, and nothing written where an output was asked for.

Almost every case fails before a model or an index loads; the two that need a real index share the
session's ``bbc_index_dir``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import TAXONOMY_YAML, masdr, one_line_error


@dataclass
class Ctx:
    """What a case builds its command line from: a temp dir, lazy fixtures, and the paths the
    command must not create (``absent``) or must leave as they were (``unchanged``)."""

    tmp: Path
    request: pytest.FixtureRequest
    absent: list[Path] = field(default_factory=list)
    unchanged: dict[Path, str] = field(default_factory=dict)

    def file(self, name: str, text: str) -> Path:
        p = self.tmp / name
        p.write_text(text, encoding="utf-8")
        return p

    @property
    def taxonomy(self) -> Path:
        return self.file("taxonomy.yaml", TAXONOMY_YAML)

    @property
    def index(self) -> Path:
        return self.request.getfixturevalue("bbc_index_dir")

    def out(self, name: str = "out") -> Path:
        """An output path that must still not exist after the failed command."""
        p = self.tmp / name
        self.absent.append(p)
        return p


Args = Callable[[Ctx], list[object]]


def _train(*sets: str) -> Args:
    def args(c: Ctx) -> list[object]:
        queries = c.file("train.jsonl", '{"query": "a late goal won the match", "scope": "sport"}\n')
        return ["train", "--taxonomy", c.taxonomy, "--train", queries, "--out", c.out(),
                *[a for s in sets for a in ("--set", s)]]
    return args


def _search(*extra: object, query: str = "who won the match") -> Args:
    return lambda c: ["search", "--index", c.tmp / "no-index", *extra, query]


def _search_config(text: str) -> Args:
    return lambda c: ["search", "--index", c.tmp / "no-index", "--search-config", c.file("search.yaml", text), "q"]


def _route(*routers: str, query: str = "who won the match", extra: tuple[object, ...] = ()) -> Args:
    def args(c: Ctx) -> list[object]:
        return ["route", *[a for r in routers for a in ("--router", r)], "--taxonomy", c.taxonomy,
                "--json", c.out("decision.json"), *extra, query]
    return args


def _corrupt_index(c: Ctx) -> list[object]:
    idx = c.tmp / "idx"
    shutil.copytree(c.index, idx)
    (idx / "manifest.json").write_text('{"format": "masdr-scoped-index/1", "taxonomy": ', encoding="utf-8")
    return ["index", "info", idx]


def _corrupt_router(c: Ctx) -> list[object]:
    router = c.tmp / "my-router"
    router.mkdir()
    (router / "router_config.json").write_text("{not json", encoding="utf-8")
    return _route(str(router))(c)


def _not_an_index(c: Ctx) -> list[object]:
    (c.tmp / "empty").mkdir()
    return ["index", "info", c.tmp / "empty"]


def _build_into_existing(c: Ctx) -> list[object]:
    out = c.tmp / "idx"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    c.unchanged[out / "keep.txt"] = "mine"
    corpus = c.file("corpus.jsonl", '{"id": "a", "text": "a goal", "metadata": {"category": "sport"}}\n')
    return ["index", "build", "--taxonomy", c.taxonomy, "--corpus", corpus, "--out", out]


def _build_with_config(text: str) -> Args:
    def args(c: Ctx) -> list[object]:
        corpus = c.file("corpus.jsonl", '{"id": "a", "text": "a goal", "metadata": {"category": "sport"}}\n')
        return ["index", "build", "--taxonomy", c.taxonomy, "--corpus", corpus, "--out", c.out("idx"),
                "--config", c.file("index.yaml", text)]
    return args


def _json_into_a_file(c: Ctx) -> list[object]:
    blocker = c.file("afile", "mine")
    c.unchanged[blocker] = "mine"
    return ["route", "--router", "regex", "--taxonomy", c.taxonomy, "--json", blocker / "d.json", "a late goal"]


def _json_onto_a_directory(c: Ctx) -> list[object]:
    target = c.tmp / "d.json"
    target.mkdir()
    (target / "keep.txt").write_text("mine", encoding="utf-8")
    c.unchanged[target / "keep.txt"] = "mine"
    return ["route", "--router", "regex", "--taxonomy", c.taxonomy, "--json", target, "a late goal"]


def _ask(*extra: object) -> Args:
    return lambda c: ["ask", "--index", c.tmp / "no-index", "--json", c.out("answer.json"), *extra,
                      "what happened?"]


# (id, command line, a regex the one error line must match)
CASES: list[tuple[str, Args, str]] = [
    # --- `masdr train --set`: the TrainConfig checks, before any model loads
    ("set-float-for-int", _train("epochs=3.5"), r"--set: field 'epochs': expected an integer, got 3\.5"),
    ("set-string-for-list", _train("target_modules=query"),
     r"field 'target_modules': expected a list of strings, got 'query'"),
    ("set-unknown-key", _train("epochz=2"), r"unknown key\(s\) \['epochz'\]; expected some of \[.*'epochs'"),
    ("set-no-equals", _train("noequals"), r"--set: expects key=value, got 'noequals'"),
    ("set-out-of-range", _train("epochs=0"), r"field 'epochs': must be > 0, got 0"),
    # --- flag values the parser refuses
    ("search-mode-choice", _search("--mode", "foo"), r"'--mode'.*'foo' is not one of 'dense', 'bm25', 'hybrid'"),
    ("search-k-zero", _search("--k", "0"), r"'--k'.*(0 is not in the range x>=1|greater than or equal to 1)"),
    ("ask-tool-protocol", _ask("--router", "regex", "--tool-protocol", "foo"),
     r"'--tool-protocol'.*'foo' is not one of 'auto', 'native', 'json'"),
    ("route-llm-dialect", _route("llm", extra=("--llm-dialect", "foo")),
     r"'--llm-dialect'[^\[]*'foo' is not one of 'openai', 'vllm', 'vllm-legacy'"),
    ("unknown-option", _search("--nope"), r"No such option: --nope"),
    ("missing-required-option", lambda c: ["index", "build", "--taxonomy", c.taxonomy, "--corpus", c.taxonomy],
     r"Missing option '--out'"),
    ("llm-serve-port", lambda c: ["llm", "serve", "--port", "70000"],
     r"'--port'.*(70000 is not in the range|less than or equal to 65535)"),
    # --- flag values the configs refuse
    ("search-global-head", _search("--global-head", "-1"), r"command line: field 'global_head': must be >= 0, got -1"),
    ("llm-url-scheme", _route("llm", extra=("--llm-url", "ftp://x")),
     r"field 'base_url': must be an http\(s\) URL, got 'ftp://x'"),
    # --- config files
    ("config-wrong-type", _search_config("global_in_scope: maybe\n"),
     r"search\.yaml: field 'global_in_scope': expected true or false, got 'maybe'"),
    ("config-not-a-mapping", _search_config("- mode\n- dense\n"),
     r"search\.yaml: expected a mapping of config keys, got list"),
    ("config-malformed-yaml", _search_config("mode: [dense\n"),
     r"search\.yaml:2: invalid YAML: expected ',' or '\]', but got '<stream end>'"),
    ("config-is-a-directory", lambda c: ["search", "--index", c.tmp, "--search-config", c.tmp, "q"],
     r": is a directory, not a config file"),
    ("config-missing", lambda c: ["search", "--index", c.tmp, "--search-config", c.tmp / "nope.yaml", "q"],
     r"nope\.yaml: config file not found"),
    ("index-config-wrong-type", _build_with_config("chunk_size: big\n"),
     r"index\.yaml: field 'chunk_size': expected an integer, got 'big'"),
    ("index-config-unknown-key", _build_with_config("chunk_sise: 100\n"),
     r"index\.yaml: unknown key\(s\) \['chunk_sise'\]"),
    # --- artifacts on disk
    ("index-corrupt-manifest", _corrupt_index,
     r"manifest\.json: not valid JSON .*the scoped index is corrupted, rebuild it"),
    ("router-corrupt-config", _corrupt_router,
     r"router_config\.json: not valid JSON .*the router artifact is corrupted, export it again"),
    ("not-an-index", _not_an_index, r"empty is not a scoped index \(no manifest\.json\); build one with"),
    ("output-exists", _build_into_existing, r"output .*idx already exists; pass --overwrite to replace it"),
    ("json-under-a-file", _json_into_a_file, r"cannot write .*afile/d\.json: .*afile is not a directory"),
    ("json-onto-a-directory", _json_onto_a_directory, r"cannot write .*d\.json: Is a directory"),
    # --- router specs
    ("spec-unknown-router", _route("nosuch"), r"unknown router 'nosuch': expected one of .*regex"),
    ("spec-unknown-policy", _route("regex:sometimes"), r"unknown routing policy 'sometimes' in 'regex:sometimes'"),
    ("spec-bad-threshold", _route("regex@2"), r"stage 'regex@2' of 'regex@2': threshold 2 is outside \[0, 1\]"),
    ("spec-vote-without-index", _route("regex+vote"), r"'\+vote' votes with a global search and needs an index"),
    ("route-router-twice", _route("regex", "llm"),
     r"this command runs one router; write a cascade as one spec \(--router regex,llm\)"),
    ("ask-router-twice", _ask("--router", "regex", "--router", "global"),
     r"write a cascade as one spec \(--router regex,global\)"),
    ("ask-no-router", _ask(), r"give either --router SPEC or --orchestrator"),
    ("eval-same-system-twice",
     lambda c: ["eval", "router", "--router", "regex", "--router", "regex", "--taxonomy", c.taxonomy,
                "--queries", c.file("q.jsonl", '{"query": "a goal", "scope": "sport"}\n'),
                "--json", c.out("r.json")],
     r"router spec 'regex' is given twice"),
    # --- other arguments
    ("prepare-bad-split", lambda c: ["data", "prepare", "bbc", "--out", c.out("bbc"), "--val", "0.6", "--test", "0.5"],
     r"split shares need 0 <= val, test and val \+ test < 1, got val=0\.6, test=0\.5"),
    ("query-empty", _search(query="   "), r"^error: query is empty$"),
    ("query-too-long", _route("regex", query="word " * 1000 + "x"),
     r"query is 5001 characters long; the limit is 4000"),
    ("unknown-scope", lambda c: ["search", "--index", c.index, "--scope", "weather", "rain tomorrow"],
     r"unknown scope 'weather'.*business"),
    # --- `masdr serve`: refused before the port opens
    ("serve-unknown-router", lambda c: ["serve", "--taxonomy", c.taxonomy, "--router", "nosuch"],
     r"unknown router 'nosuch'"),
    ("serve-nothing-to-serve", lambda c: ["serve", "--router", "regex"],
     r"serve needs a taxonomy \(--taxonomy\), an index .* or an exported router artifact"),
    ("serve-keys-unknown-scope", lambda c: ["serve", "--taxonomy", c.taxonomy, "--api-keys", c.file(
        "keys.yaml", "keys:\n  - name: a\n    key_sha256: " + "ab" * 32 + "\n    scopes: [weather]\n")],
     r"keys\.yaml: field 'keys\[0\]': unknown scope 'weather'"),
    ("serve-keys-plain-key", lambda c: ["serve", "--taxonomy", c.taxonomy, "--api-keys", c.file(
        "keys.yaml", "keys:\n  - name: a\n    key: hunter2\n")], r"'keys\[0\]': a key is never written in clear"),
    ("serve-config-range", lambda c: ["serve", "--taxonomy", c.taxonomy, "--max-batch-size", "0"],
     r"'--max-batch-size'.*(0 is not in the range x>=1|greater than or equal to 1)"),
]


@pytest.mark.parametrize(("args", "expected"), [pytest.param(a, e, id=i) for i, a, e in CASES])
def test_bad_input_is_one_error_line(args: Args, expected: str, tmp_path: Path, request: pytest.FixtureRequest):
    ctx = Ctx(tmp_path, request)
    line = one_line_error(masdr(*args(ctx), timeout=180))
    assert re.search(expected, line), line
    for p in ctx.absent:
        assert not p.exists(), f"{p} was written by a failed command"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not leftovers, f"temp files left behind: {leftovers}"
    for p, text in ctx.unchanged.items():
        assert p.read_text(encoding="utf-8") == text


def test_the_catalogue_is_wide():
    assert len(CASES) >= 24
    assert len({i for i, _, _ in CASES}) == len(CASES)
