"""Configuration of an OpenAI-compatible LLM endpoint (``configs/llm/*.yaml`` mirror it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal, get_args

from ..config import ConfigBase

# Environment variables, first one set wins. The OpenAI SDK's own names are honoured after ours, so
# an environment already set up for the SDK works unchanged.
ENV_BASE_URL = ("MASDR_LLM_BASE_URL", "OPENAI_BASE_URL")
ENV_MODEL = ("MASDR_LLM_MODEL",)
ENV_DIALECT = ("MASDR_LLM_DIALECT",)
ENV_API_KEY_FALLBACK = "OPENAI_API_KEY"
Dialect = Literal["openai", "vllm", "vllm-legacy"]
DIALECTS: tuple[str, ...] = get_args(Dialect)


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


@dataclass
class LLMConfig(ConfigBase):
    """Where the LLM is and how to talk to it. The API key is read from the environment variable
    named by ``api_key_env`` (else ``OPENAI_API_KEY``) at call time and is never stored, printed or
    logged."""

    base_url: str = field(default="http://127.0.0.1:8080/v1", metadata={"help": "OpenAI-compatible base URL"})
    model: str = field(default="local", metadata={"help": "model name sent with each request"})
    api_key_env: str = field(default="MASDR_LLM_API_KEY", metadata={"help": "env var holding the API key"})
    dialect: Dialect = field(default="openai", metadata={
        "help": "'openai' (response_format json_schema; llama.cpp, OpenAI) or 'vllm' (structured_outputs "
                "choice) or 'vllm-legacy' (guided_choice, removed in vLLM 0.12)"})
    timeout_s: float = 60.0
    max_retries: int = field(default=3, metadata={"help": "retries with backoff on 429/5xx/connection errors"})
    concurrency: int = field(default=4, metadata={"help": "parallel requests in batch evaluation"})
    temperature: float = 0.0
    max_tokens: int = 512
    frequency_penalty: float = field(default=0.0, metadata={
        "help": "OpenAI frequency_penalty; ~0.3 keeps very small models (the embedded SmolLM2) from repeating"})

    def validate(self) -> list[tuple[str, bool, str]]:
        return [("timeout_s", self.timeout_s > 0, f"must be > 0, got {self.timeout_s}"),
                ("max_retries", self.max_retries >= 0, f"must be >= 0, got {self.max_retries}"),
                ("concurrency", self.concurrency >= 1, f"must be >= 1, got {self.concurrency}"),
                ("max_tokens", self.max_tokens >= 1, f"must be >= 1, got {self.max_tokens}"),
                ("base_url", self.base_url.startswith(("http://", "https://")),
                 f"must be an http(s) URL, got {self.base_url!r}")]

    @classmethod
    def from_env(cls, **overrides: object) -> LLMConfig:
        """Defaults, overridden by ``MASDR_LLM_BASE_URL`` (or ``OPENAI_BASE_URL``),
        ``MASDR_LLM_MODEL`` and ``MASDR_LLM_DIALECT``, then by ``overrides``."""
        env = {"base_url": _first_env(ENV_BASE_URL), "model": _first_env(ENV_MODEL),
               "dialect": _first_env(ENV_DIALECT)}
        return cls.from_dict({**{k: v for k, v in env.items() if v}, **overrides}, source="MASDR_LLM_* environment")

    def api_key(self) -> str | None:
        """The key from the environment (never stored on the object)."""
        return os.environ.get(self.api_key_env) or os.environ.get(ENV_API_KEY_FALLBACK) or None
