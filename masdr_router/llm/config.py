"""Configuration of an OpenAI-compatible LLM endpoint (``configs/llm/*.yaml`` mirror it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..config import ConfigBase


@dataclass
class LLMConfig(ConfigBase):
    """Where the LLM is and how to talk to it. The API key is read from the environment variable
    named by ``api_key_env`` at call time and is never stored, printed or logged."""

    base_url: str = field(default="http://127.0.0.1:8080/v1", metadata={"help": "OpenAI-compatible base URL"})
    model: str = field(default="local", metadata={"help": "model name sent with each request"})
    api_key_env: str = field(default="MASDR_LLM_API_KEY", metadata={"help": "env var holding the API key"})
    dialect: str = field(default="openai", metadata={
        "help": "'openai' (response_format json_schema; llama.cpp, OpenAI) or 'vllm' (structured_outputs "
                "choice) or 'vllm-legacy' (guided_choice, removed in vLLM 0.12)"})
    timeout_s: float = 30.0
    max_retries: int = field(default=3, metadata={"help": "retries with backoff on 429/5xx/connection errors"})
    concurrency: int = field(default=4, metadata={"help": "parallel requests in batch evaluation"})
    temperature: float = 0.0
    max_tokens: int = 512
    frequency_penalty: float = field(default=0.0, metadata={
        "help": "OpenAI frequency_penalty; ~0.3 keeps very small models (the embedded SmolLM2) from repeating"})

    def __post_init__(self) -> None:
        if self.dialect not in {"openai", "vllm", "vllm-legacy"}:
            raise ValueError(f"dialect must be openai, vllm or vllm-legacy, got {self.dialect!r}")
        if self.timeout_s <= 0 or self.max_retries < 0 or self.concurrency < 1 or self.max_tokens < 1:
            raise ValueError("timeout_s > 0, max_retries >= 0, concurrency >= 1 and max_tokens >= 1 are required")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}")

    @classmethod
    def from_env(cls, **overrides: object) -> LLMConfig:
        """Defaults, overridden by ``MASDR_LLM_BASE_URL``, ``MASDR_LLM_MODEL`` and ``MASDR_LLM_DIALECT``."""
        env = {"base_url": os.environ.get("MASDR_LLM_BASE_URL"), "model": os.environ.get("MASDR_LLM_MODEL"),
               "dialect": os.environ.get("MASDR_LLM_DIALECT")}
        return cls.from_dict({**{k: v for k, v in env.items() if v}, **overrides}, source="MASDR_LLM_* environment")
