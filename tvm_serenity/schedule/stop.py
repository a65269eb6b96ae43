"""Stopping a long search early, by its deadline or by Ctrl-C, keeping the best order found.

Every search checks :func:`past` where it checks its deadline. Inside :func:`interruptible`
the first Ctrl-C (SIGINT) only sets a flag, so each search returns as if its deadline had
passed (the best order so far, ``optimal: false`` and its gap); a second Ctrl-C interrupts
for real.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager

__all__ = ["past", "interruptible", "stop_requested"]

_stop = threading.Event()


def stop_requested() -> bool:
    return _stop.is_set()


def past(deadline: float | None) -> bool:
    """Has ``deadline`` (a ``time.perf_counter()`` value, or None) passed, or was a stop
    requested?"""
    return _stop.is_set() or (deadline is not None and time.perf_counter() > deadline)


@contextmanager
def interruptible():
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):
        if _stop.is_set():
            raise KeyboardInterrupt
        _stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _stop.clear()
