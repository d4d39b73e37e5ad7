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

from .errors import OutputError, OutputExistsError


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
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise _cannot_write(out, e) from None
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
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """:func:`write_text_atomic` for bytes (a rendered figure, say)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise _cannot_write(path, e) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _cannot_write(path, e) from None
        raise


def _cannot_write(path: Path, e: OSError) -> OutputError:
    """An unwritable output as a one-line error (no permission, a directory where the file goes, a
    file where a folder should be) instead of a traceback."""
    blocker = next((p for p in path.parents if p.exists()), None)
    why = f"{blocker} is not a directory" if blocker is not None and not blocker.is_dir() else e.strerror or str(e)
    return OutputError(f"cannot write {path}: {why}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
