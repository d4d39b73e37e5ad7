"""Progress bars for long work (embedding, indexing, evaluation), on stderr so stdout stays clean."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


class _NullBar:
    def advance(self, n: int = 1) -> None:
        pass


@contextlib.contextmanager
def progress_bar(description: str, total: int, *, enabled: bool = True) -> Iterator[Any]:
    """``with progress_bar("embedding", n) as bar: ... bar.advance(k)``; a no-op when disabled."""
    if not enabled:
        yield _NullBar()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(file=sys.stderr)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                  transient=False, disable=not console.is_terminal and total < 1) as p:
        task = p.add_task(description, total=total)

        class _Bar:
            def advance(self, n: int = 1) -> None:
                p.advance(task, n)

        yield _Bar()
