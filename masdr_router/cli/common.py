"""What the command modules share: the consoles, option types, and the conventions every command
follows (``--json PATH`` with ``-`` for stdout; one ``--router SPEC`` per system)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from ..config import Device, SearchConfig, SearchMode
from ..errors import UsageError
from ..llm.config import ENV_BASE_URL, ENV_DIALECT, ENV_MODEL, Dialect, LLMConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..llm.protocol import ChatClient
    from ..retrieval.index import ScopedIndex
    from ..routers.spec import RouterSpec
    from ..taxonomy import Taxonomy

out = Console()
err = Console(stderr=True)


def fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.3f}"


# ---- JSON output: one meaning everywhere ----------------------------------------------------------
def _writable_json_path(value: Path | None) -> Path | None:
    """Refuse an unwritable ``--json`` path before the work starts, not after it."""
    if value is None or str(value) == "-":
        return value
    from ..errors import OutputError

    if value.is_dir():
        raise OutputError(f"cannot write {value}: Is a directory")
    blocker = next((p for p in value.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise OutputError(f"cannot write {value}: {blocker} is not a directory")
    return value


JsonOut = Annotated[Path | None, typer.Option(
    "--json", callback=_writable_json_path,
    help="write the result as JSON to this file; '-' prints it to stdout (tables then go to stderr)")]


def human(json_out: Path | None) -> Console:
    """Where the tables go: stdout, unless the JSON does."""
    return err if json_out is not None and str(json_out) == "-" else out


def emit_json(json_out: Path | None, obj: Any) -> None:
    """Write ``obj`` as JSON to ``json_out`` (atomically), or to stdout for ``-``."""
    if json_out is None:
        return
    if str(json_out) == "-":
        print(json.dumps(obj, indent=2))
        return
    from ..atomic import write_json_atomic

    write_json_atomic(json_out, obj)
    out.print(f"wrote {json_out}")


# ---- routers ---------------------------------------------------------------------------------------
ROUTER_SPEC_HELP = ("a router spec: regex, llm, llm-logprobs, cascade (regex,llm), global, oracle, or a router "
                    "directory; DIR+vote votes with a global search; a comma-separated list is a cascade tried in "
                    "order (STAGE@T: a stage answers only at confidence >= T); ':POLICY' (router, hard, abstain, "
                    "top2, soft) says what an unsure decision searches")
OneRouter = Annotated[list[str], typer.Option("--router", help=ROUTER_SPEC_HELP + ". Give it once.")]
Systems = Annotated[list[str], typer.Option("--router", help=ROUTER_SPEC_HELP + ". Repeat it to compare systems.")]


def one_router(specs: list[str]) -> str:
    """The single spec of a command that runs one router: a repeated ``--router`` is an error,
    never silently the last one (a cascade is one spec, ``A,B,C``)."""
    if len(specs) != 1:
        joined = ",".join(specs)
        raise UsageError(f"this command runs one router; write a cascade as one spec (--router {joined})")
    return specs[0]


# ---- search ----------------------------------------------------------------------------------------
SearchConfigFile = Annotated[Path | None, typer.Option(
    "--search-config", help="SearchConfig YAML (configs/search/default.yaml); the flags below override it")]
Mode = Annotated[SearchMode | None, typer.Option(help="retriever (default: the search config's, hybrid)")]
GlobalHead = Annotated[int | None, typer.Option(
    help="recall guard: keep the global top-N chunks in scoped results (default: the search config's, 0)")]
GlobalInScope = Annotated[bool | None, typer.Option(
    "--global-in-scope/--no-global-in-scope", help="recall guard: the routed scope's chunks among the global "
    "top-k come first in scoped results (default: the search config's, off)")]


SearchDevice = Annotated[Device | None, typer.Option(
    "--device", help="where to embed queries and search: 'auto' (CUDA when present), 'cpu', 'cuda'; chosen at "
                     "load, whatever machine built the index")]


def search_config(path: Path | None, *, mode: str | None = None, global_head: int | None = None,
                  global_in_scope: bool | None = None) -> SearchConfig:
    return SearchConfig.load(path, mode=mode, global_head=global_head, global_in_scope=global_in_scope)


# ---- the LLM endpoint ------------------------------------------------------------------------------
def _envvar(names: tuple[str, ...]) -> str | list[str]:
    """One variable as a string: typer quotes a list as-is in its messages ("env var: '['X']'")."""
    return names[0] if len(names) == 1 else list(names)


LLMConfigFile = Annotated[Path | None, typer.Option(
    "--llm-config", help="LLMConfig YAML, e.g. configs/llm/vllm.yaml; the flags and variables below override it")]
LLMUrl = Annotated[str | None, typer.Option(
    "--llm-url", envvar=_envvar(ENV_BASE_URL), show_envvar=True,
    help="OpenAI-compatible base URL (the key comes from MASDR_LLM_API_KEY or OPENAI_API_KEY; default "
         "http://127.0.0.1:8080/v1)")]
LLMModel = Annotated[str | None, typer.Option("--llm-model", envvar=_envvar(ENV_MODEL), show_envvar=True,
                                              help="model name sent with each request")]
LLMDialect = Annotated[Dialect | None, typer.Option("--llm-dialect", envvar=_envvar(ENV_DIALECT), show_envvar=True,
                                                    help="how constrained output is requested")]
LLMTimeout = Annotated[float | None, typer.Option("--llm-timeout", help="seconds per request (default 60)")]
Local = Annotated[bool, typer.Option("--local", help="start the embedded llama.cpp server (SmolLM2-135M) for "
                                     "this command and use it")]


def connect_llm(stack: contextlib.ExitStack, *, config: Path | None = None, url: str | None = None,
                model: str | None = None, dialect: str | None = None, timeout: float | None = None,
                local: bool = False) -> ChatClient:
    """A client for the configured endpoint (or the embedded server, with ``local``) that lives as
    long as ``stack``. Commands call it only when a router or the answer path needs an LLM, so no
    server starts for nothing."""
    from ..llm.connect import open_client

    cfg = LLMConfig.load(config, base_url=url, model=model, dialect=dialect, timeout_s=timeout)
    return stack.enter_context(open_client(cfg, local=local))


def taxonomy_and_index(taxonomy: Path | None, index: Path | None,
                       specs: Sequence[RouterSpec] = ()) -> tuple[Taxonomy, ScopedIndex | None]:
    """The taxonomy (from ``--taxonomy``, else the ``--index``'s, else the one an exported router
    among ``specs`` carries) and the index when given; an index built for another taxonomy than
    ``--taxonomy`` is refused."""
    from ..errors import UsageError
    from ..retrieval.index import ScopedIndex
    from ..routers.spec import artifact_taxonomy
    from ..taxonomy import Taxonomy

    if taxonomy is None and index is None:
        carried = artifact_taxonomy(specs)
        if carried is not None:
            return carried, None
        raise UsageError("give --taxonomy (or --index, whose taxonomy is used)")
    tax = Taxonomy.from_yaml(taxonomy) if taxonomy else None
    idx = ScopedIndex.load(index, taxonomy=tax) if index else None
    return (tax or idx.taxonomy), idx  # type: ignore[union-attr]
