"""What the routers and the answer path need from an LLM client. :class:`~masdr_router.llm.client.LLMClient`
is the implementation; the server dialect (OpenAI ``response_format``, vLLM ``structured_outputs``)
stays inside it, so callers ask for *what* they need (a choice, JSON of a schema), not *how*."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
Messages = list[dict[str, Any]]


@runtime_checkable
class ChatClient(Protocol):
    """A chat endpoint. Every method raises :class:`~masdr_router.errors.LLMError` on failure."""

    @property
    def endpoint(self) -> tuple[str, str]:
        """``(base URL, model)``: which model answers (to tell a judge from the generator)."""
        ...

    def chat(self, messages: Messages, **kw: Any) -> str:
        """The assistant's text."""
        ...

    def chat_json(self, messages: Messages, schema: dict[str, Any], *, name: str = "answer", **kw: Any) -> str:
        """The assistant's text, constrained to JSON matching ``schema``."""
        ...

    def message(self, messages: Messages, **kw: Any) -> Any:
        """The assistant message object (``content``, ``tool_calls``) for tool calling."""
        ...

    def choose(self, messages: Messages, choices: Sequence[str], **kw: Any) -> str:
        """Exactly one of ``choices``."""
        ...

    def choose_scored(self, messages: Messages, choices: Sequence[str],
                      **kw: Any) -> tuple[str, dict[str, float] | None]:
        """One of ``choices`` and, when the server returns log-probabilities, a distribution over them."""
        ...

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
        """``[fn(x) for x in items]`` with the client's bounded concurrency."""
        ...
