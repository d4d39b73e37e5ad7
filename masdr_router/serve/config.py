"""What ``masdr serve`` serves and how (``configs/serve/default.yaml`` mirrors it one-to-one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import ConfigBase
from ..query import MAX_QUERY_CHARS


@dataclass
class ServeConfig(ConfigBase):
    """Everything the service needs at start; the CLI's flags override single keys.

    >>> ServeConfig(router="regex", taxonomy="data/bbc/taxonomy.yaml").port
    8000
    >>> ServeConfig(max_batch_size=0)
    Traceback (most recent call last):
    ...
    masdr_router.errors.ConfigError: ServeConfig: field 'max_batch_size': must be > 0, got 0
    """

    # what is served
    router: str = field(default="regex", metadata={
        "help": "router spec, as the CLI takes it: an exported artifact directory, 'regex', 'llm', a cascade "
                "'regex,DIR,llm', '+vote', '@T' thresholds"})
    index: str | None = field(default=None, metadata={"help": "scoped index directory (needed by search/answer)"})
    taxonomy: str | None = field(default=None, metadata={"help": "taxonomy YAML (default: the index's)"})
    search_config: str | None = field(default=None, metadata={
        "help": "SearchConfig YAML (configs/search/); default: hybrid search with both recall guards on"})
    global_head: int | None = field(default=None, metadata={"help": "overrides the search config's recall guard"})
    global_in_scope: bool | None = field(default=None, metadata={
        "help": "overrides the search config's recall guard"})
    policy: Literal["router", "hard", "abstain", "top2", "soft"] = field(default="router", metadata={
        "help": "how a routing decision becomes a search (masdr_router.routers.policy)"})
    k: int = field(default=4, metadata={"help": "chunks an answer is synthesised from"})
    served_model_name: str = field(default="masdr-router", metadata={
        "help": "the model name of the OpenAI, TEI and KServe endpoints ('auto' is accepted too)"})
    state_file: str | None = field(default=None, metadata={
        "help": "where the last router spec that loaded is kept (atomically), so a restart serves it"})
    # the LLM endpoint (answers, chat completions, LLM routers)
    llm_config: str | None = field(default=None, metadata={"help": "LLMConfig YAML (configs/llm/)"})
    llm_base_url: str | None = field(default=None, metadata={"help": "overrides the LLM config's base_url"})
    llm_down: Literal["error", "retrieval_only"] = field(default="retrieval_only", metadata={
        "help": "when the LLM endpoint fails: 'error' (503) or 'retrieval_only' (200, no answer, the chunks)"})
    # the server
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = field(default=1, metadata={"help": "uvicorn worker processes (each loads its own models)"})
    # micro-batching of router inference
    batching: bool = field(default=True, metadata={"help": "batch concurrent route requests into one forward pass"})
    max_batch_size: int = field(default=64, metadata={"help": "queries per forward pass, at most"})
    max_wait_ms: float = field(default=2.0, metadata={"help": "how long a batch waits to fill after its first query"})
    # limits
    max_queries: int = field(default=64, metadata={"help": "queries in one request, at most"})
    max_query_chars: int = field(default=MAX_QUERY_CHARS, metadata={"help": "characters in one query, at most"})
    max_body_bytes: int = field(default=1_000_000, metadata={"help": "request body size limit"})
    request_timeout_s: float = field(default=120.0, metadata={"help": "a request taking longer gets a 504"})
    # security
    api_keys_file: str | None = field(default=None, metadata={
        "help": "YAML of API keys with their scopes and admin right (see configs/serve/keys.example.yaml); "
                "none: no authentication and no admin endpoints"})

    def validate(self) -> list[tuple[str, bool, str]]:
        positive = [(k, getattr(self, k) > 0, f"must be > 0, got {getattr(self, k)}")
                    for k in ("k", "workers", "max_batch_size", "max_queries", "max_query_chars", "max_body_bytes",
                              "request_timeout_s")]
        return [*positive,
                ("port", 0 <= self.port < 65536, f"must be a TCP port, got {self.port}"),
                ("max_wait_ms", self.max_wait_ms >= 0, f"must be >= 0, got {self.max_wait_ms}"),
                ("global_head", self.global_head is None or self.global_head >= 0,
                 f"must be >= 0, got {self.global_head}"),
                ("served_model_name", bool(self.served_model_name.strip()), "must not be empty")]
