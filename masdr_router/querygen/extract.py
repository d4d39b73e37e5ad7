"""Pseudo-queries read straight out of one document, without a model: its title, its headings and
its lead sentence. These are the phrases an author chose to say what the text is about, which is
what a person searching for it tends to type.

Each function returns plain strings; :mod:`masdr_router.querygen.pipeline` attaches provenance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .text import FUNCTION_WORDS

# Markdown ATX headings: "## Setting up", optionally closed by #s.
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
# A line made of one repeated punctuation character: a setext (Markdown) or reST underline/overline.
_RULE = re.compile(r"^\s*([=\-~^\"'`#*+_:.])\1{2,}\s*$")
# Headings that say nothing about the document's subject.
_GENERIC_HEADINGS = frozenset({
    "abstract", "acknowledgements", "acknowledgments", "appendix", "background", "conclusion", "conclusions",
    "contents", "discussion", "external links", "further reading", "introduction", "notes", "overview",
    "references", "related work", "see also", "summary", "table of contents",
})
# Sentence end: . ! ? (optionally closed by a quote or bracket) followed by space and a capital,
# digit or opening quote. Titles such as "Mr." or "Dr." would end a sentence too early, so a
# handful of common abbreviations are protected first.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = re.compile(r"\b(Mr|Mrs|Ms|Dr|Prof|St|Sr|Jr|Inc|Ltd|Co|Corp|vs|etc|e\.g|i\.e|No|U\.S|U\.K)\.",
                            re.IGNORECASE)
_DOT = "\x00"  # stands in for an abbreviation's dot while sentences are split


def _words(text: str) -> list[str]:
    return text.split()


def _fits(text: str, min_words: int, max_words: int) -> bool:
    return min_words <= len(_words(text)) <= max_words


def _clean(text: str) -> str:
    """One line, single spaces, no Markdown emphasis or trailing colon."""
    text = re.sub(r"[*_`]{1,3}([^*_`]+)[*_`]{1,3}", r"\1", text)
    return " ".join(text.split()).strip().rstrip(":").strip()


def _lines(text: str) -> list[str]:
    return [ln.rstrip() for ln in text.splitlines()]


def headings(text: str, *, min_words: int = 2, max_words: int = 20) -> list[str]:
    """Markdown (``#`` and underlined) and reStructuredText (underlined, optionally overlined)
    section titles, in order, without generic ones ("Introduction", "References").

    >>> headings("# Installing the pump\\n\\nText.\\n\\nWiring the panel\\n================\\n\\nMore.")
    ['Installing the pump', 'Wiring the panel']
    """
    lines = _lines(text)
    found: list[str] = []
    for i, line in enumerate(lines):
        m = _ATX.match(line)
        if m:
            found.append(m.group(2))
            continue
        # an underlined title: a non-empty, non-rule line directly above a rule at least as long
        # (reST requires that; a shorter "---" under prose is a Markdown horizontal rule or a dash)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and not _RULE.match(line) and _RULE.match(nxt) and len(nxt.strip()) >= len(line.strip()):
            found.append(line)
    out = []
    for h in map(_clean, found):
        if _fits(h, min_words, max_words) and h.casefold() not in _GENERIC_HEADINGS and h not in out:
            out.append(h)
    return out


def title(text: str, metadata: Mapping[str, Any] | None = None, *, field: str = "title", min_words: int = 2,
          max_words: int = 20) -> str | None:
    """The document's title: the ``field`` metadata value when present, else a short first line
    followed by more text (a headline, as raw BBC articles and many notes start); ``None`` when
    there is neither. A Markdown/reST heading on the first line is left to :func:`headings`.

    >>> title("Cairn shares up on new oil find\\n\\nShares in Cairn Energy have jumped 6%.")
    'Cairn shares up on new oil find'
    >>> title("One long paragraph without any title line.") is None
    True
    >>> title("body", {"title": "Pump manual"})
    'Pump manual'
    """
    value = (metadata or {}).get(field)
    if isinstance(value, str) and value.strip():
        t = _clean(value)
        return t if _fits(t, min_words, max_words) else None
    lines = [ln for ln in _lines(text) if ln.strip()]
    if len(lines) < 2 or _ATX.match(lines[0]) or _RULE.match(lines[0]) or _RULE.match(lines[1]):
        return None
    first = _clean(lines[0])
    # a headline is short and is not a sentence: it does not end with a full stop
    if not _fits(first, min_words, max_words) or first.endswith("."):
        return None
    return first


def _body(text: str) -> str:
    """The prose of a document: its lines without headings, rules, and a leading title line."""
    lines = _lines(text)
    keep: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _ATX.match(line) or _RULE.match(line) or (line.strip() and _RULE.match(nxt)):
            continue
        keep.append(line)
    non_empty = [ln for ln in keep if ln.strip()]
    if len(non_empty) >= 2 and title(text) == _clean(non_empty[0]):
        keep.remove(non_empty[0])
    return " ".join(" ".join(keep).split())


def sentences(text: str) -> list[str]:
    """Split prose into sentences (a regex, not a parser: good enough for a lead sentence).

    >>> sentences('Mr. Ghosn will remain chief executive. Shares rose 2%! "Good news," he said.')
    ['Mr. Ghosn will remain chief executive.', 'Shares rose 2%!', '"Good news," he said.']
    """
    protected = _ABBREVIATIONS.sub(lambda m: m.group(0)[:-1] + _DOT, text)
    return [s.replace(_DOT, ".").strip() for s in _SENTENCE_END.split(protected) if s.strip()]


def lead(text: str, *, min_words: int = 2, max_words: int = 20) -> str | None:
    """The first sentence of the document's prose, cut to ``max_words`` words; ``None`` when the
    document has no prose of at least ``min_words`` words. News writing puts the whole story in
    its first sentence, so it is the best one-sentence summary a rule can find.

    >>> lead("# Notes\\nShares in Cairn Energy have jumped 6% after the firm said an Indian oilfield "
    ...      "was larger than previously thought. Cairn said drilling had produced strong results.",
    ...      max_words=12)
    'Shares in Cairn Energy have jumped 6% after the firm'
    """
    for sentence in sentences(_body(text)):
        words = _words(sentence)
        if len(words) < min_words:
            continue
        if len(words) > max_words:
            words = words[:max_words]
            # a cut sentence ending in "the" or "an" reads as broken; end it on a content word
            while len(words) > min_words and words[-1].casefold().strip(".,;:!?\"'") in FUNCTION_WORDS:
                words.pop()
        # trailing punctuation carries nothing for a router, and a cut sentence must not end in a comma
        return " ".join(words).rstrip(".,;:!-–— ") or None
    return None
