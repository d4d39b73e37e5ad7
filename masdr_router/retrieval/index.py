"""The scoped index: one dense + one BM25 shard per scope, plus a global view over all chunks.

On disk (``masdr index build``)::

    INDEX_DIR/
      manifest.json     format, taxonomy fingerprint, encoder, chunking, counts
      taxonomy.yaml     the taxonomy it was built for
      chunks.jsonl      one chunk per line (id, doc_id, text, metadata, scopes)
      embeddings.npy    float32 (n_chunks, dim), unit rows, in chunk order
      shards.json       scope -> chunk rows in that scope

Shards are exact (flat) indexes, so they are rebuilt from ``embeddings.npy`` at load time: no
FAISS- or BM25-specific binary file needs to stay compatible across library versions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__
from ..artifacts import read_manifest_json
from ..atomic import atomic_directory, write_json_atomic
from ..config import IndexConfig, SearchConfig
from ..data import Chunk, Document, chunk_document
from ..errors import ArtifactError, TaxonomyMismatchError, ValidationError
from ..query import validate_query
from ..taxonomy import Taxonomy
from .bm25 import BM25Shard
from .dense import DenseShard, resolve_backend
from .fusion import rrf_fuse

if TYPE_CHECKING:
    from .embedder import Embedder

FORMAT = "masdr-scoped-index/1"
MANIFEST = "manifest.json"
GLOBAL = None  # the scope key of the global view


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk."""

    row: int
    chunk_id: str
    doc_id: str
    score: float
    scopes: tuple[str, ...]
    text: str


class ScopedIndex:
    """Build, save, load and search a scoped index.

    >>> idx = ScopedIndex.build(taxonomy, docs)               # doctest: +SKIP
    >>> idx.search("who won the cup final?", scopes=["sport"], k=5)  # doctest: +SKIP
    """

    def __init__(self, taxonomy: Taxonomy, chunks: list[Chunk], chunk_scopes: list[tuple[str, ...]],
                 embeddings: np.ndarray, config: IndexConfig, *, stats: dict[str, Any] | None = None,
                 embedder: Embedder | None = None) -> None:
        self.taxonomy = taxonomy
        self.chunks = chunks
        self.chunk_scopes = chunk_scopes
        self.embeddings = embeddings
        self.config = config
        self.stats = stats or {}
        self._embedder = embedder
        self.backend = resolve_backend(config.backend, self._device())
        self.shard_rows: dict[str | None, np.ndarray] = {
            name: np.array([i for i, s in enumerate(chunk_scopes) if name in s], dtype=np.int64)
            for name in taxonomy.names}
        self.shard_rows[GLOBAL] = np.arange(len(chunks), dtype=np.int64)
        self._dense: dict[str | None, DenseShard] = {}
        self._bm25: dict[str | None, BM25Shard] = {}

    # ---- building -----------------------------------------------------------------------------
    @classmethod
    def build(cls, taxonomy: Taxonomy, docs: Sequence[Document], config: IndexConfig | None = None, *,
              progress: bool = False) -> ScopedIndex:
        from .embedder import Embedder

        config = config or IndexConfig()
        t0 = time.perf_counter()
        embedder = Embedder(config.encoder, device=config.device, max_length=config.max_length,
                            query_prompt=config.query_prompt, document_prompt=config.document_prompt)
        load_s = time.perf_counter() - t0
        # windows are counted in words but capped in the encoder's tokens (after its special
        # tokens and the document prompt), so the encoder never truncates what BM25 indexes
        budget = config.max_length - embedder.token_lengths([embedder.prompts["document"] or ""])[0]
        chunks: list[Chunk] = []
        for d in docs:
            chunks.extend(chunk_document(d, config.chunk_size, config.chunk_overlap, max_tokens=budget,
                                         token_counts=embedder.word_token_counts))
        if not chunks:
            raise ValidationError("corpus produced no chunks (all documents empty?)")
        chunk_scopes = [tuple(taxonomy.scopes_of(c.metadata)) for c in chunks]
        t0 = time.perf_counter()
        emb = embedder.encode([c.text for c in chunks], kind="document", batch_size=config.batch_size,
                              progress=progress, description="embedding chunks")
        embed_s = time.perf_counter() - t0
        stats = {"n_documents": len(docs), "encoder_load_s": round(load_s, 3), "embed_s": round(embed_s, 3),
                 "chunks_per_s": round(len(chunks) / max(embed_s, 1e-9), 2), "device": embedder.device,
                 "encoder": embedder.describe()}
        return cls(taxonomy, chunks, chunk_scopes, emb, config, stats=stats, embedder=embedder)

    # ---- persistence --------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        counts = {name: len(self.shard_rows[name]) for name in self.taxonomy.names}
        return {
            "format": FORMAT,
            "package_version": __version__,
            "taxonomy": {"name": self.taxonomy.name, "fingerprint": self.taxonomy.fingerprint},
            "encoder": self.stats.get("encoder") or {"name": self.config.encoder, "dim": int(self.embeddings.shape[1]),
                                                     "max_length": self.config.max_length},
            "config": self.config.to_dict(),
            "counts": {"documents": self.stats.get("n_documents", len({c.doc_id for c in self.chunks})),
                       "chunks": len(self.chunks),
                       "unscoped_chunks": sum(1 for s in self.chunk_scopes if not s),
                       "per_scope": counts},
            "build_stats": self.stats,
        }

    def save(self, out: str | Path, *, overwrite: bool = False) -> Path:
        """Write the index directory atomically (temp dir + rename)."""
        with atomic_directory(out, overwrite=overwrite) as tmp:
            self.taxonomy.to_yaml(tmp / "taxonomy.yaml")
            with (tmp / "chunks.jsonl").open("w", encoding="utf-8") as f:
                for c, s in zip(self.chunks, self.chunk_scopes):
                    f.write(json.dumps({"id": c.id, "doc_id": c.doc_id, "text": c.text, "metadata": c.metadata,
                                        "scopes": list(s)}, ensure_ascii=False) + "\n")
            np.save(tmp / "embeddings.npy", self.embeddings.astype(np.float32))
            write_json_atomic(tmp / "shards.json", {k: v.tolist() for k, v in self.shard_rows.items() if k})
            # The manifest goes last: a directory without one is never mistaken for an index.
            write_json_atomic(tmp / MANIFEST, self.manifest())
        return Path(out)

    @classmethod
    def load(cls, path: str | Path, *, taxonomy: Taxonomy | None = None, backend: str | None = None,
             device: str | None = None) -> ScopedIndex:
        """Load an index; with ``taxonomy``, refuse one built for a different taxonomy."""
        path = Path(path)
        manifest = read_manifest(path)
        stored = Taxonomy.from_yaml(path / "taxonomy.yaml")
        want = manifest["taxonomy"]["fingerprint"]
        if stored.fingerprint != want:
            raise ArtifactError(f"{path}: taxonomy.yaml does not match the manifest fingerprint (index corrupted?)")
        if taxonomy is not None and taxonomy.fingerprint != want:
            raise TaxonomyMismatchError(
                f"index {path} was built for taxonomy '{manifest['taxonomy']['name']}' ({want}), not for "
                f"'{taxonomy.name}' ({taxonomy.fingerprint}); rebuild it with `masdr index build`")
        config = IndexConfig.from_dict(manifest["config"], source=str(path / MANIFEST))
        # the device is a load-time choice: an index built on a GPU machine loads on a CPU one
        config = config.with_overrides(backend=backend, device=device or "auto")
        chunks, scopes = [], []
        try:
            with (path / "chunks.jsonl").open(encoding="utf-8") as f:
                for line in f:
                    r = json.loads(line)
                    chunks.append(Chunk(id=r["id"], doc_id=r["doc_id"], text=r["text"], metadata=r["metadata"]))
                    scopes.append(tuple(r["scopes"]))
            emb = np.load(path / "embeddings.npy", allow_pickle=False)
        except FileNotFoundError as e:
            raise ArtifactError(f"{path}: {Path(str(e.filename)).name} is missing (index corrupted?)") from None
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
            raise ArtifactError(f"{path}/chunks.jsonl:{len(chunks) + 1}: not a chunk record "
                                "(index corrupted?)") from None
        except ValueError as e:
            raise ArtifactError(f"{path}/embeddings.npy: {e} (index corrupted?)") from None
        if emb.shape[0] != len(chunks):
            raise ArtifactError(f"{path}: embeddings.npy has {emb.shape[0]} rows for {len(chunks)} chunks")
        return cls(taxonomy or stored, chunks, scopes, emb, config, stats=manifest.get("build_stats"))

    # ---- search -------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from .embedder import Embedder

            self._embedder = Embedder(self.config.encoder, device=self.config.device,
                                      max_length=self.config.max_length, query_prompt=self.config.query_prompt,
                                      document_prompt=self.config.document_prompt)
        return self._embedder

    def _device(self) -> str:
        from ..devices import resolve_device

        return resolve_device(self.config.device)

    def dense_shard(self, scope: str | None) -> DenseShard:
        if scope not in self._dense:
            rows = self._rows(scope)
            self._dense[scope] = DenseShard(self.embeddings[rows], backend=self.backend, device=self._device())
        return self._dense[scope]

    def bm25_shard(self, scope: str | None) -> BM25Shard:
        if scope not in self._bm25:
            rows = self._rows(scope)
            self._bm25[scope] = BM25Shard([self.chunks[i].text for i in rows])
        return self._bm25[scope]

    def _rows(self, scope: str | None) -> np.ndarray:
        if scope is not None:
            self.taxonomy.check_scope(scope)
        return self.shard_rows[scope]

    def warm(self, scopes: Sequence[str | None] | None = None) -> None:
        """Build the in-memory shards now rather than on first search."""
        for s in scopes if scopes is not None else [GLOBAL, *self.taxonomy.names]:
            self.dense_shard(s)
            self.bm25_shard(s)

    def encode_queries(self, queries: Sequence[str], *, progress: bool = False) -> np.ndarray:
        return self.embedder.encode(list(queries), kind="query", batch_size=64, progress=progress,
                                    description="embedding queries")

    def search_shard(self, scope: str | None, queries: Sequence[str], qvecs: np.ndarray, k: int,
                     cfg: SearchConfig) -> list[list[tuple[int, float]]]:
        """Ranked ``(global_row, score)`` lists for a batch of queries inside one shard."""
        rows = self._rows(scope)
        depth = k if cfg.mode == "dense" else max(k, cfg.candidates)
        dense_rows = bm25_rows = None
        if cfg.mode in {"dense", "hybrid"}:
            d_scores, d_local = self.dense_shard(scope).search(qvecs, depth)
            dense_rows = np.where(d_local >= 0, rows[np.maximum(d_local, 0)], -1)
        if cfg.mode in {"bm25", "hybrid"}:
            b_scores, b_local = self.bm25_shard(scope).search(list(queries), depth)
            bm25_rows = np.where(b_local >= 0, rows[np.maximum(b_local, 0)], -1)
        out = []
        for qi in range(len(queries)):
            if cfg.mode == "dense":
                out.append([(int(r), float(s)) for r, s in zip(dense_rows[qi], d_scores[qi]) if r >= 0][:k])
            elif cfg.mode == "bm25":
                out.append([(int(r), float(s)) for r, s in zip(bm25_rows[qi], b_scores[qi]) if r >= 0][:k])
            else:
                out.append(rrf_fuse([dense_rows[qi].tolist(), bm25_rows[qi].tolist()],
                                    [cfg.dense_weight, cfg.bm25_weight], k=cfg.rrf_k, top=k))
        return out

    def search_many(self, queries: Sequence[str], scopes: Sequence[Sequence[str] | None], k: int = 10,
                    cfg: SearchConfig | None = None, *, qvecs: np.ndarray | None = None,
                    weights: Sequence[Sequence[float] | None] | None = None) -> list[list[Hit]]:
        """Search each query inside its scopes (``None`` = global view). Queries that share a
        scope are searched as one batch. Several scopes for one query are fused by RRF, weighted
        by ``weights[i]`` (one weight per scope, e.g. the router's probabilities) when given."""
        cfg = cfg or SearchConfig()
        if len(scopes) != len(queries):
            raise ValueError("need one scope list per query")
        if weights is not None and len(weights) != len(queries):
            raise ValueError("need one weight list (or None) per query")
        queries = [validate_query(q) for q in queries]
        if qvecs is None:
            qvecs = self.encode_queries(queries)
        groups: dict[str | None, list[int]] = {}
        for qi, sc in enumerate(scopes):
            for s in (sc if sc else [GLOBAL]):
                groups.setdefault(s, []).append(qi)
            if sc and (cfg.global_head > 0 or cfg.global_in_scope):  # the recall guards need the global ranking
                groups.setdefault(GLOBAL, []).append(qi)
        per_query: list[dict[str | None, list[tuple[int, float]]]] = [{} for _ in queries]
        for s, qis in groups.items():
            ranked = self.search_shard(s, [queries[i] for i in qis], qvecs[qis], k, cfg)
            for qi, r in zip(qis, ranked):
                per_query[qi][s] = r
        results = []
        for qi, by_scope in enumerate(per_query):
            head: list[tuple[int, float]] = []
            if scopes[qi] and (cfg.global_head > 0 or cfg.global_in_scope):
                wanted = set(scopes[qi])
                head = [(r, sc) for j, (r, sc) in enumerate(by_scope.pop(GLOBAL))
                        if j < cfg.global_head or (cfg.global_in_scope and wanted.intersection(self.chunk_scopes[r]))]
            if len(by_scope) == 1:
                ranked = next(iter(by_scope.values()))
            else:
                order = list(dict.fromkeys(scopes[qi] or []))  # the query's scopes, in its own order
                w = None
                if weights is not None and weights[qi] is not None:
                    given = dict(zip(scopes[qi] or [], weights[qi]))
                    w = [given[s] for s in order]
                ranked = rrf_fuse([[r for r, _ in by_scope[s]] for s in order], w, k=cfg.rrf_k, top=k)
            if head:
                kept = {r for r, _ in head}
                ranked = head + [(r, s) for r, s in ranked if r not in kept][: k - len(head)]
            results.append([self._hit(r, s) for r, s in ranked])
        return results

    def search(self, query: str, scopes: Sequence[str] | None = None, k: int = 10,
               cfg: SearchConfig | None = None) -> list[Hit]:
        """Top-``k`` chunks for one query inside ``scopes`` (all of them fused), or globally."""
        return self.search_many([query], [scopes], k, cfg)[0]

    def _hit(self, row: int, score: float) -> Hit:
        c = self.chunks[row]
        return Hit(row=row, chunk_id=c.id, doc_id=c.doc_id, score=score, scopes=self.chunk_scopes[row], text=c.text)

    def __len__(self) -> int:
        return len(self.chunks)


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the index at ``path``, checked for format and required keys."""
    manifest = read_manifest_json(path, MANIFEST, kind="scoped index", fmt=FORMAT,
                                  required=("taxonomy", "config", "counts", "encoder"),
                                  make_hint="build one with `masdr index build`", fix_hint="rebuild it")
    if not isinstance(manifest["taxonomy"], dict) or "fingerprint" not in manifest["taxonomy"]:
        raise ArtifactError(f"{path / MANIFEST}: missing key(s) ['taxonomy.fingerprint']; the scoped index is "
                            "corrupted, rebuild it")
    return manifest
