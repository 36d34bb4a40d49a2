"""A stop asked for by a signal (Ctrl-C, SIGTERM), honoured within moments at the next point where stopping
leaves nothing half-written.

A run installs :class:`SignalStop` around its work. Until it is armed (loading data and weights: nothing to keep
yet) a signal stops at once. Once armed, the first signal only asks for a stop (:func:`request`), and the work that
runs long looks at the request at fine-grained points through :func:`check`: the fast sampler between decoding
steps, every forward of a model :func:`watch` was called on and of each of its layers (each decoding step of
transformers' ``generate``, each micro-batch of an update, each batch of an evaluation, and within each of those one
layer after the other), the held-out evaluation between its batches. ``check``
raises :class:`StopRequested`, which unwinds the step in progress without saving anything: what the run keeps is
what it had finished writing (its last checkpoint), and a checkpoint being written when the signal came is
finished first (no check point sits inside a save). A second signal stops at once, and a third is the signal's
own default (the process ends).

The request is one per process: the signals are too. On several processes each process gets the signal (torchrun
passes it on) and stops at its own next check point.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_requested: str | None = None  # the signal that asked for the stop in progress


class StopRequested(KeyboardInterrupt):
    """Raised at a check point once a signal asked for a stop. A KeyboardInterrupt, so that it passes through
    ``except Exception`` in library code and whatever stops on Ctrl-C stops on it."""

    def __init__(self, signal_name: str):
        self.signal_name = signal_name
        super().__init__(f"stopped by {signal_name}")


def request(signal_name: str) -> None:
    """Ask for a stop (the first request is kept)."""
    global _requested
    _requested = _requested or signal_name


def requested() -> str | None:
    """The signal that asked for a stop, or None."""
    return _requested


def clear() -> None:
    global _requested
    _requested = None


def check() -> None:
    """Raise :class:`StopRequested` when a stop was asked for; else nothing (a global read: cheap enough for every
    decoding step)."""
    if _requested is not None:
        raise StopRequested(_requested)


def _check_before_forward(module, args) -> None:
    check()


def watch(*modules) -> list:
    """Make every forward of ``modules`` a check point, and every forward of each layer inside them (a module held
    in a ``ModuleList``: a transformer's decoder layers), so that a stop lands within one layer of a long forward
    (the prefill of an evaluation batch runs for tens of seconds on a loaded CPU); forward pre-hooks, whose handles
    are returned to remove them. A module met twice (a PEFT model and its base) is hooked once."""
    from torch import nn

    seen, handles = set(), []

    def hook(module) -> None:
        if id(module) not in seen:
            seen.add(id(module))
            handles.append(module.register_forward_pre_hook(_check_before_forward))

    for module in modules:
        if module is None:
            continue
        hook(module)
        for inner in module.modules():
            if isinstance(inner, nn.ModuleList):
                for layer in inner:
                    hook(layer)
    return handles


class SignalStop:
    """SIGINT and SIGTERM while this is entered (main thread only; elsewhere a no-op): before :meth:`arm` the first
    stops at once, after it the first asks for a stop (:func:`request`; ``announce(signal_name)`` says so), the
    second stops at once and the third ends the process. Entering and leaving clear the request."""

    def __init__(self, announce: Callable[[str], None] | None = None):
        self.announce = announce
        self.armed = False
        self._old: dict[int, object] = {}

    def arm(self) -> None:
        self.armed = True

    def _handle(self, signum, frame) -> None:
        name = _NAMES.get(signum, signal.Signals(signum).name)
        if _requested is not None or not self.armed:
            if _requested is not None:  # the second: the next one ends the process, whatever it is doing
                for s in _SIGNALS:
                    signal.signal(s, signal.SIG_DFL)
                print(f"{name} again: stopping now", file=sys.stderr, flush=True)
            request(name)
            raise StopRequested(_requested)
        request(name)
        if self.announce is not None:
            self.announce(name)

    def __enter__(self) -> SignalStop:
        clear()
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in _SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}
        clear()


@contextlib.contextmanager
def stop_on_signals(
    announce: Callable[[str], None] | None = None, armed: bool = True
) -> Iterator[SignalStop]:
    """:class:`SignalStop` as a ``with`` block, armed from the start unless ``armed`` is False."""
    with SignalStop(announce) as stop:
        stop.armed = armed
        yield stop


__all__ = [
    "SignalStop",
    "StopRequested",
    "check",
    "clear",
    "request",
    "requested",
    "stop_on_signals",
    "watch",
]
