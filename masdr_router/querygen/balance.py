"""Balancing: the same number of pseudo-queries for every scope, so small scopes do not vanish.

A corpus is usually lopsided (the composite set's scopes differ 16× in size), and a router trained
on pseudo-queries in corpus proportions learns the big scopes and misses the small ones, exactly
where the MASDR-RAG paper found dilution worst. So every scope gets the same target, capped by what
it has: a scope with fewer candidates keeps them all rather than being padded with repeats.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .candidate import Candidate
from .config import METHOD_PRIORITY


def sample_scope(candidates: Sequence[Candidate], n: int | None, *, seed: int, scope: str) -> list[Candidate]:
    """At most ``n`` of one scope's candidates (all of them when ``n`` is ``None``), seeded.

    Documents are visited in a shuffled order, round-robin: every document gives one query before
    any gives a second, so the sample covers as many documents (topics) of the scope as it can
    instead of several phrasings of a few. Each document gives its best candidate first (title,
    heading, lead, LLM question, then keyphrases in random order; see ``METHOD_PRIORITY``). The
    seed is mixed with the scope name, so adding a scope to the taxonomy does not reshuffle the others.

    >>> cs = [Candidate(f"q{d}{k}", f"d{d}", ("a",), "lead") for d in range(3) for k in range(2)]
    >>> sorted({c.doc_id for c in sample_scope(cs, 3, seed=0, scope="a")})
    ['d0', 'd1', 'd2']
    """
    rng = random.Random(f"{seed}/{scope}")  # a str seed hashes the same in every process
    by_doc: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_doc.setdefault(c.doc_id, []).append(c)
    docs = list(by_doc)
    rng.shuffle(docs)
    for d in docs:
        rng.shuffle(by_doc[d])  # ties within a method in random order (sort is stable)
        by_doc[d].sort(key=lambda c: METHOD_PRIORITY.get(c.method, len(METHOD_PRIORITY)))
    limit = len(candidates) if n is None else min(n, len(candidates))
    out: list[Candidate] = []
    layer = 0
    while len(out) < limit:
        for d in docs:
            if layer < len(by_doc[d]):
                out.append(by_doc[d][layer])
                if len(out) == limit:
                    break
        layer += 1
    return out


def balance(candidates: Sequence[Candidate], scopes: Sequence[str], per_scope: int | None, *,
            seed: int) -> dict[str, list[Candidate]]:
    """``{scope: sample}`` for every scope in ``scopes`` (taxonomy order), each of
    ``min(per_scope, what the scope has)`` candidates; ``per_scope=None`` keeps everything.

    >>> cs = [Candidate(f"q{i}", f"d{i}", ("big",), "lead") for i in range(10)]
    >>> cs += [Candidate("only one", "s0", ("small",), "lead")]
    >>> {s: len(v) for s, v in balance(cs, ["big", "small", "empty"], 4, seed=0).items()}
    {'big': 4, 'small': 1, 'empty': 0}
    """
    by_scope: dict[str, list[Candidate]] = {s: [] for s in scopes}
    for c in candidates:
        by_scope[c.scope].append(c)
    return {s: sample_scope(cs, per_scope, seed=seed, scope=s) for s, cs in by_scope.items()}
