"""``masdr demo``: the main job on the embedded default, end to end, reusing finished steps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..datasets import DatasetName
from . import answer, data, evaluate, index, train
from .common import out


def demo(
    workdir: Annotated[Path, typer.Option(help="where data, index and reports go")] = Path("runs/demo"),
    dataset: Annotated[DatasetName, typer.Option(help="the data set (see `masdr data list`)")] = "bbc",
    router_out: Annotated[Path | None, typer.Option(help="where the trained router is exported "
                                                    "(default: checkpoints/DATASET-router)")] = None,
    max_docs_per_scope: Annotated[int | None, typer.Option(min=1, help="subsample the corpus for a quicker "
                                                                  "run")] = None,
    k: Annotated[int, typer.Option(min=1, help="cut-off for P@k and R@k")] = 10,
) -> None:
    """The main job on the embedded default: fetch a real data set, build the scoped index with
    MiniLM, train + calibrate + export a LoRA router, compare global vs regex-routed vs LoRA-routed
    vs oracle-scoped retrieval on the held-out test queries, and answer one test question end to
    end through the embedded local LLM server. Finished steps are reused."""
    from ..data import read_queries
    from ..routers.lora import CONFIG_NAME, LoraRouter

    data_dir, index_dir = workdir / dataset, workdir / f"{dataset}-index"
    router_dir = router_out or Path("checkpoints") / f"{dataset}-router"
    if not (data_dir / "dataset.json").is_file():
        out.rule(f"1/5 data: {dataset}")
        data.prepare(dataset, data_dir, max_docs_per_scope=max_docs_per_scope, overwrite=data_dir.exists())
    else:
        out.print(f"reusing {data_dir}")
    if not (index_dir / "manifest.json").is_file():
        out.rule("2/5 index: MiniLM embeddings, one FAISS + BM25 shard per scope")
        index.build(data_dir / "taxonomy.yaml", data_dir / "corpus.jsonl", index_dir, overwrite=index_dir.exists())
    else:
        out.print(f"reusing {index_dir}")
    if not (router_dir / CONFIG_NAME).is_file():
        out.rule(f"3/5 router: LoRA on MiniLM, calibrated for retrieval on the index, exported to {router_dir}")
        # thresholds chosen for retrieval with the recall guards step 4 searches with
        train.train(data_dir / "taxonomy.yaml", data_dir / "train.jsonl", router_dir, val=data_dir / "val.jsonl",
                    test=data_dir / "test.jsonl", overwrite=router_dir.exists(), index=index_dir, global_head=1,
                    global_in_scope=True)
    else:
        out.print(f"reusing {router_dir}")
    out.rule("4/5 retrieval: global vs regex-routed vs LoRA-routed vs oracle-scoped")
    # both recall guards on, as recommended: routing should raise precision without costing recall
    evaluate.retrieval(index_dir, data_dir / "test.jsonl", ["global", "regex", str(router_dir), f"{router_dir}+vote",
                                                            "oracle"],
                       k=k, global_head=1, global_in_scope=True, json_out=workdir / f"{dataset}-retrieval.json",
                       plot=workdir / f"{dataset}-retrieval.png")
    # show the routed path: the first test question the router is confident about
    router = LoraRouter.from_pretrained(router_dir)
    questions = [q.query for q in read_queries(data_dir / "test.jsonl")]
    question = next((q for q, d in zip(questions, router.route_batch(questions)) if not d.abstained), questions[0])
    out.rule("5/5 answer: LoRA route -> scoped search -> one call to the embedded SmolLM2 server")
    answer.ask(question, index_dir, [str(router_dir)], k=3, local=True)
