"""Keyphrases: the n-grams that say what a document is about *relative to the rest of the corpus*.

TF-IDF over the whole corpus ranks a document's phrases by how often it uses them against how
many other documents do, so "oil find" beats "the company" and a phrase every document of a scope
shares still scores lower than one particular to this document. Phrases never span punctuation
and never start or end with a stop word, so they read as noun-phrase-like search terms
("Indian oilfield", "chief operating officer") rather than fragments ("said the firm").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..data import Document
from .text import FUNCTION_WORDS

_CLAUSE = re.compile(r"[.,;:!?()\[\]{}\"“”‘’|/–—]+|\s-\s|\s'|'\s")
_WORD = re.compile(r"[^\W_](?:[\w'’.-]*[^\W_])?")
_POSSESSIVE = re.compile(r"['’]s$")


def _words(text: str) -> list[str]:
    """Lower-cased words without a possessive 's, so "Goldsmith's" and "Goldsmith" are one word."""
    return [_POSSESSIVE.sub("", w.lower()) for w in _WORD.findall(text)]


# Function words that may sit inside a phrase: "Bank of England", "Department for Education",
# "rock and roll". Any other function word inside breaks it ("results on Friday", "1984 and had").
_INNER_OK = frozenset({"of", "and", "for"})


def _content(word: str) -> bool:
    # "1m", "194m", "2004": amounts and years bound no phrase a person would search for
    return word not in FUNCTION_WORDS and word[0].isalpha()


def candidate_phrases(text: str, min_words: int = 2, max_words: int = 4) -> list[str]:
    """Lower-cased n-grams of ``min_words``..``max_words`` words inside one clause whose first and
    last words are content words (not function words, not bare numbers) and whose inner function
    words are only "of", "and", "for".

    >>> candidate_phrases("The Bank of England raised rates by 0.5 points, said Mr King.", 2, 3)
    ['bank of england', 'england raised', 'england raised rates', 'raised rates']
    """
    out = []
    for clause in _CLAUSE.split(text):
        words = _words(clause)
        for i in range(len(words)):
            if not _content(words[i]):
                continue
            for n in range(min_words, max_words + 1):
                gram = words[i:i + n]
                if len(gram) < n or any(w in FUNCTION_WORDS and w not in _INNER_OK for w in gram[1:-1]):
                    break
                if _content(gram[-1]):
                    out.append(" ".join(gram))
    return out


def _surface(text: str, phrase: str) -> str:
    """The phrase as the document writes it (its capitals), else the lower-cased form."""
    # each word may be followed by the possessive the analyzer dropped
    pattern = r"(?<![\w])" + r"(?:['’]s)?\W+".join(map(re.escape, phrase.split())) + r"(?![\w])"
    m = re.search(pattern, text, flags=re.IGNORECASE)
    return " ".join(m.group(0).split()) if m else phrase


def _content_words(text: str) -> list[str]:
    return [w for w in _words(text) if _content(w)]


def keyphrases(documents: Sequence[Document], *, per_doc: int = 3, min_words: int = 2,
               max_words: int = 4) -> dict[str, list[str]]:
    """The top ``per_doc`` phrases of each document against the whole ``documents`` corpus, best
    first, as ``{doc id: [phrase, ...]}``, in the document's own spelling.

    A phrase scores its TF-IDF (sublinear tf) times the mean TF-IDF of its content words in the
    document. Most phrases occur once in one document, so phrase TF-IDF alone ties across nearly
    all of them; the word factor breaks the tie towards phrases about what the document keeps
    talking about ("Rank" in a story on Rank's demerger), and remaining ties go to the phrase that
    comes first. A phrase containing or contained in a better pick is skipped, so the picks are
    not variants of one phrase ("oil find", "new oil find").

    >>> docs = [Document("a", "Shares in Cairn Energy jumped after the new oil find in Rajasthan. "
    ...                       "Cairn Energy said the oil find was larger than thought."),
    ...         Document("b", "The striker scored twice as the home side won the cup final.")]
    >>> keyphrases(docs, per_doc=2)["a"]
    ['Cairn Energy', 'oil find']
    """
    if per_doc == 0 or not documents:
        return {d.id: [] for d in documents}
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [d.text for d in documents]
    phrase_vec = TfidfVectorizer(analyzer=lambda t: candidate_phrases(t, min_words, max_words),
                                 sublinear_tf=True, norm=None)
    word_vec = TfidfVectorizer(analyzer=_content_words, sublinear_tf=True, norm=None)
    try:
        phrase_m = phrase_vec.fit_transform(texts).tocsr()
        word_m = word_vec.fit_transform(texts).tocsr()
    except ValueError:  # no document has a single phrase ("empty vocabulary")
        return {d.id: [] for d in documents}
    vocab = phrase_vec.get_feature_names_out()
    word_col = word_vec.vocabulary_
    result: dict[str, list[str]] = {}
    for row, doc in enumerate(documents):
        start, end = word_m.indptr[row], word_m.indptr[row + 1]
        word_score = dict(zip(word_m.indices[start:end], word_m.data[start:end]))
        first_seen = {p: i for i, p in reversed(list(enumerate(candidate_phrases(doc.text, min_words, max_words))))}
        start, end = phrase_m.indptr[row], phrase_m.indptr[row + 1]
        scored = []
        for col, tfidf in zip(phrase_m.indices[start:end], phrase_m.data[start:end]):
            phrase = str(vocab[col])
            content = [word_score.get(word_col.get(w, -1), 0.0) for w in phrase.split() if _content(w)]
            scored.append((-tfidf * sum(content) / len(content), first_seen.get(phrase, 0), phrase))
        picked: list[str] = []
        for _, _, phrase in sorted(scored):
            padded = f" {phrase} "
            if any(padded in f" {p} " or f" {p} " in padded for p in picked):
                continue
            picked.append(phrase)
            if len(picked) == per_doc:
                break
        result[doc.id] = [_surface(doc.text, p) for p in picked]
    return result
