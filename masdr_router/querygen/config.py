"""How pseudo-queries are generated from a corpus (``configs/synth/default.yaml`` mirrors it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from ..config import ConfigBase

Method = Literal["title", "heading", "lead", "keyphrase", "llm"]
METHODS: tuple[str, ...] = get_args(Method)
RULE_METHODS: tuple[str, ...] = ("title", "heading", "lead", "keyphrase")  # no LLM needed
# Which candidate is best, when there is a choice (the copy of a near-duplicate group to keep, a
# document's first pick in sampling): an author's title or heading reads most like a query, then the
# lead sentence (when an LLM merely copied it, the row should say it was extracted), then a question
# written for the document, then a bare phrase. On BBC a router trained on leads alone beats one
# trained on keyphrases alone (TF-IDF + LR, test accuracy 0.77 vs 0.64).
METHOD_PRIORITY = {"title": 0, "heading": 1, "lead": 2, "llm": 3, "keyphrase": 4}


@dataclass
class SynthConfig(ConfigBase):
    """Pseudo-query generation: which extractors run, how many queries each scope keeps, and the
    thresholds of the deduplication and contamination checks.

    >>> SynthConfig(per_scope=50, methods=["lead", "keyphrase"]).per_scope
    50
    >>> SynthConfig(methods=["headline"])
    Traceback (most recent call last):
    ...
    masdr_router.errors.ConfigError: SynthConfig: field 'methods': unknown method(s) ['headline']; choose from ...
    """

    # 1000: on BBC (2,060 articles) a TF-IDF router trained on 1000 a scope is as good as on all of
    # them (test accuracy 0.806 vs 0.809; 300 a scope: 0.758), while a scope with 16x the documents
    # of another still cannot drown it
    per_scope: int | None = field(default=1000, metadata={
        "help": "target pseudo-queries per scope, the same for every scope and capped by what the scope has "
                "after filtering (a small scope keeps all it has); null keeps everything"})
    # list[str] checked in validate(), not list[Method]: the type check alone would say "a list of
    # values" without naming the choices
    methods: list[str] = field(default_factory=lambda: list(RULE_METHODS), metadata={
        "help": "extractors: title, heading, lead, keyphrase (no LLM), llm (needs an endpoint)"})
    min_words: int = field(default=2, metadata={"help": "shorter candidates are dropped (one word is no query)"})
    max_words: int = field(default=20, metadata={
        "help": "longer titles, headings and LLM questions are dropped; lead sentences are cut to this length"})
    title_field: str = field(default="title", metadata={
        "help": "metadata key holding a document's title; else a short first line is the title"})
    keyphrases_per_doc: int = field(default=3, metadata={"help": "top TF-IDF phrases taken per document"})
    keyphrase_min_words: int = 2
    keyphrase_max_words: int = 4
    dedup_jaccard: float = field(default=0.9, metadata={
        "help": "word-set Jaccard at or above which two pseudo-queries are near-duplicates"})
    contamination_jaccard: float = field(default=0.8, metadata={
        "help": "word-set Jaccard with a held-out query at or above which a pseudo-query is dropped"})
    exclude_relevant_docs: bool | None = field(default=None, metadata={
        "help": "drop pseudo-queries generated from the relevant documents of held-out queries; null: on "
                "when the held-out queries carry relevant_ids"})
    seed: int = field(default=0, metadata={"help": "seed of the per-scope sampling and the LLM document sample"})
    llm_batch_size: int = field(default=4, metadata={"help": "documents per constrained LLM call"})
    llm_questions_per_doc: int = field(default=2, metadata={"help": "questions the LLM writes per document"})
    llm_max_docs_per_scope: int | None = field(default=50, metadata={
        "help": "documents per scope sent to the LLM (seeded sample); null sends all"})
    llm_doc_words: int = field(default=150, metadata={"help": "words of each document shown to the LLM"})

    def validate(self) -> list[tuple[str, bool, str]]:
        def positive(name: str) -> tuple[str, bool, str]:
            v = getattr(self, name)
            return name, v is None or v >= 1, f"must be >= 1, got {v}"

        return [
            positive("per_scope"), positive("keyphrase_min_words"), positive("llm_batch_size"),
            positive("llm_questions_per_doc"), positive("llm_max_docs_per_scope"), positive("llm_doc_words"),
            ("methods", bool(self.methods), f"must name at least one of {', '.join(METHODS)}"),
            ("methods", set(self.methods) <= set(METHODS),
             f"unknown method(s) {sorted(set(self.methods) - set(METHODS))}; choose from {', '.join(METHODS)}"),
            ("methods", len(set(self.methods)) == len(self.methods), f"names a method twice: {self.methods}"),
            ("min_words", self.min_words >= 1, f"must be >= 1, got {self.min_words}"),
            ("max_words", self.max_words >= self.min_words,
             f"must be >= min_words ({self.min_words}), got {self.max_words}"),
            ("keyphrases_per_doc", self.keyphrases_per_doc >= 0, f"must be >= 0, got {self.keyphrases_per_doc}"),
            ("keyphrase_max_words", self.keyphrase_max_words >= self.keyphrase_min_words,
             f"must be >= keyphrase_min_words ({self.keyphrase_min_words}), got {self.keyphrase_max_words}"),
            ("dedup_jaccard", 0 < self.dedup_jaccard <= 1, f"must be in (0, 1], got {self.dedup_jaccard}"),
            ("contamination_jaccard", 0 < self.contamination_jaccard <= 1,
             f"must be in (0, 1], got {self.contamination_jaccard}"),
        ]

    @property
    def uses_llm(self) -> bool:
        return "llm" in self.methods
