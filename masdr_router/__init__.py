"""masdr_router: scope-first retrieval-augmented generation.

Importing the package is cheap: heavy libraries (torch, transformers, faiss) load only inside the
functions that need them. The public API is re-exported here lazily.

>>> import masdr_router
>>> masdr_router.__version__
'0.1.0'
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_EXPORTS = {
    "Taxonomy": "taxonomy", "Scope": "taxonomy", "load_taxonomy": "taxonomy",
    "Document": "data", "Chunk": "data", "LabelledQuery": "data", "read_corpus": "data",
    "read_queries": "data", "write_corpus": "data", "write_queries": "data", "chunk_document": "data",
    "IndexConfig": "config", "SearchConfig": "config",
    "MasdrError": "errors", "ValidationError": "errors", "ConfigError": "errors", "UsageError": "errors",
    "OutputExistsError": "errors", "OutputError": "errors", "UnknownScopeError": "errors",
    "TaxonomyMismatchError": "errors", "ArtifactError": "errors", "QueryError": "errors", "DatasetError": "errors",
    "LLMError": "errors",
    "Router": "routers", "RouteDecision": "routers", "RegexRouter": "routers", "GlobalRouter": "routers",
    "OracleRouter": "routers", "LLMRouter": "routers", "CascadeRouter": "routers", "Stage": "routers",
    "RouterSpec": "routers", "parse_router_spec": "routers", "build_router": "routers",
    "build_systems": "routers", "register_router": "routers", "LoraRouter": "routers.lora",
    "RetrievalVoteRouter": "routers.vote",
    "ChatClient": "llm.protocol", "LLMClient": "llm.client", "LLMConfig": "llm.config", "LocalLLMServer": "llm.server",
    "ScopedRAG": "answer.rag", "Answer": "answer.rag", "Orchestrator": "answer.orchestrator",
    "TrainConfig": "training.config", "train_router": "training.trainer", "TrainResult": "training.trainer",
    "evaluate_router": "evaluation.router", "evaluate_retrieval": "evaluation.retrieval",
    "ScopedIndex": "retrieval.index", "Hit": "retrieval.index", "Embedder": "retrieval.embedder",
    "load_dataset": "datasets", "SynthConfig": "querygen", "synthesize_queries": "querygen",
    "ServeConfig": "serve.config", "create_app": "serve.app",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'masdr_router' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
