"""What the `pacs-rl` commands share on the command line: one-line errors, the other spellings of options
(TRL's and older ones, rewritten before the options are parsed), and the data and prompt options, declared once
from :class:`pacs_rl.settings.DataSettings`.

Light on purpose (no torch, no TRL): a command checks its input with these before it imports them.
"""

from __future__ import annotations

import importlib
import logging
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from pacs_rl.settings import DataSettings, SettingsError, one_line, rewrite_args

# click's exceptions and context as typer raises them: from the click package, or from the copy of it that newer
# typers vendor (typer._click)
_click = sys.modules[typer.BadParameter.__module__]
ClickException, UsageError, NoArgsIsHelpError = (
    _click.ClickException,
    _click.UsageError,
    _click.NoArgsIsHelpError,
)
_context = importlib.import_module(typer.BadParameter.__module__.rsplit(".", 1)[0] + ".globals")


class CommandError(UsageError):
    """A mistake in a command's input (an option, a setting, a file, a path): one line, exit status 2."""


def fail(message: Any) -> NoReturn:
    """Stop the command with ``message`` as its one-line error (exit status 2)."""
    raise CommandError(one_line(str(message)), ctx=_context.get_current_context(silent=True))


def note(message: str) -> None:
    """A one-line note on stderr (an older spelling, a setting the command changed)."""
    typer.echo(f"note: {message}", err=True)


class _StderrHandler(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when a note is written, not the stream of when it was made (a caller
    that swaps stderr for a while, a test's capture, would otherwise leave the handler on a closed stream)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def show_library_notes() -> None:
    """Print the library's notes (a capped training set, skipped data rows) as ``note: ...`` lines on stderr."""
    logger = logging.getLogger("pacs_rl")
    if not any(getattr(h, "_pacs_cli", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("note: %(message)s"))
        handler._pacs_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def typed_command(output_dir: str | None = None) -> str:
    """The `pacs-rl` command being run, as typed (``pacs-rl train --max-steps 4``), without --resume (a rerun into
    the same folder continues it), with ``--output-dir output_dir`` added when the command did not name it."""
    ctx = _context.get_current_context(silent=True)
    argv = list(ctx.meta.get("pacs_rl.argv", [])) if ctx is not None else []
    words = [a for a in argv if a != "--resume"]
    named = any(w in ("--output-dir", "-o", "--output_dir", "--output") or w.startswith(("--output-dir=", "--output_dir="))
                for w in words)  # fmt: skip
    if output_dir is not None and not named:
        words += ["--output-dir", str(output_dir)]
    return shlex.join(["pacs-rl", *words])


def error_line(e: Exception) -> str:
    """``pacs-rl train: error: <what and what to do>``; a parsing error adds where the help is."""
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "pacs-rl"
    hint = "" if isinstance(e, CommandError) or not isinstance(e, UsageError) else f" (see {where} --help)"
    return f"{where}: error: {one_line(e.format_message())}{hint}"


class Group(TyperGroup):
    """The root command: every error it or a sub-command raises is printed as one line, without a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # type: ignore[override]
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except ClickException as e:
            typer.echo(error_line(e), err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


class _RewrittenArgs:
    """The arguments of a command rewritten before parsing (:func:`pacs_rl.settings.rewrite_args`), each older
    spelling with a note. ``settings``: setting key -> type text, when every setting is also an option
    (``--learning_rate 1e-5`` = ``--set learning_rate=1e-5``, TRL's spelling)."""

    settings: Mapping[str, str] | None = None

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        # as typed, from the first command under the root on (a sub-command's parent has set it): the command that
        # goes on after a stop
        ctx.meta.setdefault("pacs_rl.argv", [self.name or "", *args])
        notes: list[str] = []
        names = [o for p in self.params for o in (*p.opts, *p.secondary_opts)]
        try:
            args = rewrite_args(self.name or "", args, names, notes, self.settings)
        except SettingsError as e:
            raise CommandError(str(e), ctx=ctx) from None
        for message in notes:
            note(message)
        return super().parse_args(ctx, args)  # type: ignore[misc]


class Command(_RewrittenArgs, TyperCommand):
    """A sub-command whose arguments are rewritten before parsing (:class:`_RewrittenArgs`)."""


class CommandGroup(_RewrittenArgs, TyperGroup):
    """A sub-command with sub-commands of its own (`pacs-rl compare paired`), its arguments rewritten alike."""


def declared_option(
    f: Any, *flags: str, default: Any = None, shown: Any = None, extra: str = "", metavar: str | None = None
) -> Any:
    """The option of the setting that dataclass field ``f`` declares (`pacs_rl.settings.setting`): its help is the
    declaration's, ``extra`` after it, and ``[default: shown]`` (``shown`` None: the declared default; False: no
    default shown). ``default``: the option's own value when not given (None: not given, the layer below decides)."""
    if shown is None:
        shown = f.default
    text = f.metadata["help"] + (f" {extra}" if extra else "")
    text += "" if shown is False else f"  [default: {shown}]"
    return typer.Option(default, *flags, help=text, show_default=False, metavar=metavar)


def data_option(name: str) -> Any:
    """The option of data setting ``name`` (:class:`DataSettings`), the same in every command: default None
    (the setting's default, or the layer below it), its help from the field."""
    f = DataSettings.__dataclass_fields__[name]
    flag = "--" + name.replace("_", "-")
    if f.type == "bool":
        shown = flag if f.default else f"--no-{flag[2:]}"
        help_text = f"{f.metadata['help']}  [default: {shown}]"
        return typer.Option(None, f"{flag}/--no-{flag[2:]}", help=help_text, show_default=False)
    return typer.Option(None, flag, help=f.metadata["help"], show_default=False, metavar="TEXT")


def end_dry_run(refusals: Sequence[str]) -> None:
    """The last lines of every command's ``--dry-run``: each refusal and exit status 1, or "every check passed"."""
    if refusals:
        typer.echo(f"refused ({len(refusals)}):")
        for message in refusals:
            typer.echo(f"  - {message}")
        raise typer.Exit(1)
    typer.echo("every check passed")


__all__ = [
    "Command",
    "CommandError",
    "CommandGroup",
    "Group",
    "data_option",
    "declared_option",
    "end_dry_run",
    "error_line",
    "fail",
    "note",
    "typed_command",
]
