"""A lock file per piece of a comparison, so that several `pacs-rl compare` processes can share one folder or record
without doing the same work twice. The lock is the operating system's (``filelock``): a process that dies, however
it dies, lets go of it, and the file left behind holds nothing."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock


def lock_of(target: Path) -> FileLock:
    """The lock of ``target`` (a run or evaluation folder, or a record), the file ``TARGET.lock`` beside it; it
    does not wait: ``acquire`` raises ``filelock.Timeout`` while another process holds it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(target.parent / (target.name + ".lock"), timeout=0)
