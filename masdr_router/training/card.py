"""The model card (README.md) written into every exported router."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import TrainConfig

if TYPE_CHECKING:
    from ..routers.lora import LoraRouter


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def card_data(router: LoraRouter, metrics: dict[str, Any], cfg: TrainConfig) -> Any:
    """The card's metadata (the YAML front matter the Hugging Face Hub reads): library, pipeline
    tag, a portable ``base_model``, tags, and the evaluation in ``model-index``."""
    from huggingface_hub import EvalResult, ModelCardData

    from ..retrieval.embedder import portable_encoder_name

    name = f"{router.taxonomy.name}-scope-router"
    results = []
    ev = metrics.get("evaluation") or {}
    if ev:
        lora = ev["lora"]
        for metric_type, key, label in (("accuracy", "top1_accuracy", "top-1 accuracy"),
                                        ("f1", "top1_macro_f1", "top-1 macro-F1"),
                                        ("accuracy", "accuracy", "accuracy with abstention"),
                                        ("f1", "macro_f1", "macro-F1 with abstention")):
            if lora.get(key) is not None:
                results.append(EvalResult(task_type="text-classification", dataset_type=router.taxonomy.name,
                                          dataset_name=f"{router.taxonomy.name} {ev['split']} queries",
                                          dataset_split=ev["split"], metric_type=metric_type,
                                          metric_value=float(lora[key]), metric_name=label))
    return ModelCardData(library_name="masdr-router", pipeline_tag="text-classification",
                         base_model=portable_encoder_name(cfg.base_model),
                         tags=["masdr-router", "scope-routing", "rag", "lora", "peft", "text-classification"],
                         model_name=name, eval_results=results or None)


def model_card(router: LoraRouter, metrics: dict[str, Any], cfg: TrainConfig) -> str:
    """README.md of an exported router: YAML front matter (:func:`card_data`), then what it is,
    how it was trained, its evaluation, calibration and the taxonomy."""
    cal = metrics["calibration"]
    lines = [
        "---", card_data(router, metrics, cfg).to_yaml(), "---", "",
        f"# LoRA scope router for taxonomy `{router.taxonomy.name}`",
        "",
        f"Routes a query to one of {len(router.labels)} scopes ({', '.join(router.labels)}), or abstains when its",
        f"calibrated confidence is below {cal['threshold']:.3f} (then {cfg.below_threshold}).",
        "",
        "Load it with `masdr_router.LoraRouter.from_pretrained(DIR)` or `masdr route --router DIR ...`.",
        "",
        "## Model",
        f"- base encoder: `{cfg.base_model}`, {cfg.pooling} pooling{', L2-normalised' if router.normalize else ''}, "
        f"max {cfg.max_length} tokens",
        f"- LoRA r={cfg.lora_r}{_soup_rank(metrics, cfg.lora_r)}, alpha={cfg.lora_alpha}, dropout={cfg.lora_dropout}, "
        f"modules {', '.join(cfg.target_modules)}"
        f"{own_weights(cfg)}"
        f"; {metrics.get('trainable_params', '?'):,} trainable of {metrics.get('total_params', '?'):,} parameters",
        f"- taxonomy fingerprint `{router.taxonomy.fingerprint}`",
        f"- training data: {data_line(metrics)}",
        f"- trained on {metrics['n_train']} queries in {metrics['train_seconds']:.0f} s on "
        f"{metrics.get('device', '?')}; {regime_line(metrics)}",
        f"- exported model: {selection_line(metrics)}",
        f"- temperature {cal['temperature']:.3f} (held-out ECE {cal['val_ece_before']:.3f} -> "
        f"{cal['val_ece_after']:.3f}); {_threshold_line(router, metrics)}",
        "",
    ]
    ev = metrics.get("evaluation") or {}
    if ev:
        lines += [f"## Evaluation ({ev['split']} split, {ev['lora']['n_queries']} queries)", "",
                  "| router | accuracy | macro-F1 | top-1 accuracy | abstain | accuracy when answered | ECE | p50 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        for name in ("lora", "regex"):
            r = ev[name]
            lines.append(f"| {name} | {_f(r['accuracy'])} | {_f(r['macro_f1'])} | {_f(r['top1_accuracy'])} | "
                         f"{_f(r['abstain_rate'])} | {_f(r['accuracy_when_answered'])} | {_f(r['ece'])} | "
                         f"{_f(r['latency_ms']['p50'])} |")
        lines += ["", "Accuracy and macro-F1 count abstentions as misses; top-1 ignores the threshold.", ""]
    lines += ["## Intended use", "",
              "Route a user's query to the organisational scope whose documents should answer it, so that",
              "retrieval searches only that scope (scope-first RAG). Below its threshold it abstains and the",
              "caller searches more widely. It knows only the scopes below; a query about anything else is",
              "routed to the closest of them or abstained on, never refused.", "",
              "## Taxonomy", "", "| scope | description |", "|---|---|",
              *[f"| {sc.name} | {' '.join(sc.description.split())} |" for sc in router.taxonomy.scopes], ""]
    history = metrics["history"]
    cols = [c for c in ("train_loss", "val_loss", "val_accuracy", "val_macro_f1", "cv_accuracy", "cv_macro_f1")
            if any(c in h for h in history)]
    title = "cross-validated (out-of-fold)" if "cv_macro_f1" in cols else "validation"
    lines += [f"## Per-epoch {title} scores", "", "| epoch | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
              "|---" * (len(cols) + 1) + "|"]
    for h in history:
        lines.append(f"| {h['epoch']} | " + " | ".join(f"{h[c]:.4f}" if c in h else "-" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def regime_line(metrics: dict[str, Any]) -> str:
    sel = metrics.get("selection") or {}
    if metrics.get("regime") == "cv":
        epochs = sel.get("cv_epochs", metrics["val"]["best_epoch"]) if sel.get("model", "lora") == "lora" else "-"
        if sel.get("epoch_rule") == "budget":
            return (f"few-shot: fine-tuned for the whole epoch budget ({sel.get('epoch_budget', '?')}) on all queries, "
                    f"no epoch count chosen; {sel.get('folds', '?')}-fold cross-validation gave the held-out "
                    f"predictions ({metrics.get('regime_reason', '')})")
        return (f"{sel.get('folds', '?')}-fold cross-validation chose {epochs} epochs "
                f"(of {sel.get('epoch_budget', '?')}), then the model was refit on all queries "
                f"({metrics.get('regime_reason', '')})")
    if sel.get("holdout_choice", "best") == "last":
        return (f"trained the whole epoch budget ({sel.get('epoch_budget', '?')}) and exported the last epoch; "
                f"a validation split of {metrics['n_val']} queries chose the model and calibrated it "
                f"({metrics.get('regime_reason', 'holdout')})")
    return (f"early-stopped on a validation split of {metrics['n_val']} queries, best epoch "
            f"{metrics['val']['best_epoch']} ({metrics.get('regime_reason', 'holdout')})")


def selection_line(metrics: dict[str, Any]) -> str:
    sel = metrics.get("selection") or {}
    held = "out-of-fold" if metrics.get("regime") == "cv" else "validation"
    lora = sel.get("lora_cv_macro_f1", sel.get("lora_val_macro_f1"))
    probe = sel.get("probe_cv_macro_f1", sel.get("probe_val_macro_f1"))
    guard = sel.get("guard") or {}
    margin = sel.get("guard_margin_se")

    def lead(head: str) -> str:  # "by 0.120 (> 1 bootstrap SE, 0.031)"
        e = guard.get(head)
        return f" by {e['lead']:.3f} (> {margin:g} bootstrap SE, {e['se']:.3f})" if e and margin else ""

    if sel.get("model") == "probe":
        return (f"the frozen-encoder probe (logistic regression, C={sel.get('probe_C')}): its {held} macro-F1 "
                f"{_f(probe)} beat the LoRA model's {_f(lora)}{lead('probe')}, so the guard kept it")
    if sel.get("model") == "centroid":
        centroid = sel.get("centroid_cv_macro_f1", sel.get("centroid_val_macro_f1"))
        return (f"the frozen-encoder nearest-centroid head: its {held} macro-F1 {_f(centroid)} beat the LoRA "
                f"model's {_f(lora)}{lead('centroid')} (and the probe's {_f(probe)}), so the guard kept it")
    noise = [f"the {k}'s lead of {e['lead']:.3f} is within {margin:g} bootstrap SE ({e['se']:.3f})"
             for k, e in guard.items() if e["lead"] > 0 and margin and k in sel.get("guard_heads", [])]
    within = f" ({'; '.join(noise)}, so the guard kept LoRA)" if noise else ""
    stage = sel.get("contrastive") or {}
    weights = {"all": "all encoder weights", "lora": "the LoRA adapters"}.get(stage.get("contrastive_weights"), "")
    paired = stage.get("contrastive_queries")
    pairs = f"pairs of {paired} queries" if paired else "pairs"
    first = (f"a contrastive stage ({stage['contrastive_steps']} steps of same/other-scope {pairs} on {weights}, loss "
             f"{stage['contrastive_loss_first']:.3f} -> {stage['contrastive_loss_last']:.3f}), then "
             if stage.get("contrastive_steps") else "")
    check = sel.get("contrastive_check") or {}
    if check:  # the stage was cross-validated against the run without it
        scores = (f"best out-of-fold macro-F1 {_f(check['with_stage_cv_macro_f1'])} with it, "
                  f"{_f(check['without_stage_cv_macro_f1'])} without")
        verdict = (f"the contrastive stage was kept: {scores} (SE {check['se']:.3f}); " if check["kept"] else
                   f"the contrastive stage was dropped: {scores}, a lead beyond {check['margin_se']:g} bootstrap SE "
                   f"({check['se']:.3f}); ")
        first = verdict + first
    if first and sel.get("cv_epochs") == 0:
        return (f"{first}a probe on the tuned encoder, without classification fine-tuning (cross-validation chose "
                f"0 epochs); {held} macro-F1 {_f(lora)} against the frozen probe's {_f(probe)}{within}")
    alpha = sel.get("alpha")
    wise = (f", exported as the weight-space ensemble (WiSE-FT, alpha {alpha:g}) of the fine-tuned model and the "
            f"probe it started from" if alpha is not None and alpha < 1 else "")
    soup = sel.get("soup") or {}
    souped = (f", the uniform soup (weight average) of {soup['members']} runs at consecutive seeds (their {held} "
              f"macro-F1 {', '.join(_f(v) for v in soup['member_val_macro_f1'])})" if soup.get("members") else "")
    return (f"LoRA fine-tuned: {first}a probe-initialised head{wise}{souped}; {held} macro-F1 {_f(lora)} against the "
            f"frozen probe's {_f(probe)}{within}")


def own_weights(cfg: TrainConfig) -> str:
    """What the card adds when fine-tuning also tuned the encoder's own weights (``finetune_weights``).

    >>> own_weights(TrainConfig(finetune_weights="all"))
    ", and the encoder's own weights at learning rate 5e-05"
    """
    if cfg.finetune_weights != "all":
        return ""
    return f", and the encoder's own weights at learning rate {cfg.encoder_learning_rate:g}"


def _soup_rank(metrics: dict[str, Any], lora_r: int) -> str:
    """``" per run (adapter rank 48: a soup of 3 runs)"`` when the exported LoRA model is a soup, else ``""``.

    >>> _soup_rank({"selection": {"model": "lora", "soup": {"members": 3}}}, 16)
    ' per run (adapter rank 48: a soup of 3 runs)'
    >>> _soup_rank({"selection": {"model": "probe", "soup": {"members": 3}}}, 16)
    ''
    """
    sel = metrics.get("selection") or {}
    k = (sel.get("soup") or {}).get("members") if sel.get("model") == "lora" else None
    return f" per run (adapter rank {k * lora_r}: a soup of {k} runs)" if k else ""


def _threshold_line(router: LoraRouter, metrics: dict[str, Any]) -> str:
    fit = metrics.get("retrieval_thresholds") or {}
    cal = metrics["calibration"]
    if not fit:
        return (f"threshold {router.threshold:.3f} for {cal['target_accuracy']:.0%} accuracy-when-answered "
                "(classification objective)")
    r, v = fit["router"], fit["vote"]
    return (f"threshold {r['threshold']:.3f} chosen for retrieval on {fit['n_queries']} held-out queries: P@{fit['k']} "
            f"{r['p_at_k']:.3f} with R@{fit['k']} {r['r_at_k']:.3f} against global search's {r['global_p_at_k']:.3f} / "
            f"{r['global_r_at_k']:.3f} (the classification threshold was {fit['classification_threshold']:.3f}); "
            f"with the retrieval vote (`DIR+vote`): threshold {v['threshold']:.3f}, beta {v['beta']:g}, P@{fit['k']} "
            f"{v['p_at_k']:.3f}, R@{fit['k']} {v['r_at_k']:.3f}")


def data_line(metrics: dict[str, Any]) -> str:
    """What the router was trained on: the labelled queries and, with ``--corpus``, the pseudo-queries
    made from it (how many, how they were weighed, or why ``corpus_check`` left them out).

    >>> data_line({"n_train": 40, "n_labelled": 40})
    '40 labelled queries'
    """
    corpus = metrics.get("corpus") or {}
    labelled = f"{metrics.get('n_labelled', metrics['n_train'])} labelled queries"
    if not corpus:
        return labelled
    methods = ", ".join(f"{m} {r['kept']}" for m, r in (corpus["report"].get("per_method") or {}).items())
    n, per_epoch = corpus["n_pseudo"], corpus.get("per_epoch", corpus["n_pseudo"])
    weighing = (f"each weighing {corpus['weight']:g} in the loss" if per_epoch >= n else
                f"each epoch a fresh sample of {per_epoch} of them at weight 1 (an expected weight of "
                f"{corpus['weight']:g} each)")
    made = (f"{n} pseudo-queries made from the corpus `{corpus['path']}` "
            f"({corpus['report'].get('source', {}).get('corpus_sha256', '')}; {methods or 'by rule'})")
    check = corpus.get("check") or {}
    scored = [f"{who} scored macro-F1 {c['with_corpus_macro_f1']:.3f} with them and {c['without_macro_f1']:.3f} "
              f"without on {c['held_out']} {on} queries"
              for step, who, on in (("probe", "the frozen probe", "held-out labelled"),
                                    ("fine_tuned", "the fine-tuned router", "validation"))
              if (c := check.get(step))]
    verdict = f" (corpus_check: {'; '.join(scored)})" if scored else ""
    if check and not check["kept"]:
        return f"{labelled}; the {made} were left out{verdict}"
    return f"{labelled} + {made}, {weighing}, none leaking the validation or test queries{verdict}"
