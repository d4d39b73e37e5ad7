"""A thin client for OpenAI-compatible chat endpoints (vLLM, llama.cpp server, OpenAI).

It uses the official ``openai`` SDK, which already retries 408/409/429/5xx and connection errors
with exponential backoff; this module adds what routing needs on top: choice-constrained answers
in each server's dialect, bounded-concurrency batches, streaming, and one error type.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import LLMError
from .config import LLMConfig

__all__ = ["LLMClient", "LLMError", "choice_constraint", "choice_distribution", "json_constraint", "parse_choice"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def json_constraint(dialect: str, schema: dict[str, Any], *, name: str = "answer") -> dict[str, Any]:
    """Request fields that make the server answer with JSON matching ``schema``, per dialect:
    ``response_format`` json_schema (``openai``), ``structured_outputs: {"json": ...}`` (``vllm``)
    or ``guided_json`` (``vllm-legacy``).

    >>> json_constraint("vllm", {"type": "object"})
    {'extra_body': {'structured_outputs': {'json': {'type': 'object'}}}}
    """
    if dialect == "vllm":
        return {"extra_body": {"structured_outputs": {"json": schema}}}
    if dialect == "vllm-legacy":
        return {"extra_body": {"guided_json": schema}}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "strict": True,
                                                                       "schema": schema}}}


def choice_constraint(dialect: str, choices: Sequence[str], *, key: str = "scope") -> dict[str, Any]:
    """Request fields that make the server answer with exactly one of ``choices``.

    - ``openai``: ``response_format`` with a strict JSON schema whose ``key`` is an enum
      (OpenAI structured outputs; llama.cpp server turns it into a grammar).
    - ``vllm``: ``structured_outputs: {"choice": [...]}``, sent as extra body (vLLM docs,
      features/structured_outputs: the form that replaced ``guided_choice``, removed in v0.12.0).
    - ``vllm-legacy``: ``guided_choice: [...]`` for vLLM before 0.12, sent as extra body.

    >>> choice_constraint("vllm", ["a", "b"])
    {'extra_body': {'structured_outputs': {'choice': ['a', 'b']}}}
    """
    choices = list(choices)
    if dialect == "vllm":
        return {"extra_body": {"structured_outputs": {"choice": choices}}}
    if dialect == "vllm-legacy":
        return {"extra_body": {"guided_choice": choices}}
    schema = {"type": "object", "properties": {key: {"type": "string", "enum": choices}},
              "required": [key], "additionalProperties": False}
    return json_constraint(dialect, schema, name="choice")


def parse_choice(dialect: str, content: str | None, choices: Sequence[str], *, key: str = "scope") -> str:
    """The chosen label from a constrained answer; :class:`LLMError` when it is not one of them."""
    text = (content or "").strip()
    if dialect == "openai":
        try:
            value = json.loads(text)[key]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise LLMError(f"answer is not the requested JSON object: {text[:120]!r}") from None
    else:
        value = text.strip('"').strip()
    if value not in choices:
        raise LLMError(f"answer {str(value)[:80]!r} is not one of the {len(choices)} allowed labels"
                       + _legacy_hint(dialect))
    return str(value)


def _legacy_hint(dialect: str) -> str:
    # vLLM 0.12 removed the guided_* fields and ignores them without an error: free text comes back
    return ("; vLLM >= 0.12 ignores the guided_* fields of dialect 'vllm-legacy': use dialect 'vllm'"
            if dialect == "vllm-legacy" else "")


def choice_distribution(logprobs: Any, choices: Sequence[str], *, key: str | None = None) -> dict[str, float] | None:
    """A probability distribution over ``choices`` read from the top log-probabilities the server
    returned with a constrained answer, renormalised over the choices found; ``None`` when the
    server sent none or no choice is among them.

    llama.cpp reports the model's own distribution at each position, before the grammar masks it;
    vLLM (checked on 0.32) reports it after the mask, renormalised over the tokens the grammar
    allows, and ``-9999.0`` for the others. Both give the same distribution over the choices once
    renormalised over them (the mask only removes tokens that begin no choice); with vLLM the top
    log-probabilities hold only allowed tokens, so every choice's tokens are there. Two positions are read, the
    first that names a choice wins: where the answer's value begins (after ``"key": "`` when the
    answer is a JSON object, else the first token), then the first generated position (where a
    model asked for a bare letter code states it, before the JSON wrapper dilutes it). A token
    counts, case-insensitively, for the one choice it equals or begins (``"Bus"`` and
    ``"business"`` both count for ``business``; at the first position only with two or more
    characters, since there ``"S"`` may begin any word); a token that begins several choices tells
    them apart no further and is left out. Choices absent from the top-k get 0.

    >>> from types import SimpleNamespace as NS
    >>> first = NS(token="A", top_logprobs=[NS(token="A", logprob=-0.1), NS(token=" B", logprob=-2.4),
    ...                                     NS(token="x", logprob=-3.0)])
    >>> {k: round(v, 3) for k, v in choice_distribution(NS(content=[first]), ["A", "B", "C"]).items()}
    {'A': 0.909, 'B': 0.091, 'C': 0.0}
    """
    import math
    import re

    try:
        positions = list(logprobs.content or [])
    except (AttributeError, TypeError):
        return None
    if not positions:
        return None
    texts = [str(getattr(p, "token", "")) for p in positions]
    full = "".join(texts)
    m = re.search(rf'"{re.escape(key)}"\s*:\s*"', full) if key else re.match(r'[\s"]*', full)
    value_at = None
    if m is not None:
        offset = 0
        for i, t in enumerate(texts):  # the token that holds the value's first character
            offset += len(t)
            if offset > m.end():
                value_at = i
                break
    lowered = [c.lower() for c in choices]

    def owner(token: str, min_prefix: int) -> int | None:
        t = token.strip().strip('"').strip().lower()
        if not t:
            return None
        hits = [i for i, c in enumerate(lowered) if c == t or (len(t) >= min_prefix and c.startswith(t))]
        return hits[0] if len(hits) == 1 else None

    for i in dict.fromkeys(j for j in (value_at, 0) if j is not None):
        # inside the value every token starts a label; before it, "s" is as likely "Shares" as "sport"
        min_prefix = 1 if i == value_at else 2
        mass = [0.0] * len(choices)
        for alt in getattr(positions[i], "top_logprobs", None) or []:
            lp, c = getattr(alt, "logprob", None), owner(str(getattr(alt, "token", "")), min_prefix)
            if c is not None and isinstance(lp, int | float) and math.isfinite(lp):
                mass[c] += math.exp(lp)
        total = sum(mass)
        if total > 0:
            return {c: v / total for c, v in zip(choices, mass)}
    return None


class LLMClient:
    """Chat with an OpenAI-compatible endpoint.

    >>> client = LLMClient(LLMConfig(base_url="http://127.0.0.1:8080/v1"))      # doctest: +SKIP
    >>> client.choose([{"role": "user", "content": "Sport or tech? 'Cup final'"}], ["sport", "tech"])  # doctest: +SKIP
    'sport'
    """

    def __init__(self, config: LLMConfig | None = None) -> None:
        from ..extras import require

        openai = require("openai")

        self.config = config or LLMConfig()
        # A placeholder key keeps the SDK happy against local servers that need none.
        key = self.config.api_key() or "not-needed"
        self._client = openai.OpenAI(base_url=self.config.base_url, api_key=key, timeout=self.config.timeout_s,
                                     max_retries=self.config.max_retries)

    @property
    def endpoint(self) -> tuple[str, str]:
        return self.config.base_url, self.config.model

    def _create(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        import openai

        params = {"model": self.config.model, "messages": messages, "temperature": self.config.temperature,
                  "max_tokens": self.config.max_tokens, **kw}
        if self.config.frequency_penalty and "frequency_penalty" not in kw:
            params["frequency_penalty"] = self.config.frequency_penalty
        try:
            return self._client.chat.completions.create(**params)
        except openai.APITimeoutError:
            raise LLMError(f"LLM endpoint {self.config.base_url} timed out after {self.config.timeout_s:g} s") from None
        except openai.APIConnectionError:
            raise LLMError(f"LLM endpoint {self.config.base_url} is unreachable") from None
        except openai.APIStatusError as e:
            # the server's own words (vLLM: "top_logprobs must be <= 20", "tool_choice ... requires
            # --enable-auto-tool-choice"), cut short: they may echo the request
            said = " ".join(str(getattr(e, "message", "") or "").split())[:240]
            raise LLMError(f"LLM endpoint {self.config.base_url} answered HTTP {e.status_code}"
                           + (f": {said}" if said else "")) from None
        except openai.OpenAIError as e:
            raise LLMError(f"LLM endpoint {self.config.base_url} failed: {type(e).__name__}") from None
        except ValueError:  # the SDK lets a non-JSON body through as a JSONDecodeError
            raise LLMError(f"LLM endpoint {self.config.base_url} answered malformed data") from None

    def chat(self, messages: list[dict[str, Any]], **kw: Any) -> str:
        """The assistant's text for ``messages``."""
        resp = self._create(messages, **kw)
        try:
            return resp.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            raise LLMError("LLM endpoint returned a response without a message") from None

    def chat_json(self, messages: list[dict[str, Any]], schema: dict[str, Any], *, name: str = "answer",
                  **kw: Any) -> str:
        """The assistant's text, constrained by the server to JSON matching ``schema`` (in this
        client's dialect, see :func:`json_constraint`). Text that does not even start as JSON means
        the server ignored the constraint (vLLM >= 0.12 silently drops ``guided_json``): an
        :class:`LLMError`, never free text passed off as the constrained answer. JSON cut off by the
        token limit is returned, for the caller to salvage."""
        text = self.chat(messages, **json_constraint(self.config.dialect, schema, name=name), **kw)
        if not text.lstrip().startswith(("{", "[")):
            raise LLMError(f"the LLM endpoint ignored the JSON constraint (dialect '{self.config.dialect}') and "
                           f"answered free text: {text.strip()[:80]!r}" + _legacy_hint(self.config.dialect))
        return text

    def message(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        """The assistant message object itself (with ``tool_calls`` when tools were offered)."""
        resp = self._create(messages, **kw)
        try:
            return resp.choices[0].message
        except (AttributeError, IndexError, TypeError):
            raise LLMError("LLM endpoint returned a response without a message") from None

    def choose(self, messages: list[dict[str, Any]], choices: Sequence[str], *, key: str = "scope",
               max_tokens: int = 32, **kw: Any) -> str:
        """One of ``choices``, constrained by the server (see :func:`choice_constraint`)."""
        return self._constrained_choice(messages, choices, key=key, max_tokens=max_tokens, **kw)[0]

    def choose_scored(self, messages: list[dict[str, Any]], choices: Sequence[str], *, key: str = "scope",
                      max_tokens: int = 32, top_logprobs: int = 20, **kw: Any) -> tuple[str, dict[str, float] | None]:
        """Like :meth:`choose`, and also a distribution over ``choices`` from the answer's
        log-probabilities (see :func:`choice_distribution`); ``None`` when the server gives none.
        ``choices`` should differ in their first token, so one position tells them apart."""
        answer, choice = self._constrained_choice(messages, choices, key=key, max_tokens=max_tokens,
                                                  logprobs=True, top_logprobs=top_logprobs, **kw)
        # the JSON dialect wraps the answer as {"key": "..."}; the vLLM ones answer it bare
        json_key = key if self.config.dialect == "openai" else None
        return answer, choice_distribution(getattr(choice, "logprobs", None), choices, key=json_key)

    def _constrained_choice(self, messages: list[dict[str, Any]], choices: Sequence[str], *, key: str,
                            **kw: Any) -> tuple[str, Any]:
        """The parsed label and the raw response choice it came from."""
        resp = self._create(messages, **choice_constraint(self.config.dialect, choices, key=key), **kw)
        try:
            choice = resp.choices[0]
            content = choice.message.content
        except (AttributeError, IndexError, TypeError):
            raise LLMError("LLM endpoint returned a response without a message") from None
        return parse_choice(self.config.dialect, content, choices, key=key), choice

    def stream(self, messages: list[dict[str, Any]], **kw: Any) -> Iterator[str]:
        """Yield the answer's text as it is generated; a connection lost mid-stream is an LLMError."""
        import openai

        try:
            for chunk in self._create(messages, stream=True, **kw):
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    yield delta
        except openai.OpenAIError as e:
            raise LLMError(f"LLM endpoint {self.config.base_url} failed while streaming: {type(e).__name__}") from None
        except (ValueError, AttributeError, IndexError):
            raise LLMError(f"LLM endpoint {self.config.base_url} streamed malformed data") from None

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
        """``[fn(x) for x in items]`` with at most ``config.concurrency`` requests in flight."""
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            return list(pool.map(fn, items))

    def models(self) -> list[str]:
        import openai

        try:
            return [m.id for m in self._client.models.list()]
        except openai.OpenAIError as e:
            raise LLMError(f"LLM endpoint {self.config.base_url} failed: {type(e).__name__}") from None
