"""API keys and per-key scope entitlements.

The keys file (YAML) lists callers; a key is given as its SHA-256 (``key_sha256``, what should be
committed to a config repository) or read from an environment variable (``key_env``), never as
plain text in the file::

    keys:
      - name: support-desk
        key_env: MASDR_KEY_SUPPORT        # the key itself lives in the environment
        scopes: [sport, entertainment]    # entitled scopes; omit for all
      - name: ops
        key_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        admin: true                       # may call /admin/reload

A presented key is hashed and compared with every stored digest in constant time, so neither the
comparison nor the loop's early exit tells an attacker how close a guess was. Keys are never
logged: callers are named by their ``name``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..taxonomy import Taxonomy


@dataclass(frozen=True)
class Caller:
    """Who is calling: a named key with its entitled scopes (``None``: all) and admin right."""

    name: str
    scopes: frozenset[str] | None = None
    admin: bool = False

    def allows(self, scope: str) -> bool:
        return self.scopes is None or scope in self.scopes


ANONYMOUS = Caller("anonymous")


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyStore:
    """The keys the service accepts.

    >>> store = KeyStore([(digest("s3cret"), Caller("desk", frozenset({"sport"})))])
    >>> store.lookup("s3cret").name, store.lookup("guess")
    ('desk', None)
    """

    def __init__(self, entries: list[tuple[bytes, Caller]]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: str) -> Caller | None:
        presented = digest(key)
        found = None
        for stored, caller in self._entries:  # no early exit: the time does not depend on which key matched
            if hmac.compare_digest(presented, stored) and found is None:
                found = caller
        return found

    @classmethod
    def from_yaml(cls, path: str | Path, taxonomy: Taxonomy) -> KeyStore:
        """Read the keys file; an unknown scope, a missing key or a duplicate name is a ConfigError."""
        from ..config import read_yaml

        p = Path(path)
        raw = read_yaml(p, kind="API keys file")
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list) or not raw["keys"]:
            raise ConfigError("expected a mapping with a non-empty list 'keys'", path=str(p))
        entries, names = [], set()
        for i, item in enumerate(raw["keys"]):
            entries.append(_entry(item, i, str(p), taxonomy, names))
        return cls(entries)


def _entry(item: Any, i: int, path: str, taxonomy: Taxonomy, names: set[str]) -> tuple[bytes, Caller]:
    where = f"keys[{i}]"
    if not isinstance(item, dict):
        raise ConfigError("expected a mapping", path=path, field=where)
    if "key" in item:
        raise ConfigError("a key is never written in clear: give 'key_sha256' (sha256sum of the key) or 'key_env' "
                          "(the environment variable holding it)", path=path, field=where)
    unknown = set(item) - {"name", "key_sha256", "key_env", "scopes", "admin"}
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)}", path=path, field=where)
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("needs a 'name'", path=path, field=where)
    if name in names:
        raise ConfigError(f"name '{name}' is given twice", path=path, field=where)
    names.add(name)
    if ("key_sha256" in item) == ("key_env" in item):
        raise ConfigError("give exactly one of 'key_sha256' and 'key_env'", path=path, field=where)
    if "key_env" in item:
        value = os.environ.get(str(item["key_env"]))
        if not value:
            raise ConfigError(f"environment variable {item['key_env']} is not set", path=path, field=where)
        stored = digest(value)
    else:
        try:
            stored = bytes.fromhex(str(item["key_sha256"]))
        except ValueError:
            stored = b""
        if len(stored) != 32:
            raise ConfigError("'key_sha256' must be 64 hex digits (sha256sum of the key)", path=path, field=where)
    scopes = item.get("scopes")
    if scopes is not None:
        if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) for s in scopes):
            raise ConfigError("'scopes' must be a non-empty list of scope names", path=path, field=where)
        for s in scopes:
            if s not in taxonomy.names:
                raise ConfigError(f"unknown scope '{s}'; the taxonomy has {', '.join(taxonomy.names)}", path=path,
                                  field=where)
    admin = item.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError("'admin' must be true or false", path=path, field=where)
    return stored, Caller(name, frozenset(scopes) if scopes is not None else None, admin)
