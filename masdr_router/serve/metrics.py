"""Prometheus metrics of one app instance (its own registry: two apps in a process never mix)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class Metrics:
    """Counters and histograms ``/metrics`` exposes (names prefixed ``masdr_``)."""

    registry: Any
    requests: Any
    latency: Any
    decisions: Any
    abstentions: Any
    batch_size: Any
    llm_failures: Any
    reloads: Any

    @classmethod
    def create(cls) -> Metrics:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        reg = CollectorRegistry()
        return cls(
            registry=reg,
            requests=Counter("masdr_requests", "HTTP requests by endpoint and status code",
                             ["endpoint", "status"], registry=reg),
            latency=Histogram("masdr_request_latency_seconds", "request latency by endpoint", ["endpoint"],
                              buckets=LATENCY_BUCKETS, registry=reg),
            decisions=Counter("masdr_route_decisions", "routing decisions by scope ('none' when abstaining) "
                              "and the stage that decided", ["scope", "stage"], registry=reg),
            abstentions=Counter("masdr_route_abstentions", "queries the router abstained on", registry=reg),
            batch_size=Histogram("masdr_batch_size", "queries per router forward pass", buckets=BATCH_BUCKETS,
                                 registry=reg),
            llm_failures=Counter("masdr_llm_failures", "failed calls to the LLM endpoint by where they happened",
                                 ["where"], registry=reg),
            reloads=Counter("masdr_router_reloads", "router reloads by outcome", ["outcome"], registry=reg),
        )

    def decided(self, scope: str | None, stage: str) -> None:
        self.decisions.labels(scope=scope or "none", stage=stage or "unknown").inc()
        if scope is None:
            self.abstentions.inc()

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
