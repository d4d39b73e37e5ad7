"""A pseudo-query candidate and where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..data import LabelledQuery


@dataclass(frozen=True)
class Candidate:
    """A pseudo-query extracted from (or written for) one document.

    ``scopes`` are every scope of the document (usually one); a candidate from a document in
    several scopes cannot be one router label and is dropped as ambiguous.

    >>> c = Candidate("Cairn shares jump", doc_id="bbc-business-198", scopes=("business",), method="lead")
    >>> c.to_row()
    {'query': 'Cairn shares jump', 'scope': 'business', 'relevant_ids': ['bbc-business-198'], \
'provenance': {'doc_id': 'bbc-business-198', 'scope': 'business', 'method': 'lead'}}
    """

    text: str
    doc_id: str
    scopes: tuple[str, ...]
    method: str

    @property
    def scope(self) -> str:
        """The one scope of a candidate that survived the ambiguity check."""
        if len(self.scopes) != 1:
            raise ValueError(f"candidate from {self.doc_id} has {len(self.scopes)} scopes, not one")
        return self.scopes[0]

    @property
    def provenance(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "scope": self.scope, "method": self.method}

    def to_query(self) -> LabelledQuery:
        """The labelled query: its text, its document's scope, and its document as the relevant one."""
        return LabelledQuery(query=self.text, scope=self.scope, relevant_ids=(self.doc_id,))

    def to_row(self) -> dict[str, Any]:
        """A labelled-queries JSONL row with an extra ``provenance`` field, which
        :func:`~masdr_router.data.read_queries` ignores (it reads only the contract's keys)."""
        return {**self.to_query().to_dict(), "provenance": self.provenance}
