"""Near-duplicate groups, and the two decisions made on them: a group whose members come from
documents of different scopes is *ambiguous* (the same query would teach the router two labels, so
all of it goes), and of a group within one scope only one member is kept (the rest are
*duplicates*, which would only over-weight one phrasing in training).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from .candidate import Candidate
from .similarity import JaccardIndex
from .text import tokens


def near_duplicate_groups(texts: Sequence[str], threshold: float) -> list[list[int]]:
    """Indices of ``texts`` grouped by word-set Jaccard >= ``threshold``, chained (if A ~ B and
    B ~ C, all three are one group); every text is in exactly one group, singletons included.
    Texts equal after :func:`~masdr_router.querygen.text.normalise` have Jaccard 1.

    >>> near_duplicate_groups(["Oil find!", "oil  FIND", "bank profits", "new oil find"], 0.9)
    [[0, 1], [2], [3]]
    """
    sets = [tokens(t) for t in texts]
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in JaccardIndex(sets, threshold).pairs():
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = {}
    for i in range(len(texts)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def ambiguous(candidates: Sequence[Candidate], groups: Sequence[Sequence[int]]) -> set[int]:
    """Members of groups that span more than one scope (including a candidate whose own document
    is in several scopes).

    >>> cs = [Candidate("oil find", "d1", ("business",), "keyphrase"),
    ...       Candidate("Oil find", "d2", ("tech",), "keyphrase"), Candidate("cup final", "d3", ("sport",), "lead")]
    >>> sorted(ambiguous(cs, [[0, 1], [2]]))
    [0, 1]
    """
    out: set[int] = set()
    for g in groups:
        if len({s for i in g for s in candidates[i].scopes}) > 1:
            out.update(g)
    return out


def duplicates(groups: Sequence[Sequence[int]], skip: Collection[int], key: Callable[[int], object]) -> set[int]:
    """All members of each group but the best one by ``key`` (smallest), ignoring ``skip`` (already
    dropped for another reason, so a group's survivor is never one that is dropped anyway).

    >>> sorted(duplicates([[0, 1, 2], [3]], skip={0}, key=lambda i: i))
    [2]
    """
    out: set[int] = set()
    for g in groups:
        alive = sorted((i for i in g if i not in skip), key=key)
        out.update(alive[1:])
    return out
