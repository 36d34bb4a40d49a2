"""The lock of a record, so that one process at a time adds to it (a second driver, a merge). The lock is the
operating system's (``filelock``): a process that dies, however it dies, lets go of it, and the file left behind
holds nothing."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock


def lock_of(target: Path) -> FileLock:
    """The lock of ``target``: the file ``TARGET.lock`` beside it. It does not wait: ``acquire`` raises
    ``filelock.Timeout`` while another process holds it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(target.parent / (target.name + ".lock"), timeout=0)
