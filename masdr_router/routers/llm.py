"""Zero-shot LLM router: the taxonomy's scope names and descriptions in a prompt, the answer
constrained to the scope names by the server. A failed or invalid answer is an abstention (the
caller falls back), never a crash."""

from __future__ import annotations

import logging
from typing import Any

from ..taxonomy import Taxonomy
from .base import RouteDecision, Router, register_router

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """You route questions to the part of an organisation whose documents answer them.
Pick exactly one scope for the question. The scopes:
{scopes}
Answer with the scope name only."""


def build_messages(taxonomy: Taxonomy, query: str) -> list[dict[str, str]]:
    """The chat messages the router sends: scope catalogue as system prompt, the query as user turn.

    >>> t = Taxonomy.from_dict({"name": "t", "scopes": [
    ...     {"name": "sport", "description": "Matches.", "match": {"a": 1}}]})
    >>> print(build_messages(t, "who won?")[0]["content"].splitlines()[2])
    - sport: Matches.
    """
    catalogue = "\n".join(f"- {s.name}: {s.description}" for s in taxonomy.scopes)
    return [{"role": "system", "content": SYSTEM_PROMPT.format(scopes=catalogue)},
            {"role": "user", "content": f"Question: {query}\nScope:"}]


@register_router("llm")
class LLMRouter(Router):
    """Route with one constrained chat call to an OpenAI-compatible endpoint (vLLM, llama.cpp, OpenAI).

    >>> router = LLMRouter(taxonomy, LLMClient(LLMConfig(base_url=...)))   # doctest: +SKIP
    """

    name = "llm"

    def __init__(self, taxonomy: Taxonomy, client: Any = None, **client_kwargs: Any) -> None:
        super().__init__(taxonomy)
        if client is None:  # `--router llm`: the endpoint comes from MASDR_LLM_* variables
            from ..llm.client import LLMClient
            from ..llm.config import LLMConfig

            client = LLMClient(LLMConfig.from_env(**client_kwargs))
        self.client = client

    def _route(self, query: str) -> RouteDecision:
        from ..llm.client import LLMError

        try:
            scope = self.client.choose(build_messages(self.taxonomy, query), self.taxonomy.names)
        except LLMError as e:
            log.warning("LLM router abstains: %s", e)
            return RouteDecision(scope=None, stage=self.name, trace=({"stage": self.name, "error": str(e)},))
        return RouteDecision(scope=scope, scores={scope: 1.0}, stage=self.name,
                             trace=({"stage": self.name, "scope": scope},))

    def route_batch(self, queries: list[str]) -> list[RouteDecision]:
        return self.client.map(self.route, queries)
