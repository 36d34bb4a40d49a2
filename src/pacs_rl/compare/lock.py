"""A lock file per piece of a comparison, so that several `pacs-rl compare` processes can share one folder or record
without doing the same work twice; a lock whose process died is taken over."""

from __future__ import annotations

import os
from pathlib import Path


class PhaseLock:
    """An exclusive lock file beside a run or evaluation folder, so several `pacs-rl compare` processes
    can share one comparison folder (e.g. one per method with --only): a phase locked by a live process
    is left to it. A lock whose process is gone (killed) is taken over."""

    def __init__(self, target: Path):
        self.path = target.parent / (target.name + ".lock")
        self.held = False

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if _alive(self.path):
                    return False
                self.path.unlink(missing_ok=True)  # stale: its process died
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            self.held = True
            return True
        return False

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _alive(lock: Path) -> bool:
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    if pid == os.getpid():
        return False  # our own leftover (a phase that raised): take it over
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
