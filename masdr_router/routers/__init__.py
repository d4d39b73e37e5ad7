"""Routers: regex rules, the trained LoRA router, the zero-shot LLM router, the cascade, and
reference routers (global, oracle); all share the :class:`Router` interface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MasdrError
from ..taxonomy import Taxonomy
from .base import RouteDecision, Router, register_router, registered_routers
from .cascade import CascadeRouter, Stage
from .llm import LLMRouter
from .reference import GlobalRouter, OracleRouter
from .regex import RegexRouter

__all__ = ["CascadeRouter", "GlobalRouter", "LLMRouter", "OracleRouter", "RegexRouter", "RouteDecision", "Router",
           "Stage", "load_router", "register_router", "registered_routers"]


def load_router(spec: str, taxonomy: Taxonomy, **kwargs: Any) -> Router:
    """Build a router from a CLI spec: a registered name (``global``, ``oracle``, ``regex``, ...)
    or a router artifact directory.

    >>> load_router("regex", taxonomy)        # doctest: +SKIP
    """
    factories = registered_routers()
    if spec in factories:
        return factories[spec](taxonomy, **kwargs)
    if Path(spec, "router_config.json").is_file():
        from .lora import LoraRouter

        return LoraRouter.from_pretrained(spec, taxonomy=taxonomy, **kwargs)
    raise MasdrError(f"unknown router '{spec}': expected one of {', '.join(sorted(factories))} "
                     "or a router artifact directory (with router_config.json)")
