"""One running service: the loaded state, metrics, the micro-batcher, callers, and the app's lifespan
(load in the background so ``/health`` answers at once and ``/ready`` says 503 until loaded;
SIGHUP reloads the router)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..errors import QueryError
from ..query import validate_query
from .auth import ANONYMOUS, Caller
from .batching import MicroBatcher
from .config import ServeConfig
from .metrics import Metrics
from .state import ServiceState

if TYPE_CHECKING:
    from ..routers.base import RouteDecision

log = logging.getLogger("masdr_router.serve")


class Unauthorized(Exception):
    """No API key, or one the service does not know (HTTP 401)."""


class TooMany(QueryError):
    """More queries in one request than ``max_queries`` (HTTP 413, as TEI answers a batch too large)."""


class Service:
    """Everything a request handler needs, created per app (no module-level state)."""

    def __init__(self, cfg: ServeConfig, state: ServiceState | None = None) -> None:
        self.cfg = cfg
        self.state = state or ServiceState(cfg)
        self.metrics = Metrics.create()
        # one thread runs the router: torch parallelises inside a forward pass, and concurrent
        # forward passes on the same cores only slow each other down
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masdr-router")
        self.batcher = MicroBatcher(self._route_now, max_batch_size=cfg.max_batch_size, max_wait_ms=cfg.max_wait_ms,
                                    executor=self.executor,
                                    on_batch=lambda n, _s: self.metrics.batch_size.observe(n))

    # ---- lifespan --------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Any) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        self.batcher.start()
        loading = None if self.state.ready else loop.run_in_executor(None, self._load)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not in the main thread
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, self._reload_on_signal))
        try:
            yield
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGHUP)
            if loading is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(loading), timeout=0.1)
            await self.batcher.stop()
            self.executor.shutdown(wait=False, cancel_futures=True)

    def _load(self) -> None:
        try:
            self.state.load()
        except Exception as e:  # /ready reports it; the process stays up so the reason can be read
            self.state.error = f"{type(e).__name__}: {e}"
            log.error("loading failed: %s", self.state.error)

    def _reload_on_signal(self) -> None:
        try:
            new = self.state.reload()
            self.metrics.reloads.labels(outcome="ok").inc()
            log.info("SIGHUP: router %s reloaded", new.spec)
        except Exception as e:
            self.metrics.reloads.labels(outcome="refused").inc()
            log.error("SIGHUP: reload refused, the old router keeps serving: %s", e)

    # ---- requests ----------------------------------------------------------------------------------
    def require_ready(self) -> None:
        self.state.loaded()

    def caller(self, authorization: str | None) -> Caller:
        keys = self.state.keys
        if keys is None:
            return ANONYMOUS
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        found = keys.lookup(token.strip())
        if found is None:
            raise Unauthorized("invalid API key")
        return found

    def check_queries(self, texts: list[str]) -> list[str]:
        """Stripped queries, or a QueryError naming the bad one (``query[i]`` in a batch)."""
        if not texts:
            raise QueryError("no query given")
        if len(texts) > self.cfg.max_queries:
            raise TooMany(f"{len(texts)} queries in one request; the limit is {self.cfg.max_queries}")
        out = []
        for i, t in enumerate(texts):
            try:
                out.append(validate_query(t, max_chars=self.cfg.max_query_chars))
            except QueryError as e:
                raise QueryError(f"query[{i}]: {e}" if len(texts) > 1 else str(e)) from None
            if any(0xD800 <= ord(c) <= 0xDFFF for c in t):  # a lone surrogate ("\ud800" in JSON): not UTF-8
                raise QueryError(f"query[{i}] is not valid UTF-8 text" if len(texts) > 1
                                 else "query is not valid UTF-8 text")
        return out

    def _route_now(self, texts: list[str]) -> list[RouteDecision]:
        current, _ = self.state.loaded()
        return current.router.route_batch(texts)

    async def route(self, texts: list[str]) -> list[RouteDecision]:
        """Decisions for validated ``texts``: micro-batched with concurrent requests, or alone."""
        self.require_ready()
        if self.cfg.batching:
            decisions = await self.batcher.submit(texts)
        else:
            loop = asyncio.get_running_loop()
            decisions = await loop.run_in_executor(self.executor, self._route_now, texts)
            self.metrics.batch_size.observe(len(texts))
        for d in decisions:
            self.metrics.decided(d.scope, d.stage)
        return decisions

    async def timed(self, coro: Any) -> Any:
        """``coro`` under the request timeout (TimeoutError -> 504)."""
        return await asyncio.wait_for(coro, timeout=self.cfg.request_timeout_s)
