"""The ``masdr`` command line: one small module per command group, each parsing its arguments and
making one call into the package. ``python -m masdr_router.cli`` runs it too."""

from .app import app, main, run

__all__ = ["app", "main", "run"]
