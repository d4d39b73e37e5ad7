"""Router specs: the one way a router is named on the command line, in the benchmarks and in the
service, and the one function that builds it.

Grammar::

    SPEC   := CHAIN [":" POLICY]          POLICY: how an unsure decision is searched (routers.policy)
    CHAIN  := STAGE ("," STAGE)*          two or more stages are a cascade, tried in order
    STAGE  := BASE ["+vote"] ["@" T]      +vote: retrieval-informed (needs an index);
                                          @T: the stage answers at confidence >= T (in place of
                                          its own threshold), else the next one tries
    BASE   := a registered name (global, oracle, regex, llm, llm-logprobs, cascade)
            | a router artifact directory (``masdr train`` writes one)

Examples: ``regex``, ``checkpoints/bbc-router``, ``checkpoints/bbc-router+vote``,
``checkpoints/bbc-router:top2``, ``regex,checkpoints/bbc-router@0.9,llm`` (regex, then the LoRA
router when it is at least 0.9 sure, then the LLM, else global search).

The grammar is parsed without touching the file system (:func:`parse_router_spec`), except that a
spec naming an existing path as a whole is taken as that path (so a directory whose name holds a
``,`` or ``@`` still works); :func:`build_router` resolves the names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MasdrError
from ..taxonomy import Taxonomy
from .base import Router, registered_routers
from .lora.files import CONFIG_NAME
from .policy import POLICIES

if TYPE_CHECKING:
    from ..config import SearchConfig
    from ..llm.protocol import ChatClient
    from .vote import SearchIndex

VOTE_SUFFIX = "+vote"
LLM_BASES = ("llm", "llm-logprobs", "cascade")


class RouterSpecError(MasdrError, ValueError):
    """A router spec that does not follow the grammar, or names no router."""


@dataclass(frozen=True)
class StageSpec:
    """One stage of a spec: a base router, optionally voted by retrieval, optionally gated."""

    base: str
    vote: bool = False
    threshold: float | None = None

    @property
    def is_artifact(self) -> bool:
        return self.base not in registered_routers()

    @property
    def label(self) -> str:
        """Short display name: an artifact directory by its last path component."""
        name = Path(self.base).name if self.is_artifact else self.base
        gate = f"@{self.threshold:g}" if self.threshold is not None else ""
        return name + (VOTE_SUFFIX if self.vote else "") + gate


@dataclass(frozen=True)
class RouterSpec:
    """A parsed spec: its stages (one, or a cascade) and the routing policy."""

    text: str
    stages: tuple[StageSpec, ...]
    policy: str = "router"

    @property
    def name(self) -> str:
        """The system's name in reports: ``bbc-router+vote``, ``regex,bbc-router,llm:top2``."""
        chain = ",".join(s.label for s in self.stages)
        return chain if self.policy == "router" else f"{chain}:{self.policy}"

    @property
    def chain(self) -> str:
        """The spec without its policy: specs with the same chain share one router."""
        return ",".join(s.base + (VOTE_SUFFIX if s.vote else "") + (f"@{s.threshold!r}" if s.threshold is not None
                                                                    else "") for s in self.stages)

    @property
    def needs_llm(self) -> bool:
        return any(s.base in LLM_BASES for s in self.stages)

    @property
    def needs_index(self) -> bool:
        return any(s.vote for s in self.stages)


def parse_router_spec(text: str) -> RouterSpec:
    """Parse a spec (see the module docstring for the grammar).

    >>> s = parse_router_spec("regex,runs/my-router+vote@0.8,llm:top2")
    >>> [(st.base, st.vote, st.threshold) for st in s.stages], s.policy
    ([('regex', False, None), ('runs/my-router', True, 0.8), ('llm', False, None)], 'top2')
    >>> parse_router_spec("regex:sometimes")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    masdr_router.routers.spec.RouterSpecError: unknown routing policy 'sometimes' in 'regex:sometimes'; ...
    """
    if not isinstance(text, str) or not text.strip():
        raise RouterSpecError("empty router spec; expected e.g. 'regex', a router directory, or 'regex,DIR,llm'")
    text = text.strip()
    chain, policy = text, "router"
    head, sep, tail = text.rpartition(":")
    if sep and not Path(text).exists():
        if tail not in POLICIES:
            raise RouterSpecError(f"unknown routing policy '{tail}' in '{text}'; expected one of {', '.join(POLICIES)}")
        chain, policy = head, tail
    parts = [chain] if Path(chain).exists() else chain.split(",")
    stages = tuple(_parse_stage(p.strip(), text) for p in parts)
    return RouterSpec(text=text, stages=stages, policy=policy)


def _parse_stage(part: str, text: str) -> StageSpec:
    given = part
    if not part:
        raise RouterSpecError(f"empty stage in router spec '{text}'; stages are separated by single commas")
    threshold = None
    head, sep, tail = part.rpartition("@")
    if sep and not Path(part).exists():
        try:
            threshold = float(tail)
        except ValueError:
            raise RouterSpecError(f"stage '{part}' of '{text}': '@{tail}' is not a confidence threshold; "
                                  "expected a number in [0, 1], e.g. '@0.9'") from None
        if not (0.0 <= threshold <= 1.0) or math.isnan(threshold):
            raise RouterSpecError(f"stage '{part}' of '{text}': threshold {tail} is outside [0, 1]")
        part = head
    vote = part.endswith(VOTE_SUFFIX) and not Path(part).exists()
    base = part[: -len(VOTE_SUFFIX)] if vote else part
    if not base:
        raise RouterSpecError(f"stage '{given}' of '{text}' names no router")
    return StageSpec(base=base, vote=vote, threshold=threshold)


def build_router(spec: str | RouterSpec, *, taxonomy: Taxonomy | None = None, index: SearchIndex | None = None,
                 llm: ChatClient | None = None, search: SearchConfig | None = None) -> Router:
    """Build the router a spec names. ``taxonomy`` defaults to the index's; ``index`` is needed by
    ``+vote`` stages (their global search uses ``search``, which should be the configuration the
    results are searched with); ``llm`` by the LLM routers (without one they read the endpoint from
    the ``MASDR_LLM_*`` variables). The routing policy is not part of the router: see
    :func:`masdr_router.routers.policy.search_plan`.

    >>> build_router("regex", taxonomy=tax)                       # doctest: +SKIP
    >>> build_router("regex,checkpoints/bbc-router,llm", index=idx, llm=client)  # doctest: +SKIP
    """
    from .cascade import CascadeRouter, Stage

    spec = parse_router_spec(spec) if isinstance(spec, str) else spec
    if taxonomy is None:
        if index is None:
            raise RouterSpecError("building a router needs a taxonomy or an index")
        taxonomy = index.taxonomy
    if spec.needs_index and index is None:
        raise RouterSpecError(f"'{spec.text}': '{VOTE_SUFFIX}' votes with a global search and needs an index "
                              "(give --index)")
    stages = [Stage(_build_stage(s, taxonomy, index, llm, search), s.threshold) for s in spec.stages]
    if len(stages) == 1 and stages[0].threshold is None:
        return stages[0].router
    return CascadeRouter(taxonomy, stages)


def build_systems(specs: Sequence[str], *, taxonomy: Taxonomy | None = None, index: SearchIndex | None = None,
                  llm: ChatClient | None = None,
                  search: SearchConfig | None = None) -> dict[str, tuple[Router, str]]:
    """``{name: (router, policy)}`` for systems to compare; specs that differ only in their policy
    share one router (it is loaded once and routes each query once)."""
    built: dict[str, Router] = {}
    systems: dict[str, tuple[Router, str]] = {}
    for text in specs:
        spec = parse_router_spec(text)
        if spec.name in systems:
            raise RouterSpecError(f"router spec '{text}' is given twice")
        if spec.chain not in built:
            built[spec.chain] = build_router(spec, taxonomy=taxonomy, index=index, llm=llm, search=search)
        systems[spec.name] = (built[spec.chain], spec.policy)
    return systems


def artifact_taxonomy(specs: Sequence[RouterSpec]) -> Taxonomy | None:
    """The taxonomy carried by the first exported router (directory or Hub repo) among ``specs``'
    stages, or ``None``: an artifact is enough to route, no taxonomy file needed."""
    from .lora.files import TAXONOMY_FILE
    from .lora.router import resolve_artifact

    for spec in specs:
        for stage in spec.stages:
            if stage.base in registered_routers():
                continue
            if Path(stage.base, CONFIG_NAME).is_file() or _is_hub_id(stage.base):
                return Taxonomy.from_yaml(resolve_artifact(stage.base) / TAXONOMY_FILE)
    return None


def _is_hub_id(text: str) -> bool:
    from .lora.router import is_hub_id

    return is_hub_id(text)


def _build_stage(stage: StageSpec, taxonomy: Taxonomy, index: SearchIndex | None, llm: ChatClient | None,
                 search: SearchConfig | None) -> Router:
    factories = registered_routers()
    if stage.base in factories:
        router = factories[stage.base](taxonomy, index=index, llm=llm)
    elif Path(stage.base, CONFIG_NAME).is_file() or _is_hub_id(stage.base):
        from .lora import LoraRouter

        router = LoraRouter.from_pretrained(stage.base, taxonomy=taxonomy)
    elif Path(stage.base).is_dir():
        raise RouterSpecError(f"'{stage.base}' is a directory but not a router artifact (no {CONFIG_NAME}); "
                              "train one with `masdr train`")
    else:
        raise RouterSpecError(f"unknown router '{stage.base}': expected one of {', '.join(sorted(factories))} "
                              f"or a router artifact directory (with {CONFIG_NAME})")
    if stage.vote:
        from .vote import RetrievalVoteRouter

        router = RetrievalVoteRouter(router, index, search=search)  # type: ignore[arg-type]
    return router
