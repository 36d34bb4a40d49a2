"""A package face that loads its names on first use, so that importing the package (``pacs_rl.training``,
``pacs_rl.evaluation``, ...) loads none of the heavy modules behind it: its ``__init__`` holds the table of its
names and one line::

    _EXPORTS = {"EvalConfig": "pacs_rl.evaluation.runner", ...}  # name -> the module that defines it
    __getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)

A module in the table is absolute (``pacs_rl....``) or relative to the package (``"graders"``). ``load_first`` names
modules imported before the first name is handed out, whichever it is (`pacs_rl.algorithms`: the loss modules,
which fill the loss registry as they load)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping


def lazy_face(
    package: str, exports: Mapping[str, str], load_first: Iterable[str] = ()
) -> tuple[Callable, Callable, list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) of package ``package`` whose public names ``exports`` maps to the
    modules that define them; a name is imported from its module when it is first asked for, after the modules of
    ``load_first``."""
    first = tuple(load_first)

    def absolute(module: str) -> str:
        return module if module.startswith("pacs_rl.") else f"{package}.{module}"

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for module in first:
            importlib.import_module(absolute(module))
        return getattr(importlib.import_module(absolute(exports[name])), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__, sorted(exports)
