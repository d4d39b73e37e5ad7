"""``masdr route``: route one query and show the decision."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from .common import (
    JsonOut,
    LLMConfigFile,
    LLMDialect,
    LLMModel,
    LLMUrl,
    Local,
    OneRouter,
    SearchConfigFile,
    connect_llm,
    emit_json,
    human,
    one_router,
    search_config,
    taxonomy_and_index,
)
from .report import print_decision


def route(
    query: Annotated[str, typer.Argument(help="the query")],
    router: OneRouter,
    taxonomy: Annotated[Path | None, typer.Option(help="taxonomy YAML (default: the --index's)")] = None,
    index: Annotated[Path | None, typer.Option(help="index directory (needed by +vote routers)")] = None,
    search_cfg: SearchConfigFile = None,
    llm_cfg: LLMConfigFile = None,
    llm_url: LLMUrl = None,
    llm_model: LLMModel = None,
    llm_dialect: LLMDialect = None,
    local: Local = False,
    json_out: JsonOut = None,
) -> None:
    """Route one query and print the decision."""
    from ..query import validate_query
    from ..routers import build_router, parse_router_spec

    query = validate_query(query)
    spec = parse_router_spec(one_router(router))
    tax, idx = taxonomy_and_index(taxonomy, index, [spec])
    with contextlib.ExitStack() as stack:
        client = connect_llm(stack, config=llm_cfg, url=llm_url, model=llm_model, dialect=llm_dialect,
                             local=local) if spec.needs_llm else None
        r = build_router(spec, taxonomy=tax, index=idx, llm=client, search=search_config(search_cfg))
        decision = r.route(query)
    print_decision(human(json_out), decision)
    emit_json(json_out, decision.to_dict())
