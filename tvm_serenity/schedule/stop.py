"""Stopping a long computation early, by its deadline or by Ctrl-C, keeping the best result.

One :class:`Deadline` bounds a whole command: scheduling (heuristic warm starts, exact search,
divide and conquer, soft budgeting), graph rewriting and arena planning (heuristic warm start
and CP-SAT) all poll it and return their best valid result so far (``optimal: false`` and its
gap) once it has passed. A phase that must leave time to later phases hands them a
:meth:`Deadline.share` of what is left: a sub-deadline that never ends after its parent.

``time_limit`` arguments (``schedule(..., time_limit=)``, ``plan_arena(..., time_limit=)``,
``rewrite_graph``) take seconds or a :class:`Deadline`; ``None`` means
:data:`DEFAULT_TIME_LIMIT` (60 s) for scheduling. Seconds must be a finite number >= 0;
anything else raises :class:`TimeLimitError` (one line).

The search loops poll :func:`past` on the deadline's ``end`` (a ``time.perf_counter()``
value). Inside :func:`interruptible` the first Ctrl-C (SIGINT) only sets a flag, so each
search returns as if its deadline had passed; a second Ctrl-C interrupts for real.
"""

from __future__ import annotations

import math
import numbers
import signal
import threading
import time
from contextlib import contextmanager

from ..errors import SerenityError

__all__ = ["Deadline", "DEFAULT_TIME_LIMIT", "TimeLimitError", "check_seconds", "past",
           "interruptible", "stop_requested"]

DEFAULT_TIME_LIMIT = 60.0   # seconds for one scheduling call (or `schedule` command) if none given

_stop = threading.Event()


class TimeLimitError(SerenityError, ValueError):
    """A time limit is not a finite, non-negative number of seconds."""


def check_seconds(value, what: str = "time_limit") -> float:
    """``value`` as float seconds, or :class:`TimeLimitError` (bools, NaN, inf, < 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TimeLimitError(f"{what} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise TimeLimitError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


class Deadline:
    """A point in time (``end``, on ``time.perf_counter()``'s clock) every phase polls.

    ``Deadline(seconds)`` ends ``seconds`` from now; ``Deadline.of(limit)`` accepts a
    Deadline (returned as is), seconds, or None (``default`` seconds).
    """

    __slots__ = ("end",)

    def __init__(self, seconds: float):
        self.end = time.perf_counter() + check_seconds(seconds)

    @classmethod
    def of(cls, limit: "Deadline | float | None", default: float = DEFAULT_TIME_LIMIT,
           what: str = "time_limit") -> "Deadline":
        if isinstance(limit, Deadline):
            return limit
        return cls(default if limit is None else check_seconds(limit, what))

    def remaining(self) -> float:
        """Seconds left (0 once passed)."""
        return max(0.0, self.end - time.perf_counter())

    def expired(self) -> bool:
        """Has the deadline passed, or was a stop (Ctrl-C) requested?"""
        return past(self.end)

    def share(self, fraction: float) -> "Deadline":
        """A sub-deadline ``fraction`` (0..1) of the remaining time from now."""
        sub = Deadline.__new__(Deadline)
        sub.end = min(self.end, time.perf_counter() + self.remaining() * fraction)
        return sub

    def __repr__(self) -> str:
        return f"Deadline({self.remaining():.3f} s left)"


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
