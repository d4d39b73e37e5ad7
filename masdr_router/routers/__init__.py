"""Routers: regex rules, the trained LoRA router, the zero-shot LLM router, the cascade,
retrieval-informed voting and reference routers (global, oracle); all share the :class:`Router`
interface and are named by specs (:mod:`.spec`) everywhere: CLI, benchmarks, service."""

from __future__ import annotations

from .base import RouteDecision, Router, RouterFactory, register_router, registered_routers
from .cascade import CascadeRouter, Stage
from .llm import LLMRouter
from .reference import GlobalRouter, OracleRouter
from .regex import RegexRouter
from .spec import RouterSpec, RouterSpecError, StageSpec, build_router, build_systems, parse_router_spec

__all__ = ["CascadeRouter", "GlobalRouter", "LLMRouter", "OracleRouter", "RegexRouter", "RouteDecision", "Router",
           "RouterFactory", "RouterSpec", "RouterSpecError", "Stage", "StageSpec", "build_router", "build_systems",
           "parse_router_spec", "register_router", "registered_routers"]
