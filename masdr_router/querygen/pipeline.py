"""From a corpus to labelled pseudo-queries: extract candidates, drop ambiguous, contaminated and
duplicate ones, balance the scopes, and account for every candidate.

Every candidate ends in exactly one place, counted per scope and per method: kept, or dropped as
*ambiguous* (its text, or a near-duplicate of it, comes from documents of different scopes),
*contaminated* (it leaks a held-out query), *duplicate* (another member of its near-duplicate group
is kept), or *unsampled* (over the scope's target). The checks run in that order on purpose:
ambiguity is a property of the whole corpus, so it is judged before anything is removed; a group's
survivor is chosen among its uncontaminated members, so removing a contaminated copy never loses
a clean one.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..atomic import write_text_atomic
from ..data import Document, LabelledQuery, read_corpus, read_queries
from ..errors import UsageError, ValidationError
from ..taxonomy import Taxonomy
from . import extract
from .balance import balance
from .candidate import Candidate
from .config import METHOD_PRIORITY, METHODS, SynthConfig
from .contamination import HeldOutQueries, contaminated
from .dedup import ambiguous, duplicates, near_duplicate_groups
from .keyphrases import keyphrases

if TYPE_CHECKING:
    from ..llm.protocol import ChatClient

DROP_REASONS = ("ambiguous", "contaminated", "duplicate", "unsampled")


@dataclass
class SynthResult:
    """The kept pseudo-queries (taxonomy order, then sampling order) and the provenance report."""

    candidates: list[Candidate]
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def queries(self) -> list[LabelledQuery]:
        return [c.to_query() for c in self.candidates]


def rule_candidates(documents: Sequence[tuple[Document, tuple[str, ...]]], cfg: SynthConfig) -> list[Candidate]:
    """Title, heading, lead and keyphrase candidates (those among ``cfg.methods``), document by
    document. Keyphrases are ranked against every document given, the whole corpus.

    >>> doc = Document("d1", "Oil find lifts Cairn\\nShares in Cairn Energy jumped after an oil find.")
    >>> [(c.method, c.text) for c in rule_candidates([(doc, ("business",))], SynthConfig(methods=["title", "lead"]))]
    [('title', 'Oil find lifts Cairn'), ('lead', 'Shares in Cairn Energy jumped after an oil find')]
    """
    m, lo, hi = set(cfg.methods), cfg.min_words, cfg.max_words
    phrases = (keyphrases([d for d, _ in documents], per_doc=cfg.keyphrases_per_doc,
                          min_words=cfg.keyphrase_min_words, max_words=cfg.keyphrase_max_words)
               if "keyphrase" in m else {})
    out: list[Candidate] = []
    for doc, scopes in documents:
        found: list[tuple[str, str | None]] = []
        if "title" in m:
            found.append(("title", extract.title(doc.text, doc.metadata, field=cfg.title_field, min_words=lo,
                                                 max_words=hi)))
        if "heading" in m:
            found.extend(("heading", h) for h in extract.headings(doc.text, min_words=lo, max_words=hi))
        if "lead" in m:
            found.append(("lead", extract.lead(doc.text, min_words=lo, max_words=hi)))
        found.extend(("keyphrase", p) for p in phrases.get(doc.id, []) if lo <= len(p.split()) <= hi)
        out.extend(Candidate(text, doc.id, scopes, method) for method, text in found if text)
    return out


def _llm_documents(documents: Sequence[tuple[Document, tuple[str, ...]]], excluded: set[str],
                   cfg: SynthConfig) -> list[tuple[Document, tuple[str, ...]]]:
    """The documents worth an LLM call: a seeded sample of up to ``llm_max_docs_per_scope`` per
    scope, leaving out documents whose questions would be dropped anyway (held-out documents and
    documents in several scopes), so no call is spent on them."""
    by_scope: dict[str, list[tuple[Document, tuple[str, ...]]]] = {}
    for d, scopes in documents:
        if len(scopes) == 1 and d.id not in excluded:
            by_scope.setdefault(scopes[0], []).append((d, scopes))
    out = []
    for scope, docs in by_scope.items():
        n = cfg.llm_max_docs_per_scope
        out.extend(docs if n is None or len(docs) <= n else random.Random(f"{cfg.seed}/llm/{scope}").sample(docs, n))
    return out


def synthesize_queries(taxonomy: Taxonomy, documents: Sequence[Document], *, config: SynthConfig | None = None,
                       held_out: Iterable[LabelledQuery] = (), client: ChatClient | None = None,
                       progress: bool = False, source: dict[str, Any] | None = None) -> SynthResult:
    """Pseudo-queries for every scope of ``taxonomy`` from ``documents``, none leaking ``held_out``.

    ``client`` is needed (and used) only when ``"llm"`` is among ``config.methods``; ``source``
    (file paths and hashes) is copied into the report.

    >>> tax = Taxonomy.from_dict({"name": "news", "scopes": [
    ...     {"name": "sport", "description": "Sport", "match": {"desk": "sport"}},
    ...     {"name": "tech", "description": "Technology", "match": {"desk": "tech"}}]})
    >>> docs = [Document("s1", "Federer wins the Dubai final. He beat Ljubicic.", {"desk": "sport"}),
    ...         Document("t1", "Apple unveils a cheaper iPod. It costs $99.", {"desk": "tech"})]
    >>> res = synthesize_queries(tax, docs, config=SynthConfig(methods=["lead"]),
    ...                          held_out=[LabelledQuery("Apple unveils a cheaper iPod", "tech")])
    >>> [(q.query, q.scope, q.relevant_ids) for q in res.queries]
    [('Federer wins the Dubai final', 'sport', ('s1',))]
    >>> res.report["dropped"]
    {'ambiguous': 0, 'contaminated': 1, 'duplicate': 0, 'unsampled': 0}
    """
    cfg = config or SynthConfig()
    if cfg.uses_llm and client is None:
        raise UsageError("method 'llm' needs an LLM endpoint (give --llm-url, --llm-config or --local)")
    held = list(held_out)
    scoped = [(d, tuple(taxonomy.scopes_of(d.metadata))) for d in documents]
    unscoped = sum(1 for _, s in scoped if not s)
    scoped = [(d, s) for d, s in scoped if s]
    if not scoped:
        raise ValidationError(f"no document belongs to a scope of taxonomy '{taxonomy.name}'; check its match "
                              f"keys against the corpus metadata")
    exclude_docs = cfg.exclude_relevant_docs
    if exclude_docs is None:  # auto: on when the held-out queries say which documents they came from
        exclude_docs = any(q.relevant_ids for q in held)
    excluded = {i for q in held for i in q.relevant_ids} if exclude_docs else set()

    cands = rule_candidates(scoped, cfg)
    llm_report: dict[str, Any] = {"used": False}
    if cfg.uses_llm and client is not None:  # (a missing client was refused above)
        from .llm import llm_candidates

        llm_docs = _llm_documents(scoped, excluded, cfg)
        extra, stats = llm_candidates(client, llm_docs, batch_size=cfg.llm_batch_size,
                                      questions=cfg.llm_questions_per_doc, min_words=cfg.min_words,
                                      max_words=cfg.max_words, doc_words=cfg.llm_doc_words, progress=progress)
        cands.extend(extra)
        base_url, model = client.endpoint
        llm_report = {"used": True, "base_url": base_url, "model": model, "documents": len(llm_docs),
                      **stats.to_dict()}

    # one reason per candidate, decided in order: ambiguous, contaminated, duplicate, unsampled
    reason: dict[int, str] = {}
    groups = near_duplicate_groups([c.text for c in cands], cfg.dedup_jaccard)
    reason.update(dict.fromkeys(ambiguous(cands, groups), "ambiguous"))
    index = HeldOutQueries((q.query for q in held), cfg.contamination_jaccard) if held else None
    how_contaminated = {i: how for i, how in contaminated(cands, index, excluded).items() if i not in reason}
    reason.update(dict.fromkeys(how_contaminated, "contaminated"))
    dup = duplicates(groups, skip=reason, key=lambda i: (METHOD_PRIORITY[cands[i].method], i))
    reason.update(dict.fromkeys(dup, "duplicate"))
    available = [c for i, c in enumerate(cands) if i not in reason]
    picked = balance(available, taxonomy.names, cfg.per_scope, seed=cfg.seed)
    kept = [c for s in taxonomy.names for c in picked[s]]
    kept_ids = {id(c) for c in kept}  # identity: the very objects balance() picked
    for i, c in enumerate(cands):
        if i not in reason and id(c) not in kept_ids:
            reason[i] = "unsampled"

    report = _report(taxonomy, cfg, scoped, cands, reason, how_contaminated, kept, unscoped=unscoped,
                     held=held, excluded=excluded, exclude_docs=exclude_docs, llm=llm_report, source=source)
    return SynthResult(kept, report)


def _report(taxonomy: Taxonomy, cfg: SynthConfig, scoped: Sequence[tuple[Document, tuple[str, ...]]],
            cands: Sequence[Candidate], reason: dict[int, str], how_contaminated: dict[int, str],
            kept: Sequence[Candidate], *, unscoped: int, held: Sequence[LabelledQuery], excluded: set[str],
            exclude_docs: bool, llm: dict[str, Any], source: dict[str, Any] | None) -> dict[str, Any]:
    def zero() -> dict[str, int]:
        return {"generated": 0, **dict.fromkeys(DROP_REASONS, 0), "kept": 0}

    per_scope = {s: {"documents": 0, **zero()} for s in taxonomy.names}
    for _, scopes in scoped:
        for s in scopes:
            per_scope[s]["documents"] += 1
    per_method = {m: zero() for m in METHODS if m in cfg.methods}
    multi_scope = zero()  # candidates of documents in several scopes have no one scope to count under
    for i, c in enumerate(cands):
        row = per_scope[c.scopes[0]] if len(c.scopes) == 1 else multi_scope
        outcome = reason.get(i, "kept")
        for r in (row, per_method[c.method]):
            r["generated"] += 1
            r[outcome] += 1
    for r in per_scope.values():
        r["available"] = r["kept"] + r["unsampled"]
    dropped = Counter(reason.values())
    report: dict[str, Any] = {
        "package_version": __version__,
        "queries": len(kept),
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "source": {**(source or {}), "documents": len(scoped) + unscoped, "unscoped_documents": unscoped,
                   "taxonomy": {"name": taxonomy.name, "fingerprint": taxonomy.fingerprint}},
        "held_out": {"queries": len(held), "exclude_relevant_docs": exclude_docs,
                     "excluded_documents": len(excluded)},
        "generated": len(cands),
        "dropped": {r: dropped.get(r, 0) for r in DROP_REASONS},
        "contaminated_by": dict(sorted(Counter(how_contaminated.values()).items())),
        "per_scope": per_scope,
        "per_method": per_method,
        "llm": llm,
    }
    if multi_scope["generated"]:
        report["multi_scope"] = multi_scope
    return report


# ---- files -----------------------------------------------------------------------------------------
def file_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read in blocks.

    >>> file_digest("/dev/null")
    'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


@dataclass
class SynthInputs:
    """A taxonomy, a corpus and held-out queries read from files, with where they came from."""

    taxonomy: Taxonomy
    documents: list[Document]
    held_out: list[LabelledQuery]
    source: dict[str, Any]


def load_inputs(taxonomy: str | Path, corpus: str | Path, exclude: Sequence[str | Path] = ()) -> SynthInputs:
    """Read and validate every input (before any long work or an LLM server starts), and record
    paths and sha256 digests for the provenance report.

    >>> inputs = load_inputs("data/bbc/taxonomy.yaml", "data/bbc/corpus.jsonl",
    ...                      ["data/bbc/test.jsonl"])                                   # doctest: +SKIP
    >>> res = synthesize_queries(inputs.taxonomy, inputs.documents, held_out=inputs.held_out,
    ...                          source=inputs.source)                                # doctest: +SKIP
    """
    tax = Taxonomy.from_yaml(taxonomy)
    docs = read_corpus(corpus)
    held = [q for p in exclude for q in read_queries(p, tax)]
    source = {"corpus": str(corpus), "corpus_sha256": file_digest(corpus), "taxonomy_file": str(taxonomy),
              "held_out_files": [{"path": str(p), "sha256": file_digest(p)} for p in exclude]}
    return SynthInputs(tax, docs, held, source)


def write_pseudo_queries(path: str | Path, candidates: Iterable[Candidate]) -> None:
    """Write labelled-query JSONL (atomically) with each row's ``provenance``; an empty result is
    an error rather than a file that :func:`~masdr_router.data.read_queries` refuses later.

    >>> write_pseudo_queries("data/bbc/pseudo.jsonl", res.candidates)   # doctest: +SKIP
    >>> read_queries("data/bbc/pseudo.jsonl")[0]                        # doctest: +SKIP
    LabelledQuery(query='Cairn Energy', scope='business', relevant_ids=('bbc-business-198',), answer=None)
    """
    rows = [json.dumps(c.to_row(), ensure_ascii=False) + "\n" for c in candidates]
    if not rows:
        raise UsageError("no pseudo-query is left to write: every candidate was dropped (see the counts); add "
                         "--methods or exclude fewer held-out queries")
    write_text_atomic(path, "".join(rows))
