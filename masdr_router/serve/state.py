"""What one service instance holds (taxonomy, index, router, LLM client, keys) and the blocking work
on it: loading, hot reload, entitlement-restricted routing and search, synthesis.

The router is swapped by one reference assignment: a request that already took the old router
finishes with it, the next takes the new one, so a reload drops nothing in flight.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import SearchConfig
from ..errors import MasdrError, UsageError
from .auth import Caller, KeyStore
from .config import ServeConfig

if TYPE_CHECKING:
    from ..llm.client import LLMClient
    from ..retrieval.index import Hit, ScopedIndex
    from ..routers.base import RouteDecision, Router
    from ..taxonomy import Taxonomy

log = logging.getLogger("masdr_router.serve")
SERVING_SEARCH = SearchConfig(global_head=1, global_in_scope=True)


class Forbidden(MasdrError):
    """The caller is not entitled to what it asked for (HTTP 403)."""


class NotReady(MasdrError):
    """The service is still loading, or lacks what the endpoint needs (HTTP 503)."""


class LLMUnavailable(MasdrError):
    """The LLM endpoint failed and the service is configured to say so (HTTP 503)."""


@dataclasses.dataclass
class LoadedRouter:
    """A router with the spec it was built from and its search policy."""

    router: Router
    spec: str
    name: str  # for display: an artifact by its directory name
    policy: str
    loaded_at: float


class ServiceState:
    """Models and settings of one service; :meth:`load` is blocking (run it in a thread).

    >>> state = ServiceState(ServeConfig(router="regex", taxonomy="data/bbc/taxonomy.yaml"))  # doctest: +SKIP
    >>> state.load(); state.current.router.route("cup final").scope                          # doctest: +SKIP
    'sport'
    """

    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.ready = False
        self.error: str | None = None  # why loading failed, for /ready
        self.taxonomy: Taxonomy | None = None
        self.index: ScopedIndex | None = None
        self.llm: LLMClient | None = None
        self.keys: KeyStore | None = None
        self.search = SearchConfig()
        self.current: LoadedRouter | None = None
        self._reload_lock = threading.Lock()

    # ---- what requests use -----------------------------------------------------------------------
    def loaded(self) -> tuple[LoadedRouter, Taxonomy]:
        """The router serving now and the taxonomy; :class:`NotReady` until loading has finished."""
        if not self.ready or self.current is None or self.taxonomy is None:
            raise NotReady(f"not ready: {self.error}" if self.error else "not ready: still loading")
        return self.current, self.taxonomy

    @property
    def client(self) -> LLMClient:
        """The LLM client answers are synthesised with (:class:`NotReady` until loaded)."""
        if self.llm is None:
            raise NotReady("not ready: no LLM client yet")
        return self.llm

    # ---- loading ---------------------------------------------------------------------------------
    def load(self) -> None:
        from ..llm.client import LLMClient
        from ..llm.config import LLMConfig
        from ..retrieval.index import ScopedIndex
        from ..taxonomy import Taxonomy

        cfg = self.cfg
        tax = Taxonomy.from_yaml(cfg.taxonomy) if cfg.taxonomy else None
        if tax is None and cfg.index is None:
            tax = self._artifact_taxonomy()
        self.index = ScopedIndex.load(cfg.index, taxonomy=tax) if cfg.index else None
        self.taxonomy = tax or self.index.taxonomy  # type: ignore[union-attr]
        # serving defaults to both recall guards: routing should raise precision, never cost recall
        base = SearchConfig.from_yaml(cfg.search_config) if cfg.search_config else SERVING_SEARCH
        self.search = base.with_overrides(global_head=cfg.global_head, global_in_scope=cfg.global_in_scope)
        # as every command: the config file, else the MASDR_LLM_* / OPENAI_* variables; a flag wins
        llm = LLMConfig.from_yaml(cfg.llm_config) if cfg.llm_config else LLMConfig.from_env()
        self.llm = LLMClient(llm.with_overrides(base_url=cfg.llm_base_url))
        self.keys = KeyStore.from_yaml(cfg.api_keys_file, self.taxonomy) if cfg.api_keys_file else None
        self.current = self._initial_router()
        if self.index is not None:
            self.index.warm()
        self.ready = True
        log.info("serving router %s over %s", self.current.spec, cfg.index or "no index (route only)")

    def _artifact_taxonomy(self) -> Taxonomy:
        """Route-only serving of an exported router: the taxonomy it carries."""
        from ..routers.spec import artifact_taxonomy, parse_router_spec

        carried = artifact_taxonomy([parse_router_spec(self.cfg.router)])
        if carried is None:
            raise UsageError("serve needs a taxonomy (--taxonomy), an index (--index, whose taxonomy is used) or an "
                             "exported router artifact (which carries its taxonomy)")
        return carried

    def _initial_router(self) -> LoadedRouter:
        """The last router that loaded (``state_file``), else the configured one."""
        if self.cfg.state_file and Path(self.cfg.state_file).is_file():
            try:
                spec = json.loads(Path(self.cfg.state_file).read_text(encoding="utf-8"))["router"]
                return self.build(spec)
            except (MasdrError, OSError, ValueError, KeyError, TypeError) as e:
                log.warning("state file %s: %s; serving the configured router %s", self.cfg.state_file, e,
                            self.cfg.router)
        return self.build(self.cfg.router)

    def build(self, spec: str) -> LoadedRouter:
        """Build and check a router for this service's taxonomy and index (raises MasdrError)."""
        from ..routers.spec import build_router, parse_router_spec

        parsed = parse_router_spec(spec)
        router = build_router(parsed, taxonomy=self.taxonomy, index=self.index, llm=self.llm, search=self.search)
        if router.max_llm_calls == 0:  # a router that cannot even route one query is not swapped in
            router.route_batch(["smoke test of a freshly loaded router"])
        policy = parsed.policy if parsed.policy != "router" else self.cfg.policy
        return LoadedRouter(router, parsed.text, parsed.name, policy, time.time())

    def reload(self, spec: str | None = None) -> LoadedRouter:
        """Load ``spec`` (default: the one serving now, re-read from disk) and swap it in; on any
        failure the old router keeps serving and the error is raised."""
        from ..atomic import write_json_atomic

        with self._reload_lock:  # one reload at a time; requests keep using self.current meanwhile
            current, _ = self.loaded()
            new = self.build(spec or current.spec)
            self.current = new
            if self.cfg.state_file:
                write_json_atomic(self.cfg.state_file, {"router": new.spec, "loaded_at": new.loaded_at})
            log.info("reloaded router %s", new.spec)
            return new

    # ---- entitlements ----------------------------------------------------------------------------
    @staticmethod
    def restrict(decision: RouteDecision, caller: Caller) -> RouteDecision:
        """The decision as a caller limited to some scopes may see it: scores of its scopes only; a
        scope it is not entitled to becomes an abstention that falls back to its own scopes (the
        router's pick is not named, which would tell the caller where the answer lives)."""
        if caller.scopes is None:
            return decision
        scores = {s: v for s, v in decision.scores.items() if s in caller.scopes}
        fallback = tuple(s for s in decision.fallback if s in caller.scopes)
        if decision.scope is not None and decision.scope in caller.scopes:
            return dataclasses.replace(decision, scores=scores, fallback=fallback)
        best = max(scores.values(), default=None)
        entry = {"stage": "entitlement", "accepted": False,
                 "reason": "the router's scope is not among the caller's scopes" if decision.scope
                 else "the router abstained"}
        return dataclasses.replace(decision, scope=None, scores=scores, confidence=best,
                                   fallback=fallback or tuple(sorted(caller.scopes)),
                                   trace=(*decision.trace, entry))

    def plan(self, decision: RouteDecision | None, caller: Caller, scope: str | None,
             policy: str) -> tuple[list[str] | None, list[float] | None, SearchConfig]:
        """Scopes (``None``: all), weights and search settings for one query, never outside what
        ``caller`` is entitled to."""
        from ..routers.policy import search_plan

        _, taxonomy = self.loaded()
        search = self.search
        # the global recall guard guards against the router's mistakes; it would bring in other
        # scopes' chunks, which a limited caller may not see and a caller naming its scope did not ask for
        if (caller.scopes is not None or scope is not None) and search.global_head:
            search = search.with_overrides(global_head=0)
        if scope is not None:
            taxonomy.check_scope(scope)
            if not caller.allows(scope):
                raise Forbidden(f"this API key is not entitled to scope '{scope}'")
            return [scope], None, search
        if decision is None:
            raise ValueError("plan() needs the routing decision when no scope is given")
        scopes, weights = search_plan(decision, policy)
        if caller.scopes is not None:
            keep = [i for i, s in enumerate(scopes or []) if s in caller.scopes]
            if not keep:
                return sorted(caller.scopes), None, search
            scopes = [scopes[i] for i in keep]  # type: ignore[index]
            weights = [weights[i] for i in keep] if weights else None
        return scopes, weights, search

    def search_one(self, query: str, scopes: list[str] | None, weights: list[float] | None, search: SearchConfig,
                   k: int, caller: Caller) -> list[Hit]:
        if self.index is None:
            raise NotReady("this service was started without an index (--index): it can route, not search")
        hits = self.index.search_many([query], [scopes], k, search, weights=[weights] if weights else None)[0]
        if caller.scopes is not None:  # the last line of defence: nothing leaves that the caller may not see
            hits = [h for h in hits if caller.scopes.intersection(h.scopes)]
        return hits


def hit_dict(h: Hit, *, text: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"chunk_id": h.chunk_id, "doc_id": h.doc_id, "scopes": list(h.scopes),
                           "score": round(float(h.score), 6)}
    if text:
        out["text"] = h.text
    return out
