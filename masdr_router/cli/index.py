"""``masdr index`` and ``masdr search``: build, inspect and search scoped indexes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..config import Device
from .common import GlobalHead, GlobalInScope, Mode, SearchConfigFile, SearchDevice, out, search_config
from .report import print_manifest

app = typer.Typer(help="Build and inspect scoped indexes.", no_args_is_help=True)


@app.command("build")
def build(
    taxonomy: Annotated[Path, typer.Option(help="taxonomy YAML")],
    corpus: Annotated[Path, typer.Option(help="corpus JSONL")],
    out_dir: Annotated[Path, typer.Option("--out", help="index directory (written atomically)")],
    config: Annotated[Path | None, typer.Option(help="IndexConfig YAML (configs/index/default.yaml)")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="words per chunk")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="words shared by consecutive chunks")] = None,
    batch_size: Annotated[int | None, typer.Option(help="encoder batch size")] = None,
    device: Annotated[Device | None, typer.Option(help="where to embed (default: the config's, auto)")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing index directory")] = False,
) -> None:
    """Chunk, embed and shard a corpus: one dense + BM25 shard per scope, plus a global view."""
    from ..atomic import check_output
    from ..config import IndexConfig
    from ..data import read_corpus
    from ..retrieval.index import ScopedIndex
    from ..taxonomy import Taxonomy

    # every input is validated before any work, so bad input never leaves a partial directory behind
    check_output(out_dir, overwrite=overwrite)
    tax = Taxonomy.from_yaml(taxonomy)
    cfg = IndexConfig.load(config, chunk_size=chunk_size, chunk_overlap=chunk_overlap, batch_size=batch_size,
                           device=device)
    docs = read_corpus(corpus)
    index = ScopedIndex.build(tax, docs, cfg, progress=True)
    index.save(out_dir, overwrite=overwrite)
    print_manifest(out, index.manifest(), out_dir)


@app.command("info")
def info(path: Annotated[Path, typer.Argument(help="index directory")]) -> None:
    """Show an index's manifest."""
    from ..retrieval.index import read_manifest

    print_manifest(out, read_manifest(path), path)


def search(
    query: Annotated[str, typer.Argument(help="the query")],
    index: Annotated[Path, typer.Option(help="index directory")],
    scope: Annotated[list[str] | None, typer.Option(help="search only these scopes (repeatable); "
                                                       "default: the whole corpus")] = None,
    k: Annotated[int, typer.Option(min=1, help="number of chunks")] = 5,
    device: SearchDevice = None,
    search_cfg: SearchConfigFile = None,
    mode: Mode = None,
    global_head: GlobalHead = None,
    global_in_scope: GlobalInScope = None,
) -> None:
    """Search an index, globally or inside scopes."""
    from ..query import validate_query
    from ..retrieval.index import ScopedIndex

    query = validate_query(query)
    cfg = search_config(search_cfg, mode=mode, global_head=global_head, global_in_scope=global_in_scope)
    idx = ScopedIndex.load(index, device=device)
    for s in scope or []:
        idx.taxonomy.check_scope(s)
    for rank, h in enumerate(idx.search(query, scope or None, k, cfg), start=1):
        out.print(f"{rank:2d}. [bold]{h.chunk_id}[/] ({', '.join(h.scopes) or 'no scope'}) {h.score:.4f}")
        out.print(f"    {h.text[:200]}", highlight=False)
