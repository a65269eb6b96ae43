"""Operator orderings. ``schedule(graph, method)`` runs one method by name; every method's
peak comes from :mod:`tvm_serenity.memory`.

A method is a function ``f(graph, *, inplace, time_limit, seed) -> ScheduleResult`` registered
in :data:`METHODS` with :func:`register_method`.
"""

from __future__ import annotations

import time
from typing import Callable

from ..graph import Graph, GraphError
from . import baselines
from .result import ScheduleResult, make_result
from .stop import interruptible

__all__ = ["ScheduleResult", "make_result", "METHODS", "register_method", "schedule",
           "baselines"]

MethodFn = Callable[..., ScheduleResult]
METHODS: dict[str, MethodFn] = {}


def register_method(name: str):
    def deco(fn: MethodFn) -> MethodFn:
        METHODS[name] = fn
        return fn
    return deco


def _baseline(name: str, order_fn: Callable[[Graph], list[str]]) -> None:
    def run(graph: Graph, *, inplace: bool = True, time_limit: float | None = None,
            seed: int = 0) -> ScheduleResult:
        t0 = time.perf_counter()
        order = order_fn(graph)
        return make_result(graph, order, name, time.perf_counter() - t0, inplace)
    run.__doc__ = f"The {name} baseline order."
    register_method(name)(run)


_baseline("stored", baselines.stored_order)
_baseline("kahn", baselines.kahn_order)
_baseline("dfs", baselines.dfs_order)
_baseline("rpo", baselines.rpo_order)


@register_method("random")
def _random(graph: Graph, *, inplace: bool = True, time_limit: float | None = None,
            seed: int = 0, samples: int = 100) -> ScheduleResult:
    t0 = time.perf_counter()
    order = baselines.best_random_order(graph, samples, seed, inplace)
    return make_result(graph, order, "random", time.perf_counter() - t0, inplace,
                       samples=samples, seed=seed)


def schedule(graph: Graph, method: str = "stored", *, inplace: bool = True,
             time_limit: float | None = None, seed: int = 0, **options) -> ScheduleResult:
    """Order ``graph``'s operators with ``method`` (a key of :data:`METHODS`)."""
    if method not in METHODS:
        raise GraphError(f"unknown scheduling method '{method}' "
                         f"(choose from {', '.join(sorted(METHODS))})")
    with interruptible():     # Ctrl-C: stop searching, keep the best order found
        return METHODS[method](graph, inplace=inplace, time_limit=time_limit, seed=seed,
                               **options)


# Exact searches (docs/serenity.md): registered after the baselines they start from.
from . import budget, divide, dp  # noqa: E402

register_method("greedy")(dp.greedy_method)
register_method("textbook")(dp.textbook_method)
register_method("dp")(dp.dp_method)
register_method("astar")(dp.astar_method)
register_method("descent")(dp.descent_method)
register_method("budget")(budget.budget_method)
register_method("serenity")(divide.serenity_method)
