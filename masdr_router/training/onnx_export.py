"""Optional ONNX export of a router artifact for CPU serving with onnxruntime, checked against
the torch outputs before it is kept."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MasdrError

# checked when the caller has no queries of its own: any text exercises the graph's shapes
SAMPLE_QUERIES = ("Shares slide as profits fall", "Who won the cup final?", "New rules for broadband providers",
                  "Minister promises tax cuts before the election", "Film star wins best actor award")


def export_onnx(artifact: str | Path, sample_texts: list[str], *, atol: float = 1e-4) -> dict[str, Any]:
    """Export ``artifact/encoder + head`` to ``artifact/router.onnx`` (logits), verify it on
    ``sample_texts`` against torch, and record it in ``router_config.json``.

    >>> export_onnx("checkpoints/bbc-router", ["Shares slide as profits fall"])  # doctest: +SKIP
    {'file': 'router.onnx', 'max_abs_diff': 7e-07, ...}
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise MasdrError("ONNX export needs onnx and onnxruntime (pip install 'masdr-router[onnx]')") from None
    import torch

    from ..routers.lora import CONFIG_NAME, ONNX_FILE, LoraRouter

    artifact = Path(artifact)
    router = LoraRouter.from_pretrained(artifact, device="cpu")
    if not sample_texts:
        raise MasdrError("ONNX export needs at least one sample query to verify the exported graph")

    class _Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids, attention_mask)

    wrapped = _Logits(router.model).eval()
    enc = router.tokenizer(sample_texts[:2], padding=True, truncation=True, max_length=router.max_length,
                           return_tensors="pt")
    fd, tmp = tempfile.mkstemp(prefix=".router.", suffix=".onnx", dir=artifact)
    os.close(fd)
    try:
        # The TorchScript-based exporter: stable for BERT-style encoders, no extra dependencies.
        # Its tracer warns about shape-dependent Python branches in transformers' masking code; the
        # check against torch below, on batches of other lengths, is what tells whether it is right.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapped, (enc["input_ids"], enc["attention_mask"]), tmp,
                              input_names=["input_ids", "attention_mask"], output_names=["logits"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                            "attention_mask": {0: "batch", 1: "tokens"}, "logits": {0: "batch"}},
                              opset_version=17, dynamo=False)
        session = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])
        enc_np = router.tokenizer(sample_texts, padding=True, truncation=True, max_length=router.max_length,
                                  return_tensors="np")
        got = session.run(None, {"input_ids": enc_np["input_ids"].astype(np.int64),
                                 "attention_mask": enc_np["attention_mask"].astype(np.int64)})[0]
        want = router.logits(sample_texts)
        diff = float(np.abs(got - want).max())
        if diff > atol or not (got.argmax(1) == want.argmax(1)).all():
            raise MasdrError(f"ONNX export does not match torch (max |diff| {diff:.2e} > {atol:.0e}); not kept")
        os.replace(tmp, artifact / ONNX_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    info = {"file": ONNX_FILE, "opset": 17, "max_abs_diff": diff, "checked_on": len(sample_texts),
            "onnxruntime": ort.__version__}
    cfg = json.loads((artifact / CONFIG_NAME).read_text())
    cfg["onnx"] = info
    from ..atomic import write_json_atomic

    write_json_atomic(artifact / CONFIG_NAME, cfg)
    return info
