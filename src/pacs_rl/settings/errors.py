"""The refusal of a setting, an option or a path (`SettingsError`), on one line however its parts were written."""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting, option or path that cannot be used as given; the message names it and what to do."""


def one_line(text: str) -> str:
    """``text`` on one line (an error is one line, however its parts were written): lines joined by '; ', or by
    a space after a line that ends with ':'."""
    out = ""
    for part in (p.strip() for p in str(text).splitlines() if p.strip()):
        out += part if not out else (" " if out.endswith(":") else "; ") + part
    return out


__all__ = ["SettingsError", "one_line"]
