"""Reference "routers" for evaluation: global (never scopes) and oracle (the gold scope)."""

from __future__ import annotations

from ..errors import MasdrError
from .base import RouteDecision, Router, register_router


@register_router("global")
class GlobalRouter(Router):
    """Always abstains, so search runs over the whole corpus (the monolithic baseline)."""

    name = "global"

    def _route(self, query: str) -> RouteDecision:
        return RouteDecision(scope=None, stage=self.name)


@register_router("oracle")
class OracleRouter(Router):
    """Returns the gold scope. Only meaningful in evaluation, where the gold label is known."""

    name = "oracle"

    def __init__(self, taxonomy, gold: dict[str, str] | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(taxonomy)
        self.gold = gold or {}

    def _route(self, query: str) -> RouteDecision:
        if query not in self.gold:
            raise MasdrError("the oracle router only works in evaluation, where each query's gold scope is known")
        scope = self.gold[query]
        return RouteDecision(scope=scope, scores={scope: 1.0}, stage=self.name, confidence=1.0)
