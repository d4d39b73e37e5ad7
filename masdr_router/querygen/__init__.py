"""Pseudo-queries from the corpus itself: cold-start training data for a router.

Every indexed document already carries its scope, so phrases taken from a document (its title,
headings, lead sentence, keyphrases; optionally questions an LLM writes for it) are queries
labelled with that scope for free. This package extracts them, removes ambiguous, duplicate and
test-leaking ones, balances the scopes, and keeps the provenance of every row.

- ``text``, ``similarity``: what "the same query" means (normalised text, word-set Jaccard) and a
  fast near-duplicate search
- ``extract``, ``keyphrases``, ``llm``: the candidate sources
- ``dedup``, ``contamination``, ``balance``: the filters
- ``config``: :class:`SynthConfig` (``configs/synth/default.yaml``); ``pipeline``: all of it in order

>>> from masdr_router.querygen import SynthConfig, synthesize_queries      # doctest: +SKIP
>>> res = synthesize_queries(taxonomy, documents, config=SynthConfig(per_scope=200),
...                          held_out=read_queries("data/bbc/test.jsonl"))  # doctest: +SKIP
>>> write_pseudo_queries("data/bbc/pseudo.jsonl", res.candidates)            # doctest: +SKIP
"""

from .candidate import Candidate
from .config import METHODS, RULE_METHODS, SynthConfig
from .pipeline import SynthInputs, SynthResult, load_inputs, synthesize_queries, write_pseudo_queries

__all__ = ["METHODS", "RULE_METHODS", "Candidate", "SynthConfig", "SynthInputs", "SynthResult", "load_inputs",
           "synthesize_queries", "write_pseudo_queries"]
