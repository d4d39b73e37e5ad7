"""Scope taxonomy: the organisational slices of a corpus that queries are routed to.

A taxonomy YAML looks like::

    name: bbc-news
    scopes:
      - name: business
        description: Company results, markets, the economy, trade and jobs.
        match: {source: bbc, category: business}
        patterns: ['\\bshares?\\b', '\\beconom']

A chunk belongs to every scope whose ``match`` it satisfies (all keys must match; a value may be
a list of accepted values).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UnknownScopeError, ValidationError

SCOPE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class Scope:
    """One organisational scope: a name, a description for humans and LLMs, and a metadata filter."""

    name: str
    description: str
    match: dict[str, tuple[Any, ...]]
    patterns: tuple[str, ...] = ()

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """True when every ``match`` key is present in ``metadata`` with an accepted value."""
        return all(k in metadata and metadata[k] in accepted for k, accepted in self.match.items())


@dataclass(frozen=True)
class Taxonomy:
    """An ordered set of scopes. Order is meaningful: it fixes label ids for trained routers.

    >>> t = Taxonomy.from_dict({"name": "t", "scopes": [
    ...     {"name": "a", "description": "A", "match": {"kind": "a"}},
    ...     {"name": "b", "description": "B", "match": {"kind": ["b", "c"]}}]})
    >>> t.scopes_of({"kind": "c"})
    ['b']
    """

    name: str
    scopes: tuple[Scope, ...]
    source: str | None = field(default=None, compare=False)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str | Path) -> Taxonomy:
        from .config import read_yaml

        return cls.from_dict(read_yaml(path, kind="taxonomy file", error=ValidationError), source=str(path))

    @classmethod
    def from_dict(cls, raw: Any, *, source: str | None = None) -> Taxonomy:
        src = source or "<taxonomy>"
        if not isinstance(raw, dict):
            raise ValidationError(f"expected a mapping with 'name' and 'scopes', got {type(raw).__name__}",
                                  path=src)
        unknown = set(raw) - {"name", "scopes"}
        if unknown:
            raise ValidationError(f"unknown top-level key(s) {sorted(unknown)}; expected 'name' and 'scopes'",
                                  path=src)
        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValidationError("must be a non-empty string", path=src, field="name")
        scopes_raw = raw.get("scopes")
        if not isinstance(scopes_raw, list) or not scopes_raw:
            raise ValidationError("must be a non-empty list of scopes", path=src, field="scopes")
        scopes: list[Scope] = []
        seen: set[str] = set()
        for i, s in enumerate(scopes_raw):
            scope = _parse_scope(s, i, src)
            if scope.name in seen:
                raise ValidationError(f"duplicate scope name '{scope.name}'", path=src,
                                      field=f"scopes[{i}].name")
            seen.add(scope.name)
            scopes.append(scope)
        return cls(name=name, scopes=tuple(scopes), source=source)

    def to_dict(self) -> dict[str, Any]:
        def scope_dict(s: Scope) -> dict[str, Any]:
            d: dict[str, Any] = {"name": s.name, "description": s.description,
                                 "match": {k: (list(v) if len(v) > 1 else v[0]) for k, v in s.match.items()}}
            if s.patterns:
                d["patterns"] = list(s.patterns)
            return d

        return {"name": self.name, "scopes": [scope_dict(s) for s in self.scopes]}

    def to_yaml(self, path: str | Path) -> None:
        import yaml

        from .atomic import write_text_atomic

        write_text_atomic(path, yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True, width=100))

    # ---- queries ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [s.name for s in self.scopes]

    def __len__(self) -> int:
        return len(self.scopes)

    def __contains__(self, name: object) -> bool:
        return any(s.name == name for s in self.scopes)

    def __getitem__(self, name: str) -> Scope:
        for s in self.scopes:
            if s.name == name:
                return s
        raise UnknownScopeError(self.unknown_scope_message(name))

    def index(self, name: str) -> int:
        for i, s in enumerate(self.scopes):
            if s.name == name:
                return i
        raise UnknownScopeError(self.unknown_scope_message(name))

    def unknown_scope_message(self, name: str) -> str:
        return f"unknown scope '{name}'; taxonomy '{self.name}' has: {', '.join(self.names)}"

    def check_scope(self, name: str) -> str:
        """Return ``name`` if it is a scope of this taxonomy, else raise :class:`UnknownScopeError`."""
        if name not in self:
            raise UnknownScopeError(self.unknown_scope_message(name))
        return name

    def scopes_of(self, metadata: Mapping[str, Any]) -> list[str]:
        """Names of every scope whose ``match`` the metadata satisfies, in taxonomy order."""
        return [s.name for s in self.scopes if s.matches(metadata)]

    @property
    def fingerprint(self) -> str:
        """Stable hash of what defines the scopes: their names, order and ``match`` filters.

        Descriptions and regex patterns are routing *hints* and may be edited without invalidating
        an index or a trained router, so they are deliberately left out.
        """
        canon = [{"name": s.name, "match": {k: sorted(map(_canon, v)) for k, v in sorted(s.match.items())}}
                 for s in self.scopes]
        blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()[:16]


def _canon(v: Any) -> str:
    return json.dumps(v)


def _parse_scope(s: Any, i: int, src: str) -> Scope:
    where = f"scopes[{i}]"
    if not isinstance(s, dict):
        raise ValidationError(f"expected a mapping, got {type(s).__name__}", path=src, field=where)
    label = f"{where} ('{s.get('name')}')" if isinstance(s.get("name"), str) else where
    unknown = set(s) - {"name", "description", "match", "patterns"}
    if unknown:
        raise ValidationError(f"unknown key(s) {sorted(unknown)}; expected name, description, match, patterns",
                              path=src, field=label)
    name = s.get("name")
    if not isinstance(name, str) or not SCOPE_NAME_RE.match(name):
        raise ValidationError(f"must match [a-z0-9][a-z0-9_-]*, got {name!r}", path=src, field=f"{where}.name")
    desc = s.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise ValidationError("must be a non-empty string", path=src, field=f"{label}.description")
    match_raw = s.get("match")
    if not isinstance(match_raw, dict) or not match_raw:
        raise ValidationError("must be a non-empty mapping of metadata key -> value or list of values",
                              path=src, field=f"{label}.match")
    match: dict[str, tuple[Any, ...]] = {}
    for k, v in match_raw.items():
        values = v if isinstance(v, list) else [v]
        if not values or not all(isinstance(x, _SCALARS) for x in values):
            raise ValidationError(f"value must be a scalar or a non-empty list of scalars, got {v!r}",
                                  path=src, field=f"{label}.match.{k}")
        match[str(k)] = tuple(values)
    patterns_raw = s.get("patterns") or []
    if not isinstance(patterns_raw, list) or not all(isinstance(p, str) for p in patterns_raw):
        raise ValidationError("must be a list of regex strings", path=src, field=f"{label}.patterns")
    for j, p in enumerate(patterns_raw):
        try:
            re.compile(p)
        except re.error as e:
            raise ValidationError(f"invalid regex {p!r}: {e}", path=src, field=f"{label}.patterns[{j}]") from None
    return Scope(name=name, description=desc.strip(), match=match, patterns=tuple(patterns_raw))


def load_taxonomy(path_or_obj: str | Path | Taxonomy) -> Taxonomy:
    """Accept a path or an already-loaded taxonomy."""
    return path_or_obj if isinstance(path_or_obj, Taxonomy) else Taxonomy.from_yaml(path_or_obj)
