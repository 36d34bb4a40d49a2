"""One look for every progress bar of the package (sampling, grading, evaluation, audit, training, held-out passes):
the description, the bar, n/total, the bar's own fields, the elapsed time and the ETA. The elapsed time stays
meaningful once a bar is full, when the ETA reads 0. Without a terminal (a log file) or switched off (--no-progress)
a bar shows nothing. rich loads when a bar is made, not with this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def terminal_bars(enabled: bool = True, stderr: bool = False) -> bool:
    """Whether a bar ``enabled`` would be drawn: its stream (stdout, or stderr) is a terminal. Where it is not (a log
    file), a long job says what it does in lines instead."""
    from rich.console import Console

    return enabled and Console(stderr=stderr).is_terminal


def progress_bar(*fields: Any, enabled: bool = True, transient: bool = False, stderr: bool = False) -> Any:
    """A rich ``Progress`` (not started): description, bar, n/total, ``fields`` (rich columns, or column text such
    as ``"acc {task.fields[acc]}"``), elapsed time, ETA. ``transient``: gone once stopped; ``stderr``: drawn on
    stderr (a command whose report goes to stdout)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=stderr)
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(f) if isinstance(f, str) else f for f in fields),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
        disable=not (enabled and console.is_terminal),
    )


def started_bar(description: str, total: int, *fields: Any, enabled: bool = True, **options: Any) -> Any:
    """A `progress_bar` started with one task (task 0) of ``total`` steps, or None when not ``enabled``.
    ``options``: `progress_bar`'s (transient, stderr), else the task's (``completed``, the fields' first values)."""
    if not enabled:
        return None
    look = {k: options.pop(k) for k in ("transient", "stderr") if k in options}
    bar = progress_bar(*fields, enabled=enabled, **look)
    bar.start()
    bar.add_task(description, total=total, **options)
    return bar


@contextlib.contextmanager
def advancing(
    description: str, total: int, *fields: Any, enabled: bool = True, **options: Any
) -> Iterator[Any]:
    """`started_bar` for a ``with`` block: yields ``advance(k=1, **field values)`` (nothing happens when not
    ``enabled``); the bar stops when the block ends."""
    bar = started_bar(description, total, *fields, enabled=enabled, **options)
    if bar is None:
        yield lambda k=1, **values: None
        return
    try:
        yield lambda k=1, **values: bar.update(0, advance=k, **values)
    finally:
        bar.stop()
