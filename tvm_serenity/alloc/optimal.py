"""Optimal arena offsets for one order: CP-SAT, warm-started, with in-place placements decided
jointly, and a proven gap when it stops early.

Model (OR-Tools CP-SAT), in units of the alignment (every padded size, gap and region is a
multiple of it). One integer offset ``x_t`` per tensor with bytes (zero-byte tensors sit at 0
and occupy nothing), the arena ``A``, ``x_t + size_t <= A``. Time is the order's steps; a
tensor occupies ``[x_t, x_t + size_t)`` over its lifetime. Two tensors need disjoint addresses
only if their lifetimes overlap; the overlap relation of intervals is an interval graph whose
maximal cliques are live sets of single steps, so one ``NoOverlap`` per step whose live set is
not contained in another step's covers exactly the overlapping pairs, with CP-SAT's energetic
propagation over each step.

In-place step ``(k, u, v)`` with ``gap`` and ``region`` (:mod:`tvm_serenity.alloc.plan`): ``u``'s
interval covers its lifetime up to step ``k - 1`` only, and at step ``k`` one of three layouts:

* in place (literal ``ip``): ``x_u = x_v + gap``; at step ``k`` the pair fills ``[x_v, x_v +
  region)``;
* right shift (literal ``mv``, only if ``gap > 0``): ``x_v = x_u``, ``u`` memmoved to ``x_u +
  gap`` before the step; at step ``k`` the pair again fills ``[x_v, x_v + region)``;
* disjoint (neither): ``u`` keeps ``[x_u, x_u + size_u)`` at step ``k`` and ``v`` avoids it.

At step ``k`` the clique holds ``v``'s interval, an optional interval for ``u`` (present when
disjoint) and an optional interval ``[x_v + size_v, x_v + region)`` (present when shared).

Search. The lower bound is :func:`~tvm_serenity.alloc.plan.arena_lower_bound` (the liveness
peak for alignment 1); the best heuristic plan (greedy, bestfit) is the upper bound and the
solution hint. Phases, all within ``time_limit``:

1. if the heuristic meets the lower bound without right shifts, it is optimal: no solver;
1b. without in-place steps (buffer lists, the plain memory model): MiniMalloc's canonical
   search (:mod:`.canonical`) at the lower bound (0.4 of the time; a proof of infeasibility
   raises the bound by one unit), then, if a ``capacity`` between the bound and the heuristic
   is given, at the capacity (half of what is left); a placement found replaces the heuristic
   as the upper bound and the hint;
2. *at the bound*: ``A`` fixed to the lower bound, minimising the number of right shifts (each
   is a memmove at run time). Finding such a plan is usually much easier than improving the
   heuristic from above; if the heuristic is above the bound this phase gets half the time, and
   proving it infeasible raises the lower bound by one unit;
3. *above the bound* (if 2 found nothing): minimise ``A`` between the bound and the heuristic,
   then the number of right shifts, hinted with the heuristic.

Each solver run starts with one deterministic worker (bounded by CP-SAT's deterministic time,
a measure of work, and a quarter of the run's time): what it proves optimal or infeasible is
taken, so the same input gives the same plan, byte for byte, on any machine load; only what it
cannot settle goes on to CP-SAT's parallel portfolio (which returns any of tied optima).

The result is never worse than the heuristic; when the time limit stops the search, ``gap`` is
the proven gap to the best lower bound known. ``time_limit`` is one deadline (seconds or a
:class:`~tvm_serenity.schedule.stop.Deadline`, default :data:`DEFAULT_TIME_LIMIT`) for the warm
start (the greedy plan always completes, bestfit is dropped past it), model building and every
solver run; a phase reached with no time left is not run. Optimality is over the plans
described here (in-place steps laid out in place, right-shifted or disjoint).
"""

from __future__ import annotations

import math
import os
import time

from ortools.sat.python import cp_model

from ..graph import Graph
from ..memory import Liveness
from ..schedule.stop import Deadline
from .canonical import fits_capacity
from .heuristics import plan_bestfit, plan_greedy
from .plan import (ArenaPlan, Move, PlanError, arena_lower_bound, label, make_plan, padded,
                   sharings)

__all__ = ["plan_optimal", "DEFAULT_TIME_LIMIT"]

DEFAULT_TIME_LIMIT = 5.0
# The first solver run of each phase: one worker, bounded by CP-SAT's deterministic time (a
# measure of work, so the same on a loaded machine) and by this share of the phase's time
DETERMINISTIC_WORK = 1.0
DETERMINISTIC_SHARE = 0.25


def plan_optimal(graph: Graph | None, liveness: Liveness, alignment: int = 1, *,
                 time_limit: Deadline | float | None = DEFAULT_TIME_LIMIT,
                 workers: int | None = None, seed: int = 0, capacity: int | None = None,
                 widths: dict[str, int] | None = None) -> ArenaPlan:
    """Minimise the arena, then (same arena) the number of right shifts, within
    ``time_limit`` (seconds or a :class:`~tvm_serenity.schedule.stop.Deadline`; None: the
    default) for the warm start and every solver run together. ``graph`` None: a plain buffer
    list (:mod:`.buffers`). ``capacity``: an arena worth reaching when the lower bound is not
    (the canonical search tries it second); ``widths``: the tensors' lifetime lengths in their
    own time, for the canonical search's preorder (default: steps)."""
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit, DEFAULT_TIME_LIMIT)
    # The greedy plan always completes: the valid plan to fall back on past the deadline.
    candidates = [plan_greedy(graph, liveness, alignment),
                  plan_bestfit(graph, liveness, alignment, deadline.end)]
    best = min((p for p in candidates if p is not None),
               key=lambda p: (p.arena_bytes, p.num_moves))
    search = _Search(graph, liveness, alignment, deadline, workers, seed)
    search.details.update(warm_start=best.planner, warm_start_bytes=best.arena_bytes)
    lower = arena_lower_bound(liveness, alignment)
    layout = (best.offsets, best.inplace, best.moves, best.arena_bytes)
    status = "bound"
    if best.arena_bytes > lower and not liveness.inplace:
        targets = [lower] + ([padded(capacity, alignment)] if capacity is not None and
                             lower < padded(capacity, alignment) < best.arena_bytes else [])
        for target, share in zip(targets, (0.4, 0.5)):
            code, found = _canonical(liveness, alignment, target, deadline.share(share),
                                     widths, search.details)
            if code == "infeasible":
                lower = max(lower, target + alignment)
            layout = found or layout
            if found:
                break
    if layout[3] > lower or best.moves:
        at_bound = layout if layout[3] == lower else None
        share = None if at_bound else 0.5
        code, found = search.run(lower, lower, at_bound, share, minimize_arena=False)
        if found:
            layout = found
        elif layout[3] > lower:
            if code == cp_model.INFEASIBLE:
                lower += alignment
            code, found = search.run(lower, layout[3], layout, None, minimize_arena=True)
            lower = max(lower, search.bound)
            status = "optimal" if code == cp_model.OPTIMAL else "time_limit"
            layout = found or layout
    offsets, inplace, moves, _ = layout
    return make_plan("optimal", liveness, alignment, offsets, inplace, moves,
                     time.perf_counter() - t0, status, lower, **search.details)


def _canonical(liveness: Liveness, alignment: int, target: int, deadline: Deadline, widths,
               details: dict):
    """MiniMalloc's canonical search (:mod:`.canonical`) for an arena of ``target`` bytes:
    ``(status, layout or None)``."""
    names = [n for n, lt in liveness.lifetimes.items() if lt.bytes > 0]
    lts = liveness.lifetimes
    status, units, nodes = fits_capacity(
        [lts[n].start for n in names], [lts[n].end for n in names],
        [padded(lts[n].bytes, alignment) // alignment for n in names], target // alignment,
        deadline, None if widths is None else [widths[n] for n in names])
    details.setdefault("canonical", []).append({"target_bytes": target, "status": status,
                                                "nodes": nodes})
    if units is None:
        return status, None
    offsets = {n: 0 for n in lts}
    offsets.update({n: u * alignment for n, u in zip(names, units)})
    arena = max((offsets[n] + padded(lts[n].bytes, alignment) for n in names), default=0)
    return status, (offsets, (), (), arena)


class _Search:
    """CP-SAT runs over one liveness, sharing a deadline."""

    def __init__(self, graph, liveness, alignment, deadline: Deadline, workers, seed):
        self.graph, self.liveness, self.alignment = graph, liveness, alignment
        self.deadline = deadline
        self.workers = workers or max(8, os.cpu_count() or 1)
        self.seed = seed
        self.bound = 0
        self.details: dict = {}

    def run(self, lower: int, upper: int, hint, share, minimize_arena: bool):
        """Solve with ``lower <= A <= upper`` (bytes), minimising ``A`` then the number of
        right shifts (lexicographically: ``A * (M + 1) + shifts`` with ``M`` possible shifts), or
        only the shifts; ``share`` of the time limit (None: all that is left). Returns the
        status and the improving layout found (offsets, in-place steps, moves, arena) or
        None; a minimising run leaves its proven lower bound on ``A`` in ``self.bound``."""
        a = self.alignment
        run_deadline = self.deadline if share is None else self.deadline.share(share)
        built = None if run_deadline.expired() else _build_model(self.liveness, a, lower,
                                                                 upper, run_deadline)
        if built is None or run_deadline.expired():
            self.details.update(solver="cp-sat", solver_status="not run (time limit)")
            return cp_model.UNKNOWN, None
        model, x, arena, shared = built
        moves = [mv for _, _, mv in shared if mv is not None]
        weight = len(moves) + 1
        if minimize_arena:
            model.minimize(weight * arena + sum(moves))
        elif moves:
            model.minimize(sum(moves))
        if hint is not None:
            _add_hint(model, x, arena, shared, hint, a)
        # one deterministic worker first (reproducible plans: a parallel search returns any of
        # the tied optima), the parallel portfolio only when it neither proves nor refutes
        solver, code = self._solve(model, 1, run_deadline.share(DETERMINISTIC_SHARE),
                                   DETERMINISTIC_WORK)
        seconds = self.details.get("solver_seconds", 0.0) + solver.wall_time
        if code not in (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID) \
                and not run_deadline.expired():
            solver, code = self._solve(model, self.workers, run_deadline, None)
            seconds += solver.wall_time
        self.details.update(solver="cp-sat", solver_status=solver.status_name(code),
                            solver_seconds=round(seconds, 6))
        if code == cp_model.MODEL_INVALID:
            raise PlanError(f"{label(self.graph)}: CP-SAT rejects the arena model "
                            f"(a bug in tvm_serenity.alloc.optimal)")
        if minimize_arena:
            objective_bound = math.ceil(solver.best_objective_bound - 1e-6)
            self.bound = -(-(objective_bound - len(moves)) // weight) * a
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return code, None
        found = _extract(solver, x, arena, a, self.liveness, shared)
        better = hint is None or (found[3], len(found[2])) < (hint[3], len(hint[2]))
        return code, (found if better else None)

    def _solve(self, model, workers: int, deadline: Deadline, work: float | None):
        """A CP-SAT run of ``model`` with ``workers`` until ``deadline`` (and, with ``work``,
        that much deterministic time): the solver and its status."""
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = self.seed
        solver.parameters.max_time_in_seconds = max(deadline.remaining(), 0.0)
        if work is not None:
            solver.parameters.max_deterministic_time = work
        return solver, solver.solve(model)


def _add_hint(model, x, arena, shared, layout, alignment) -> None:
    offsets, inplace, moves, arena_bytes = layout
    for n, var in x.items():
        model.add_hint(var, offsets[n] // alignment)
    model.add_hint(arena, arena_bytes // alignment)
    moved = {m.step for m in moves}
    for s, ip, mv in shared:
        model.add_hint(ip, s.pair in inplace and s.pair.step not in moved)
        if mv is not None:
            model.add_hint(mv, s.pair.step in moved)


def _extract(solver, x, arena, alignment, liveness: Liveness, shared):
    offsets = {n: 0 for n in liveness.lifetimes}
    offsets.update({n: solver.value(var) * alignment for n, var in x.items()})
    inplace, moves = [], []
    for s, ip, mv in shared:
        if solver.boolean_value(ip):
            inplace.append(s.pair)
        elif mv is not None and solver.boolean_value(mv):
            inplace.append(s.pair)
            p = offsets[s.pair.input]
            moves.append(Move(s.pair.step, s.pair.input, s.pair.output, p, p + s.gap))
    return offsets, inplace, moves, solver.value(arena) * alignment


def _build_model(liveness: Liveness, alignment: int, lower: int, upper: int,
                 deadline: Deadline):
    """The CP-SAT model with ``lower <= A <= upper`` (bytes; multiples of ``alignment``);
    ``x[t]`` and ``A`` are in units of ``alignment``. None if ``deadline`` passes first."""
    model = cp_model.CpModel()
    lts = liveness.lifetimes
    unit = {n: padded(lt.bytes, alignment) // alignment for n, lt in lts.items()}
    top = upper // alignment
    arena = model.new_int_var(lower // alignment, top, "arena")
    x = {}
    for n in lts:
        if unit[n] > 0:
            x[n] = model.new_int_var(0, top - unit[n], n)
            model.add(x[n] + unit[n] <= arena)
    if deadline.expired():
        return None
    shs = sharings(liveness, alignment)
    steps_of_input = {s.pair.input: s.pair.step for s in shs}
    cliques: list[list] = [[] for _ in range(liveness.num_steps)]
    for n, var in x.items():
        lt = lts[n]
        last = steps_of_input.get(n, lt.end + 1) - 1
        if last >= lt.start:
            interval = model.new_fixed_size_interval_var(var, unit[n], n)
            for k in range(lt.start, last + 1):
                cliques[k].append(interval)
    if deadline.expired():
        return None
    shared = []
    for s in shs:
        u, v, k = s.pair.input, s.pair.output, s.pair.step
        gap, region = s.gap // alignment, s.region // alignment
        ip = model.new_bool_var(f"inplace_{k}")
        model.add(x[u] == x[v] + gap).only_enforce_if(ip)
        share, mv = ip, None
        if gap > 0:
            mv = model.new_bool_var(f"shift_{k}")
            model.add(x[v] == x[u]).only_enforce_if(mv)
            share = model.new_bool_var(f"shared_{k}")
            model.add(ip + mv == share)
            model.add(x[v] + region <= arena).only_enforce_if(mv)
        cliques[k].append(model.new_optional_fixed_size_interval_var(
            x[u], unit[u], ~share, f"{u}@{k}"))
        if region > unit[v]:
            cliques[k].append(model.new_optional_fixed_size_interval_var(
                x[v] + unit[v], region - unit[v], share, f"region_{k}"))
        shared.append((s, ip, mv))
    # One NoOverlap per maximal clique. Live sets are sets of intervals: one contained in a
    # step's far away is contained in every step between, so comparing each run of equal
    # consecutive sets with its two neighbours finds them all (the run's first step stays).
    keys = [frozenset(map(id, c)) for c in cliques]
    k = 0
    while k < len(keys):
        j = k
        while j + 1 < len(keys) and keys[j + 1] == keys[k]:
            j += 1
        dominated = (k > 0 and keys[k] < keys[k - 1]) or (j + 1 < len(keys) and
                                                          keys[k] < keys[j + 1])
        if len(cliques[k]) >= 2 and not dominated:
            model.add_no_overlap(cliques[k])
        k = j + 1
    return model, x, arena, shared
