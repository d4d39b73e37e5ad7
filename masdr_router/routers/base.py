"""The router interface every router shares: ``route(query) -> RouteDecision``."""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..query import validate_query
from ..taxonomy import Taxonomy

if TYPE_CHECKING:
    from ..llm.protocol import ChatClient
    from .vote import SearchIndex


@dataclass(frozen=True)
class RouteDecision:
    """What a router decided for one query.

    ``scope`` is ``None`` when the router abstains (callers then search globally or fall back to
    the next stage). ``scores`` holds a per-scope score (a probability for calibrated routers).
    ``llm_calls`` counts the LLM requests this decision cost (cascades add up their stages').
    """

    scope: str | None
    scores: dict[str, float] = field(default_factory=dict)
    stage: str = ""
    latency_ms: float = 0.0
    confidence: float | None = None
    trace: tuple[dict[str, Any], ...] = ()
    fallback: tuple[str, ...] = ()  # scopes to search fused when abstaining; empty = global search
    llm_calls: int = 0

    @property
    def abstained(self) -> bool:
        return self.scope is None

    @property
    def search_scopes(self) -> list[str] | None:
        """What retrieval should search: the scope, else the fallback scopes, else ``None`` (global)."""
        if self.scope is not None:
            return [self.scope]
        return list(self.fallback) or None

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "abstained": self.abstained, "stage": self.stage,
                "confidence": self.confidence, "latency_ms": round(self.latency_ms, 3),
                "scores": {k: round(v, 6) for k, v in self.scores.items()}, "fallback": list(self.fallback),
                "llm_calls": self.llm_calls, "trace": list(self.trace)}


class Router(ABC):
    """Base class: subclasses implement :meth:`_route`; :meth:`route` validates and times it.

    >>> from masdr_router import RegexRouter, Taxonomy
    >>> t = Taxonomy.from_dict({"name": "t", "scopes": [
    ...     {"name": "sport", "description": "Sport.", "match": {"c": "s"}, "patterns": ["\\\\bgoal"]},
    ...     {"name": "tech", "description": "Tech.", "match": {"c": "t"}, "patterns": ["\\\\bchip"]}]})
    >>> RegexRouter(t).route("a late goal").scope
    'sport'
    """

    name: str = "router"
    #: the most LLM requests one decision can cost (a cascade allows at most one)
    max_llm_calls: int = 0

    def __init__(self, taxonomy: Taxonomy) -> None:
        self.taxonomy = taxonomy

    @abstractmethod
    def _route(self, query: str) -> RouteDecision:
        """Route one validated query. ``latency_ms`` is filled in by :meth:`route`."""

    def route(self, query: str) -> RouteDecision:
        q = validate_query(query)
        t0 = time.perf_counter()
        d = self._route(q)
        ms = (time.perf_counter() - t0) * 1000
        return dataclasses.replace(d, stage=d.stage or self.name, latency_ms=ms)

    def route_batch(self, queries: list[str]) -> list[RouteDecision]:
        return [self.route(q) for q in queries]


class RouterFactory(Protocol):
    """Builds a registered router. ``index`` and ``llm`` are what a router may need beyond the
    taxonomy: a factory uses what it needs and ignores the rest."""

    def __call__(self, taxonomy: Taxonomy, *, index: SearchIndex | None = None,
                 llm: ChatClient | None = None) -> Router: ...


_REGISTRY: dict[str, RouterFactory] = {}
F = TypeVar("F", bound=RouterFactory)


def register_router(name: str) -> Callable[[F], F]:
    """Register a router factory under a spec name (``regex``, ``llm``, ...): see :class:`RouterFactory`."""

    def deco(factory: F) -> F:
        _REGISTRY[name] = factory
        return factory

    return deco


def registered_routers() -> dict[str, RouterFactory]:
    return dict(_REGISTRY)
