"""Request bodies of the service's endpoints (pydantic; FastAPI documents them in ``/openapi.json``).

Queries are typed ``str`` with ``strict`` so a number or a list where a string belongs is a 422,
never coerced. Length limits come from :class:`ServeConfig` and are checked by the handlers, so
they follow the configuration rather than being frozen into the schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RouteRequest(_Body):
    """``query``: one query or a list of them."""

    query: StrictStr | list[StrictStr] = Field(description="a query, or a batch of queries")
    top_k: int | None = Field(default=None, ge=1, description="also return the k most likely scopes")
    return_trace: bool = Field(default=False, description="include each stage's decision (cascades)")


class SearchRequest(_Body):
    query: StrictStr
    scope: StrictStr | None = Field(default=None, description="search this scope instead of routing")
    k: int = Field(default=10, ge=1, le=100, description="chunks to return")
    return_text: bool = Field(default=True, description="include each chunk's text")


class AnswerRequest(_Body):
    query: StrictStr
    scope: StrictStr | None = Field(default=None, description="answer from this scope instead of routing")
    k: int | None = Field(default=None, ge=1, le=20, description="chunks to synthesise from (default: the config's)")
    stream: bool = Field(default=False, description="server-sent events: decision, answer deltas, final answer")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, ...: accepted and ignored

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: StrictStr | list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    """OpenAI ``POST /v1/chat/completions``; sampling parameters are accepted and passed over
    (the synthesis call is constrained JSON, so they change little)."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    user: str | None = None


class PredictRequest(_Body):
    """text-embeddings-inference ``POST /predict``."""

    inputs: StrictStr | list[StrictStr] | list[list[StrictStr]]
    truncate: bool = False
    raw_scores: bool = False
    truncation_direction: Literal["Left", "Right", "left", "right"] | None = None


class InferTensor(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: StrictStr
    shape: list[int]
    datatype: StrictStr
    data: list[Any]
    parameters: dict[str, Any] | None = None


class InferRequestedOutput(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: StrictStr


class InferRequest(BaseModel):
    """KServe open inference protocol v2 ``POST /v2/models/{name}/infer``."""

    model_config = ConfigDict(extra="allow")

    id: str | None = None
    inputs: list[InferTensor] = Field(min_length=1)
    outputs: list[InferRequestedOutput] | None = None
    parameters: dict[str, Any] | None = None


class ReloadRequest(_Body):
    router: StrictStr | None = Field(default=None, description="a new router spec (default: reload the current "
                                                               "one from disk)")
