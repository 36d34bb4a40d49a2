"""A lock file per piece of a comparison, so that several `pacs-rl compare` processes can share one folder or record
without doing the same work twice. The lock is the operating system's (``filelock``): a process that dies, however
it dies, lets go of it, and the file left behind holds nothing."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock

LOCKS = ".locks"  # a comparison folder's lock files, out of the way of the run and evaluation folders


def lock_of(target: Path, root: Path | None = None) -> FileLock:
    """The lock of ``target`` (a run or evaluation folder, or a record): the file ``TARGET.lock`` beside it, or,
    with ``root`` (the comparison folder that holds ``target``), under ``root/.locks/`` at the same relative path.
    It does not wait: ``acquire`` raises ``filelock.Timeout`` while another process holds it."""
    if root is not None:
        target = root / LOCKS / target.relative_to(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(target.parent / (target.name + ".lock"), timeout=0)
