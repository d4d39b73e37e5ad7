"""Exact inner-product search over one shard of unit vectors.

Two backends with one interface: FAISS ``IndexFlatIP`` (moved to the GPU when faiss-gpu and a
CUDA device are present) and plain torch matrix search (CUDA when present) for machines without
FAISS. Both are exact, so they return the same neighbours.

Each scope gets its *own* shard. We never search a global GPU index with an ``IDSelector``:
classic faiss-gpu indexes silently ignore ``SearchParameters(sel=...)`` (faiss #3114, #3924) and
would return out-of-scope chunks -- the very dilution scoping exists to stop.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..errors import MasdrError


@functools.lru_cache(maxsize=1)
def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def faiss_gpu_count() -> int:
    if not faiss_available():
        return 0
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def resolve_backend(backend: str = "auto", device: str = "cpu") -> str:
    """``auto``: FAISS when it can search on ``device``, else torch exact search (so a CUDA machine
    with faiss-cpu, e.g. the GPU image, searches on the GPU with torch rather than on the CPU).

    >>> resolve_backend("torch"), resolve_backend("auto", "cpu") in ("faiss", "torch")
    ('torch', True)
    """
    if backend == "auto":
        if not faiss_available() or (device == "cuda" and faiss_gpu_count() == 0):
            return "torch"
        return "faiss"
    if backend == "faiss" and not faiss_available():
        raise MasdrError("backend 'faiss' requested but faiss is not installed (pip install faiss-cpu)")
    return backend


class DenseShard:
    """Exact top-k inner-product search over ``vectors`` (float32, unit rows)."""

    def __init__(self, vectors: np.ndarray, *, backend: str = "auto", device: str = "cpu") -> None:
        self.backend = resolve_backend(backend, device)
        self.n, self.dim = vectors.shape
        self.device = "cpu"
        self._index: Any
        if self.backend == "faiss":
            import faiss

            index = faiss.IndexFlatIP(self.dim)
            if self.n:
                index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            if device == "cuda" and faiss_gpu_count() > 0:
                index = faiss.index_cpu_to_gpu(_gpu_resources(), 0, index)
                self.device = "cuda"
            self._index = index
        else:
            import torch

            self.device = device
            self._index = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(device)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(scores, rows)`` of shape ``(nq, min(k, n))``, best first."""
        k = min(k, self.n)
        nq = queries.shape[0]
        if k == 0:
            return np.zeros((nq, 0), np.float32), np.zeros((nq, 0), np.int64)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if self.backend == "faiss":
            scores, rows = self._index.search(q, k)
            return scores, rows.astype(np.int64)
        import torch

        with torch.inference_mode():
            sims = torch.from_numpy(q).to(self.device) @ self._index.T
            top = torch.topk(sims, k, dim=1)
        return top.values.cpu().numpy(), top.indices.cpu().numpy().astype(np.int64)


@functools.lru_cache(maxsize=1)
def _gpu_resources() -> Any:
    import faiss

    return faiss.StandardGpuResources()
