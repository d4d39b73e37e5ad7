"""The trained LoRA router (R2-Routed) and everything inference needs: the model, the artifact's
file names, softmax with temperature, and the ONNX runtime. Training lives in
:mod:`masdr_router.training`, which builds on this package (never the other way round)."""

from .files import CONFIG_NAME, FORMAT, HEAD_NAME, ONNX_FILE
from .router import LoraRouter, softmax

__all__ = ["CONFIG_NAME", "FORMAT", "HEAD_NAME", "ONNX_FILE", "LoraRouter", "softmax"]
