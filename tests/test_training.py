"""Training the LoRA router on a tiny real subset: export/load round trip, resume after a kill,
wandb offline logging, calibration. Real MiniLM, real peft, real accelerate, real wandb."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from wandb_records import read_run

from masdr_router import LabelledQuery, LoraRouter, Taxonomy, TaxonomyMismatchError, TrainConfig, train_router
from masdr_router.errors import ConfigError, ValidationError
from masdr_router.training.calibration import choose_threshold, expected_calibration_error, fit_temperature

# the mechanics of the holdout regime (export, resume, logging) on a few epochs and one run; the regimes,
# the probe guard and the soup of several runs have their own tests below
FAST = {"epochs": 2, "batch_size": 16, "max_length": 32, "progress": False, "learning_rate": 2e-3,
        "regime": "holdout", "min_steps": 0, "keep_probe": False, "holdout_soup": 1}


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
def minilm():
    """The MiniLM encoder's path, tokenizer and frozen model, loaded once for the tests that build runs."""
    from transformers import AutoModel, AutoTokenizer

    from masdr_router.retrieval.embedder import resolve_encoder_path

    path = resolve_encoder_path("minilm")
    return path, AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


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


def test_holdout_trains_the_whole_budget_and_exports_the_last_epoch_unless_told_best(bbc_queries):
    tax, qs = bbc_queries
    # patience 1 would stop 'best' at the first epoch without a validation gain; 'last' ignores it
    last = train_router(tax, qs, None, TrainConfig(**{**FAST, "epochs": 4, "early_stopping_patience": 1}))
    assert [h["epoch"] for h in last.history] == [1, 2, 3, 4] and last.best_epoch == 4
    assert last.val_metrics["macro_f1"] == pytest.approx(last.history[-1]["val_macro_f1"])
    sel = last.extra["selection"]
    assert sel["holdout_choice"] == "last" and sel["epoch_budget"] == 4
    assert last.val_metrics["best_val_epoch"] == 1 + int(np.argmax([h["val_macro_f1"] for h in last.history]))
    best = train_router(tax, qs, None, TrainConfig(**{**FAST, "epochs": 4, "holdout_choice": "best",
                                                     "early_stopping_patience": 10}))
    f1 = [h["val_macro_f1"] for h in best.history]
    assert f1 == pytest.approx([h["val_macro_f1"] for h in last.history])  # the same training, epoch by epoch
    assert best.best_epoch == 1 + int(np.argmax(f1)) and best.val_metrics["macro_f1"] == pytest.approx(max(f1))
    from masdr_router.training.card import regime_line

    metrics = {"regime": "holdout", "n_val": last.n_val, "val": last.val_metrics, **last.extra}
    assert "whole epoch budget (4) and exported the last epoch" in regime_line(metrics)
    assert "best epoch" in regime_line({**metrics, "val": best.val_metrics, **best.extra})


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


def test_a_soup_is_the_average_of_its_runs_weights_exactly(minilm):
    """Two LoRA runs' soup predicts as the plain encoder whose weights are the average of the two runs'
    merged weights, with the average head; and its adapter config says the stacked rank."""
    import copy

    import torch
    from transformers import AutoModel

    from masdr_router.routers.lora.model import RouterModel
    from masdr_router.training.model import build_lora_model, model_soup

    path, tok, _ = minilm
    runs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        m = build_lora_model(path, 3, pooling="mean", head_dropout=0.0, lora_r=4, lora_alpha=8, lora_dropout=0.0,
                             target_modules=["query", "value"], normalize=True)
        with torch.no_grad():  # B starts at zero: give each run an update of its own, as training would
            for n, p in m.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05)
        runs.append(m.eval())
    merged = [copy.deepcopy(m.encoder).merge_and_unload().state_dict() for m in runs]
    reference = RouterModel(AutoModel.from_pretrained(path), 3, pooling="mean", head_dropout=0.0, normalize=True).eval()
    reference.encoder.load_state_dict({k: (merged[0][k] + merged[1][k]) / 2 for k in merged[0]})
    reference.head.load_state_dict({k: (runs[0].head.state_dict()[k] + runs[1].head.state_dict()[k]) / 2
                                    for k in ("weight", "bias")})
    enc = tok(["the bank raised interest rates", "a late goal won the cup final"], return_tensors="pt", padding=True)
    with torch.no_grad():
        alone = runs[0](enc["input_ids"], enc["attention_mask"]).clone()
        expected = reference(enc["input_ids"], enc["attention_mask"])
        soup = model_soup(runs)(enc["input_ids"], enc["attention_mask"])
    assert (alone - expected).abs().max() > 1e-3  # the runs differ: averaging them changes the model
    torch.testing.assert_close(soup, expected, atol=1e-5, rtol=1e-4)
    conf = runs[0].encoder.peft_config["default"]
    assert (conf.r, conf.lora_alpha) == (8, 16)


def test_the_holdout_soup_trains_its_runs_exports_one_model_and_resumes_each_run(bbc_queries, tmp_path):
    from peft import PeftModel
    from transformers import AutoModel

    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.card import model_card

    tax, qs = bbc_queries
    texts = [q.query for q in qs]
    cfg = TrainConfig(**{**FAST, "holdout_soup": 2})
    alone = train_router(tax, qs, None, TrainConfig(**FAST))
    soup = train_router(tax, qs, None, cfg)
    sel = soup.extra["selection"]
    assert sel["soup"]["members"] == 2 and len(sel["soup"]["member_val_macro_f1"]) == 2
    # its first run is the single run; the export is not
    assert sel["soup"]["member_val_macro_f1"][0] == pytest.approx(alone.val_metrics["macro_f1"])
    assert np.abs(soup.router.predict_proba(texts) - alone.router.predict_proba(texts)).max() > 1e-3
    assert soup.router.meta["lora"]["r"] == 2 * cfg.lora_r and soup.router.meta["lora"]["soup_members"] == 2
    assert soup.extra["trainable_params"] == alone.extra["trainable_params"]  # per run
    metrics = {"val": soup.val_metrics, "calibration": soup.calibration, "history": soup.history,
               "n_train": soup.n_train, "n_val": soup.n_val, "train_seconds": soup.train_seconds, **soup.extra}
    card = model_card(soup.router, metrics, cfg)
    assert "soup (weight average) of 2 runs" in card and f"adapter rank {2 * cfg.lora_r}" in card

    # the exported adapter alone, on the published base, is the exported encoder
    out = soup.router.save_pretrained(tmp_path / "router")
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (2 * cfg.lora_r, 2 * cfg.lora_alpha)
    rebuilt = PeftModel.from_pretrained(AutoModel.from_pretrained(resolve_encoder_path("minilm")),
                                        out / "adapter").merge_and_unload().state_dict()
    exported = AutoModel.from_pretrained(out / "encoder").state_dict()
    assert max(float((rebuilt[k] - exported[k]).abs().max()) for k in exported) < 1e-5
    loaded = LoraRouter.from_pretrained(out, taxonomy=tax, device="cpu")
    np.testing.assert_allclose(loaded.predict_proba(texts), soup.router.predict_proba(texts), atol=1e-5)

    # killed in the second run's first epoch: the resumed soup retrains neither the first run nor that epoch
    ends = []

    def record(end):
        ends.append(end.epoch)
        if len(ends) == cfg.epochs + 1:
            raise KeyboardInterrupt

    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(KeyboardInterrupt):
        train_router(tax, qs, None, cfg, checkpoint_dir=ckpt, on_epoch_end=record)
    assert json.loads((ckpt / "soup-member-1" / "state.json").read_text())["epoch"] == 1
    ends.clear()
    resumed = train_router(tax, qs, None, cfg, checkpoint_dir=ckpt, on_epoch_end=ends.append)
    assert [e.epoch for e in ends] == [2]
    np.testing.assert_allclose(resumed.router.predict_proba(texts), soup.router.predict_proba(texts), atol=1e-5)


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
           "--set", "max_length=32", "--set", "early_stopping_patience=10", "--set", "progress=false",
           "--set", "regime=holdout", "--set", "min_steps=0", "--set", "keep_probe=false"]
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
    with pytest.raises(ConfigError, match=r"field 'pooling': expected one of mean, cls, pooler, got 'max'"):
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


def test_a_bare_on_or_off_in_yaml_or_set_is_the_choice_not_a_boolean(tmp_path):
    # YAML 1.1 reads `off` as false: `contrastive: off` must still mean the choice "off"
    from masdr_router.training.run import load_train_config

    (tmp_path / "c.yaml").write_text("contrastive: off\n")
    assert TrainConfig.from_yaml(tmp_path / "c.yaml").contrastive == "off"
    assert load_train_config(None, ["contrastive=on"]).contrastive == "on"
    # only where on/off are the choices: a boolean is still no pooling mode
    with pytest.raises(ConfigError, match=r"field 'pooling': expected one of mean, cls, pooler, got False"):
        TrainConfig.from_dict({"pooling": False})


def test_a_number_in_exponent_form_in_yaml_or_set_is_a_number(tmp_path):
    # YAML 1.1 reads 5e-4 (no dot in the mantissa) as the string '5e-4'; people write learning rates so
    from masdr_router.training.run import load_train_config

    (tmp_path / "c.yaml").write_text("learning_rate: 5e-4\ncontrastive_learning_rate: 2E-5\n")
    cfg = TrainConfig.from_yaml(tmp_path / "c.yaml")
    assert (cfg.learning_rate, cfg.contrastive_learning_rate) == (5e-4, 2e-5)
    assert load_train_config(None, ["learning_rate=3e-4"]).learning_rate == 3e-4
    # only a number's spelling: any other string is still refused, and an integer field takes no exponent
    with pytest.raises(ConfigError, match=r"field 'learning_rate': expected a number, got '5e-4x'"):
        TrainConfig.from_dict({"learning_rate": "5e-4x"})
    with pytest.raises(ConfigError, match=r"field 'epochs': expected an integer, got '1e1'"):
        TrainConfig.from_dict({"epochs": "1e1"})


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
    # between the last confidence answered (0.9) and the first refused (0.8)
    assert thr == pytest.approx(0.85) and stats["abstain_rate"] == 0.5 and stats["accuracy_when_answered"] == 1.0
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
    # a serving install without torch (and without transformers) routes the same
    expected = trained.router.predict_proba(texts[:5]).tolist()
    code = ("import sys, json; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from masdr_router.routers.lora import LoraRouter\n"
            f"r = LoraRouter.from_pretrained({str(out)!r}, runtime='onnx')\n"
            f"print(json.dumps(r.predict_proba({texts[:5]!r}).tolist()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(json.loads(proc.stdout), expected, atol=1e-4)


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


@pytest.mark.gpu
def test_a_frozen_head_the_guard_exports_sits_on_its_encoder_s_device():
    from transformers import AutoModel

    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.probe import LinearProbe
    from masdr_router.training.trainer import probe_model

    frozen = AutoModel.from_pretrained(resolve_encoder_path("minilm")).to("cuda").eval()
    probe = LinearProbe(weight=np.zeros((3, 384), np.float32), bias=np.zeros(3, np.float32), C=1.0, normalize=True)
    model = probe_model(frozen, probe, 3, "mean")
    assert {p.device.type for p in model.parameters()} == {"cuda"}


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


def test_each_run_trains_with_its_own_precision_whatever_accelerator_came_before(bbc_queries):
    """SetFit, the transformers Trainer or an earlier run leave accelerate's process-wide state behind;
    a run still gets the device and precision it asks for instead of raising or inheriting them."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    tax, qs = bbc_queries
    AcceleratorState._reset_state(reset_partial_state=True)  # the process as another library finds it...
    Accelerator(cpu=True, mixed_precision="bf16")  # ...and what that library leaves behind
    used = []
    for precision in ("auto", "bf16"):  # "auto" is fp32 on a CPU
        run, moved = _one_epoch(TrainConfig(**{**FAST, "device": "cpu", "mixed_precision": precision}), tax, qs[:16])
        used.append((run.accelerator.mixed_precision, moved > 0))
    assert used == [("no", True), ("bf16", True)]


# ---- regimes, LP-FT and the probe guard ------------------------------------------------------------
# a short contrastive stage: the regime tests check that it runs where it should, not what it learns
# (so it is not cross-validated against the run without it: that check has its own test)
SMALL = {"batch_size": 16, "max_length": 32, "progress": False, "epochs": 3, "min_steps": 0, "max_epochs": 3,
         "contrastive_max_steps": 10, "contrastive_check": False}


@pytest.mark.parametrize("choice", ["best", "one_se"])
def test_small_data_takes_the_cross_validated_path_and_refits_on_everything(bbc_queries, tmp_path, choice):
    tax, qs = bbc_queries
    result = train_router(tax, qs, None, TrainConfig(**SMALL, keep_probe=False, cv_choice=choice))
    assert result.extra["regime"] == "cv" and "< cv_below=1000" in result.extra["regime_reason"]
    # every labelled query is used for the final model; none is spent on a validation split
    assert (result.n_train, result.n_val) == (len(qs), 0)
    assert result.router.meta["train"]["n_train"] == len(qs)
    cv = {h["epoch"]: h["cv_macro_f1"] for h in result.history}
    # after a contrastive stage 0 epochs (the probe on the tuned encoder) is a candidate too
    assert list(cv) == [0, 1, 2, 3]
    best = max(cv, key=lambda e: (cv[e], -e))
    if choice == "best":
        assert result.best_epoch == best
    else:  # the fewest epochs within one standard error of the best
        rule = result.extra["selection"]["cv_choice"]
        assert rule["best"] == best and result.best_epoch <= best
        assert cv[result.best_epoch] >= rule["best_score"] - rule["se"] - 1e-9
    # the out-of-fold predictions at the chosen epoch are what was calibrated and reported
    assert result.val_metrics["macro_f1"] == pytest.approx(cv[result.best_epoch])
    assert result.calibration["temperature"] > 0
    sel = result.extra["selection"]
    assert sel["model"] == "lora" and sel["folds"] == 3 and len(sel["fold_val_macro_f1"]) == 3
    # small data: the contrastive stage ran in every fold (on that fold's training queries) and for the refit
    assert [f["contrastive_steps"] for f in sel["fold_contrastive"]] == [10, 10, 10]
    assert sel["contrastive"]["contrastive_steps"] == 10 and sel["contrastive"]["contrastive_weights"] == "all"
    # the stage tuned the base encoder, so the adapters alone would not reproduce the model: only the
    # merged encoder is exported, and it loads to the same predictions
    assert result.router.meta["lora"]["base_weights"] == "contrastive-tuned"
    out = result.router.save_pretrained(tmp_path / "router")
    assert not (out / "adapter").exists() and (out / "encoder" / "model.safetensors").is_file()
    texts = [q.query for q in qs]
    np.testing.assert_allclose(LoraRouter.from_pretrained(out).predict_proba(texts),
                               result.router.predict_proba(texts), atol=1e-5)
    from masdr_router.training.card import model_card

    metrics = {"calibration": result.calibration, "history": result.history, "train_seconds": 1.0,
               "n_train": result.n_train, "n_val": result.n_val, "val": result.val_metrics, **result.extra}
    assert "a contrastive stage (10 steps" in model_card(result.router, metrics, TrainConfig(**SMALL, keep_probe=False))


def test_few_shot_trains_the_whole_budget_and_exports_the_weight_space_ensemble(bbc_queries):
    """After a contrastive stage (few queries per scope) the out-of-fold scores of a few dozen queries
    choose epochs no better than chance, so by default nothing is chosen: the whole budget is trained and
    the export is the weight-space ensemble (alpha few_shot_alpha) with the strong probe it started from.
    Without the stage the cv regime chooses the epoch count and exports the fine-tuned model."""
    from masdr_router.training.card import model_card

    tax, qs = bbc_queries
    cfg = TrainConfig(**SMALL, keep_probe=False)
    few = train_router(tax, qs, None, cfg)
    sel = few.extra["selection"]
    assert sel["epoch_rule"] == "budget" and few.best_epoch == sel["epoch_budget"] == 3
    assert sel["alpha"] == 0.25 and sel["contrastive"]["contrastive_steps"] > 0
    cv = {h["epoch"]: h["cv_macro_f1"] for h in few.history}
    assert few.val_metrics["macro_f1"] == pytest.approx(cv[3])  # the held-out scores are the ensemble's
    metrics = {"calibration": few.calibration, "history": few.history, "train_seconds": 1.0,
               "n_train": few.n_train, "n_val": few.n_val, "val": few.val_metrics, **few.extra}
    card = model_card(few.router, metrics, cfg)
    assert "few-shot: fine-tuned for the whole epoch budget (3)" in card and "WiSE-FT, alpha 0.25" in card
    plenty = train_router(tax, qs, None, TrainConfig(**SMALL, keep_probe=False, contrastive_below=1))
    sel = plenty.extra["selection"]
    assert sel["epoch_rule"] == "best" and sel["alpha"] == 1.0 and not sel["contrastive"]


def test_the_folds_drop_a_contrastive_stage_that_loses_to_the_run_without_it(bbc_queries):
    """With contrastive: auto the run without the stage is cross-validated too; the stage is dropped
    only when that run leads out of fold by more than contrastive_check_margin_se bootstrap SEs. A stage
    at a learning rate that wrecks the encoder must be dropped, and the refit then trains without it."""
    from masdr_router.training.card import model_card
    from masdr_router.training.trainer import choose_stage

    tax, qs = bbc_queries
    # bbc_queries has 12 queries per scope: below the default contrastive_check_from, so it is lowered
    wrecking = {**SMALL, "contrastive_check": True, "contrastive_check_from": 8, "contrastive_learning_rate": 0.5,
                "contrastive_max_steps": 20, "keep_probe": False, "learning_rate": 2e-3}
    result = train_router(tax, qs, None, TrainConfig(**wrecking))
    sel = result.extra["selection"]
    check = sel["contrastive_check"]
    assert not check["kept"]
    assert check["margin_se"] == TrainConfig().contrastive_check_margin_se == 2.0
    assert check["without_stage_cv_macro_f1"] - check["with_stage_cv_macro_f1"] > check["margin_se"] * check["se"]
    assert choose_stage(TrainConfig(), check["with_stage_cv_macro_f1"], check["without_stage_cv_macro_f1"],
                        check["se"]) is False
    # the refit and the reported folds are the run without the stage: no stage, the epoch count chosen
    assert sel["contrastive"] == {} and not any(f for f in sel["fold_contrastive"])
    assert sel["epoch_rule"] == "best" and sel["alpha"] == 1.0 and result.router.meta["lora"]["base_weights"] == \
        "pretrained"
    assert result.val_metrics["macro_f1"] == pytest.approx(check["without_stage_cv_macro_f1"], abs=1e-4)
    metrics = {"calibration": result.calibration, "history": result.history, "train_seconds": 1.0,
               "n_train": result.n_train, "n_val": result.n_val, "val": result.val_metrics, **result.extra}
    assert "the contrastive stage was dropped" in model_card(result.router, metrics, TrainConfig(**wrecking))


def test_cross_validation_may_choose_the_tuned_encoder_without_fine_tuning(bbc_queries):
    """0 epochs is a candidate after the contrastive stage: SetFit's model, the tuned encoder with a
    probe on its features. With a learning rate too small to move anything every epoch count scores
    what 0 epochs scores, and a tie goes to the fewest epochs."""
    from masdr_router.training.card import model_card
    from masdr_router.training.contrastive import tuned_features
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import encode

    tax, qs = bbc_queries
    cfg = TrainConfig(**SMALL, keep_probe=False, learning_rate=1e-9, cv_choice="best")
    result = train_router(tax, qs, None, cfg)
    sel = result.extra["selection"]
    assert result.best_epoch == 0 and sel["cv_epochs"] == 0 and sel["model"] == "lora"
    assert result.history[0]["epoch"] == 0 and "train_loss" not in result.history[0]
    # the exported model is a probe fitted on the refit's tuned encoder, over all the queries
    router = result.router
    data = encode(cfg, tax.names, qs, router.tokenizer, router.model.encoder)
    tuned = tuned_features(router.model, data.ids, data.mask, device="cpu")
    probe = fit_probe(tuned, data.y.numpy(), len(tax.names))
    np.testing.assert_allclose(router.logits([q.query for q in qs]), probe.logits(tuned), atol=1e-3)
    metrics = {"calibration": result.calibration, "history": result.history, "train_seconds": 1.0,
               "n_train": result.n_train, "n_val": result.n_val, "val": result.val_metrics, **result.extra}
    assert "without classification fine-tuning (cross-validation chose 0 epochs)" in model_card(router, metrics, cfg)


def test_auto_regime_holds_out_when_a_validation_file_is_given_or_data_is_plentiful(bbc_queries):
    from masdr_router.training.trainer import choose_regime

    cfg = TrainConfig()
    assert choose_regime(cfg, 595, has_val=False)[0] == "cv"
    assert choose_regime(cfg, 595, has_val=True)[0] == "holdout"
    assert choose_regime(cfg, 1441, has_val=False)[0] == "holdout"
    assert choose_regime(TrainConfig(regime="cv"), 5000, has_val=True)[0] == "cv"
    # thresholds for retrieval want out-of-fold predictions on every query, whatever the size
    assert choose_regime(cfg, 1441, has_val=False, for_retrieval=True)[0] == "cv"
    assert choose_regime(cfg, 1441, has_val=True, for_retrieval=True)[0] == "holdout"
    assert choose_regime(TrainConfig(regime="holdout"), 1441, has_val=False, for_retrieval=True)[0] == "holdout"
    tax, qs = bbc_queries
    result = train_router(tax, qs[:40], qs[40:], TrainConfig(**SMALL))
    assert result.extra["regime"] == "holdout" and (result.n_train, result.n_val) == (40, len(qs) - 40)
    assert result.extra["selection"]["contrastive"] == {}  # auto: the stage is for the small-data regime


def test_lp_ft_the_head_starts_as_the_frozen_probe(bbc_queries, minilm):
    """LoRA's B matrices start at zero, so a model whose head is initialised from the probe
    predicts exactly what the probe predicts before its first step."""
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import build_run, encode

    tax, qs = bbc_queries
    cfg = TrainConfig(**SMALL)
    path, tok, frozen = minilm
    data = encode(cfg, tax.names, qs, tok, frozen)
    probe = fit_probe(data.features, data.y.numpy(), len(tax.names))
    run = build_run(cfg, tax.names, path, tok, data, None, key="t", epochs=1, head_init=probe)
    assert probe.normalize and run.unwrapped.normalize  # both on the unit-length sentence embeddings
    np.testing.assert_allclose(run.predict_logits(data.ids, data.mask), probe.logits(data.features), atol=1e-3)
    cold = build_run(cfg, tax.names, path, tok, data, None, key="t", epochs=1, head_init=None)
    assert not np.allclose(cold.predict_logits(data.ids, data.mask), probe.logits(data.features), atol=1e-1)


def test_a_run_s_initialisation_depends_on_its_seed_not_on_what_ran_before(bbc_queries, minilm):
    """The contrastive check's run without the stage must be the run contrastive=off would train, and a
    refit must not depend on how many folds preceded it: so building a run draws its adapters from its
    own seed, whatever the global generator went through, and leaves that generator where it was."""
    import torch

    from masdr_router.training.model import trainable_state
    from masdr_router.training.trainer import build_run, encode

    tax, qs = bbc_queries
    cfg = TrainConfig(**SMALL)
    path, tok, frozen = minilm
    data = encode(cfg, tax.names, qs[:16], tok, frozen)

    def adapters(seed: int, global_seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(global_seed)
        torch.rand(1000)  # whatever ran before: other folds, the other candidate, a probe
        run = build_run(TrainConfig(**{**SMALL, "seed": seed}), tax.names, path, tok, data, None, key="t",
                        epochs=1)
        after = torch.rand(1)
        torch.manual_seed(global_seed)
        torch.rand(1000)
        assert torch.equal(after, torch.rand(1))  # the global stream goes on as if nothing was drawn
        return {n: t for n, t in trainable_state(run.unwrapped).items() if "lora_A" in n or n.startswith("head")}

    with torch.random.fork_rng():  # this test's own draws leave the session's generator alone
        first, second, other = adapters(0, 1), adapters(0, 2), adapters(1, 1)
    assert first.keys() == second.keys() and any("lora_A" in n for n in first)
    assert all(torch.equal(first[n], second[n]) for n in first)
    assert not any(torch.equal(first[n], other[n]) for n in first)


def test_the_default_probe_sees_directions_not_lengths_and_the_standardised_one_is_kept_for_the_pooler():
    from masdr_router.training.probe import NORMALIZED_C, fit_probe

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-1, 1, (20, 8)), rng.normal(1, 1, (20, 8))]) + 3.0
    y = np.repeat([0, 1], 20)
    lengths = rng.uniform(0.2, 5.0, (40, 1))  # the same directions at other lengths: the same logits
    p = fit_probe(x, y, 2)
    assert p.normalize and p.C == NORMALIZED_C
    np.testing.assert_allclose(p.logits(x * lengths), p.logits(x), atol=1e-5)
    raw = fit_probe(x, y, 2, normalize=False)
    assert not np.allclose(raw.logits(x * lengths), raw.logits(x), atol=1e-2)
    assert TrainConfig().normalize and not TrainConfig(pooling="pooler").normalize
    assert TrainConfig(pooling="pooler", features="normalized").normalize


def test_the_contrastive_stage_pulls_a_scope_s_queries_together_and_the_head_starts_on_the_tuned_encoder(
        bbc_queries, minilm):
    """Same-scope pairs are pulled to cosine 1 and other-scope pairs pushed to 0, so after the stage
    the gap between a query's mean cosine to its own scope and to the others widens; LP-FT then
    starts the head from a probe on the tuned features, not on the frozen ones."""
    import contextlib

    import torch

    from masdr_router.training.contrastive import contrastive_stage, tuned_features
    from masdr_router.training.model import build_lora_model
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import build_run, encode

    tax, qs = bbc_queries
    cfg = TrainConfig(**SMALL)
    path, tok, frozen = minilm
    data = encode(cfg, tax.names, qs, tok, frozen)
    y = data.y.numpy()

    def scope_gap(features):
        f = features / np.linalg.norm(features, axis=1, keepdims=True)
        cos, same = f @ f.T, (y[:, None] == y[None, :]) & ~np.eye(len(y), dtype=bool)
        return cos[same].mean() - cos[y[:, None] != y[None, :]].mean()

    model = build_lora_model(path, len(tax.names), pooling="mean", head_dropout=0.1, lora_r=16, lora_alpha=32,
                             lora_dropout=0.1, target_modules=["query", "key", "value", "dense"])
    before = scope_gap(tuned_features(model, data.ids, data.mask, device="cpu"))
    np.testing.assert_allclose(before, scope_gap(data.features), atol=1e-4)  # LoRA starts as the identity
    stats = contrastive_stage(model, data.ids, data.mask, data.y, iterations=20, learning_rate=1e-4, batch_size=32,
                              max_steps=30, seed=0, device="cpu", autocast=contextlib.nullcontext)
    after = scope_gap(tuned_features(model, data.ids, data.mask, device="cpu"))
    assert stats["contrastive_steps"] == 30 and stats["contrastive_loss_last"] < stats["contrastive_loss_first"]
    assert after > before + 0.02, (before, after)  # 30 steps: 0.075 -> 0.111

    # all weights (SetFit's way, the default): the base encoder moves, the adapters stay at their
    # start for classification fine-tuning, and the base is frozen again afterwards
    model = build_lora_model(path, len(tax.names), pooling="mean", head_dropout=0.1, lora_r=16, lora_alpha=32,
                             lora_dropout=0.1, target_modules=["query", "key", "value", "dense"])
    start = {n: p.detach().clone() for n, p in model.encoder.named_parameters()}
    stats = contrastive_stage(model, data.ids, data.mask, data.y, iterations=20, learning_rate=2e-5, batch_size=32,
                              max_steps=30, seed=0, device="cpu", autocast=contextlib.nullcontext, weights="all")
    moved = {n for n, p in model.encoder.named_parameters() if not torch.equal(p, start[n])}
    assert moved and not any("lora_" in n for n in moved) and stats["contrastive_weights"] == "all"
    assert all(("lora_" in n) == p.requires_grad for n, p in model.encoder.named_parameters())
    assert scope_gap(tuned_features(model, data.ids, data.mask, device="cpu")) > before + 0.02

    frozen_probe = fit_probe(data.features, y, len(tax.names))
    run = build_run(TrainConfig(**{**SMALL, "contrastive_max_steps": 30}), tax.names, path, tok, data, None,
                    key="t", epochs=1, head_init=frozen_probe, contrastive=True)
    tuned = tuned_features(run.unwrapped, data.ids, data.mask, device="cpu")
    np.testing.assert_allclose(run.predict_logits(data.ids, data.mask),
                               fit_probe(tuned, y, len(tax.names)).logits(tuned), atol=1e-3)
    assert not np.allclose(run.predict_logits(data.ids, data.mask), frozen_probe.logits(data.features), atol=1e-1)


def test_contrastive_rows_labelled_pairs_the_labelled_queries_and_classification_keeps_the_pseudo_queries(
        bbc_queries, minilm):
    """With contrastive_rows: labelled the stage pairs only the labelled queries, so a few of them and
    hundreds of pseudo-queries make a short stage; the pseudo-queries still train the head. When every
    training query is a pseudo-query (a cold start), the stage pairs them all."""
    from masdr_router.training.trainer import build_run, encode

    tax, qs = bbc_queries
    path, tok, frozen = minilm
    # two labelled queries a scope; the pseudo-queries span three scopes, so a cold start has pairs of both kinds
    labelled, pseudo = qs[::6], [q for i, q in enumerate(qs) if i % 6][:30]

    def config(rows):  # an uncapped stage with few pairs a query, so its length counts the paired queries
        return TrainConfig(**{**SMALL, "contrastive_max_steps": 600, "contrastive_iterations": 1,
                              "contrastive_batch_size": 4, "contrastive_rows": rows})

    steps = {}
    for rows in ("all", "labelled"):
        cfg = config(rows)
        data = encode(cfg, tax.names, labelled, tok, frozen) + encode(cfg, tax.names, pseudo, tok, frozen,
                                                                      weight=0.1, pseudo=True)
        run = build_run(cfg, tax.names, path, tok, data, None, key="t", epochs=1, contrastive=True)
        steps[rows] = run.contrastive["contrastive_steps"]
        assert run.contrastive["contrastive_queries"] == {"all": 40, "labelled": 10}[rows]  # for the model card
        assert len(run.train[0]) == 40  # classification trains on every row either way
    # SetFit's sampling: 2 x iterations x n pairs, 4 a batch
    assert steps == {"all": 2 * 40 // 4, "labelled": 2 * 10 // 4}
    cfg = config("labelled")
    cold = encode(cfg, tax.names, pseudo, tok, frozen, pseudo=True)
    assert build_run(cfg, tax.names, path, tok, cold, None, key="t", epochs=1,
                     contrastive=True).contrastive["contrastive_steps"] == 2 * 30 // 4


def test_corpus_per_epoch_sample_draws_a_fresh_share_of_the_pseudo_queries_at_their_expected_weight(
        bbc_queries, minilm):
    """With corpus_per_epoch: sample an epoch trains on every labelled query and corpus_weight x N
    pseudo-queries drawn afresh, each raised to weight 1, so a pseudo-query keeps its expected weight
    in 1/corpus_weight times fewer rows an epoch; 'all' keeps every row each epoch in the order runs
    have always drawn, and a cold start trains on all its rows either way."""
    import torch

    from masdr_router.training.trainer import build_run, encode, train_one_epoch

    tax, qs = bbc_queries
    path, tok, frozen = minilm
    labelled, pseudo = qs[::6], [q for i, q in enumerate(qs) if i % 6][:40]  # 10 labelled, 40 pseudo

    def run_for(per_epoch, rows=None):
        cfg = TrainConfig(**{**SMALL, "corpus_weight": 0.25, "corpus_per_epoch": per_epoch})
        data = rows or (encode(cfg, tax.names, labelled, tok, frozen)
                        + encode(cfg, tax.names, pseudo, tok, frozen, weight=0.25, pseudo=True))
        return build_run(cfg, tax.names, path, tok, data, None, key="t", epochs=2)

    sample = run_for("sample")
    assert sample.steps_per_epoch == 2  # (10 labelled + 0.25 x 40) rows, 16 a batch
    drawn = []
    for epoch in range(2):
        order, weights = sample.epoch_rows(epoch, torch.Generator().manual_seed(epoch))
        assert sorted(order[order < 10].tolist()) == list(range(10))  # every labelled query, once
        pseudo_rows = order[order >= 10]
        assert len(pseudo_rows) == 10 and len(set(pseudo_rows.tolist())) == 10
        drawn.append(set(pseudo_rows.tolist()))
        # weight 1 each: 10 drawn of 40 at weight 1 is 40 x 0.25 in expectation, as with 'all'
        assert torch.allclose(weights[order], torch.ones(20))
    assert drawn[0] != drawn[1]  # a fresh sample each epoch
    train_one_epoch(sample, 0)
    assert {int(st["step"]) for st in sample.optimizer.state.values()} == {2}  # the epoch's optimizer steps

    every = run_for("all")
    assert every.steps_per_epoch == 4  # 50 rows
    order, weights = every.epoch_rows(3, torch.Generator().manual_seed(3))
    assert order.tolist() == torch.randperm(50, generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(weights, every.train[3])
    cfg = TrainConfig(**{**SMALL, "corpus_weight": 0.25, "corpus_per_epoch": "sample"})
    cold = run_for("sample", encode(cfg, tax.names, pseudo, tok, frozen, pseudo=True))
    assert cold.steps_per_epoch == 3 and len(cold.epoch_rows(0, torch.Generator().manual_seed(0))[0]) == 40


def test_contrastive_pairs_cover_every_pair_before_repeating_one():
    """SetFit's sampling: all unordered pairs (a query with itself too), same-scope and other-scope
    lists cycled to iterations x n each and interleaved."""
    from masdr_router.training.contrastive import sample_pairs

    y = np.array([0, 0, 0, 1, 1, 2])
    pairs = sample_pairs(y, 4, np.random.default_rng(0))
    assert len(pairs) == 2 * 4 * len(y) and pairs[0::2, 2].all() and not pairs[1::2, 2].any()
    same = {(i, j) for i in range(6) for j in range(i, 6) if y[i] == y[j]}  # 6 + 3 + 1 = 10
    other = {(i, j) for i in range(6) for j in range(i, 6) if y[i] != y[j]}  # 11
    pos = [tuple(sorted(p[:2])) for p in pairs if p[2] == 1]
    neg = [tuple(sorted(p[:2])) for p in pairs if p[2] == 0]
    assert set(pos[:len(same)]) == same and set(neg[:len(other)]) == other
    assert pos[len(same):2 * len(same)] == pos[:len(same)]  # then the same order again
    assert not (sample_pairs(np.zeros(4, dtype=int), 2, np.random.default_rng(0))[:, 2] == 0).any()


def test_the_weight_space_ensemble_runs_from_the_probe_to_the_fine_tuned_model(bbc_queries, tmp_path):
    """finetune_alpha exports WiSE-FT's interpolation: at 0 the model fine-tuning started from (the
    probe on the encoder), at 1 the fine-tuned one, in between LoRA's update scaled by alpha and the
    head interpolated. One epoch, so every alpha trains the same weights (a seeded run)."""
    import torch

    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.trainer import encode, prepare_splits

    tax, qs = bbc_queries
    one = {**FAST, "epochs": 1}
    runs = {a: train_router(tax, qs, None, TrainConfig(**one, finetune_alpha=a)) for a in (0.0, 0.5, 1.0)}
    texts = [q.query for q in qs]
    # alpha 0: exactly the probe on the frozen encoder, though an epoch of fine-tuning ran
    cfg = TrainConfig(**one)
    train, _ = prepare_splits(qs, None, cfg)
    from transformers import AutoModel

    frozen = AutoModel.from_pretrained(resolve_encoder_path("minilm")).eval()
    data = encode(cfg, tax.names, train, runs[0.0].router.tokenizer, frozen)
    probe = fit_probe(data.features, data.y.numpy(), len(tax.names))
    frozen_features = encode(cfg, tax.names, qs, runs[0.0].router.tokenizer, frozen).features
    np.testing.assert_allclose(runs[0.0].router.logits(texts), probe.logits(frozen_features), atol=1e-3)
    assert not np.allclose(runs[1.0].router.logits(texts), probe.logits(frozen_features), atol=1e-2)

    def weights(router):
        return {n: p.detach() for n, p in router.model.named_parameters() if "lora_B" in n or n.startswith("head.")}

    half, full = weights(runs[0.5].router), weights(runs[1.0].router)
    for n, w in half.items():
        start = torch.from_numpy(probe.weight if n == "head.weight" else probe.bias) if n.startswith("head.") else 0
        torch.testing.assert_close(w, 0.5 * full[n] + 0.5 * start, atol=1e-5, rtol=1e-4)
    assert any(float(w.abs().max()) > 0 for n, w in full.items() if "lora_B" in n)  # the adapters did move
    # the ensemble is the exported model: it saves and loads as such
    out = runs[0.5].router.save_pretrained(tmp_path / "wise")
    np.testing.assert_allclose(LoraRouter.from_pretrained(out).predict_proba(texts),
                               runs[0.5].router.predict_proba(texts), atol=1e-5)
    with pytest.raises(ConfigError, match="finetune_alpha"):
        TrainConfig(finetune_alpha=0.5, head_init="random")


def test_finetune_weights_all_tunes_the_encoder_at_its_own_rate_and_exports_it_merged(bbc_queries, tmp_path):
    """finetune_weights: all trains the encoder's own weights beside the adapters and the head, at
    encoder_learning_rate; the artifact is the merged encoder alone (the adapters would not apply to the
    published base), and the weight-space ensemble interpolates the encoder's weights too."""
    import torch
    from transformers import AutoModel

    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.trainer import make_optimizer

    tax, qs = bbc_queries
    one = {**FAST, "epochs": 1, "finetune_weights": "all", "encoder_learning_rate": 1e-4}
    runs = {a: train_router(tax, qs, None, TrainConfig(**one, finetune_alpha=a)) for a in (0.5, 1.0)}
    outs = {a: r.router.save_pretrained(tmp_path / f"alpha-{a}") for a, r in runs.items()}
    for out in outs.values():  # the merged encoder alone
        assert not (out / "adapter").exists() and (out / "encoder" / "model.safetensors").is_file()
    pretrained, full, half = (AutoModel.from_pretrained(path).state_dict()[
        "encoder.layer.0.attention.self.query.weight"] for path in (
        resolve_encoder_path("minilm"), outs[1.0] / "encoder", outs[0.5] / "encoder"))
    # the encoder's own weights moved under the adapters (a merge alone would show the adapters' update),
    # and the half-way ensemble is half-way between the pretrained and the fine-tuned encoder
    own = dict(runs[1.0].router.model.named_parameters())
    own = next(p for n, p in own.items() if n.endswith("layer.0.attention.self.query.base_layer.weight"))
    assert float((own.detach() - pretrained).abs().max()) > 1e-4
    torch.testing.assert_close(half, 0.5 * full + 0.5 * pretrained, atol=1e-6, rtol=1e-5)
    router = runs[1.0].router
    assert router.meta["lora"]["base_weights"] == "fine-tuned"
    assert runs[1.0].extra["trainable_params"] > 0.9 * runs[1.0].extra["total_params"]
    texts = [q.query for q in qs]
    np.testing.assert_allclose(LoraRouter.from_pretrained(outs[1.0]).predict_proba(texts),
                               router.predict_proba(texts), atol=1e-5)
    # the encoder's own weights at encoder_learning_rate, the adapters and the head at learning_rate
    cfg = TrainConfig(**one)
    scales = {id(p): g["lr_scale"] for g in make_optimizer(router.model, cfg).param_groups for p in g["params"]}
    for n, p in router.model.named_parameters():
        if p.requires_grad:
            base_weight = n.startswith("encoder.") and "lora_" not in n
            assert scales[id(p)] == pytest.approx(1e-4 / cfg.learning_rate if base_weight else 1.0), n


def test_the_guard_exports_the_probe_when_it_validates_better(bbc_queries, tmp_path):
    from masdr_router.training.card import model_card

    tax, qs = bbc_queries
    # a LoRA run that cannot learn (random head, a vanishing learning rate) against a fitted probe
    crippled = {**SMALL, "regime": "holdout", "head_init": "random", "learning_rate": 1e-9, "epochs": 1,
                "contrastive": "off"}
    kept = train_router(tax, qs, None, TrainConfig(**crippled))
    sel = kept.extra["selection"]
    assert sel["model"] == "probe" and sel["probe_val_macro_f1"] > sel["lora_val_macro_f1"]
    out = kept.router.save_pretrained(tmp_path / "router")
    assert not (out / "adapter").exists()  # the frozen encoder with the probe as its head
    loaded = LoraRouter.from_pretrained(out)
    texts = [q.query for q in qs]
    np.testing.assert_allclose(loaded.predict_proba(texts), kept.router.predict_proba(texts), atol=1e-5)
    metrics = {"calibration": kept.calibration, "history": kept.history, "train_seconds": 1.0,
               "n_train": kept.n_train, "n_val": kept.n_val, "val": kept.val_metrics, **kept.extra}
    card = model_card(kept.router, metrics, TrainConfig(**crippled))
    assert "the guard kept it" in card and "bootstrap SE" in card
    assert sel["guard"]["probe"]["lead"] > sel["guard_margin_se"] * sel["guard"]["probe"]["se"] > 0
    off = train_router(tax, qs, None, TrainConfig(**{**crippled, "keep_probe": False}))
    assert off.extra["selection"]["model"] == "lora"


def test_the_guard_ignores_a_lead_within_the_noise_of_a_few_held_out_queries(bbc_queries):
    """A frozen head that wins by a query or two of a few dozen is not better (Django docs at 8 per
    scope: the probe led out of fold 0.200 to 0.184, was exported, and lost 0.04 on test)."""
    from masdr_router import Embedder
    from masdr_router.training.card import selection_line
    from masdr_router.training.probe import fit_probe
    from masdr_router.training.selection import guard_evidence
    from masdr_router.training.trainer import choose_export, macro_f1

    tax, qs = bbc_queries
    y = np.array([tax.names.index(q.scope) for q in qs])
    x = Embedder("minilm", device="cpu", max_length=64).encode([q.query for q in qs])
    fit, held = np.arange(len(qs)) % 2 == 0, np.arange(len(qs)) % 2 == 1
    probe = fit_probe(x[fit], y[fit], len(tax.names)).logits(x[held]).argmax(1)
    true = y[held]
    right, wrong = np.flatnonzero(probe == true), np.flatnonzero(probe != true)
    assert len(right) >= 10 and len(wrong) >= 2  # the probe is a real model here, not a coin
    # the fine-tuned model disagrees with the probe on five queries: three the probe has right, two it
    # has wrong; net, one query in the probe's favour ...
    close = probe.copy()
    close[right[:3]] = (true[right[:3]] + 1) % len(tax.names)
    close[wrong[:2]] = true[wrong[:2]]
    # ... or it gets half of the probe's right answers wrong
    far = probe.copy()
    far[right[::2]] = (true[right[::2]] + 1) % len(tax.names)
    n = len(tax.names)
    evidence_close = guard_evidence(true, {"lora": close, "probe": probe}, n)
    for lora, expected in ((close, "lora"), (far, "probe")):
        evidence = guard_evidence(true, {"lora": lora, "probe": probe}, n)
        assert evidence["probe"]["lead"] == pytest.approx(macro_f1(true, probe, n) - macro_f1(true, lora, n))
        assert evidence["probe"]["lead"] > 0
        assert choose_export(TrainConfig(), evidence) == expected
        # without the margin any lead exports the probe: the margin is what keeps the close model
        assert choose_export(TrainConfig(guard_margin_se=0), evidence) == "probe"
        assert choose_export(TrainConfig(keep_probe=False), evidence) == "lora"
    # the model card says why the probe's lead was not enough
    sel = {"model": "lora", "guard": evidence_close, "guard_margin_se": 1.0, "guard_heads": ["probe"]}
    assert "within 1 bootstrap SE" in selection_line({"regime": "cv", "selection": sel})
    assert "within" not in selection_line({"regime": "cv", "selection": {**sel, "guard_heads": []}})


def test_the_centroid_head_is_scored_always_and_exported_only_when_allowed(bbc_queries, tmp_path):
    """The centroid head is a linear layer over raw pooled features that predicts exactly the cosine
    nearest scope centroid of the sentence embeddings."""
    from masdr_router import Embedder

    tax, qs = bbc_queries
    crippled = {**SMALL, "head_init": "random", "learning_rate": 1e-9, "epochs": 1, "max_length": 64,
                "contrastive": "off"}
    default = train_router(tax, qs, None, TrainConfig(**crippled))
    assert default.extra["selection"]["model"] != "centroid" and "centroid_cv_macro_f1" in default.extra["selection"]
    only = train_router(tax, qs, None, TrainConfig(**crippled, frozen_heads=["centroid"]))
    sel = only.extra["selection"]
    assert sel["model"] == "centroid" and sel["centroid_cv_macro_f1"] > sel["lora_cv_macro_f1"]
    texts = [q.query for q in qs]
    emb = Embedder("minilm", device="cpu", max_length=64).encode(texts)
    y = np.array([tax.names.index(q.scope) for q in qs])
    centroids = np.stack([emb[y == i].mean(0) for i in range(len(tax.names))])
    cosine = emb @ (centroids / np.linalg.norm(centroids, axis=1, keepdims=True)).T
    loaded = LoraRouter.from_pretrained(only.router.save_pretrained(tmp_path / "router"))
    assert (loaded.predict_proba(texts).argmax(1) == cosine.argmax(1)).all()


def test_thresholds_for_retrieval_keep_recall_at_global_and_are_stored(bbc_small, bbc_index, bbc_small_dir, tmp_path):
    from masdr_router import SearchConfig, build_router
    from masdr_router.training.run import run_training
    from masdr_router.training.thresholds import best_threshold

    # known answer: route the confident queries whose scoped search is right, never lose recall
    conf = np.array([0.95, 0.8, 0.7, 0.4])
    routed_p, routed_r = np.array([1.0, 1.0, 1.0, 0.0]), np.array([1.0, 1.0, 1.0, 0.0])
    global_p, global_r = np.full(4, 0.6), np.array([1.0, 1.0, 0.0, 1.0])
    fit = best_threshold(conf, routed_p, routed_r, global_p, global_r)
    assert fit["threshold"] == pytest.approx(0.55) and fit["routed_rate"] == 0.75
    assert fit["r_at_k"] >= fit["global_r_at_k"] and fit["p_at_k"] > fit["global_p_at_k"]

    bbc_index.save(tmp_path / "idx")
    cfg = TrainConfig(**{**FAST, "keep_probe": True})
    metrics = run_training(taxonomy=bbc_small_dir / "taxonomy.yaml", train=bbc_small_dir / "train.jsonl",
                           val=bbc_small_dir / "val.jsonl", out=tmp_path / "router", cfg=cfg, index=tmp_path / "idx",
                           search=SearchConfig(global_head=1, global_in_scope=True))
    fit = metrics["retrieval_thresholds"]
    assert fit["router"]["r_at_k"] >= fit["router"]["global_r_at_k"]
    assert fit["vote"]["r_at_k"] >= fit["vote"]["global_r_at_k"] and fit["vote"]["beta"] in (0.5, 1.0, 2.0)
    assert fit["search"]["global_head"] == 1
    router = LoraRouter.from_pretrained(tmp_path / "router")
    assert router.threshold == pytest.approx(fit["router"]["threshold"])
    assert router.meta["threshold_objective"] == "retrieval"
    voted = build_router(f"{tmp_path / 'router'}+vote", index=bbc_index)
    assert (voted.threshold, voted.beta) == (pytest.approx(fit["vote"]["threshold"]), fit["vote"]["beta"])
    assert "chosen for retrieval" in (tmp_path / "router" / "README.md").read_text()


def test_with_an_index_and_no_validation_file_thresholds_are_fitted_out_of_fold(bbc_small_dir, bbc_index_dir,
                                                                                 tmp_path):
    """Above cv_below the automatic regime holds out a validation split -- unless the thresholds are
    to be chosen for retrieval: then every query gets an out-of-fold prediction to fit them on."""
    from masdr_router import SearchConfig
    from masdr_router.training.run import run_training

    cfg = TrainConfig(**{**FAST, "regime": "auto", "cv_below": 10, "cv_folds": 2, "contrastive": "off"})
    common = {"taxonomy": bbc_small_dir / "taxonomy.yaml", "train": bbc_small_dir / "train.jsonl", "cfg": cfg}
    n_train = len((bbc_small_dir / "train.jsonl").read_text().splitlines())
    plain = run_training(**common, out=tmp_path / "plain")
    assert plain["regime"] == "holdout"
    fitted = run_training(**common, out=tmp_path / "fitted", index=bbc_index_dir,
                          search=SearchConfig(global_head=1, global_in_scope=True))
    assert fitted["regime"] == "cv"
    assert fitted["retrieval_thresholds"]["n_queries"] == n_train  # all of them, not a carve-out
    assert LoraRouter.from_pretrained(tmp_path / "fitted").threshold == pytest.approx(
        fitted["retrieval_thresholds"]["router"]["threshold"])


def test_a_router_from_the_corpus_records_its_training_data(bbc_small_dir, tmp_path):
    from masdr_router import read_queries
    from masdr_router.training.card import data_line
    from masdr_router.training.run import run_training
    from masdr_router.training.trainer import epoch_budget, rows_per_epoch

    cfg = TrainConfig(**{**FAST, "keep_probe": True})
    test = read_queries(bbc_small_dir / "test.jsonl")
    # cold start: no labelled query at all, only the corpus
    cold = run_training(taxonomy=bbc_small_dir / "taxonomy.yaml", train=None, corpus=bbc_small_dir / "corpus.jsonl",
                        test=bbc_small_dir / "test.jsonl", out=tmp_path / "cold", cfg=cfg)
    assert cold["n_labelled"] == 0 and cold["corpus"]["n_pseudo"] == cold["n_train"] + cold["n_val"] > 0
    report = cold["corpus"]["report"]
    # the test queries' articles gave no pseudo-query (contamination check), and the source is recorded
    assert report["held_out"]["queries"] == len(test) and report["dropped"]["contaminated"] > 0
    assert report["source"]["corpus_sha256"].startswith("sha256:")
    card = (tmp_path / "cold" / "README.md").read_text()
    assert "0 labelled queries + " in card and "pseudo-queries made from the corpus" in card
    # mixed: labelled queries plus pseudo-queries at corpus_weight
    # 8 a batch: the few labelled queries and an epoch's rows then make different step counts
    # corpus_check off: this is about how a kept corpus is trained on and recorded (the checks have their tests)
    mixed_cfg = TrainConfig(**{**FAST, "keep_probe": True, "min_steps": 20, "batch_size": 8, "corpus_check": False,
                               "corpus_check_finetune": False})
    mixed = run_training(taxonomy=bbc_small_dir / "taxonomy.yaml", train=bbc_small_dir / "train.jsonl",
                         corpus=bbc_small_dir / "corpus.jsonl", val=bbc_small_dir / "val.jsonl",
                         out=tmp_path / "mixed", cfg=mixed_cfg)
    n_labelled = len(read_queries(bbc_small_dir / "train.jsonl"))
    assert mixed["n_labelled"] == n_labelled and mixed["n_train"] == n_labelled + mixed["corpus"]["n_pseudo"]
    assert mixed["corpus"]["weight"] == cfg.corpus_weight
    # corpus_per_epoch: sample (the default): each epoch trains on corpus_weight x N of the pseudo-queries
    n_pseudo = mixed["corpus"]["n_pseudo"]
    assert mixed["corpus"]["per_epoch"] == round(cfg.corpus_weight * n_pseudo) < n_pseudo
    # the small-data epoch budget counts the pseudo-queries' optimizer steps too: a few labelled
    # queries plus hundreds of pseudo-queries are not trained for the few labelled queries' epochs
    per_epoch = rows_per_epoch(mixed_cfg, mixed["n_train"], n_pseudo)
    assert len(mixed["history"]) == epoch_budget(mixed_cfg, per_epoch) < epoch_budget(mixed_cfg, n_labelled)
    assert (f"each epoch a fresh sample of {mixed['corpus']['per_epoch']} of them at weight 1 (an expected weight "
            f"of {cfg.corpus_weight:g} each)") in (tmp_path / "mixed" / "README.md").read_text()
    every = {**mixed, "corpus": {**mixed["corpus"], "per_epoch": n_pseudo}}  # what corpus_per_epoch: all records
    assert f"each weighing {cfg.corpus_weight:g} in the loss" in data_line(every)


@pytest.fixture(scope="module")
def bbc_100_dir(tmp_path_factory):
    """100 real BBC articles (20 per desk), saved as `masdr data prepare` writes a set."""
    from masdr_router.datasets import load_dataset

    out = tmp_path_factory.mktemp("data") / "bbc100"
    load_dataset("bbc", max_docs_per_scope=20, seed=0).save(out, seed=0)
    return out


def _wrong_desks(set_dir: Path, out: Path) -> Path:
    """The set's corpus with every document's desk moved to the next one, as a broken metadata mapping would."""
    docs = [json.loads(line) for line in (set_dir / "corpus.jsonl").read_text().splitlines()]
    desks = sorted({d["metadata"]["category"] for d in docs})
    moved = {desk: desks[(i + 1) % len(desks)] for i, desk in enumerate(desks)}
    out.write_text("".join(json.dumps({**d, "metadata": {**d["metadata"], "category": moved[d["metadata"][
        "category"]]}}) + "\n" for d in docs))
    return out


def test_corpus_check_leaves_out_a_corpus_that_hurts_and_keeps_one_that_helps(bbc_100_dir, tmp_path):
    """corpus_check fits the frozen probe with and without the pseudo-queries and scores both on the
    held-out labelled queries: a corpus whose documents carry the wrong desks is left out before any
    fine-tuning, and the run, its metrics and its card say so; the real corpus with two labelled
    queries per desk is kept by the probe and by the fine-tuned comparison (the holdout regime: --val)."""
    from masdr_router import read_queries
    from masdr_router.training.run import run_training

    wrong = _wrong_desks(bbc_100_dir, tmp_path / "wrong_desks.jsonl")
    cfg = TrainConfig(**{**FAST, "keep_probe": True, "corpus_weight": 1.0})
    common = {"taxonomy": bbc_100_dir / "taxonomy.yaml", "val": bbc_100_dir / "val.jsonl",
              "test": bbc_100_dir / "test.jsonl", "cfg": cfg}
    hurt = run_training(train=bbc_100_dir / "train.jsonl", corpus=wrong, out=tmp_path / "hurt", **common)
    check = hurt["corpus"]["check"]
    assert check["kept"] is False and check["probe"]["without_macro_f1"] > check["probe"]["with_corpus_macro_f1"]
    assert "fine_tuned" not in check  # left out by the probe: no fine-tuning run with it
    assert hurt["corpus"]["n_pseudo"] > 0 and hurt["n_train"] == hurt["n_labelled"]  # none trained on
    card = (tmp_path / "hurt" / "README.md").read_text()
    assert "pseudo-queries made from the corpus" in card and "were left out (corpus_check: the frozen probe" in card

    desks = sorted({q.scope for q in read_queries(bbc_100_dir / "train.jsonl")})
    two_each = tmp_path / "two_each.jsonl"
    train = read_queries(bbc_100_dir / "train.jsonl")
    few = [q for s in desks for q in [q for q in train if q.scope == s][:2]]
    two_each.write_text("".join(json.dumps({"query": q.query, "scope": q.scope}) + "\n" for q in few))
    helped = run_training(train=two_each, corpus=bbc_100_dir / "corpus.jsonl", out=tmp_path / "helped", **common)
    check = helped["corpus"]["check"]
    assert check["kept"] is True and check["probe"]["with_corpus_macro_f1"] > check["probe"]["without_macro_f1"]
    tuned = check["fine_tuned"]
    assert tuned["kept"] is True and tuned["with_corpus_macro_f1"] >= tuned["without_macro_f1"]
    assert helped["n_train"] == len(few) + helped["corpus"]["n_pseudo"]
    card = (tmp_path / "helped" / "README.md").read_text()
    assert f"{len(few)} labelled queries + {helped['corpus']['n_pseudo']} pseudo-queries" in card
    assert f"the fine-tuned router scored macro-F1 {tuned['with_corpus_macro_f1']:.3f} with them" in card


def test_the_fine_tuned_corpus_check_leaves_out_a_corpus_the_probe_was_not_asked_about(bbc_100_dir, tmp_path):
    """In the holdout regime the router is fine-tuned with and without the corpus and the validation
    split decides: with the probe's check off, the wrong-desk corpus is trained on, loses to the run
    without it, and is left out; with both checks off it is trained on and exported."""
    from masdr_router.training.run import run_training

    wrong = _wrong_desks(bbc_100_dir, tmp_path / "wrong_desks.jsonl")
    cfg = TrainConfig(**{**FAST, "keep_probe": True, "corpus_weight": 1.0, "corpus_check": False})
    common = {"taxonomy": bbc_100_dir / "taxonomy.yaml", "train": bbc_100_dir / "train.jsonl", "corpus": wrong,
              "val": bbc_100_dir / "val.jsonl", "test": bbc_100_dir / "test.jsonl"}
    tuned = run_training(out=tmp_path / "tuned", cfg=cfg, **common)
    check = tuned["corpus"]["check"]
    assert "probe" not in check and check["kept"] is False
    assert check["fine_tuned"]["without_macro_f1"] > check["fine_tuned"]["with_corpus_macro_f1"]
    assert tuned["n_train"] == tuned["n_labelled"]  # the exported run trained on the labelled queries alone
    card = (tmp_path / "tuned" / "README.md").read_text()
    assert "were left out (corpus_check: the fine-tuned router scored" in card
    off = run_training(out=tmp_path / "off", cfg=TrainConfig(**{**cfg.to_dict(), "corpus_check_finetune": False}),
                       **common)
    assert off["corpus"]["check"] == {} and off["n_train"] == off["n_labelled"] + off["corpus"]["n_pseudo"]


def test_a_pseudo_query_weighs_corpus_weight_in_the_loss():
    import torch

    from masdr_router.training.trainer import Encoded

    a = Encoded(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3), torch.tensor([0, 1]), np.zeros((2, 4)),
                torch.ones(2), torch.zeros(2, dtype=torch.bool))
    b = Encoded(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), torch.tensor([1]), np.ones((1, 4)),
                torch.full((1,), 0.3), torch.ones(1, dtype=torch.bool))
    both = a + b
    assert both.weight.tolist() == pytest.approx([1.0, 1.0, 0.3]) and both.features.shape == (3, 4)
    assert both.take(np.array([2])).weight.tolist() == pytest.approx([0.3])
    assert both.pseudo.tolist() == [False, False, True] and both.take(np.array([2, 0])).pseudo.tolist() == [True, False]


def test_a_held_out_query_is_not_scored_against_pseudo_queries_that_would_leak_it():
    """A fold trains on the pseudo-queries but those that the contamination check would keep away from a
    test query: made from its held-out queries' documents, or matching one's text (equal, contained,
    containing, nearly equal). Otherwise the corpus is scored on its source."""
    import torch

    from masdr_router.training.trainer import Encoded

    def encoded(docs, pseudo, texts=()):
        n = len(docs)
        return Encoded(torch.zeros(n, 3, dtype=torch.long), torch.ones(n, 3), torch.zeros(n, dtype=torch.long),
                       np.arange(n, dtype=float)[:, None], torch.ones(n), torch.full((n,), pseudo), docs, texts)

    labelled = encoded((("d1",), ("d2", "d4")), False)
    corpus = encoded((("d1",), ("d3",), ("d2",), ("d4",)), True)
    assert corpus.outside(labelled.take(np.array([0]))).docs == (("d3",), ("d2",), ("d4",))
    kept = corpus.outside(labelled)
    assert kept.docs == (("d3",),) and kept.features[:, 0].tolist() == [1.0] and kept.pseudo.tolist() == [True]
    # queries without relevant_ids or texts name nothing to leave out
    assert corpus.outside(encoded(((), ()), False)).docs == corpus.docs
    assert (labelled + corpus).docs == labelled.docs + corpus.docs
    # by text: a pseudo-query from another document that the held-out query contains, or that equals it
    held = encoded(((),), False, ("Cairn shares up on new oil find",))
    corpus = encoded((("d5",), ("d6",), ("d7",)), True,
                     ("new oil find", "Cup final tonight", "cairn shares up on new oil find!"))
    kept = corpus.outside(held)
    assert kept.texts == ("Cup final tonight",) and kept.docs == (("d6",),) and kept.features[:, 0].tolist() == [1.0]
    assert (held + corpus).texts == held.texts + corpus.texts


def _one_epoch(cfg, tax, qs):
    """Build a run over ``qs`` and train one epoch; returns the run (the named steps of trainer.py)."""
    from transformers import AutoModel, AutoTokenizer

    from masdr_router.retrieval.embedder import resolve_encoder_path
    from masdr_router.training.trainer import build_run, encode, train_one_epoch

    path = resolve_encoder_path("minilm")
    tok, frozen = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    data = encode(cfg, tax.names, qs, tok, frozen)
    run = build_run(cfg, tax.names, path, tok, data, None, key="t", epochs=1)
    before = {n: p.detach().clone() for n, p in run.unwrapped.named_parameters() if p.requires_grad}
    train_one_epoch(run, 0)
    moved = sum(float((p.detach() - before[n]).norm()) for n, p in run.unwrapped.named_parameters()
                if p.requires_grad)
    return run, moved


def test_gradient_accumulation_steps_the_optimizer_once_per_group_of_batches(bbc_queries):
    tax, qs = bbc_queries
    base = {**FAST, "batch_size": 8}
    run, _ = _one_epoch(TrainConfig(**base), tax, qs[:32])
    accumulated, _ = _one_epoch(TrainConfig(**{**base, "grad_accumulation_steps": 2}), tax, qs[:32])

    def steps(r):
        return {int(s["step"]) for s in r.optimizer.state_dict()["state"].values()}

    assert steps(run) == {4} and steps(accumulated) == {2}  # 32 queries, batches of 8


def test_gradient_clipping_bounds_each_update(bbc_queries):
    tax, qs = bbc_queries
    _, free = _one_epoch(TrainConfig(**FAST), tax, qs[:32])
    _, clipped = _one_epoch(TrainConfig(**{**FAST, "max_grad_norm": 1e-6}), tax, qs[:32])
    # Adam normalises step sizes, so clipping shows in the first steps' direction and size, not to zero
    assert clipped != pytest.approx(free, rel=1e-3)


def test_wandb_honours_its_variables_and_a_restarted_run_logs_into_the_same_run(bbc_queries, tmp_path,
                                                                                monkeypatch):
    tax, qs = bbc_queries
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_PROJECT", "from-the-environment")
    cfg = TrainConfig(**{**FAST, "epochs": 1, "report_to": "wandb", "wandb_mode": "disabled"})
    monkeypatch.setenv("WANDB_MODE", "offline")  # wins over the config's "disabled"
    train_router(tax, qs, None, cfg)
    train_router(tax, qs, None, cfg)  # the same run again, as after a kill
    runs = sorted(tmp_path.glob("wandb/offline-run-*"))  # offline-run-<time>-<run id>
    ids = {r.name.split("-", 3)[3] for r in runs}
    assert len(runs) == 2 and len(ids) == 1 and ids.pop().startswith("router-")  # one run id, resumed
    for r in runs:  # the project named by $WANDB_PROJECT is the one recorded in the run
        assert b"from-the-environment" in next(r.glob("run-*.wandb")).read_bytes()
