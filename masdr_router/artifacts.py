"""Reading the JSON manifest that makes a directory an artifact (an index, a router), with one
error for each way it can be wrong: absent, not JSON, another format, keys missing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import ArtifactError


def read_manifest_json(directory: Path, filename: str, *, kind: str, fmt: str, required: Sequence[str],
                       make_hint: str, fix_hint: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``directory/filename`` as a dict whose ``format`` is ``fmt`` (and whose keys in ``extra``
    have those values) and which holds every ``required`` key; else :class:`ArtifactError`.

    >>> read_manifest_json(Path("/"), "manifest.json", kind="scoped index", fmt="x/1", required=[],
    ...                    make_hint="build one", fix_hint="rebuild it")
    Traceback (most recent call last):
    ...
    masdr_router.errors.ArtifactError: / is not a scoped index (no manifest.json); build one
    """
    path = directory / filename
    if not path.is_file():
        raise ArtifactError(f"{directory} is not a {kind} (no {filename}); {make_hint}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: not valid JSON ({e}); the {kind} is corrupted, {fix_hint}") from None
    want = {"format": fmt, **(extra or {})}
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in want.items()):
        found = {k: data.get(k) for k in want} if isinstance(data, dict) else type(data).__name__
        raise ArtifactError(f"{path}: unsupported {kind} {found!r}, expected {want!r}")
    missing = [k for k in required if k not in data]
    if missing:
        raise ArtifactError(f"{path}: missing key(s) {missing}; the {kind} is corrupted, {fix_hint}")
    return data
