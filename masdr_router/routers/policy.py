"""How a routing decision becomes a search: which scopes, with which weights.

A misrouted query searches the wrong shard and loses its relevant documents entirely, so an
imperfect router with hard scoping can do worse than global search. The policies trade precision
(search one scope) against recall (search more when unsure):

- ``router``:  what the router decided (its scope; below its threshold its fallback, else global)
- ``hard``:    always the top-scoring scope, never abstain
- ``abstain``: the scope when confident, otherwise global search
- ``top2``:    the scope when confident, otherwise the two most likely scopes fused
- ``soft``:    the scope when confident, otherwise the most likely scopes covering 90 % of the
               probability (at most 3), fused with RRF weighted by their probabilities
"""

from __future__ import annotations

from typing import Literal, get_args

from ..errors import MasdrError
from .base import RouteDecision

Policy = Literal["router", "hard", "abstain", "top2", "soft"]
POLICIES: tuple[str, ...] = get_args(Policy)


def search_plan(decision: RouteDecision, policy: str = "router", *, soft_mass: float = 0.9,
                soft_max: int = 3) -> tuple[list[str] | None, list[float] | None]:
    """``(scopes, weights)`` to search for ``decision``; ``scopes=None`` means global search.

    >>> d = RouteDecision(scope=None, scores={"a": 0.5, "b": 0.3, "c": 0.2}, confidence=0.5)
    >>> search_plan(d, "top2")
    (['a', 'b'], None)
    >>> search_plan(d, "soft")
    (['a', 'b', 'c'], [0.5, 0.3, 0.2])
    """
    if policy not in POLICIES:
        raise MasdrError(f"unknown routing policy '{policy}'; expected one of {', '.join(POLICIES)}")
    ranked = [(s, v) for s, v in sorted(decision.scores.items(), key=lambda kv: -kv[1]) if v > 0]
    if policy == "router":
        return decision.search_scopes, None
    if policy == "hard":
        return ([ranked[0][0]], None) if ranked else (decision.search_scopes, None)
    if decision.scope is not None:
        return [decision.scope], None
    if policy == "abstain" or not ranked:
        return None, None
    if policy == "top2":
        return [s for s, _ in ranked[:2]], None
    chosen, mass = [], 0.0
    for s, v in ranked[:soft_max]:
        chosen.append((s, v))
        mass += v
        if mass >= soft_mass - 1e-9:  # 0.6 + 0.3 is 0.8999... in floating point
            break
    return [s for s, _ in chosen], [v for _, v in chosen]
