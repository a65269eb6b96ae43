"""Optimal arena offsets for one order: CP-SAT, warm-started, with in-place placements decided
jointly, and a proven gap when it stops early.

Model (OR-Tools CP-SAT). One integer offset ``x_t`` per tensor with bytes (zero-byte tensors sit
at 0 and occupy nothing), the arena ``A`` to minimise, ``x_t + padded(t) <= A``. Time is the
order's steps; a tensor occupies ``[x_t, x_t + padded(t))`` over its lifetime. Two tensors need
disjoint addresses only if their lifetimes overlap, and the overlap relation of intervals is an
interval graph whose maximal cliques are the live sets of single steps: one ``NoOverlap`` per
step whose live set is not contained in a neighbouring step's covers exactly the overlapping
pairs, with CP-SAT's energetic propagation over each step.

In-place step ``(k, u, v)`` with ``gap`` and ``region`` (:mod:`tvm_serenity.alloc.plan`): ``u``'s
interval covers its lifetime up to step ``k - 1`` only, and at step ``k`` one of three layouts:

* in place (literal ``ip``): ``x_u = x_v + gap``; at step ``k`` the pair fills ``[x_v, x_v +
  region)``;
* right shift (literal ``mv``, only if ``gap > 0``): ``x_v = x_u``, ``u`` memmoved to ``x_u +
  gap`` before the step; at step ``k`` the pair again fills ``[x_v, x_v + region)``;
* disjoint (neither): ``u`` keeps ``[x_u, x_u + padded(u))`` at step ``k`` and ``v`` avoids it.

At step ``k`` the clique holds ``v``'s interval, an optional interval for ``u`` (present when
disjoint) and an optional interval ``[x_v + padded(v), x_v + region)`` (present when shared).

Search. The best heuristic plan (greedy, bestfit) is both the upper bound (``A <= its arena``)
and the solution hint; the lower bound is :func:`~tvm_serenity.alloc.plan.lower_bound_bytes`.
If the heuristic already meets the lower bound it is optimal and the solver is not called for
the arena. The result is never worse than the heuristic; when the time limit stops the solver,
``gap`` is the proven gap to the best of the solver's bound and the lower bound. Optimality is
over the plans described here (in-place steps laid out in place, right-shifted or disjoint).
A second phase (only when the plan has right shifts, within the same time limit) keeps the
arena and minimises the number of shifts, since each one is a memmove at run time.
"""

from __future__ import annotations

import math
import os
import time

from ortools.sat.python import cp_model

from ..graph import Graph
from ..memory import Liveness
from .heuristics import plan_bestfit, plan_greedy
from .plan import ArenaPlan, Move, PlanError, lower_bound_bytes, make_plan, padded, sharings

__all__ = ["plan_optimal", "DEFAULT_TIME_LIMIT"]

DEFAULT_TIME_LIMIT = 5.0


def plan_optimal(graph: Graph, liveness: Liveness, alignment: int = 1, *,
                 time_limit: float | None = DEFAULT_TIME_LIMIT, workers: int | None = None,
                 seed: int = 0) -> ArenaPlan:
    """Minimise the arena, then (same arena) the number of right shifts."""
    t0 = time.perf_counter()
    candidates = [plan_greedy(graph, liveness, alignment), plan_bestfit(graph, liveness, alignment)]
    best = min(candidates, key=lambda p: (p.arena_bytes, p.num_moves))
    lower = lower_bound_bytes(liveness, alignment)
    details = {"warm_start": best.planner, "warm_start_bytes": best.arena_bytes}
    layout = (best.offsets, best.inplace, best.moves, best.arena_bytes)
    status, bound = "bound", lower
    if best.arena_bytes > lower or best.moves:
        model, x, arena, shared = _build_model(liveness, alignment, best.arena_bytes, lower)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers or max(8, os.cpu_count() or 1)
        solver.parameters.random_seed = seed
        deadline = None if time_limit is None else time.perf_counter() + float(time_limit)
        details.update(solver="cp-sat", solver_seconds=0.0)
        if best.arena_bytes > lower:
            model.minimize(arena)
            code = _solve(graph, solver, model, x, arena, shared, layout, alignment, deadline,
                          details)
            bound = max(lower, math.ceil(solver.best_objective_bound - 1e-6) * alignment)
            status = "optimal" if code == cp_model.OPTIMAL else "time_limit"
            if code != cp_model.UNKNOWN and solver.value(arena) * alignment < best.arena_bytes:
                layout = _extract(solver, x, arena, alignment, liveness, shared)
        if layout[2] and (deadline is None or time.perf_counter() < deadline):
            model.add(arena == layout[3] // alignment)
            model.minimize(sum(mv for _, _, mv in shared if mv is not None))
            code = _solve(graph, solver, model, x, arena, shared, layout, alignment, deadline,
                          details)
            if code != cp_model.UNKNOWN and solver.objective_value < len(layout[2]):
                layout = _extract(solver, x, arena, alignment, liveness, shared)
    offsets, inplace, moves, _ = layout
    return make_plan("optimal", liveness, alignment, offsets, inplace, moves,
                     time.perf_counter() - t0, status, bound, **details)


def _solve(graph, solver, model, x, arena, shared, layout, alignment, deadline,
           details) -> int:
    """Solve ``model`` hinted with ``layout`` (offsets, in-place steps, moves, arena)."""
    offsets, inplace, moves, arena_bytes = layout
    model.clear_hints()
    for n, var in x.items():
        model.add_hint(var, offsets[n] // alignment)
    model.add_hint(arena, arena_bytes // alignment)
    moved = {m.step for m in moves}
    for s, ip, mv in shared:
        model.add_hint(ip, s.pair in inplace and s.pair.step not in moved)
        if mv is not None:
            model.add_hint(mv, s.pair.step in moved)
    if deadline is not None:
        solver.parameters.max_time_in_seconds = max(0.0, deadline - time.perf_counter())
    code = solver.solve(model)
    details["solver_status"] = solver.status_name(code)
    details["solver_seconds"] = round(details["solver_seconds"] + solver.wall_time, 6)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        raise PlanError(f"graph '{graph.name}': CP-SAT reports the arena model "
                        f"{solver.status_name(code)} although the hinted plan satisfies it "
                        f"(a bug in tvm_serenity.alloc.optimal)")
    return code


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


def _build_model(liveness: Liveness, alignment: int, upper: int, lower: int):
    """The CP-SAT model in units of ``alignment`` (every padded size, gap, region and bound is
    a multiple of it): ``x[t]``, ``arena`` and the returned values are in units."""
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
    keys = [frozenset(map(id, c)) for c in cliques]
    for k, clique in enumerate(cliques):
        dominated = any(keys[k] < keys[j] or (j < k and keys[k] == keys[j])
                        for j in range(len(keys)))
        if len(clique) >= 2 and not dominated:
            model.add_no_overlap(clique)
    return model, x, arena, shared
