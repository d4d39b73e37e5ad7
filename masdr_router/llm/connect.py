"""Getting a client for a configured endpoint, or for the embedded server started just for the
work at hand (``masdr ask --local``, the demo)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .client import LLMClient
from .config import LLMConfig

# What the embedded SmolLM2-135M needs from a client: it repeats itself inside JSON strings without
# a frequency penalty, and synthesis on two CPU cores can take minutes under load.
EMBEDDED_CLIENT_SETTINGS = {"frequency_penalty": 0.3, "timeout_s": 300.0}


@contextlib.contextmanager
def open_client(config: LLMConfig | None = None, *, local: bool = False) -> Iterator[LLMClient]:
    """A client for ``config``'s endpoint; with ``local``, for the embedded llama.cpp server,
    started for the block and stopped after it.

    >>> with open_client(LLMConfig.load("configs/llm/vllm.yaml")) as client:   # doctest: +SKIP
    ...     client.chat([{"role": "user", "content": "hi"}])
    """
    config = config or LLMConfig.from_env()
    if not local:
        yield LLMClient(config)
        return
    from .server import LocalLLMServer

    with LocalLLMServer() as server:
        yield LLMClient(config.with_overrides(base_url=server.base_url, **EMBEDDED_CLIENT_SETTINGS))
