"""Serving a router's logits from ``router.onnx`` with onnxruntime (CPU). The export itself is in
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
