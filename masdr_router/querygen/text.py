"""Text normalisation for comparing pseudo-queries: one definition of "the same query" that the
deduplication, the ambiguity check and the contamination check all share.

Two queries that differ only in case, whitespace or punctuation are the same query to a router,
so they are compared after :func:`normalise`; near-duplicates are compared by the Jaccard overlap
of their word sets (:func:`jaccard`), which ignores word order and repeated words.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection

# Anything that is not a letter or digit separates words: "China's" -> "china s", "6%" -> "6".
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Lower-case, Unicode-compatibility-folded text with punctuation replaced by single spaces.

    >>> normalise("  Profits JUMP at China's top bank!! ")
    'profits jump at china s top bank'
    """
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def tokens(text: str) -> frozenset[str]:
    """The set of words of :func:`normalise` d text.

    >>> sorted(tokens("Oil, oil and GAS"))
    ['and', 'gas', 'oil']
    """
    return frozenset(normalise(text).split())


def jaccard(a: Collection[str], b: Collection[str]) -> float:
    """``|a ∩ b| / |a ∪ b|`` of two word sets (0.0 when both are empty).

    >>> jaccard(tokens("new oil find"), tokens("oil find"))
    0.6666666666666666
    """
    a, b = set(a), set(b)
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def contains_phrase(haystack: str, needle: str) -> bool:
    """Whether normalised ``needle`` occurs in normalised ``haystack`` as whole words (so
    ``"oil find"`` is in ``"new oil find"`` but ``"il fin"`` is not).

    >>> contains_phrase("Cairn shares up on new oil find", "OIL FIND")
    True
    >>> contains_phrase("Cairn shares up on new oil find", "il fin")
    False
    """
    h, n = normalise(haystack), normalise(needle)
    return bool(n) and f" {n} " in f" {h} "


# English function words: a phrase starting or ending with one is a fragment ("of the bank", "shares
# in"). Hand-kept rather than scikit-learn's list, which also holds content words a search needs
# ("computer", "system", "interest", "bill", "fire", "find").
FUNCTION_WORDS = frozenset(  # one string, split: 190 quoted words would be unreadable
    """
a about above after again against all also although am among an and any are as at be because been before
being below between both but by can could did do does doing down during each either else ever every few for
from further had has have having he her here hers herself him himself his how however i if in into is it its
itself just may me might more most much must my myself neither no nor not now of off on once only or other
our ours ourselves out over own per same she should since so some such than that the their theirs them
themselves then there these they this those though through thus to too under until up upon us very via was
we were what when where whether which while who whom whose why will with within without would yet you your
yours yourself yourselves
said says say told added according also just like year years week weeks day days time times mr mrs ms dr
s t re ve ll d m
""".split()  # noqa: SIM905
)
