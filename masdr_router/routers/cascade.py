"""The cascade router (Hybrid-Routed and beyond): regex -> trained LoRA -> zero-shot LLM -> global.

Each stage answers only when it is confident enough (its own threshold); otherwise the next stage
tries. When every stage abstains the query is searched globally. The decision carries a trace:
which stage decided, with what confidence, and how long every stage took. An LLM stage may appear
at most once, so a query costs at most one router LLM call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MasdrError
from ..taxonomy import Taxonomy
from .base import RouteDecision, Router, register_router

if TYPE_CHECKING:
    from ..llm.protocol import ChatClient


@dataclass
class Stage:
    """One cascade stage: a router and the confidence it needs to decide (``None``: its own call).

    A threshold replaces the router's own: ``DIR@0.5`` decides every query its top scope scores at
    least 0.5 on, also where the router's calibrated threshold (say 0.8) would have abstained. A
    stage that abstains for another reason (no rule matched, a tie, no confidence) still abstains.
    """

    router: Router
    threshold: float | None = None

    def scope(self, d: RouteDecision) -> str | None:
        """The scope this stage decides from the router's decision ``d``, or ``None``: the next stage tries."""
        if self.threshold is None or d.confidence is None:
            return d.scope
        if d.confidence < self.threshold:
            return None
        if d.scope is not None:
            return d.scope
        ranked = sorted(d.scores.items(), key=lambda kv: kv[1], reverse=True)
        if not ranked or ranked[0][1] <= 0 or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
            return None  # no rule matched, or a tie: nothing to decide at any threshold
        return ranked[0][0]


class CascadeRouter(Router):
    """Route with the first confident stage.

    >>> cascade = CascadeRouter(tax, [Stage(RegexRouter(tax)), Stage(lora, 0.9), Stage(llm)])  # doctest: +SKIP
    >>> cascade.route("Shares slide as profits fall").stage                                    # doctest: +SKIP
    'regex'
    """

    name = "cascade"

    def __init__(self, taxonomy: Taxonomy, stages: Sequence[Stage]) -> None:
        super().__init__(taxonomy)
        if not stages:
            raise MasdrError("a cascade needs at least one stage")
        if sum(s.router.max_llm_calls for s in stages) > 1:
            raise MasdrError("a cascade may have at most one LLM stage (one router LLM call per query)")
        for s in stages:
            if s.router.taxonomy.fingerprint != taxonomy.fingerprint:
                raise MasdrError(f"cascade stage '{s.router.name}' was built for taxonomy "
                                 f"'{s.router.taxonomy.name}', not '{taxonomy.name}'")
        self.stages = list(stages)
        self.max_llm_calls = sum(s.router.max_llm_calls for s in stages)

    def _route(self, query: str) -> RouteDecision:
        trace = []
        llm_calls = 0
        for stage in self.stages:
            t0 = time.perf_counter()
            d = stage.router.route(query)
            llm_calls += d.llm_calls
            ms = (time.perf_counter() - t0) * 1000
            scope = stage.scope(d)
            ok = scope is not None
            entry = {"stage": stage.router.name, "scope": scope if ok else d.scope, "confidence": d.confidence,
                     "threshold": stage.threshold, "accepted": ok, "latency_ms": round(ms, 3)}
            errors = [t["error"] for t in d.trace if "error" in t]
            if errors:
                entry["error"] = errors[0]
            trace.append(entry)
            if ok:
                return RouteDecision(scope=scope, scores=d.scores, stage=stage.router.name,
                                     confidence=d.confidence, trace=tuple(trace), llm_calls=llm_calls)
        last = trace[-1]
        return RouteDecision(scope=None, stage="global", trace=(*trace, {"stage": "global", "accepted": True}),
                             confidence=last.get("confidence"), llm_calls=llm_calls)


@register_router("cascade")
def hybrid_routed(taxonomy: Taxonomy, *, llm: ChatClient | None = None, **_: object) -> CascadeRouter:
    """``cascade``: the paper's Hybrid-Routed system, regex first and the zero-shot LLM when the
    rules abstain; the same as the spec ``regex,llm``. Longer cascades are specs too:
    ``regex,DIR,llm``."""
    from .llm import LLMRouter
    from .regex import RegexRouter

    return CascadeRouter(taxonomy, [Stage(RegexRouter(taxonomy)), Stage(LLMRouter(taxonomy, llm))])
