"""SIGINT / SIGTERM that arrive while a long command is still starting (importing, reading
its settings, opening its store), before it catches signals itself: the first is kept and
acted on as soon as the command catches signals (a graceful stop, as if sent then), so a
daemon stopped while it starts exits as stopped, not killed; a second stops at once."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALLED = frozenset({"serve", "generate", "evaluate", "calibrate"})
"""The commands that stop gracefully on SIGINT / SIGTERM (``ragjury.commands._signals``)."""
_CAUGHT = (signal.SIGINT, signal.SIGTERM)
_pending: list[int] = []


def _keep(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _pending:  # the second: stop now, as a second signal does later on
        # at once and with the same exit code wherever it lands (an exception raised here
        # could land in an import or the event loop's own code); nothing is lost: what
        # the command wrote is committed, and it has taken no work yet
        print(f"ragjury: {name} again while starting: stopping now", file=sys.stderr, flush=True)
        os._exit(130)
    _pending.append(signum)
    print(
        f"ragjury: {name} while starting: stopping as soon as started (send it again to "
        "stop at once)",
        file=sys.stderr,
        flush=True,
    )


@contextmanager
def early_signals_kept(command: str) -> Iterator[None]:
    """While ``command`` runs (one of :data:`SIGNALLED`, in the main thread), keep a SIGINT /
    SIGTERM until it catches signals itself; the handlers before are put back after it, and
    a signal it never took is dropped (``main`` may run inside another program)."""
    if command not in SIGNALLED or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in _CAUGHT}
    for signum in _CAUGHT:
        signal.signal(signum, _keep)
    try:
        yield
    finally:
        _pending.clear()
        for signum, handler in before.items():
            signal.signal(signum, handler)


def signal_kept() -> bool:
    """Whether a signal is kept, not yet handed over: a stop was asked for while starting
    (asked from any thread: what takes a job in stops judging it, see ``submit_samples``)."""
    return bool(_pending)


def early_signals() -> list[int]:
    """The signal kept while starting (at most one), handed over once."""
    kept = list(_pending)
    _pending.clear()
    return kept
