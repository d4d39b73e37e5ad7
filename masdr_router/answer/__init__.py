"""The answer path: route -> scoped retrieval -> one synthesis call (:class:`ScopedRAG`), and the
tool-calling orchestrator it is measured against (:class:`Orchestrator`)."""

from .orchestrator import Orchestrator
from .rag import Answer, ScopedRAG, answer_schema, format_sources, parse_answer, synthesise

__all__ = ["Answer", "Orchestrator", "ScopedRAG", "answer_schema", "format_sources", "parse_answer", "synthesise"]
