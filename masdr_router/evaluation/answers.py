"""Answer evaluation with an LLM judge that is not the generator (optional; off by default).

- faithfulness: the share of the answer's claims (its sentences) that the judge finds supported by
  the retrieved chunks -- the paper's measure of how much of an answer is grounded;
- correctness: whether the answer agrees with the reference answer, for queries that have one.

The judge's verdicts are choice-constrained ("supported"/"unsupported", "correct"/"incorrect"); a
verdict the judge could not give is counted as missing, not as a pass.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..data import LabelledQuery
from ..errors import LLMError, MasdrError

if TYPE_CHECKING:
    from ..answer.rag import Answer, ScopedRAG
    from ..llm.protocol import ChatClient

CLAIM_PROMPT = """Sources:
{sources}

Claim: {claim}

Is the claim supported by the sources? Answer supported or unsupported."""

CORRECT_PROMPT = """Question: {question}
Reference answer: {reference}
Candidate answer: {answer}

Does the candidate answer agree with the reference answer? Answer correct or incorrect."""


def split_claims(answer: str, *, min_words: int = 3) -> list[str]:
    """Sentences of the answer with at least ``min_words`` words (citation brackets removed).

    >>> split_claims("Profits rose 5% [d1#0]. Costs fell. Ok.")
    ['Profits rose 5%.']
    """
    text = re.sub(r"\[[^\[\]]*\]", "", answer)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    return [re.sub(r"\s+([.!?])$", r"\1", s) for s in sentences if len(s.split()) >= min_words]


def _verdict(judge: ChatClient, prompt: str, choices: list[str]) -> str | None:
    try:
        return judge.choose([{"role": "user", "content": prompt}], choices, key="verdict")
    except LLMError:
        return None


def judge_answer(judge: ChatClient, answer: Answer, reference: str | None = None, *,
                 max_claims: int = 8) -> dict[str, Any]:
    """Faithfulness (and correctness when a reference is given) of one :class:`Answer`."""
    sources = "\n\n".join(f"[{h.chunk_id}] {h.text}" for h in answer.hits)
    claims = split_claims(answer.answer)[:max_claims]
    verdicts = [_verdict(judge, CLAIM_PROMPT.format(sources=sources, claim=c), ["supported", "unsupported"])
                for c in claims]
    given = [v for v in verdicts if v is not None]
    out: dict[str, Any] = {"claims": len(claims), "judged": len(given),
                           "faithfulness": sum(v == "supported" for v in given) / len(given) if given else None}
    if reference:
        v = _verdict(judge, CORRECT_PROMPT.format(question=answer.question, reference=reference,
                                                 answer=answer.answer), ["correct", "incorrect"])
        out["correct"] = None if v is None else v == "correct"
    return out


def evaluate_answers(rag: ScopedRAG, queries: Sequence[LabelledQuery], judge: ChatClient) -> dict[str, Any]:
    """Answer each query with ``rag`` and judge it. The judge must be a different endpoint or model
    from the generator: a model grading its own answers is not an evaluation."""
    if rag.client.endpoint == judge.endpoint:
        raise MasdrError("the judge must differ from the generator (another endpoint or model)")
    rows = []
    for q in queries:
        ans = rag.ask(q.query)
        verdict = judge_answer(judge, ans, q.answer)
        rows.append({"query": q.query, "scope": q.scope, "routed_to": ans.decision.scope,
                     "citations": len(ans.citations), "llm_calls": ans.llm_calls, **verdict})
    faith = [r["faithfulness"] for r in rows if r["faithfulness"] is not None]
    correct = [r["correct"] for r in rows if r.get("correct") is not None]
    return {"n_queries": len(rows),
            "faithfulness": round(statistics.fmean(faith), 4) if faith else None,
            "correctness": round(statistics.fmean(correct), 4) if correct else None,
            "n_judged_faithfulness": len(faith), "n_judged_correctness": len(correct),
            "cited_rate": round(sum(r["citations"] > 0 for r in rows) / len(rows), 4) if rows else None,
            "llm_calls_per_query": round(statistics.fmean(r["llm_calls"] for r in rows), 4) if rows else None,
            "rows": rows}
