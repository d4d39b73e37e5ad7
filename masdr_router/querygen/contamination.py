"""The contamination check: no pseudo-query may leak a held-out (test) query into training.

A pseudo-query is contaminated when its normalised text equals, contains or is contained in a
held-out query (as whole words), or when its word-set Jaccard with one reaches the threshold. And
when the held-out queries name their relevant documents, a pseudo-query generated *from* such a
document is contaminated too: on a headline-as-query set like BBC, the test query is the title of
its relevant document, so that document's lead sentence or keyphrases paraphrase the test query
even when no string check catches it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence

from .candidate import Candidate
from .similarity import JaccardIndex
from .text import normalise


class HeldOutQueries:
    """Held-out query texts, indexed to tell quickly whether a text leaks one of them.

    >>> h = HeldOutQueries(["Cairn shares up on new oil find", "Blair rejects Iraq advice calls"], 0.8)
    >>> [h.match(t) for t in ["cairn shares up on new oil find!", "new oil find", "Cup final tonight"]]
    ['equal', 'contained', None]
    """

    def __init__(self, queries: Iterable[str], threshold: float) -> None:
        self.texts = sorted({n for n in map(normalise, queries) if n})
        self.sets = [frozenset(t.split()) for t in self.texts]
        self.similar = JaccardIndex(self.sets, threshold)
        self._with_word: dict[str, set[int]] = defaultdict(set)
        for i, s in enumerate(self.sets):
            for w in s:
                self._with_word[w].add(i)

    def __len__(self) -> int:
        return len(self.texts)

    def match(self, text: str) -> str | None:
        """How ``text`` leaks a held-out query: ``"equal"``, ``"contains"`` (it contains one),
        ``"contained"`` (one contains it), ``"similar"`` (Jaccard >= threshold), or ``None``."""
        norm = normalise(text)
        words = frozenset(norm.split())
        if not words:
            return None
        padded = f" {norm} "
        # a held-out query that shares a word with the text is the only one that can match at all
        sharing = set().union(*(self._with_word.get(w, set()) for w in words))
        verdict = None
        for i in sorted(sharing):
            if self.texts[i] == norm:
                return "equal"
            if verdict is None:
                if self.sets[i] <= words and f" {self.texts[i]} " in padded:
                    verdict = "contains"
                elif words <= self.sets[i] and padded in f" {self.texts[i]} ":
                    verdict = "contained"
        if verdict is None and self.similar.query(words):
            verdict = "similar"
        return verdict


def contaminated(candidates: Sequence[Candidate], held_out: HeldOutQueries | None,
                 excluded_docs: Collection[str] = ()) -> dict[int, str]:
    """``{index: reason}`` of the contaminated candidates; the reason is ``"document"`` (made from
    a held-out query's relevant document) or how its text matches (see :meth:`HeldOutQueries.match`).

    >>> cs = [Candidate("new oil find", "d1", ("business",), "keyphrase"),
    ...       Candidate("record profits", "d2", ("business",), "keyphrase"),
    ...       Candidate("cup final", "d3", ("sport",), "lead")]
    >>> contaminated(cs, HeldOutQueries(["Cairn shares up on new oil find"], 0.8), excluded_docs={"d3"})
    {0: 'contained', 2: 'document'}
    """
    out: dict[int, str] = {}
    excluded = set(excluded_docs)
    for i, c in enumerate(candidates):
        if c.doc_id in excluded:
            out[i] = "document"
        elif held_out is not None and (how := held_out.match(c.text)) is not None:
            out[i] = how
    return out

