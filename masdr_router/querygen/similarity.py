"""Finding word sets with Jaccard overlap >= a threshold without comparing every pair.

Deduplicating ten thousand pseudo-queries pairwise is 50 million set comparisons; prefix filtering
(Bayardo et al., "Scaling up all pairs similarity search", WWW 2007) makes it near-linear. Order
every word by a fixed global order (rarest first). If ``J(A, B) >= t`` then ``|A ∩ B| >= t·|A|``
and ``>= t·|B|``, so the first ``|A| - ceil(t·|A|) + 1`` words of A and the first
``|B| - ceil(t·|B|) + 1`` words of B must share a word. Indexing each set under its prefix only
and probing with the query's prefix finds every qualifying pair; a size check and the exact
Jaccard then remove the false candidates. Rare words first keeps the posting lists short.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from .text import jaccard

_EPS = 1e-9  # t·|A| computed in floating point: 0.9 * 10 is 9.000000000000002


def _prefix_len(n: int, threshold: float) -> int:
    return n - math.ceil(threshold * n - _EPS) + 1


class JaccardIndex:
    """An index of word sets answering "which of them have Jaccard >= ``threshold`` with this one?".

    >>> idx = JaccardIndex([{"oil", "find"}, {"bank", "profits", "jump"}, {"new", "oil", "find"}], 0.6)
    >>> idx.query({"oil", "find"})
    [0, 2]
    """

    def __init__(self, sets: Sequence[Iterable[str]], threshold: float, *,
                 extra_vocabulary: Iterable[Iterable[str]] = ()) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.sets = [frozenset(s) for s in sets]
        # Any fixed total order is correct; frequency order (rarest first) only makes it fast.
        # Words seen only in queries (extra_vocabulary) count too, so their order is fixed up front.
        freq = Counter(w for s in self.sets for w in s)
        freq.update(w for s in extra_vocabulary for w in set(s))
        self._freq = freq
        self._postings: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(self.sets):
            for w in self._ordered(s)[: _prefix_len(len(s), threshold)]:
                self._postings[w].append(i)

    def _ordered(self, s: Iterable[str]) -> list[str]:
        return sorted(s, key=lambda w: (self._freq.get(w, 0), w))

    def query(self, s: Iterable[str]) -> list[int]:
        """Indices (ascending) of the indexed sets with Jaccard >= threshold to ``s``."""
        s = frozenset(s)
        if not s:
            return []
        lo, hi = self.threshold * len(s) - _EPS, len(s) / self.threshold + _EPS
        seen: set[int] = set()
        for w in self._ordered(s)[: _prefix_len(len(s), self.threshold)]:
            seen.update(self._postings.get(w, ()))
        return sorted(i for i in seen if lo <= len(self.sets[i]) <= hi
                      and jaccard(s, self.sets[i]) >= self.threshold - _EPS)

    def pairs(self) -> list[tuple[int, int]]:
        """Every pair ``(i, j)``, ``i < j``, of indexed sets with Jaccard >= threshold (a self-join).

        >>> JaccardIndex([{"a", "b"}, {"c"}, {"b", "a"}], 0.9).pairs()
        [(0, 2)]
        """
        return [(i, j) for i, s in enumerate(self.sets) for j in self.query(s) if j > i]
