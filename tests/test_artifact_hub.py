"""The exported router on the Hugging Face ecosystem's terms: a model card with metadata the Hub
reads, portable names (never a path of the training machine), and Hub repo ids resolved through
``huggingface_hub`` (offline, from its cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from masdr_router import TrainConfig


@pytest.fixture(scope="module")
def exported(bbc_small_dir, tmp_path_factory):
    from masdr_router.training.run import run_training

    out = tmp_path_factory.mktemp("card") / "router"
    cfg = TrainConfig(epochs=1, batch_size=16, max_length=32, progress=False, regime="holdout", min_steps=0)
    metrics = run_training(taxonomy=bbc_small_dir / "taxonomy.yaml", train=bbc_small_dir / "train.jsonl",
                           val=bbc_small_dir / "val.jsonl", test=bbc_small_dir / "test.jsonl", out=out, cfg=cfg)
    return out, metrics


def test_the_model_card_carries_hub_metadata_and_the_evaluation(exported):
    from huggingface_hub import ModelCard

    out, metrics = exported
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "masdr-router" and card.data.pipeline_tag == "text-classification"
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert {"masdr-router", "lora"} <= set(card.data.tags)
    results = {r.metric_name: r for r in card.data.eval_results}
    lora = metrics["evaluation"]["lora"]
    assert results["top-1 macro-F1"].metric_value == pytest.approx(lora["top1_macro_f1"])
    assert results["top-1 accuracy"].metric_value == pytest.approx(lora["top1_accuracy"])
    assert all(r.dataset_split == "test" for r in results.values())
    assert "## Taxonomy" in card.text and "## Intended use" in card.text


def test_no_path_of_the_training_machine_is_left_in_the_artifact(exported):
    out, _ = exported
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "sentence-transformers/all-MiniLM-L6-v2"
    for name in ("README.md", "router_config.json", "adapter/adapter_config.json", "adapter/README.md"):
        text = (out / name).read_text()
        assert "site-packages" not in text and str(out.parent) not in text, name


def test_a_hub_repo_id_loads_from_the_local_hub_cache(exported, tmp_path):
    out, _ = exported
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--bbc-scope-router"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    shutil.copytree(out, repo / "snapshots" / revision)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}

    def route(spec: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "masdr_router.cli", "route", "--router", spec, "--json", "-",
                               "Shares fall as bank profits miss forecasts"], capture_output=True, text=True, env=env)

    ok = route("acme/bbc-scope-router")  # no --taxonomy: the artifact carries it
    assert ok.returncode == 0, ok.stderr
    local = route(str(out))
    assert json.loads(ok.stdout)["scores"] == json.loads(local.stdout)["scores"]
    missing = route("acme/not-cached")
    assert missing.returncode == 2 and "local Hub cache" in missing.stderr


def test_a_pooler_router_is_a_standard_transformers_classifier(bbc_small, tmp_path):
    import numpy as np
    from transformers import pipeline

    from masdr_router import LoraRouter, train_router
    from masdr_router.routers.lora import softmax

    cfg = TrainConfig(epochs=2, batch_size=16, max_length=32, progress=False, regime="holdout", min_steps=0,
                      keep_probe=False, pooling="pooler")
    router = train_router(bbc_small.taxonomy, bbc_small.queries, None, cfg).router
    out = router.save_pretrained(tmp_path / "router")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {str(i): s for i, s in enumerate(bbc_small.taxonomy.names)}
    texts = [q.query for q in bbc_small.queries[:8]]
    classify = pipeline("text-classification", model=str(out), top_k=None)
    got = [{d["label"]: d["score"] for d in row} for row in classify(texts)]
    loaded = LoraRouter.from_pretrained(out)
    # the pipeline's softmax is the router's own probabilities before temperature
    untempered = softmax(loaded.logits(texts), 1.0)
    want = [dict(zip(loaded.labels, row)) for row in untempered]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-5)
    np.testing.assert_allclose(loaded.predict_proba(texts), router.predict_proba(texts), atol=1e-5)
    assert not (out / "encoder").exists()  # one copy of the weights: the standard model at the root
