"""Query validation shared by routers, search and the CLI."""

from __future__ import annotations

from .errors import QueryError

MAX_QUERY_CHARS = 4000  # far beyond any question; longer input is a pasted document, not a query


def validate_query(query: object, *, max_chars: int = MAX_QUERY_CHARS) -> str:
    """Return the stripped query, or raise :class:`QueryError` for non-strings, empty or huge input.

    >>> validate_query("  budget 2024 ")
    'budget 2024'
    """
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    q = query.strip()
    if not q:
        raise QueryError("query is empty")
    if len(q) > max_chars:
        raise QueryError(f"query is {len(q)} characters long; the limit is {max_chars}")
    return q
