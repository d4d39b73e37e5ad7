"""Talking to LLMs: an OpenAI/vLLM-compatible client and the embedded local llama.cpp server."""
