"""The ``masdr`` command: the command tree and the error contract. Subcommand names are stable:
other tooling calls them.

Every failure caused by the user's input (a flag value, a file, a config key) ends with one
``error: …`` line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from . import answer, data, demo, evaluate, index, route, serve, synth, train
from .common import err

app = typer.Typer(help="Scope-first RAG: route a query to its organisational scope, search only there.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
app.add_typer(data.app, name="data")
app.add_typer(index.app, name="index")
app.command("search")(index.search)
app.command("route")(route.route)
app.command("train")(train.train)
app.add_typer(evaluate.app, name="eval")
app.add_typer(train.export_app, name="export")
app.command("ask")(answer.ask)
app.add_typer(answer.llm_app, name="llm")
app.command("demo")(demo.demo)
app.command("synth-queries")(synth.synth_queries)
app.command("serve")(serve.serve)


def _version(value: bool) -> None:
    if value:
        from .._version import __version__

        print(f"masdr {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Scope-first RAG: route a query to its organisational scope, search only there."""


def error_line(message: str) -> None:
    from rich.markup import escape

    # escaped: a message may hold brackets ("the [train] extra") that rich would take for markup
    err.print(f"[bold red]error:[/] {escape(' '.join(str(message).split()))}", highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns (and, as a script, exits with) 0 on success, 2 on bad input, 130 on Ctrl-C."""
    import logging

    from ..errors import MasdrError

    # the click that typer raises from: click itself, or the copy that newer typer vendors
    click = sys.modules[typer.BadParameter.__module__]

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("masdr_router").setLevel(logging.INFO)
    try:
        result = app(args=argv, prog_name="masdr", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except getattr(click, "NoArgsIsHelpError", ()) as e:
        print(e.ctx.get_help())
        return 0
    except click.UsageError as e:  # a flag the parser could not take: same contract as our own errors
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        error_line(e.format_message() + hint)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err.print("interrupted")
        return 130
    except MasdrError as e:
        error_line(str(e))
        return 2
    except ImportError as e:  # an optional dependency a command needs and this install lacks
        from ..extras import missing_extra

        extra = missing_extra(e)
        if extra is None:
            raise
        error_line(str(extra))
        return 2


def run() -> None:
    sys.exit(main())
