"""Shared fixtures: a small real BBC subset and a real MiniLM + FAISS index over it, built once."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

import pytest


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None and not has_cuda:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def bbc_small():
    """30 real BBC articles (6 per desk) with their headline queries."""
    from masdr_router.datasets import load_dataset

    return load_dataset("bbc", max_docs_per_scope=6, seed=0)


@pytest.fixture(scope="session")
def bbc_small_dir(bbc_small, tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "bbc"
    bbc_small.save(out, seed=0)
    return out


@pytest.fixture(scope="session")
def bbc_index(bbc_small):
    from masdr_router import IndexConfig, ScopedIndex

    return ScopedIndex.build(bbc_small.taxonomy, bbc_small.documents, IndexConfig(chunk_size=120, chunk_overlap=20))


@pytest.fixture(scope="session")
def bbc_index_dir(bbc_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("index") / "bbc-index"
    bbc_index.save(out)
    return out


@pytest.fixture(scope="session")
def small_router(bbc_small, tmp_path_factory):
    """A LoRA router trained for two epochs on the 30 small-BBC headlines, exported as bbc-router/: the
    default holdout soup of three runs, so the serving, ONNX and artifact tests load a soup's artifact."""
    from masdr_router import TrainConfig, train_router

    res = train_router(bbc_small.taxonomy, bbc_small.queries, None,
                       TrainConfig(epochs=2, batch_size=16, max_length=32, progress=False, regime="holdout",
                                   min_steps=0, keep_probe=False))
    out = tmp_path_factory.mktemp("routers") / "bbc-router"
    res.router.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def llm_server():
    """The real embedded llama.cpp server (SmolLM2-135M) on 127.0.0.1, shared by the session."""
    from masdr_router.llm.server import LocalLLMServer

    with LocalLLMServer(n_ctx=4096, parallel=2) as srv:
        yield srv


@pytest.fixture(scope="session")
def client(llm_server):
    from masdr_router.llm.client import LLMClient
    from masdr_router.llm.config import LLMConfig

    # generous timeout: two CPU cores shared with the rest of the test run
    return LLMClient(LLMConfig(base_url=llm_server.base_url, timeout_s=300, max_retries=0, concurrency=2))


@pytest.fixture
def write(tmp_path):
    """``write("name.yaml", text)`` -> path of a new file in the test's temp dir."""

    def _write(name: str, text: str):
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return _write


TAXONOMY_YAML = """\
name: tiny
scopes:
  - name: sport
    description: Matches, players and results.
    match: {category: sport}
    patterns: ['\\bgoal', '\\bmatch(es)?\\b']
  - name: tech
    description: Computers and phones.
    match: {category: [tech, science]}
    patterns: ['\\bphones?\\b', '\\bchip']
  - name: all-news
    description: Everything from the news desk.
    match: {source: news}
"""


def masdr(*args, cwd=None, env=None, timeout=600):
    """Run the real ``masdr`` command line in a subprocess, as a user would."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "masdr_router.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line_error(proc):
    """The CLI's error contract: exit status 2 and exactly one ``error: ...`` line on stderr."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]
