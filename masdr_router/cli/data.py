"""``masdr data``: real public data sets in the package's data contracts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..datasets import DatasetName
from .common import err, out

app = typer.Typer(help="Real public data sets in the package's data contracts.", no_args_is_help=True)


@app.command("prepare")
def prepare(
    name: Annotated[DatasetName, typer.Argument(help="the data set (see `masdr data list`)")],
    out_dir: Annotated[Path, typer.Option("--out", help="output directory (written atomically)")],
    max_docs_per_scope: Annotated[int | None, typer.Option(min=1, help="subsample: at most N documents per scope "
                                                                "(composite: the largest scope, ratios kept)")] = None,
    seed: Annotated[int, typer.Option(help="seed for subsampling and the stratified split")] = 0,
    val: Annotated[float, typer.Option(help="validation share of the queries")] = 0.1,
    test: Annotated[float, typer.Option(help="test share of the queries")] = 0.2,
    overwrite: Annotated[bool, typer.Option(help="replace an existing output directory")] = False,
) -> None:
    """Fetch a pinned data set, check its sha256, and write taxonomy.yaml, corpus.jsonl and
    train/val/test.jsonl."""
    from ..atomic import check_output
    from ..datasets import load_dataset
    from ..datasets.splits import check_shares

    check_output(out_dir, overwrite=overwrite)
    check_shares(val, test)
    with err.status(f"loading {name}"):
        ds = load_dataset(name, max_docs_per_scope=max_docs_per_scope, seed=seed)
    info = ds.save(out_dir, seed=seed, val=val, test=test, overwrite=overwrite)
    t = Table(title=f"{name} -> {out_dir}")
    for col in ("scope", "documents", "queries"):
        t.add_column(col, justify="left" if col == "scope" else "right")
    for s in ds.taxonomy.names:
        t.add_row(s, str(info["documents_per_scope"].get(s, 0)), str(info["queries_per_scope"].get(s, 0)))
    out.print(t)
    out.print(f"splits: {info['queries']}  taxonomy fingerprint: {info['taxonomy']['fingerprint']}")


@app.command("list")
def list_() -> None:
    """List the data sets `data prepare` knows."""
    from ..datasets import DATASETS

    for n, fn in DATASETS.items():
        doc = (sys.modules[fn.__module__].__doc__ or "").strip()
        out.print(f"{n:16s} {doc.splitlines()[0] if doc else ''}")
