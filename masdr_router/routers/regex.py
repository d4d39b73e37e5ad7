"""Regex router: the taxonomy's ``patterns``, compiled once, scored deterministically."""

from __future__ import annotations

import re

from ..taxonomy import Taxonomy
from .base import RouteDecision, Router, register_router


class RegexRouter(Router):
    """Score each scope by how many *distinct* patterns of it match the query (case-insensitive).

    The best scope wins. It abstains when nothing matches or when the best score is shared by
    several scopes: a tie is a sign the rules cannot tell, and guessing would risk searching the
    wrong shard. ``scores`` are the match counts normalised to sum to 1.
    """

    name = "regex"

    def __init__(self, taxonomy: Taxonomy, *, flags: int = re.IGNORECASE) -> None:
        super().__init__(taxonomy)
        self.compiled = {s.name: [re.compile(p, flags) for p in s.patterns] for s in taxonomy.scopes}

    def _route(self, query: str) -> RouteDecision:
        counts = {name: sum(1 for p in pats if p.search(query)) for name, pats in self.compiled.items()}
        total = sum(counts.values())
        if total == 0:
            return RouteDecision(scope=None, scores=dict.fromkeys(counts, 0.0), stage=self.name)
        scores = {k: v / total for k, v in counts.items()}
        best = max(counts.values())
        winners = [k for k, v in counts.items() if v == best]
        if len(winners) > 1:
            return RouteDecision(scope=None, scores=scores, stage=self.name, confidence=scores[winners[0]])
        return RouteDecision(scope=winners[0], scores=scores, stage=self.name, confidence=scores[winners[0]])


@register_router("regex")
def _regex(taxonomy: Taxonomy, **_: object) -> RegexRouter:
    return RegexRouter(taxonomy)
