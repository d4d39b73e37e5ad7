"""Serving a router's logits from ``router.onnx`` with onnxruntime (CPU), tokenised with the
``tokenizers`` library: no torch and no transformers at serving time. The export itself is in
:mod:`masdr_router.training.onnx_export`."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class OnnxLogits:
    """Callable ``(input_ids, attention_mask) -> logits`` over an onnxruntime session."""

    def __init__(self, path: str | Path, *, threads: int | None = None) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"input_ids": input_ids.astype(np.int64),
                                       "attention_mask": attention_mask.astype(np.int64)})[0]


class OnnxTokenizer:
    """The artifact's fast tokenizer (``tokenizer.json``) without transformers: called like a
    transformers tokenizer with ``padding=True, truncation=True, return_tensors="np"``.

    >>> tok = OnnxTokenizer("checkpoints/bbc-router/encoder")          # doctest: +SKIP
    >>> tok(["cup final"], max_length=64)["input_ids"].shape           # doctest: +SKIP
    (1, 4)
    """

    def __init__(self, folder: str | Path) -> None:
        import json

        from tokenizers import Tokenizer

        folder = Path(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        conf_path = folder / "tokenizer_config.json"
        conf = json.loads(conf_path.read_text()) if conf_path.is_file() else {}
        pad = conf.get("pad_token") or "[PAD]"
        pad = pad.get("content", "[PAD]") if isinstance(pad, dict) else pad
        self.pad_token, self.pad_id = pad, self.tokenizer.token_to_id(pad) or 0

    def __call__(self, texts: list[str], *, max_length: int, padding: bool = True, truncation: bool = True,
                 return_tensors: str = "np") -> dict[str, np.ndarray]:
        self.tokenizer.enable_truncation(max_length) if truncation else self.tokenizer.no_truncation()
        if padding:
            self.tokenizer.enable_padding(pad_id=self.pad_id, pad_token=self.pad_token)
        enc = self.tokenizer.encode_batch(list(texts))
        return {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64)}
