"""The router interface every router shares: ``route(query) -> RouteDecision``."""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..query import validate_query
from ..taxonomy import Taxonomy


@dataclass(frozen=True)
class RouteDecision:
    """What a router decided for one query.

    ``scope`` is ``None`` when the router abstains (callers then search globally or fall back to
    the next stage). ``scores`` holds a per-scope score (a probability for calibrated routers).
    """

    scope: str | None
    scores: dict[str, float] = field(default_factory=dict)
    stage: str = ""
    latency_ms: float = 0.0
    confidence: float | None = None
    trace: tuple[dict[str, Any], ...] = ()
    fallback: tuple[str, ...] = ()  # scopes to search fused when abstaining; empty = global search

    @property
    def abstained(self) -> bool:
        return self.scope is None

    @property
    def llm_calls(self) -> int:
        """Router LLM calls this decision cost (cascade stages are in the trace)."""
        if self.trace:
            return sum(1 for t in self.trace if t.get("stage") == "llm")
        return int(self.stage == "llm")

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
                "trace": list(self.trace)}


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


_REGISTRY: dict[str, Callable[..., Router]] = {}


def register_router(name: str) -> Callable[[Callable[..., Router]], Callable[..., Router]]:
    """Register a router factory ``factory(taxonomy, **kwargs)`` under a CLI name."""

    def deco(factory: Callable[..., Router]) -> Callable[..., Router]:
        _REGISTRY[name] = factory
        return factory

    return deco


def registered_routers() -> dict[str, Callable[..., Router]]:
    return dict(_REGISTRY)
