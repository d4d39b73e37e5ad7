"""The model card (README.md) written into every exported router."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import TrainConfig

if TYPE_CHECKING:
    from ..routers.lora import LoraRouter


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def model_card(router: LoraRouter, metrics: dict[str, Any], cfg: TrainConfig) -> str:
    cal = metrics["calibration"]
    lines = [
        f"# LoRA scope router for taxonomy `{router.taxonomy.name}`",
        "",
        f"Routes a query to one of {len(router.labels)} scopes ({', '.join(router.labels)}), or abstains when its",
        f"calibrated confidence is below {cal['threshold']:.3f} (then {cfg.below_threshold}).",
        "",
        "Load it with `masdr_router.LoraRouter.from_pretrained(DIR)` or `masdr route --router DIR ...`.",
        "",
        "## Model",
        f"- base encoder: `{cfg.base_model}`, {cfg.pooling} pooling, max {cfg.max_length} tokens",
        f"- LoRA r={cfg.lora_r}, alpha={cfg.lora_alpha}, dropout={cfg.lora_dropout}, "
        f"modules {', '.join(cfg.target_modules)}; {metrics.get('trainable_params', '?'):,} trainable of "
        f"{metrics.get('total_params', '?'):,} parameters",
        f"- taxonomy fingerprint `{router.taxonomy.fingerprint}`",
        f"- trained on {metrics['n_train']} queries ({metrics['n_val']} for validation) for "
        f"{len(metrics['history'])} epochs in {metrics['train_seconds']:.0f} s on {metrics.get('device', '?')}; "
        f"best epoch {metrics['val']['best_epoch']}",
        f"- temperature {cal['temperature']:.3f} (validation ECE {cal['val_ece_before']:.3f} -> "
        f"{cal['val_ece_after']:.3f}); threshold for {cal['target_accuracy']:.0%} accuracy-when-answered",
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
    lines += ["## Per-epoch validation", "", "| epoch | train loss | val loss | val accuracy | val macro-F1 |",
              "|---|---|---|---|---|"]
    for h in metrics["history"]:
        lines.append(f"| {h['epoch']} | {h['train_loss']:.4f} | {h['val_loss']:.4f} | {h['val_accuracy']:.4f} | "
                     f"{h['val_macro_f1']:.4f} |")
    return "\n".join(lines) + "\n"
