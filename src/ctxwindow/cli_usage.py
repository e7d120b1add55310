"""Usage errors of the ``ctxwindow`` commands as one line, like every other error of the CLI.

Click prints a usage error (an unknown option or command, a missing or bad
value) as a usage line, a hint and, under typer with rich, a box. ``Commands``,
the class of the ``ctxwindow`` group and of its sub-groups, prints it instead
as ``ctxwindow: error: <what>; see 'ctxwindow <command> --help'`` and exits
with status 2.
"""

from __future__ import annotations

import difflib
from typing import Any, NoReturn

import typer
import typer.core

# click's usage errors, from the copy of click that typer ships (pyproject.toml bounds typer)
from typer._click.exceptions import NoArgsIsHelpError, NoSuchOption, UsageError


class Commands(typer.core.TyperGroup):
    """A typer group whose usage errors, and those of the commands under it, are one line."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except NoArgsIsHelpError:  # no arguments at all: the help, as no_args_is_help says
            raise
        except UsageError as exc:
            one_line(exc, exc.ctx)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            # Some parse errors come without the context of the command they are about.
            sub = ctx.invoked_subcommand
            one_line(exc, exc.ctx, command_path(ctx) + (f" {sub}" if sub else ""))


def one_line(exc: UsageError, ctx: Any, path: str | None = None) -> NoReturn:
    """Print ``exc`` as one line naming the help to read, and exit with status 2."""
    message = " ".join(what(exc).split()).removesuffix(".")
    where = command_path(ctx) if ctx is not None else path or "ctxwindow"
    typer.echo(f"ctxwindow: error: {message}; see '{where} --help'", err=True)
    raise typer.Exit(2)


def what(exc: UsageError) -> str:
    """What is wrong; for an unknown option, the closest one it may stand for."""
    if isinstance(exc, NoSuchOption) and exc.possibilities:
        closest = difflib.get_close_matches(exc.option_name, exc.possibilities, n=1, cutoff=0)
        return f"{exc.message} (did you mean {closest[0]}?)"
    return exc.format_message()


def command_path(ctx: Any) -> str:
    """``ctxwindow`` and the (sub)commands of ``ctx``, whatever the script was called."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["ctxwindow", *reversed(names)])
