"""The one planning path of both entry points: check the arguments, run a planner, verify.

:func:`tvm_serenity.alloc.plan_arena` (a graph and an order) and
:func:`tvm_serenity.alloc.buffers.plan_buffers` (a list of buffers) each turn their input
into a :class:`~tvm_serenity.memory.Liveness` and hand it to :func:`run_planner`, which runs
one of :data:`PLANNERS` and passes the plan through :func:`~tvm_serenity.alloc.verify_plan`
before returning it.
"""

from __future__ import annotations

from ..graph import Graph
from ..memory import Liveness
from ..schedule.stop import Deadline
from .heuristics import plan_bestfit, plan_greedy, plan_linear
from .optimal import DEFAULT_TIME_LIMIT, plan_optimal
from .plan import ArenaPlan, PlanError
from .verify import verify_plan

__all__ = ["PLANNERS", "MAX_ALIGNMENT", "check_planner", "run_planner"]

MAX_ALIGNMENT = 1 << 16   # keeps the solver's padded sizes within its 64-bit model (graph.py)

PLANNERS = {"linear": plan_linear, "greedy": plan_greedy, "bestfit": plan_bestfit,
            "optimal": plan_optimal}


def check_planner(planner, alignment) -> None:
    """Raise :class:`PlanError` for an unknown planner or an alignment out of range."""
    if not isinstance(planner, str) or planner not in PLANNERS:
        raise PlanError(f"unknown arena planner {planner!r} "
                        f"(choose from {', '.join(PLANNERS)})")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or not (
            1 <= alignment <= MAX_ALIGNMENT):
        raise PlanError(f"alignment must be a positive integer at most {MAX_ALIGNMENT}, "
                        f"got {alignment!r}")


def run_planner(graph: Graph | None, live: Liveness, planner: str, alignment: int,
                time_limit: Deadline | float | None, **optimal_options) -> ArenaPlan:
    """Plan ``live`` with ``planner`` (``graph`` None: a buffer list) and verify the plan;
    ``optimal_options`` (``capacity``, ``widths``) go to the optimal planner only."""
    options = {}
    if planner == "optimal":
        options = {"time_limit": Deadline.of(time_limit, DEFAULT_TIME_LIMIT),
                   **optimal_options}
    plan = PLANNERS[planner](graph, live, alignment, **options)
    verify_plan(graph, live, plan)
    return plan
