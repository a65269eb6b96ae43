"""Arena planning: an offset for every tensor of one operator order, in one static arena.

``plan_arena(graph, order, planner, alignment, inplace, time_limit)`` computes the order's
liveness with :func:`tvm_serenity.memory.liveness` (the one memory model), runs a planner from
:data:`PLANNERS` and verifies the result with :func:`verify_plan` before returning it;
``plan_buffers(buffers, capacity, planner, alignment, time_limit)`` (:mod:`.buffers`) does the
same for a plain list of (start, end, size) buffers, half-open lifetimes, and says whether the
arena fits ``capacity``. Both go through :func:`.core.run_planner`:

* ``linear``: TFLite Micro's LinearMemoryPlanner (no reuse);
* ``greedy``: TFLite Micro's GreedyMemoryPlanner (largest first, first fit);
* ``bestfit``: TFLite's ArenaPlanner + SimpleMemoryArena (largest first, best fit);
* ``optimal``: MiniMalloc's canonical search (:mod:`.canonical`) and CP-SAT, warm-started from
  the best of greedy and bestfit, proven gap on timeout.

The optimal planner always has a deadline (``time_limit``, default :data:`DEFAULT_TIME_LIMIT`)
that its warm start, model building and every solver run poll; the heuristics are near linear
in the number of time-overlapping tensor pairs, the verifier O(n log n) on usual plans.

Every planner places in-place pairs by the in-place rule where it can (:mod:`.plan` explains the
rule, alignment and physical right shifts). A planner is ``f(graph, liveness, alignment) ->
ArenaPlan`` (the optimal one also takes ``time_limit``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..graph import Graph
from ..memory import liveness as _liveness
from ..schedule.stop import Deadline
from .buffers import Buffer, BufferPlan, buffer_liveness, plan_buffers, read_minimalloc_csv
from .core import MAX_ALIGNMENT, PLANNERS, check_planner, run_planner
from .heuristics import plan_bestfit, plan_greedy, plan_linear
from .optimal import DEFAULT_TIME_LIMIT, plan_optimal
from .plan import ArenaPlan, Move, PlanError, arena_lower_bound
from .verify import verify_plan

__all__ = ["ArenaPlan", "Move", "PlanError", "PLANNERS", "plan_arena", "verify_plan",
           "arena_lower_bound", "plan_linear", "plan_greedy", "plan_bestfit", "plan_optimal",
           "DEFAULT_TIME_LIMIT", "MAX_ALIGNMENT", "Buffer", "BufferPlan", "plan_buffers",
           "buffer_liveness", "read_minimalloc_csv"]


def plan_arena(graph: Graph, order, planner: str = "optimal", alignment: int = 1,
               inplace: bool = True,
               time_limit: Deadline | float | None = DEFAULT_TIME_LIMIT) -> ArenaPlan:
    """Plan ``graph``'s arena for ``order`` with ``planner`` and verify the plan.

    ``alignment``: offsets are multiples of it and sizes are rounded up to it (1 for MCU int8,
    64 for the TVM host path; at most :data:`MAX_ALIGNMENT`). ``inplace=False`` uses the plain
    memory model (no in-place pairs: the peers' planners exactly). ``time_limit`` bounds the
    optimal planner, warm start and solver together (seconds, or a
    :class:`~tvm_serenity.schedule.stop.Deadline` shared with other phases; None:
    :data:`DEFAULT_TIME_LIMIT`, 5 s); past it the best plan found comes back with its proven
    gap. The plan carries ``arena_bytes`` and, for the same order, ``liveness_peak_bytes``
    and ``lower_bound_bytes``. Wrong arguments raise a SerenityError subclass (one line).
    """
    if not isinstance(graph, Graph):
        raise PlanError(f"plan_arena: graph must be a Graph, got {type(graph).__name__}")
    if isinstance(order, (str, bytes)) or not isinstance(order, Iterable):
        raise PlanError(f"plan_arena: order must be a list of node names, got "
                        f"{type(order).__name__}")
    check_planner(planner, alignment)
    if not isinstance(inplace, bool):
        raise PlanError(f"plan_arena: inplace must be True or False, got {inplace!r}")
    deadline = Deadline.of(time_limit, DEFAULT_TIME_LIMIT)
    live = _liveness(graph, list(order), inplace)
    return run_planner(graph, live, planner, alignment, deadline)
