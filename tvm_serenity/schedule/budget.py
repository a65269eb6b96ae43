"""Adaptive soft budgeting (SERENITY, section 3.2 and Algorithm 2).

A DP run with a *budget* ``tau`` drops every partial schedule whose peak (or bound, see
:mod:`.dp`) exceeds ``tau``. Any ``tau >= mu*`` (the optimal peak) still finds an optimal order,
and the smaller ``tau`` the fewer states survive; ``tau < mu*`` finds nothing. Soft budgeting
searches for a budget that is feasible yet small enough to finish quickly:

1. the hard budget ``tau_max`` is the peak of a cheap heuristic order (the paper uses Kahn's;
   we take the best of the baselines and the greedy order, which is never larger);
2. run the budgeted DP (:func:`.dp.level_dp` with ``limit = tau``) starting at ``tau_max``,
   for at most ``T`` seconds (default 1 s; at most a quarter of the time limit when one is
   set, :func:`step_timeout_for`);
3. on **timeout**, ``tau_old <- tau`` and ``tau <- tau / 2`` (too loose, the search is too big);
   on **no solution**, ``tau <- (tau + tau_old) / 2`` (too tight: move up towards the last
   budget that timed out); stop at the first **solution**, which is optimal.

Two details the paper's pseudo-code leaves open, decided here:

* ``tau_old`` is the smallest budget that *timed out* and is not known infeasible (initially
  ``tau_max``, which is feasible). The pseudo-code's simultaneous assignment would also set it
  on "no solution", after which a second "no solution" bisects below a budget just proven
  infeasible; keeping the timed-out end makes the no-solution steps a bisection between the
  largest infeasible and the smallest prohibitive budget, as the paper's text and Figure 8(b)
  describe.
* A budget already proven infeasible (``tau <=`` the largest "no solution" budget) is answered
  without running. When the bisection has nothing left between the two ends (``tau_old`` is
  one byte above an infeasible budget), ``tau_old`` is retried with the timeout ``T`` doubled,
  so the procedure always terminates when no overall deadline is set.

Every "no solution" at ``tau`` proves ``mu* > tau``: a run stopped by the overall deadline
returns the heuristic order with that lower bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..graph import Graph
from .dp import EXHAUSTED, SOLVED, TIMEOUT, SearchOutcome, SearchSpace, level_dp, \
    run_whole_graph
from .stop import Deadline, past

__all__ = ["BudgetStep", "soft_budgeting", "budget_method", "step_timeout_for",
           "DEFAULT_STEP_TIMEOUT"]

DEFAULT_STEP_TIMEOUT = 1.0   # T, seconds per budgeted run


@dataclass(frozen=True)
class BudgetStep:
    """One point of the budget trajectory."""

    tau: int
    outcome: str        # SOLVED, EXHAUSTED ("no solution") or TIMEOUT
    seconds: float
    timeout: float      # the T the run had
    known: bool         # answered from an earlier "no solution", not run

    def to_json(self) -> dict:
        return {"tau": self.tau, "outcome": self.outcome, "seconds": round(self.seconds, 4),
                "timeout": self.timeout, "known": self.known}


def soft_budgeting(space: SearchSpace, tau_max: int, step_timeout: float = DEFAULT_STEP_TIMEOUT,
                   deadline: float | None = None, known_lower_bound: int = 0,
                   progress: bool | None = None,
                   search: Callable[..., SearchOutcome] = level_dp,
                   ) -> tuple[SearchOutcome, list[BudgetStep]]:
    """Binary-search the soft budget for ``space``; ``tau_max`` must be a feasible peak and
    ``known_lower_bound`` a proven lower bound (budgets below it are answered without a run).

    ``search(space, limit=tau, deadline=..., progress=...)`` is the budgeted search (the DP).
    Returns the outcome (SOLVED with an optimal order, or TIMEOUT with the proven lower bound
    when ``deadline`` passed first) and the budget trajectory.
    """
    if step_timeout <= 0:
        raise ValueError(f"soft budgeting: step timeout must be positive, got {step_timeout}")
    t0 = time.perf_counter()
    infeasible = known_lower_bound - 1        # largest budget known to have no solution
    timed_out = [tau_max]                     # budgets that timed out (tau_max: the top end)
    tau = tau_max
    trajectory: list[BudgetStep] = []
    expanded = 0
    while True:
        if tau <= infeasible:
            flag = EXHAUSTED
            trajectory.append(BudgetStep(tau, flag, 0.0, step_timeout, True))
        else:
            now = time.perf_counter()
            if past(deadline):
                break
            run_deadline = now + step_timeout if deadline is None \
                else min(now + step_timeout, deadline)
            outcome = search(space, limit=tau, deadline=run_deadline, progress=progress)
            expanded += outcome.expanded
            flag = outcome.status
            trajectory.append(BudgetStep(tau, flag, outcome.seconds, step_timeout, False))
            if flag == SOLVED:
                return (SearchOutcome(SOLVED, outcome.order, outcome.peak, outcome.peak,
                                      expanded, time.perf_counter() - t0), trajectory)
            if flag == EXHAUSTED:
                infeasible = max(infeasible, tau)
        if flag == TIMEOUT:
            timed_out.append(tau)
            tau //= 2
        else:
            # tau_old: the smallest budget that timed out and is not known infeasible.
            tau_old = min(t for t in timed_out if t > infeasible)
            tau = (tau + tau_old) // 2
            if tau <= infeasible:             # nothing left between the two ends
                tau = tau_old
                step_timeout *= 2
    return (SearchOutcome(TIMEOUT, None, None, infeasible + 1, expanded,
                          time.perf_counter() - t0), trajectory)


def step_timeout_for(time_limit: float | None, step_timeout: float | None) -> float:
    """``T``: as given, else :data:`DEFAULT_STEP_TIMEOUT`, at most a quarter of a time limit
    (seconds left; so that a limited run still sees several budgets)."""
    if step_timeout is not None:
        return step_timeout
    if time_limit is None:
        return DEFAULT_STEP_TIMEOUT
    return min(DEFAULT_STEP_TIMEOUT, max(time_limit, 1e-3) / 4)


def budget_method(graph: Graph, *, inplace: bool = True,
                  time_limit: Deadline | float | None = None, seed: int = 0,
                  progress: bool | None = None, step_timeout: float | None = None):
    """Soft budgeting over the whole graph (no splitting); ``details['budget_trajectory']``."""
    trajectory: list[BudgetStep] = []
    deadline = Deadline.of(time_limit)
    step_timeout = step_timeout_for(deadline.remaining(), step_timeout)

    def search(space, limit, deadline, progress):
        outcome, steps = soft_budgeting(space, limit + 1, step_timeout, deadline,
                                        progress=progress)
        trajectory.extend(steps)
        return outcome

    result = run_whole_graph(graph, "budget", search, inplace, deadline, progress)
    result.details["budget_trajectory"] = [s.to_json() for s in trajectory]
    result.details["step_timeout"] = step_timeout
    return result
