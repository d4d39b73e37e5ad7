"""Exception types. Every user-facing failure is a :class:`MasdrError` whose message is one line
that says what was found, what was expected and, where it helps, how to fix it. The CLI prints it
as ``error: …`` and exits with status 2; anything else escaping is a bug."""

from __future__ import annotations


class MasdrError(Exception):
    """Base class of all errors the package raises on bad input or state."""


class ValidationError(MasdrError, ValueError):
    """A file or value breaks a data contract (taxonomy YAML, corpus/queries JSONL, config)."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        what = f"field '{field}': " if field is not None else ""
        super().__init__(f"{where}{what}{message}")
        self.message, self.path, self.line, self.field = message, path, line, field


class ConfigError(ValidationError):
    """A configuration value of the wrong type, out of range, or not among the choices."""


class UsageError(MasdrError, ValueError):
    """Arguments that do not fit together, or a command-line value the parser could not take."""


class OutputExistsError(MasdrError, FileExistsError):
    """An output path already exists and replacing it was not asked for."""


class OutputError(MasdrError, OSError):
    """An output path cannot be written: its folder cannot be made, it is a directory, no permission."""


class UnknownScopeError(MasdrError, KeyError):
    """A scope name that the taxonomy does not define."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TaxonomyMismatchError(MasdrError):
    """An artifact (index, router) was built for a different taxonomy."""


class ArtifactError(MasdrError):
    """A saved artifact (router, index, checkpoint) is missing a file, corrupt, or of another format."""


class QueryError(MasdrError, ValueError):
    """A query that cannot be routed or searched (empty, too long)."""


class DatasetError(MasdrError):
    """A data set could not be fetched or did not pass its checksum."""


class LLMError(MasdrError):
    """The LLM endpoint was unreachable, timed out, refused the request, or answered something unusable."""


class MissingExtraError(MasdrError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""
