"""The trained LoRA router (R2-Routed): calibrated, with abstention, saved as a self-contained
directory of safetensors + JSON.

Artifact layout (``save_pretrained``)::

    DIR/
      router_config.json   type, labels, taxonomy fingerprint, base model, LoRA settings,
                           temperature, threshold, versions
      taxonomy.yaml        the taxonomy it was trained for
      encoder/             the encoder with the LoRA adapters merged in + tokenizer (for serving)
      adapter/             the LoRA adapters alone (peft format), for further training
      head.safetensors     the classification head
      metrics.json         evaluation results
      README.md            model card
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import MasdrError, TaxonomyMismatchError
from ..query import validate_query
from ..taxonomy import Taxonomy
from .base import RouteDecision, Router

FORMAT = "masdr-router/1"
CONFIG_NAME = "router_config.json"
HEAD_NAME = "head.safetensors"


class LoraRouter(Router):
    """A fine-tuned encoder classifier with temperature scaling and a confidence threshold.

    >>> router = LoraRouter.from_pretrained("checkpoints/bbc-router")        # doctest: +SKIP
    >>> router.route("Shares slide as profits fall").scope                    # doctest: +SKIP
    'business'
    >>> router.predict(["Shares slide", "Cup final tonight"])                 # doctest: +SKIP
    ['business', 'sport']
    """

    name = "lora"

    def __init__(self, taxonomy: Taxonomy, model: Any, tokenizer: Any, *, temperature: float = 1.0,
                 threshold: float = 0.0, below_threshold: str = "abstain", max_length: int = 64,
                 meta: dict[str, Any] | None = None, device: str | None = None, onnx: Any = None) -> None:
        super().__init__(taxonomy)
        self.model = model.eval()
        self.onnx = onnx  # an OnnxLogits session: serve logits from onnxruntime instead of torch
        self.tokenizer = tokenizer
        self.labels = taxonomy.names
        self.temperature = float(temperature)
        self.threshold = float(threshold)
        self.below_threshold = below_threshold
        self.max_length = max_length
        self.meta = meta or {}
        self.device = device or str(next(model.parameters()).device)

    # ---- inference ----------------------------------------------------------------------------
    def logits(self, texts: list[str], *, batch_size: int = 64) -> np.ndarray:
        import torch

        out = []
        if self.onnx is not None:
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="np")
                out.append(self.onnx(enc["input_ids"], enc["attention_mask"]))
            return np.concatenate(out) if out else np.zeros((0, len(self.labels)), np.float32)
        self.model.eval()
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt").to(self.device)
                out.append(self.model(enc["input_ids"], enc["attention_mask"]).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.labels)), np.float32)

    def predict_proba(self, texts: str | list[str]) -> np.ndarray:
        """Calibrated scope probabilities, shape ``(n, n_scopes)`` (or ``(n_scopes,)`` for one text)."""
        from ..training.calibration import softmax

        single = isinstance(texts, str)
        p = softmax(self.logits([texts] if single else list(texts)), self.temperature)
        return p[0] if single else p

    def predict(self, texts: str | list[str]) -> str | list[str]:
        """Most likely scope name(s), ignoring the threshold."""
        p = self.predict_proba(texts)
        if p.ndim == 1:
            return self.labels[int(p.argmax())]
        return [self.labels[i] for i in p.argmax(1)]

    def _decide(self, probs: np.ndarray) -> RouteDecision:
        scores = {s: float(v) for s, v in zip(self.labels, probs)}
        best = int(probs.argmax())
        conf = float(probs[best])
        if conf >= self.threshold:
            return RouteDecision(scope=self.labels[best], scores=scores, stage=self.name, confidence=conf)
        fallback = tuple(self.labels[i] for i in np.argsort(-probs)[:2]) if self.below_threshold == "top2" else ()
        return RouteDecision(scope=None, scores=scores, stage=self.name, confidence=conf, fallback=fallback)

    def _route(self, query: str) -> RouteDecision:
        return self._decide(self.predict_proba(query))

    def route_batch(self, queries: list[str]) -> list[RouteDecision]:
        qs = [validate_query(q) for q in queries]
        t0 = time.perf_counter()
        probs = self.predict_proba(qs) if qs else np.zeros((0, len(self.labels)))
        ms = (time.perf_counter() - t0) * 1000 / max(len(qs), 1)
        import dataclasses

        return [dataclasses.replace(self._decide(p), latency_ms=ms) for p in probs]

    # ---- persistence --------------------------------------------------------------------------
    def router_config(self) -> dict[str, Any]:
        import peft
        import torch
        import transformers

        return {
            "format": FORMAT, "router_type": "lora", "labels": self.labels,
            "taxonomy": {"name": self.taxonomy.name, "fingerprint": self.taxonomy.fingerprint},
            "temperature": self.temperature, "threshold": self.threshold, "below_threshold": self.below_threshold,
            "max_length": self.max_length, "pooling": self.model.pooling, **self.meta,
            "package_version": __version__,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "peft": peft.__version__},
        }

    def save_pretrained(self, out: str | Path, *, metrics: dict[str, Any] | None = None,
                        card: str | None = None, overwrite: bool = False) -> Path:
        """Write the artifact directory atomically: merged encoder, adapter, head, config, card."""
        import copy

        from safetensors.torch import save_file

        from ..atomic import atomic_directory

        with atomic_directory(out, overwrite=overwrite) as tmp:
            encoder = self.model.encoder
            if hasattr(encoder, "merge_and_unload"):  # a peft model: keep adapters, serve merged
                encoder.save_pretrained(tmp / "adapter", safe_serialization=True)
                merged = copy.deepcopy(encoder).merge_and_unload()
            else:
                merged = encoder
            merged.save_pretrained(tmp / "encoder", safe_serialization=True)
            self.tokenizer.save_pretrained(tmp / "encoder")
            head = {k: v.detach().cpu().contiguous() for k, v in self.model.head.state_dict().items()}
            save_file(head, str(tmp / HEAD_NAME))
            self.taxonomy.to_yaml(tmp / "taxonomy.yaml")
            (tmp / "metrics.json").write_text(json.dumps(metrics or {}, indent=2) + "\n")
            if card:
                (tmp / "README.md").write_text(card)
            # Written last: a directory without it is never taken for a router.
            (tmp / CONFIG_NAME).write_text(json.dumps(self.router_config(), indent=2) + "\n")
        return Path(out)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, taxonomy: Taxonomy | None = None,
                        device: str = "auto", runtime: str = "torch") -> LoraRouter:
        """Load an exported router on CPU or GPU; refuse one trained for another taxonomy.

        ``runtime="onnx"`` serves the logits from ``router.onnx`` with onnxruntime (CPU); the
        artifact must have been exported with ``masdr export onnx``."""
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from ..retrieval.embedder import resolve_device
        from ..training.model import RouterModel

        path = Path(path)
        cpath = path / CONFIG_NAME
        if not cpath.is_file():
            raise MasdrError(f"{path} is not a router artifact (no {CONFIG_NAME}); train one with `masdr train`")
        cfg = json.loads(cpath.read_text())
        if cfg.get("format") != FORMAT or cfg.get("router_type") != "lora":
            raise MasdrError(f"{path}: unsupported router artifact {cfg.get('format')!r}/{cfg.get('router_type')!r}")
        stored = Taxonomy.from_yaml(path / "taxonomy.yaml")
        want = cfg["taxonomy"]["fingerprint"]
        if taxonomy is not None and taxonomy.fingerprint != want:
            raise TaxonomyMismatchError(
                f"router {path} was trained for taxonomy '{cfg['taxonomy']['name']}' ({want}), not for "
                f"'{taxonomy.name}' ({taxonomy.fingerprint}); retrain it with `masdr train`")
        if stored.fingerprint != want or stored.names != cfg["labels"]:
            raise MasdrError(f"{path}: taxonomy.yaml does not match router_config.json (artifact corrupted?)")
        if runtime not in {"torch", "onnx"}:
            raise MasdrError(f"runtime must be torch or onnx, got {runtime!r}")
        onnx = None
        if runtime == "onnx":
            from ..training.onnx_export import ONNX_FILE, OnnxLogits

            if not (path / ONNX_FILE).is_file():
                raise MasdrError(f"{path} has no {ONNX_FILE}; export it with `masdr export onnx --router {path}`")
            onnx, device = OnnxLogits(path / ONNX_FILE), "cpu"
        dev = resolve_device(device)
        hf_logging.disable_progress_bar()
        encoder = AutoModel.from_pretrained(path / "encoder")
        model = RouterModel(encoder, len(cfg["labels"]), pooling=cfg["pooling"], head_dropout=0.0)
        model.head.load_state_dict(load_file(str(path / HEAD_NAME)))
        model.to(dev).eval()
        if dev == "cuda":
            model.to(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
            model.head.float()
        tokenizer = AutoTokenizer.from_pretrained(path / "encoder")
        meta = {k: cfg[k] for k in ("base_model", "lora", "train") if k in cfg}
        return cls(taxonomy or stored, model, tokenizer, temperature=cfg["temperature"], threshold=cfg["threshold"],
                   below_threshold=cfg.get("below_threshold", "abstain"), max_length=cfg["max_length"], meta=meta,
                   device=dev, onnx=onnx)
