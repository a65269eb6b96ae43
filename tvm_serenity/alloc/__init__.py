"""Arena planning: an offset for every tensor of one operator order, in one static arena.

``plan_arena(graph, order, planner, alignment, inplace, time_limit)`` computes the order's
liveness with :func:`tvm_serenity.memory.liveness` (the one memory model), runs a planner from
:data:`PLANNERS` and verifies the result with :func:`verify_plan` before returning it:

* ``linear``: TFLite Micro's LinearMemoryPlanner (no reuse);
* ``greedy``: TFLite Micro's GreedyMemoryPlanner (largest first, first fit);
* ``bestfit``: TFLite's ArenaPlanner + SimpleMemoryArena (largest first, best fit);
* ``optimal``: CP-SAT, warm-started from the best of greedy and bestfit, proven gap on timeout.

Every planner places in-place pairs by the in-place rule where it can (:mod:`.plan` explains the
rule, alignment and physical right shifts). A planner is ``f(graph, liveness, alignment) ->
ArenaPlan`` (the optimal one also takes ``time_limit``).
"""

from __future__ import annotations

from ..graph import Graph
from ..memory import liveness as _liveness
from .heuristics import plan_bestfit, plan_greedy, plan_linear
from .optimal import DEFAULT_TIME_LIMIT, plan_optimal
from .plan import ArenaPlan, Move, PlanError, arena_lower_bound
from .verify import verify_plan

__all__ = ["ArenaPlan", "Move", "PlanError", "PLANNERS", "plan_arena", "verify_plan",
           "arena_lower_bound", "plan_linear", "plan_greedy", "plan_bestfit", "plan_optimal",
           "DEFAULT_TIME_LIMIT"]

PLANNERS = {"linear": plan_linear, "greedy": plan_greedy, "bestfit": plan_bestfit,
            "optimal": plan_optimal}


def plan_arena(graph: Graph, order, planner: str = "optimal", alignment: int = 1,
               inplace: bool = True, time_limit: float | None = DEFAULT_TIME_LIMIT) -> ArenaPlan:
    """Plan ``graph``'s arena for ``order`` with ``planner`` and verify the plan.

    ``alignment``: offsets are multiples of it and sizes are rounded up to it (1 for MCU int8,
    64 for the TVM host path). ``inplace=False`` uses the plain memory model (no in-place pairs:
    the peers' planners exactly). ``time_limit`` bounds the optimal planner's solver (seconds;
    None: no limit). The plan carries ``arena_bytes`` and, for the same order,
    ``liveness_peak_bytes`` and ``lower_bound_bytes``.
    """
    if planner not in PLANNERS:
        raise PlanError(f"unknown arena planner '{planner}' "
                        f"(choose from {', '.join(PLANNERS)})")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
        raise PlanError(f"alignment must be a positive integer, got {alignment!r}")
    live = _liveness(graph, order, inplace)
    options = {"time_limit": time_limit} if planner == "optimal" else {}
    plan = PLANNERS[planner](graph, live, alignment, **options)
    verify_plan(graph, live, plan)
    return plan
