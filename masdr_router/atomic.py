"""Atomic outputs: a killed or failed run never leaves a half-written artifact that loads.

Everything is written into a hidden sibling temp directory and moved into place with one
``os.replace`` at the end, so a reader sees either the old directory, the new one, or nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import OutputExistsError


def check_output(out: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """``out`` as a path, or :class:`OutputExistsError` when it exists and ``overwrite`` is off.
    Call it before any long work, so a run never ends by refusing to write its result.

    >>> check_output("/", overwrite=False)
    Traceback (most recent call last):
    ...
    masdr_router.errors.OutputExistsError: output / already exists; pass --overwrite to replace it
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise OutputExistsError(f"output {out} already exists; pass --overwrite to replace it")
    return out


@contextlib.contextmanager
def atomic_directory(out: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temp directory that becomes ``out`` only if the block finishes without error.

    >>> with atomic_directory("runs/index") as tmp:      # doctest: +SKIP
    ...     (tmp / "manifest.json").write_text("{}")
    """
    out = check_output(out, overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the artifact should get normal permissions
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out.exists():
        # Move the old one aside first: os.replace cannot replace a non-empty directory.
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a file via a temp file + rename, so readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
