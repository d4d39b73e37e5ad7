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

import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._version import __version__
from ...artifacts import read_manifest_json
from ...errors import ArtifactError, MasdrError, TaxonomyMismatchError
from ...query import validate_query
from ...taxonomy import Taxonomy
from ..base import RouteDecision, Router
from .files import (
    ADAPTER_DIR,
    CARD_FILE,
    CONFIG_NAME,
    ENCODER_DIR,
    FORMAT,
    HEAD_NAME,
    LAYOUT_ENCODER_HEAD,
    LAYOUT_SEQUENCE_CLASSIFICATION,
    METRICS_FILE,
    ONNX_FILE,
    TAXONOMY_FILE,
)

if TYPE_CHECKING:
    from .model import RouterModel
    from .onnx import OnnxLogits

RUNTIMES = ("torch", "onnx")


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of ``logits / temperature``.

    >>> softmax(np.array([[0.0, 0.0], [2.0, 0.0]]), 2.0).round(3)
    array([[0.5  , 0.5  ],
           [0.731, 0.269]])
    """
    z = logits / temperature
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class LoraRouter(Router):
    """A fine-tuned encoder classifier with temperature scaling and a confidence threshold.

    >>> router = LoraRouter.from_pretrained("checkpoints/bbc-router")        # doctest: +SKIP
    >>> router.route("Shares slide as profits fall").scope                    # doctest: +SKIP
    'business'
    >>> router.predict(["Shares slide", "Cup final tonight"])                 # doctest: +SKIP
    ['business', 'sport']
    """

    name = "lora"

    def __init__(self, taxonomy: Taxonomy, model: RouterModel | None, tokenizer: Any, *, temperature: float = 1.0,
                 threshold: float = 0.0, below_threshold: str = "abstain", max_length: int = 64,
                 meta: dict[str, Any] | None = None, device: str | None = None, onnx: OnnxLogits | None = None,
                 pooling: str | None = None, normalize: bool | None = None) -> None:
        super().__init__(taxonomy)
        if model is None and onnx is None:
            raise MasdrError("a LoraRouter needs a model or an ONNX session")
        self.model = model.eval() if model is not None else None
        self.onnx = onnx  # an OnnxLogits session: serve logits from onnxruntime instead of torch
        self.pooling = pooling or (model.pooling if model is not None else "mean")
        # the ONNX graph normalises by itself; the flag is kept so a re-saved config stays true
        self.normalize = bool(normalize if normalize is not None else getattr(model, "normalize", False))
        self.tokenizer = tokenizer
        self.labels = taxonomy.names
        self.temperature = float(temperature)
        self.threshold = float(threshold)
        self.below_threshold = below_threshold
        self.max_length = max_length
        self.meta = meta or {}
        self.device = device or (str(next(model.parameters()).device) if model is not None else "cpu")

    # ---- inference ----------------------------------------------------------------------------
    def logits(self, texts: list[str], *, batch_size: int = 64) -> np.ndarray:
        """Raw scores before temperature, shape ``(n, n_scopes)``."""
        out = []
        if self.onnx is not None:
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="np")
                out.append(self.onnx(enc["input_ids"], enc["attention_mask"]))
            return np.concatenate(out) if out else np.zeros((0, len(self.labels)), np.float32)
        import torch

        if self.model is None:  # __init__ refuses a router with neither; this one has only ONNX
            raise MasdrError("this router was loaded with runtime='onnx' and has no torch model")
        self.model.eval()
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt").to(self.device)
                out.append(self.model(enc["input_ids"], enc["attention_mask"]).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.labels)), np.float32)

    def predict_proba(self, texts: str | list[str]) -> np.ndarray:
        """Calibrated scope probabilities, shape ``(n, n_scopes)`` (or ``(n_scopes,)`` for one text)."""
        single = isinstance(texts, str)
        p = softmax(self.logits([texts] if single else list(texts)), self.temperature)
        return p[0] if single else p

    def predict(self, texts: str | list[str]) -> str | list[str]:
        """Most likely scope name(s), ignoring the threshold."""
        p = self.predict_proba(texts)
        if p.ndim == 1:
            return self.labels[int(p.argmax())]
        return [self.labels[i] for i in p.argmax(1)]

    def decide(self, probs: np.ndarray) -> RouteDecision:
        """The decision for one query's calibrated probabilities at this router's threshold."""
        scores = {s: float(v) for s, v in zip(self.labels, probs)}
        best = int(probs.argmax())
        conf = float(probs[best])
        if conf >= self.threshold:
            return RouteDecision(scope=self.labels[best], scores=scores, stage=self.name, confidence=conf)
        fallback = tuple(self.labels[i] for i in np.argsort(-probs)[:2]) if self.below_threshold == "top2" else ()
        return RouteDecision(scope=None, scores=scores, stage=self.name, confidence=conf, fallback=fallback)

    def _route(self, query: str) -> RouteDecision:
        return self.decide(self.predict_proba(query))

    def route_batch(self, queries: list[str]) -> list[RouteDecision]:
        qs = [validate_query(q) for q in queries]
        t0 = time.perf_counter()
        probs = self.predict_proba(qs) if qs else np.zeros((0, len(self.labels)))
        ms = (time.perf_counter() - t0) * 1000 / max(len(qs), 1)
        return [dataclasses.replace(self.decide(p), latency_ms=ms) for p in probs]

    # ---- persistence --------------------------------------------------------------------------
    def router_config(self, layout: str = LAYOUT_ENCODER_HEAD) -> dict[str, Any]:
        import torch
        import transformers

        try:
            import peft

            peft_version: str | None = peft.__version__
        except ImportError:  # a serving install re-saving a router: no adapters involved
            peft_version = None
        return {
            "format": FORMAT, "router_type": "lora", "layout": layout, "labels": self.labels,
            "taxonomy": {"name": self.taxonomy.name, "fingerprint": self.taxonomy.fingerprint},
            "temperature": self.temperature, "threshold": self.threshold, "below_threshold": self.below_threshold,
            "max_length": self.max_length, "pooling": self.pooling, "normalize": self.normalize, **self.meta,
            "package_version": __version__,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "peft": peft_version},
        }

    def save_pretrained(self, out: str | Path, *, metrics: dict[str, Any] | None = None,
                        card: str | None = None, overwrite: bool = False) -> Path:
        """Write the artifact directory atomically: merged encoder, adapter, head, config, card."""
        import copy

        from safetensors.torch import save_file

        from ...atomic import atomic_directory

        if self.model is None:
            raise MasdrError("a router loaded with runtime='onnx' has no torch weights to save; save the torch one")
        from ...process import hf_progress_bars_off

        with atomic_directory(out, overwrite=overwrite) as tmp, hf_progress_bars_off():
            encoder = self.model.encoder
            if hasattr(encoder, "merge_and_unload"):  # a peft model: keep adapters, serve merged
                # adapters over a base the contrastive stage tuned do not apply to the published base
                if (self.meta.get("lora") or {}).get("base_weights", "pretrained") == "pretrained":
                    encoder.save_pretrained(tmp / ADAPTER_DIR, safe_serialization=True)
                    _portable_adapter_base(tmp / ADAPTER_DIR, self.meta.get("base_model"))
                merged = copy.deepcopy(encoder).merge_and_unload()
            else:
                merged = encoder
            head = {k: v.detach().cpu().contiguous() for k, v in self.model.head.state_dict().items()}
            layout = LAYOUT_ENCODER_HEAD
            if self.pooling == "pooler" and not self.normalize and standard_classifier_type(merged.config) is not None:
                # the head is the standard one: the artifact root is a transformers classifier
                _save_standard_classifier(merged, head, self.labels, tmp)
                self.tokenizer.save_pretrained(tmp)
                layout = LAYOUT_SEQUENCE_CLASSIFICATION
            else:
                merged.save_pretrained(tmp / ENCODER_DIR, safe_serialization=True)
                self.tokenizer.save_pretrained(tmp / ENCODER_DIR)
                save_file(head, str(tmp / HEAD_NAME))
            self.taxonomy.to_yaml(tmp / TAXONOMY_FILE)
            (tmp / METRICS_FILE).write_text(json.dumps(metrics or {}, indent=2) + "\n")
            if card:
                (tmp / CARD_FILE).write_text(card)
            # Written last: a directory without it is never taken for a router.
            (tmp / CONFIG_NAME).write_text(json.dumps(self.router_config(layout), indent=2) + "\n")
        return Path(out)

    def push_to_hub(self, repo_id: str, *, private: bool = True, token: str | None = None,
                    commit_message: str = "Upload masdr-router scope router", metrics: dict[str, Any] | None = None,
                    card: str | None = None) -> str:
        """Save the artifact and upload it to the Hugging Face Hub as a model repo (private by
        default); returns the commit URL. ``from_pretrained(repo_id)`` loads it back.

        >>> router.push_to_hub("my-org/bbc-scope-router")      # doctest: +SKIP
        """
        import tempfile

        from huggingface_hub import HfApi

        api = HfApi(token=token)
        with tempfile.TemporaryDirectory() as tmp:
            folder = self.save_pretrained(Path(tmp) / "router", metrics=metrics, card=card)
            api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
            info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message)
        return str(getattr(info, "commit_url", info))

    @classmethod
    def from_pretrained(cls, path: str | Path, *, taxonomy: Taxonomy | None = None,
                        device: str = "auto", runtime: str = "torch") -> LoraRouter:
        """Load an exported router on CPU or GPU; refuse one trained for another taxonomy.

        ``runtime="onnx"`` serves the logits from ``router.onnx`` with onnxruntime (CPU); the
        artifact must have been exported with ``masdr export onnx``."""
        if runtime not in RUNTIMES:
            raise MasdrError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        path = resolve_artifact(path)
        cfg = read_router_config(path)
        stored = Taxonomy.from_yaml(path / TAXONOMY_FILE)
        want = cfg["taxonomy"]["fingerprint"]
        if taxonomy is not None and taxonomy.fingerprint != want:
            raise TaxonomyMismatchError(
                f"router {path} was trained for taxonomy '{cfg['taxonomy']['name']}' ({want}), not for "
                f"'{taxonomy.name}' ({taxonomy.fingerprint}); retrain it with `masdr train`")
        if stored.fingerprint != want or stored.names != cfg["labels"]:
            raise ArtifactError(f"{path}: {TAXONOMY_FILE} does not match {CONFIG_NAME} (artifact corrupted?)")
        meta = {k: cfg[k] for k in ("base_model", "lora", "train", "threshold_objective", "vote") if k in cfg}
        standard = cfg.get("layout", LAYOUT_ENCODER_HEAD) == LAYOUT_SEQUENCE_CLASSIFICATION
        model_dir = path if standard else path / ENCODER_DIR
        common = {"temperature": cfg["temperature"], "threshold": cfg["threshold"], "meta": meta,
                  "below_threshold": cfg.get("below_threshold", "abstain"), "max_length": cfg["max_length"]}
        if runtime == "onnx":  # onnxruntime and tokenizers only: no torch, no transformers
            from .onnx import OnnxLogits, OnnxTokenizer

            if not (path / ONNX_FILE).is_file():
                raise ArtifactError(f"{path} has no {ONNX_FILE}; export it with `masdr export onnx --router {path}`")
            return cls(taxonomy or stored, None, OnnxTokenizer(model_dir), device="cpu",
                       onnx=OnnxLogits(path / ONNX_FILE), pooling=cfg["pooling"],
                       normalize=bool(cfg.get("normalize", False)), **common)
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        from ...devices import half_dtype, resolve_device
        from ...process import hf_progress_bars_off
        from .model import RouterModel

        dev = resolve_device(device)
        with hf_progress_bars_off():
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            if standard:
                from transformers import AutoModelForSequenceClassification

                classifier = AutoModelForSequenceClassification.from_pretrained(path)
                encoder, head = classifier.base_model, classifier.classifier.state_dict()
            else:
                encoder, head = AutoModel.from_pretrained(model_dir), load_file(str(path / HEAD_NAME))
        model = RouterModel(encoder, len(cfg["labels"]), pooling=cfg["pooling"], head_dropout=0.0,
                            normalize=bool(cfg.get("normalize", False)))
        model.head.load_state_dict(head)
        model.to(dev).eval()
        if dev == "cuda":
            model.to(half_dtype())
            model.head.float()
        return cls(taxonomy or stored, model, tokenizer, device=dev, **common)


def standard_classifier_type(config: Any) -> str | None:
    """The ``*ForSequenceClassification`` class whose head is exactly pooler -> dropout -> one
    linear layer (so a ``pooling="pooler"`` router is that model), or ``None`` for encoders whose
    standard head differs (RoBERTa's has a hidden layer; DistilBERT has no pooler)."""
    return {"bert": "BertForSequenceClassification"}.get(getattr(config, "model_type", ""))


def _save_standard_classifier(encoder: Any, head: dict[str, Any], labels: list[str], out: Path) -> None:
    """Write ``encoder`` + ``head`` as a standard sequence-classification model directory
    (config.json with architectures, id2label/label2id; model.safetensors) at ``out``."""
    import copy

    from transformers import AutoModelForSequenceClassification

    config = copy.deepcopy(encoder.config)
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    config.problem_type = "single_label_classification"
    config.architectures = [standard_classifier_type(config)]
    model = AutoModelForSequenceClassification.from_config(config)
    model.base_model.load_state_dict(encoder.state_dict())
    model.classifier.load_state_dict(head)
    model.save_pretrained(out, safe_serialization=True)


def is_hub_id(text: str) -> bool:
    """``owner/name`` that is not a local path."""
    return text.count("/") == 1 and not text.startswith((".", "/", "~")) and not Path(text).exists() and \
        all(part and part.strip() == part for part in text.split("/"))


def resolve_artifact(path: str | Path) -> Path:
    """A router directory, or a Hugging Face Hub repo id resolved through ``huggingface_hub``
    (from its local cache when ``HF_HUB_OFFLINE=1``, as everywhere in this package).

    >>> resolve_artifact("checkpoints/bbc-router")               # doctest: +SKIP
    >>> resolve_artifact("my-org/bbc-scope-router")             # doctest: +SKIP
    """
    if not is_hub_id(str(path)):
        return Path(path)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(str(path)))
    except (LocalEntryNotFoundError, RepositoryNotFoundError, HFValidationError, OSError) as e:
        raise ArtifactError(f"'{path}' is not a router directory, and as a Hugging Face Hub repo it could not be "
                            f"resolved ({type(e).__name__}; offline, only repos in the local Hub cache are found)"
                            ) from None


def _portable_adapter_base(adapter_dir: Path, base_model: str | None) -> None:
    """PEFT records the base model as the path it was loaded from (a site-packages directory of
    the training machine); record a name that resolves elsewhere instead."""
    from ...retrieval.embedder import portable_encoder_name

    cfg_path = adapter_dir / "adapter_config.json"
    if base_model is None or not cfg_path.is_file():
        return
    cfg = json.loads(cfg_path.read_text())
    local, portable = str(cfg.get("base_model_name_or_path") or ""), portable_encoder_name(base_model)
    cfg["base_model_name_or_path"] = portable
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    card = adapter_dir / "README.md"  # peft's own card names the base model too
    if local and card.is_file():
        card.write_text(card.read_text().replace(local, portable))


def read_router_config(path: Path) -> dict[str, Any]:
    """``router_config.json`` of the artifact at ``path``, checked for format and required keys."""
    return read_manifest_json(path, CONFIG_NAME, kind="router artifact", fmt=FORMAT, extra={"router_type": "lora"},
                              required=("labels", "taxonomy", "temperature", "threshold", "max_length", "pooling"),
                              make_hint="train one with `masdr train`", fix_hint="export it again")
