"""Training the LoRA router on a tiny real subset: export/load round trip, resume after a kill,
wandb offline logging, calibration. Real MiniLM, real peft, real accelerate, real wandb."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from wandb_records import read_run

from masdr_router import LabelledQuery, LoraRouter, Taxonomy, TaxonomyMismatchError, TrainConfig, train_router
from masdr_router.errors import ConfigError, ValidationError
from masdr_router.training.calibration import choose_threshold, expected_calibration_error, fit_temperature

FAST = {"epochs": 2, "batch_size": 16, "max_length": 32, "progress": False, "learning_rate": 2e-3}


def kill_after(epoch):
    """An ``on_epoch_end`` callback that interrupts training like a kill once ``epoch`` is checkpointed."""

    def callback(end):
        if end.epoch >= epoch:
            raise KeyboardInterrupt

    return callback


@pytest.fixture(scope="module")
def bbc_queries():
    from masdr_router.datasets import load_dataset

    ds = load_dataset("bbc", max_docs_per_scope=12, seed=1)
    return ds.taxonomy, ds.queries


@pytest.fixture(scope="module")
def trained(bbc_queries):
    tax, qs = bbc_queries
    return train_router(tax, qs, None, TrainConfig(**FAST))


def test_training_records_history_and_calibration(trained):
    assert [h["epoch"] for h in trained.history] == [1, 2]
    assert trained.history[-1]["train_loss"] < trained.history[0]["train_loss"]
    cal = trained.calibration
    assert cal["temperature"] > 0 and 0 <= cal["threshold"] <= 1 + 1e-6
    assert trained.extra["trainable_params"] < 0.05 * trained.extra["total_params"]  # LoRA: a few % at most


def test_export_then_load_gives_identical_predictions(trained, bbc_queries, tmp_path):
    tax, qs = bbc_queries
    out = trained.router.save_pretrained(tmp_path / "router", metrics={"note": "test"})
    loaded = LoraRouter.from_pretrained(out, taxonomy=tax, device="cpu")
    texts = [q.query for q in qs]
    before, after = trained.router.predict_proba(texts), loaded.predict_proba(texts)
    np.testing.assert_allclose(before, after, atol=1e-5)
    assert trained.router.predict(texts) == loaded.predict(texts)
    assert [d.scope for d in trained.router.route_batch(texts)] == [d.scope for d in loaded.route_batch(texts)]
    cfg = json.loads((out / "router_config.json").read_text())
    assert cfg["labels"] == tax.names and cfg["taxonomy"]["fingerprint"] == tax.fingerprint
    assert cfg["temperature"] == trained.router.temperature and cfg["threshold"] == trained.router.threshold
    assert {"torch", "transformers", "peft"} <= set(cfg["versions"]) and cfg["base_model"] == "minilm"
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert (out / "encoder" / "model.safetensors").is_file() and (out / "head.safetensors").is_file()
    assert not list(out.rglob("*.bin")) and not list(out.rglob("*.pt")) and not list(out.rglob("*.pkl"))


def test_a_router_for_another_taxonomy_is_refused(trained, tmp_path):
    out = trained.router.save_pretrained(tmp_path / "router")
    other = Taxonomy.from_dict({"name": "other", "scopes": [{"name": "x", "description": "X", "match": {"a": 1}}]})
    with pytest.raises(TaxonomyMismatchError, match=r"router .* was trained for taxonomy 'bbc-news' .* not for "
                                                    r"'other'"):
        LoraRouter.from_pretrained(out, taxonomy=other)


def test_below_threshold_the_router_abstains_or_offers_top2(trained):
    r = trained.router
    probs = np.array([0.4, 0.35, 0.1, 0.1, 0.05])
    r.threshold = 0.5
    r.below_threshold = "abstain"
    d = r.decide(probs)
    assert d.abstained and d.search_scopes is None
    r.below_threshold = "top2"
    d = r.decide(probs)
    assert d.abstained and d.search_scopes == ["business", "entertainment"]
    r.threshold = 0.3
    assert r.decide(probs).scope == "business"


def test_resume_after_interruption_matches_an_uninterrupted_run(bbc_queries, tmp_path):
    tax, qs = bbc_queries
    cfg = TrainConfig(**{**FAST, "epochs": 3, "early_stopping_patience": 10})
    full = train_router(tax, qs, None, cfg)
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):
        train_router(tax, qs, None, cfg, checkpoint_dir=ckpt, on_epoch_end=kill_after(1))
    assert json.loads((ckpt / "state.json").read_text())["epoch"] == 1
    resumed = train_router(tax, qs, None, cfg, checkpoint_dir=ckpt)
    assert resumed.resumed_from_epoch == 1
    assert [h["val_macro_f1"] for h in resumed.history] == pytest.approx([h["val_macro_f1"] for h in full.history])
    texts = [q.query for q in qs]
    np.testing.assert_allclose(resumed.router.predict_proba(texts), full.router.predict_proba(texts), atol=1e-5)


def test_a_checkpoint_of_another_run_is_not_resumed(bbc_queries, tmp_path):
    tax, qs = bbc_queries
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):
        train_router(tax, qs, None, TrainConfig(**FAST), checkpoint_dir=ckpt, on_epoch_end=kill_after(1))
    other = train_router(tax, qs, None, TrainConfig(**{**FAST, "epochs": 1, "seed": 5}), checkpoint_dir=ckpt)
    assert other.resumed_from_epoch == 0


def test_killed_cli_run_resumes_and_finishes(bbc_queries, tmp_path):
    tax, qs = bbc_queries
    from masdr_router import write_queries

    tax.to_yaml(tmp_path / "t.yaml")
    write_queries(tmp_path / "train.jsonl", qs)
    out = tmp_path / "router"
    cmd = [sys.executable, "-m", "masdr_router.cli", "train", "--taxonomy", str(tmp_path / "t.yaml"), "--train",
           str(tmp_path / "train.jsonl"), "--out", str(out), "--set", "epochs=4", "--set", "batch_size=16",
           "--set", "max_length=32", "--set", "early_stopping_patience=10", "--set", "progress=false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    state = tmp_path / "router.ckpt" / "state.json"
    deadline = time.time() + 300
    while not state.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state.exists(), "no checkpoint was written before the kill"
    assert not (out / "router_config.json").exists()  # no half-written artifact
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "resuming from checkpoint" in done.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_epoch"] >= 1 and len(metrics["history"]) == 4
    assert not (tmp_path / "router.ckpt").exists()  # cleaned up after a successful export


def test_wandb_offline_run_holds_the_metrics(bbc_queries, tmp_path, monkeypatch):
    tax, qs = bbc_queries
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    result = train_router(tax, qs, None, TrainConfig(**{**FAST, "epochs": 1, "report_to": "wandb"}))
    runs = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    history, summary = read_run(runs[0])
    assert history[-1]["val/macro_f1"] == pytest.approx(result.history[-1]["val_macro_f1"])
    assert summary["calibration/temperature"] == pytest.approx(result.calibration["temperature"])


def test_unknown_config_keys_and_bad_values_are_errors(tmp_path):
    (tmp_path / "c.yaml").write_text("epochs: 3\nlearning_rat: 0.1\n")
    with pytest.raises(ValidationError, match=r"unknown key\(s\) \['learning_rat'\]"):
        TrainConfig.from_yaml(tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match=r"field 'pooling': expected one of mean, cls, got 'max'"):
        TrainConfig(pooling="max")


@pytest.mark.parametrize(("values", "message"), [
    ({"epochs": 3.5}, r"field 'epochs': expected an integer, got 3.5"),
    ({"epochs": True}, r"field 'epochs': expected an integer, got True"),
    ({"epochs": "3"}, r"field 'epochs': expected an integer, got '3'"),
    ({"target_modules": "query"}, r"field 'target_modules': expected a list of strings, got 'query'"),
    ({"target_modules": ["query", 3]}, r"field 'target_modules': expected a list of strings"),
    ({"learning_rate": -1.0}, r"field 'learning_rate': must be > 0, got -1.0"),
    ({"val_fraction": 1.0}, r"field 'val_fraction': must be in \(0, 1\), got 1.0"),
    ({"target_abstain_rate": "half"}, r"field 'target_abstain_rate': expected a number or null"),
    ({"progress": "yes"}, r"field 'progress': expected true or false, got 'yes'"),
])
def test_config_values_are_type_checked_never_coerced(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(values, source="cfg.yaml")
    # an integer where a number is expected is widened, not refused
    assert TrainConfig(learning_rate=1).learning_rate == 1.0 and isinstance(TrainConfig(learning_rate=1).learning_rate,
                                                                            float)


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_train_configs_mirror_the_dataclass_one_to_one(name):
    from dataclasses import fields
    from pathlib import Path

    import yaml

    path = Path(__file__).parent.parent / "configs" / "train" / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    assert set(raw) == {f.name for f in fields(TrainConfig)}
    TrainConfig.from_yaml(path)


def test_training_rejects_unknown_scopes(bbc_queries):
    tax, qs = bbc_queries
    with pytest.raises(ValidationError, match="unknown scope 'weather'"):
        train_router(tax, [*qs, LabelledQuery("rain", "weather")], None, TrainConfig(**FAST))


def test_temperature_scaling_cools_overconfident_logits():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 2000)
    logits = np.eye(4)[y] * 2.0 + rng.normal(0, 1.0, (2000, 4))
    from masdr_router.training.calibration import softmax

    t = fit_temperature(logits * 5, y)  # the same logits made 5x over-confident
    assert t == pytest.approx(5 * fit_temperature(logits, y), rel=0.02)
    before = expected_calibration_error(softmax(logits * 5).max(1), softmax(logits * 5).argmax(1) == y)
    after = expected_calibration_error(softmax(logits * 5, t).max(1), softmax(logits * 5, t).argmax(1) == y)
    assert after < before


def test_threshold_reaches_the_target_accuracy_or_abstains_on_everything():
    conf = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 1, 1, 0, 1, 0], bool)
    thr, stats = choose_threshold(conf, correct, target_accuracy=1.0)
    assert thr == 0.9 and stats["abstain_rate"] == 0.5 and stats["accuracy_when_answered"] == 1.0
    thr, stats = choose_threshold(conf, correct, target_accuracy=0.5)
    assert thr == 0.0 and stats["abstain_rate"] == 0.0
    thr, stats = choose_threshold(conf, np.zeros(6, bool), target_accuracy=0.9)
    assert stats["abstain_rate"] == 1.0
    thr, stats = choose_threshold(conf, correct, target_abstain_rate=0.5)
    assert stats["abstain_rate"] == 0.5


def test_onnx_export_matches_torch_and_serves(trained, bbc_queries, tmp_path):
    from masdr_router.training.onnx_export import export_onnx

    _, qs = bbc_queries
    out = trained.router.save_pretrained(tmp_path / "router")
    texts = [q.query for q in qs]
    info = export_onnx(out, texts[:20])
    assert info["max_abs_diff"] < 1e-4 and (out / "router.onnx").is_file()
    assert json.loads((out / "router_config.json").read_text())["onnx"]["file"] == "router.onnx"
    onnx_router = LoraRouter.from_pretrained(out, runtime="onnx")
    np.testing.assert_allclose(onnx_router.predict_proba(texts), trained.router.predict_proba(texts), atol=1e-4)


@pytest.mark.gpu
def test_training_and_inference_use_cuda_when_present(bbc_queries, tmp_path):
    tax, qs = bbc_queries
    result = train_router(tax, qs, None, TrainConfig(**{**FAST, "device": "auto"}))
    assert result.extra["device"] == "cuda" and result.extra["mixed_precision"] in {"bf16", "fp16"}
    out = result.router.save_pretrained(tmp_path / "router")
    texts = [q.query for q in qs]
    on_gpu = LoraRouter.from_pretrained(out, device="cuda").predict_proba(texts)
    on_cpu = LoraRouter.from_pretrained(out, device="cpu").predict_proba(texts)
    assert (on_gpu.argmax(1) == on_cpu.argmax(1)).mean() > 0.95  # bf16 may flip a near-tie
    np.testing.assert_allclose(on_gpu, on_cpu, atol=0.05)


def test_a_run_leaves_the_process_as_it_found_it(bbc_queries):
    """Seeds, deterministic kernels, transformers' progress bars and warning filters are set for the
    run only: a caller's process is the same before and after."""
    import warnings

    import torch
    from transformers.utils import logging as hf_logging

    tax, qs = bbc_queries
    cfg = TrainConfig(**{**FAST, "epochs": 1})
    train_router(tax, qs, None, cfg)  # first imports of torch, peft, sympy ... add their own warning filters
    torch.manual_seed(1234)
    np.random.seed(1234)
    rng, np_rng = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    before = (torch.are_deterministic_algorithms_enabled(), hf_logging.is_progress_bar_enabled(),
              list(warnings.filters))
    train_router(tax, qs, None, cfg)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert (np.random.get_state()[1] == np_rng).all()
    assert (torch.are_deterministic_algorithms_enabled(), hf_logging.is_progress_bar_enabled(),
            list(warnings.filters)) == before
