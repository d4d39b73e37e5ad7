"""Talking to LLMs: the :class:`ChatClient` protocol, an OpenAI/vLLM-compatible client, and the
embedded local llama.cpp server."""

from .protocol import ChatClient

__all__ = ["ChatClient"]
