"""Reference "routers" for evaluation: global (never scopes) and oracle (the gold scope)."""

from __future__ import annotations

from ..errors import MasdrError
from ..taxonomy import Taxonomy
from .base import RouteDecision, Router, register_router


class GlobalRouter(Router):
    """Always abstains, so search runs over the whole corpus (the monolithic baseline)."""

    name = "global"

    def _route(self, query: str) -> RouteDecision:
        return RouteDecision(scope=None, stage=self.name)


class OracleRouter(Router):
    """Returns the gold scope. Only meaningful in evaluation, where the gold label is known."""

    name = "oracle"

    def __init__(self, taxonomy: Taxonomy, gold: dict[str, str] | None = None) -> None:
        super().__init__(taxonomy)
        self.gold = gold or {}

    def _route(self, query: str) -> RouteDecision:
        if query not in self.gold:
            raise MasdrError("the oracle router only works in evaluation, where each query's gold scope is known")
        scope = self.gold[query]
        return RouteDecision(scope=scope, scores={scope: 1.0}, stage=self.name, confidence=1.0)


@register_router("global")
def _global(taxonomy: Taxonomy, **_: object) -> GlobalRouter:
    return GlobalRouter(taxonomy)


@register_router("oracle")
def _oracle(taxonomy: Taxonomy, **_: object) -> OracleRouter:
    """Evaluation fills in the gold scopes (:func:`~masdr_router.evaluation.retrieval.evaluate_retrieval`)."""
    return OracleRouter(taxonomy)
