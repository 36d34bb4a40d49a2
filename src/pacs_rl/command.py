"""What the `pacs-rl` commands share on the command line: one-line errors, the other spellings of options
(TRL's and older ones, rewritten before the options are parsed), and the data and prompt options, declared once
from :class:`pacs_rl.settings.data.DataSettings`.

Light on purpose (no torch, no TRL): a command checks its input with these before it imports them.
"""

from __future__ import annotations

import importlib
import logging
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from pacs_rl.settings.aliases import RENAMED_SETTINGS, canonical_key, old_options
from pacs_rl.settings.data import DataSettings
from pacs_rl.settings.errors import SettingsError, one_line
from pacs_rl.settings.reading import FALSE_WORDS, TRUE_WORDS

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


def rewrite_args(
    command: str,
    args: list[str],
    options: Iterable[str],
    notes: list[str],
    settings: Mapping[str, str] | None = None,
) -> list[str]:
    """A command's arguments in one pass, every other spelling of an option replaced by its name: TRL's
    (``--output_dir`` for ``--output-dir``) quietly, an older one (`pacs_rl.settings.aliases.ALIASES`)
    with a note in ``notes``; and, with ``settings`` (setting -> its type as text), ``--name value`` for a setting
    the command has no option of written ``--set name=value`` (a bool setting may stand bare: ``--use_vllm``),
    TRL's command-line spelling of its config.

    options: the option names the command declares. Arguments after ``--`` are left alone."""
    options, old = set(options), old_options(command)
    out: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if arg == "--":
            return [*out, arg, *rest]
        if not name.startswith("--") or name in options:
            out.append(arg)
        elif name in old:
            new, noted = old[name]
            out += _old_option(name, new, value if eq else None, rest, notes if noted else [])
        else:
            spelled = name[2:].replace("-", "_")
            key, noted = RENAMED_SETTINGS.get(spelled, (spelled, False))
            flag = "--" + key.replace("_", "-")
            if flag in options:
                if noted:
                    notes.append(f"{name} is now called {flag}; the old name still works")
                out.append(flag + eq + value)
            elif settings is not None and key in settings:
                canonical_key(spelled, name, notes)  # its note, in the words a file's older key gets
                out += ["--set", f"{key}={value if eq else _option_value(name, key, settings[key], rest)}"]
            else:
                out.append(arg)
    return out


def _old_option(
    name: str, new: str | Callable[[str], list[str]], value: str | None, rest: list[str], notes
) -> list[str]:
    """An older option's arguments now, with a note: a new name, or a function of the old value."""
    if not callable(new):
        notes.append(f"{name} is now called {new}; the old name still works")
        return [new + ("" if value is None else f"={value}")]
    text = value if value is not None else (rest.pop(0) if rest else "")
    replaced = new(text)
    notes.append(f"{name} {text} is now written {' '.join(replaced)}; the old spelling still works")
    return replaced


def _option_value(name: str, key: str, kind: str, rest: list[str]) -> str:
    """The value of ``--name`` written apart (``--name VALUE``); a bool setting may stand bare."""
    following = rest[0] if rest else None
    if "bool" in kind and (following is None or following.lower() not in TRUE_WORDS + FALSE_WORDS):
        return "true"
    if following is None:
        raise SettingsError(f"{name} needs a value: {name} VALUE, or --set {key}=VALUE")
    return rest.pop(0)


class _RewrittenArgs:
    """The arguments of a command rewritten before parsing (:func:`rewrite_args`), each older
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
    """The option of the setting that dataclass field ``f`` declares (`pacs_rl.settings.declarations.setting`):
    its help is the declaration's, ``extra`` after it, and ``[default: shown]`` (``shown`` None: the declared
    default; False: no default shown). ``default``: the option's own value when not given (None: not given, the
    layer below decides)."""
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
    "rewrite_args",
    "typed_command",
]
