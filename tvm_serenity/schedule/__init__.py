"""Operator orderings. ``schedule(graph, method)`` runs one method by name; every method's
peak comes from :mod:`tvm_serenity.memory`.

A method is a function ``f(graph, *, inplace, time_limit, seed) -> ScheduleResult`` registered
in :data:`METHODS` with :func:`register_method`; ``time_limit`` is a :class:`.stop.Deadline`
that every phase of the method polls (bounds, warm-start heuristics, exact search). Without a
``time_limit`` a call is bounded by :data:`DEFAULT_TIME_LIMIT` (60 s); the heuristics are
near-linear (O(edges log n)), so even a graph of 10^5 nodes gets a valid order in time.
"""

from __future__ import annotations

import inspect
import time
from typing import Callable

from ..graph import Graph, GraphError
from . import baselines
from .result import ScheduleResult, make_result
from .stop import DEFAULT_TIME_LIMIT, Deadline, TimeLimitError, interruptible

__all__ = ["ScheduleResult", "make_result", "METHODS", "register_method", "schedule",
           "baselines", "Deadline", "DEFAULT_TIME_LIMIT", "TimeLimitError", "ScheduleError"]

MethodFn = Callable[..., ScheduleResult]
METHODS: dict[str, MethodFn] = {}


def register_method(name: str):
    def deco(fn: MethodFn) -> MethodFn:
        METHODS[name] = fn
        return fn
    return deco


def _baseline(name: str, order_fn: Callable[[Graph], list[str]]) -> None:
    def run(graph: Graph, *, inplace: bool = True, time_limit: Deadline | float | None = None,
            seed: int = 0) -> ScheduleResult:
        t0 = time.perf_counter()
        order = order_fn(graph)
        return make_result(graph, order, name, time.perf_counter() - t0, inplace,
                           deadline=Deadline.of(time_limit).end)
    run.__doc__ = f"The {name} baseline order."
    register_method(name)(run)


_baseline("stored", baselines.stored_order)
_baseline("kahn", baselines.kahn_order)
_baseline("dfs", baselines.dfs_order)
_baseline("rpo", baselines.rpo_order)


@register_method("random")
def _random(graph: Graph, *, inplace: bool = True, time_limit: Deadline | float | None = None,
            seed: int = 0, samples: int = 100) -> ScheduleResult:
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit).end
    order = baselines.best_random_order(graph, samples, seed, inplace, deadline)
    return make_result(graph, order, "random", time.perf_counter() - t0, inplace,
                       deadline=deadline, samples=samples, seed=seed)


class ScheduleError(GraphError):
    """A wrong argument to :func:`schedule` (method, flag, seed or option); a GraphError as
    an unknown method always was."""


def schedule(graph: Graph, method: str = "stored", *, inplace: bool = True,
             time_limit: Deadline | float | None = None, seed: int = 0,
             **options) -> ScheduleResult:
    """Order ``graph``'s operators with ``method`` (a key of :data:`METHODS`).

    ``time_limit`` bounds the whole call (seconds, or a :class:`~.stop.Deadline` shared with
    other phases; None: :data:`DEFAULT_TIME_LIMIT`, 60 s): past it the best order found so far
    comes back with ``optimal`` false and its gap. Wrong arguments raise a
    :class:`~tvm_serenity.errors.SerenityError` subclass (one line).
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"schedule: graph must be a Graph, got {type(graph).__name__}")
    if not isinstance(method, str) or method not in METHODS:
        raise ScheduleError(f"unknown scheduling method {method!r} "
                            f"(choose from {', '.join(sorted(METHODS))})")
    if not isinstance(inplace, bool):
        raise ScheduleError(f"schedule: inplace must be True or False, got {inplace!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ScheduleError(f"schedule: seed must be an integer, got {seed!r}")
    deadline = Deadline.of(time_limit)
    fn = METHODS[method]
    try:
        inspect.signature(fn).bind(graph, inplace=inplace, time_limit=deadline, seed=seed,
                                   **options)
    except TypeError as e:
        raise ScheduleError(f"method '{method}': {e}") from None
    with interruptible():     # Ctrl-C: stop searching, keep the best order found
        return fn(graph, inplace=inplace, time_limit=deadline, seed=seed, **options)


# Exact searches (docs/serenity.md): registered after the baselines they start from.
from . import budget, divide, dp  # noqa: E402

register_method("greedy")(dp.greedy_method)
register_method("textbook")(dp.textbook_method)
register_method("dp")(dp.dp_method)
register_method("astar")(dp.astar_method)
register_method("descent")(dp.descent_method)
register_method("budget")(budget.budget_method)
register_method("serenity")(divide.serenity_method)
