"""Exact memory-optimal scheduling: dynamic programming over scheduled sets.

The state space (docs/serenity.md)
----------------------------------
A partial schedule's future depends only on the *set* ``done`` of nodes already run: the live
tensors, the bytes they occupy and which nodes may run next are all functions of that set (the
memory model, :class:`~tvm_serenity.memory.MemoryModel`, computes every step from ``done``
alone, in-place execution included). So among all partial schedules reaching the same set only
one with the smallest peak so far needs to be kept: that is SERENITY's dynamic program, with
the set (a bitmask) as the signature. Every peak below comes from ``MemoryModel.step``.

Four searches over that space share :class:`SearchSpace`:

* :func:`level_dp` without pruning is the textbook DP (the paper's Algorithm 1): level ``i``
  holds every set of ``i`` scheduled nodes with its best peak; each is extended by every ready
  node; the single set at the last level carries an optimal order. Cost: every downset of the
  DAG, times its ready nodes.
* :func:`level_dp` with pruning (method ``dp``) keeps only states that can still beat a
  threshold ``limit``:

  - ``f(state) = max(peak so far, h(state))``, maximised along the path, where ``h`` is an
    admissible bound on the peak of any completion: the largest
    :func:`~tvm_serenity.memory.node_bounds` value among the unscheduled nodes (bytes provably
    live while that node runs, in any order), and the bytes live now (no step of a non-empty
    remainder needs less: ``mem_during >= live_before``, in place or not). Each ``h`` on a path
    is at most that path's final peak, so ``f`` is a lower bound on every completion and equals
    the peak at the end. A state with ``f > limit`` is dropped. With ``limit`` = (best
    heuristic peak - 1) an exhausted search proves the heuristic order optimal; with
    ``limit = tau`` it is the soft budget of :mod:`.budget`.
  - *dominance*: when a ready node ``v`` neither raises the peak (``mem_during(v) <= f``) nor
    grows memory (``live_after <= live_before``), only ``v`` is expanded. Exchange argument:
    take any completion and move ``v`` to its front. The bytes ``v`` adds to any later set
    ``S`` (its output minus the inputs it is the last consumer of) can only shrink as ``S``
    grows, so each moved-over step sees no more live bytes than before and keeps any in-place
    chance it had (its first input's other consumers only gain ``v``); ``v``'s own step costs
    at most ``f``, which every completion reaches anyway. The one exception is the very first
    step when unconsumed graph inputs are freed by whichever node runs first; there the rule
    is not applied.

* :func:`best_first` (method ``astar``) explores the same states in increasing ``f`` (ties:
  deepest first, so plateaus are dived through). Since ``f`` never decreases along a path, the
  first time a state is popped its ``f`` is minimal and the first complete state popped is
  optimal. When stopped early, the ``f`` just popped is a lower bound on the optimum
  (everything cheaper was explored).
* :func:`descent` (method ``descent``, the engine of ``serenity``) lowers a budget with the
  decision procedure :func:`feasible` ("is there an order within ``tau``?"), always asking
  for one order strictly better than the best known, until the answer is "no". A budget
  makes dominance much stronger: any ``v`` with ``mem_during(v) <= tau`` that does not grow
  memory may go first (same exchange argument, ``tau`` for ``f``), which collapses most
  interleavings; a set is expanded at most once; a depth-first dive finds better orders fast.
  Only the last decision has to exhaust its space. (A bisection between the bound and the
  best peak needs several exhausting decisions below the optimum: 2-4x more states on the
  zoo cells and on random graphs.)

Searches run on one *segment* of the graph (a set of nodes between a start set and a goal set,
see :mod:`.divide`); the methods here use the whole graph as one segment.
"""

from __future__ import annotations

import heapq
import sys
import time
from dataclasses import dataclass

from tqdm import tqdm

from ..graph import Graph
from ..memory import (Execution, MemoryModel, Step, bits, lower_bound_bytes, node_bounds,
                      simulate)
from . import baselines
from .result import ScheduleResult, make_result
from .stop import Deadline, past

__all__ = ["SearchSpace", "SearchOutcome", "SOLVED", "EXHAUSTED", "TIMEOUT", "level_dp",
           "best_first", "feasible", "descent", "greedy_order", "heuristic_orders",
           "best_heuristic", "show_progress", "bits"]

SOLVED = "solution"        # an order was found (optimal, or within the budget: see each search)
EXHAUSTED = "no solution"  # no order has a peak within the threshold
TIMEOUT = "timeout"        # the deadline hit first

_CLOCK_EVERY = 256         # expansions between deadline checks / progress updates


def show_progress(progress: bool | None) -> bool:
    """Progress bars go to stderr when asked for, or by default when stderr is a terminal."""
    return bool(progress) if progress is not None else sys.stderr.isatty()


class SearchSpace:
    """Scheduling states of one segment: sets ``done`` from ``start`` to ``goal``.

    ``start`` is ``(done, live bytes)`` before the segment (default: the graph inputs); every
    order of the graph reaches the same state there (:mod:`.divide`). A state is ``(done,
    live bytes, ready nodes)``; ``done`` and ``ready`` are bitmasks.
    """

    def __init__(self, model: MemoryModel, segment: int | None = None,
                 start: tuple[int, int] | None = None, bounds: dict[str, int] | None = None):
        self.model = model
        done, live = (model.input_mask, model.initial_live_bytes) if start is None else start
        self.start, self.start_live = done, live
        self.segment = (model.all_mask & ~done) if segment is None else segment
        if done & self.segment:
            raise ValueError("a segment cannot contain nodes of its prefix")
        self.goal = done | self.segment
        self.start_ready = sum(1 << v for v in bits(self.segment)
                               if (model.pred_mask[v] & done) == model.pred_mask[v])
        self._consumers_in_segment = [m & self.segment for m in model.consumer_mask]
        # Graph inputs nobody reads are freed by whichever node runs first: the dominance rule
        # does not hold at that first step.
        self._first_step_frees_inputs = bool(model.dangling)
        bounds = node_bounds(model.graph, model.inplace) if bounds is None else bounds
        # (bound, bit) of the segment's nodes, largest bound first: h() scans for the first
        # unscheduled one.
        self._by_bound = sorted(((bounds[model.names[v]], 1 << v) for v in bits(self.segment)),
                                reverse=True)

    @property
    def size(self) -> int:
        return self.goal.bit_count() - self.start.bit_count()

    def h(self, done: int, live: int) -> int:
        """Admissible bound on the peak of every completion of ``done`` (0 at the goal)."""
        if done == self.goal:
            return 0
        for bound, bit in self._by_bound:
            if not done & bit:
                return max(bound, live)
        return live

    def next_ready(self, ready: int, done_after: int, v: int) -> int:
        """Ready set after running ``v`` (``done_after`` includes ``v``)."""
        ready &= ~(1 << v)
        pred_mask = self.model.pred_mask
        for c in bits(self._consumers_in_segment[v]):
            if (pred_mask[c] & done_after) == pred_mask[c]:
                ready |= 1 << c
        return ready

    def steps(self, done: int, live: int, ready: int, f: int, reached: dict[int, int],
              dominance: bool = True) -> list[tuple[int, Step]]:
        """The moves to explore from a state whose best peak-or-bound is ``f``: every ready
        node, or only a dominating one (module docstring) when ``dominance`` is on.

        A move to a state already ``reached`` (set -> best ``f``) with a value ``<= f`` cannot
        improve it and is left out; if that move dominates, the state needs no expansion at
        all (the state reached covers its best completion).
        """
        step = self.model.step
        moves = []
        dominance = dominance and not (
            self._first_step_frees_inputs and done == self.model.input_mask)
        for v in bits(ready):
            st = step(done, live, v)
            if dominance and st.mem_during <= f and st.live_after <= live:
                known = reached.get(done | (1 << v))
                return [] if known is not None and known <= f else [(v, st)]
            known = reached.get(done | (1 << v))
            if known is None or known > f:
                moves.append((v, st))
        return moves

    def order_names(self, order: list[int]) -> list[str]:
        return [self.model.names[v] for v in order]


@dataclass
class SearchOutcome:
    """What one search over a segment established."""

    status: str                 # SOLVED, EXHAUSTED or TIMEOUT
    order: list[int] | None     # an order of the segment's nodes (SOLVED; TIMEOUT if improved)
    peak: int | None            # its peak
    lower_bound: int            # proven lower bound on the segment's optimal peak (0: none)
    expanded: int               # states expanded
    seconds: float


def _trace(came: dict[int, int], start: int, done: int) -> list[int]:
    order = []
    while done != start:
        v = came[done]
        order.append(v)
        done ^= 1 << v
    order.reverse()
    return order


def _bar(enabled: bool, desc: str, total: int | None = None):
    return tqdm(total=total, desc=desc, unit="state" if total is None else "level",
                file=sys.stderr, disable=not enabled, leave=False, mininterval=0.5)


def level_dp(space: SearchSpace, limit: int | None = None, deadline: float | None = None,
             progress: bool | None = None, *, prune: bool = True) -> SearchOutcome:
    """Level-by-level DP over scheduled sets (``prune=False``: the textbook algorithm).

    With ``prune``, states whose ``f`` exceeds ``limit`` are dropped, bounds feed ``f`` and
    dominated moves are skipped. Without, ``limit`` is ignored and every downset is visited.
    """
    t0 = time.perf_counter()
    if not prune:
        limit = None
    h = space.h if prune else (lambda done, live: 0)
    f0 = h(space.start, space.start_live)
    threshold = None if limit is None else limit + 1     # the lower bound if nothing survives
    if limit is not None and f0 > limit:
        return SearchOutcome(EXHAUSTED, None, None, threshold, 0, time.perf_counter() - t0)
    level = {space.start: (f0, space.start_live, space.start_ready)}
    came: dict[int, int] = {}
    expanded = 0
    with _bar(show_progress(progress), "dp levels", space.size) as bar:
        for _ in range(space.size):
            next_f: dict[int, int] = {}
            next_state: dict[int, tuple[int, int]] = {}     # set -> (live bytes, ready set)
            remaining = len(level)
            for done, (f, live, ready) in level.items():
                if expanded % _CLOCK_EVERY == 0 and past(deadline):
                    pending = [e[0] for e in list(level.values())[len(level) - remaining:]]
                    pending += list(next_f.values())
                    if threshold is not None:
                        pending.append(threshold)
                    lb = min(pending) if pending else f0
                    return SearchOutcome(TIMEOUT, None, None, lb, expanded,
                                         time.perf_counter() - t0)
                expanded += 1
                remaining -= 1
                for v, st in space.steps(done, live, ready, f, next_f, dominance=prune):
                    child = done | (1 << v)
                    fc = max(f, st.mem_during, h(child, st.live_after))
                    if limit is not None and fc > limit:
                        continue
                    known = next_f.get(child)
                    if known is not None and known <= fc:
                        continue
                    next_f[child] = fc
                    next_state[child] = (st.live_after, space.next_ready(ready, child, v))
                    came[child] = v
            level = {c: (fc, *next_state[c]) for c, fc in next_f.items()}
            bar.update(1)
            bar.set_postfix(states=len(level), refresh=False)
            if not level:
                return SearchOutcome(EXHAUSTED, None, None, threshold, expanded,
                                     time.perf_counter() - t0)
    (peak, *_), = level.values()
    return SearchOutcome(SOLVED, _trace(came, space.start, space.goal), peak, peak, expanded,
                         time.perf_counter() - t0)


def best_first(space: SearchSpace, limit: int | None = None, deadline: float | None = None,
               progress: bool | None = None) -> SearchOutcome:
    """A* over scheduled sets with key ``f = max(peak so far, bound)``, dropping ``f > limit``.

    SOLVED: the order is optimal. EXHAUSTED: no order has peak <= ``limit``. TIMEOUT: the
    optimum is at least ``lower_bound``.
    """
    t0 = time.perf_counter()
    f0 = space.h(space.start, space.start_live)
    threshold = None if limit is None else limit + 1
    if limit is not None and f0 > limit:
        return SearchOutcome(EXHAUSTED, None, None, threshold, 0, time.perf_counter() - t0)
    best = {space.start: f0}
    came: dict[int, int] = {}
    heap = [(f0, 0, space.start, space.start_live, space.start_ready)]
    goal, expanded = space.goal, 0
    with _bar(show_progress(progress), "best-first") as bar:
        while heap:
            f, neg_depth, done, live, ready = heapq.heappop(heap)
            if best[done] < f:
                continue                                  # superseded entry
            if done == goal:
                return SearchOutcome(SOLVED, _trace(came, space.start, goal), f, f, expanded,
                                     time.perf_counter() - t0)
            if expanded % _CLOCK_EVERY == 0:
                if past(deadline):
                    return SearchOutcome(TIMEOUT, None, None, f, expanded,
                                         time.perf_counter() - t0)
                bar.update(_CLOCK_EVERY if expanded else 0)
                bar.set_postfix(bound=f, open=len(heap), refresh=False)
            expanded += 1
            for v, st in space.steps(done, live, ready, f, best):
                child = done | (1 << v)
                fc = max(f, st.mem_during, space.h(child, st.live_after))
                if limit is not None and fc > limit:
                    continue
                known = best.get(child)
                if known is not None and known <= fc:
                    continue
                best[child] = fc
                came[child] = v
                heapq.heappush(heap, (fc, neg_depth - 1, child, st.live_after,
                                      space.next_ready(ready, child, v)))
    return SearchOutcome(EXHAUSTED, None, None, threshold, expanded, time.perf_counter() - t0)


def feasible(space: SearchSpace, tau: int, deadline: float | None = None,
             bar: tqdm | None = None) -> SearchOutcome:
    """Decide whether some order of the segment has a peak ``<= tau`` (depth first).

    With a budget the dominance rule gets stronger: a ready node that does not grow memory
    and whose step fits in ``tau`` may run first in *some* order within ``tau`` if any exists
    (the exchange argument of the module docstring with ``tau`` for ``f``). A set visited once
    is never expanded again (whether it completes within ``tau`` does not depend on how it was
    reached). SOLVED: an order within ``tau`` (not necessarily optimal). EXHAUSTED: none
    exists, and ``lower_bound`` is the smallest peak-or-bound that was cut off, which the
    optimum cannot undercut (the same search with any budget below it explores a subset of
    these sets). ``bar``: a progress bar to advance.
    """
    t0 = time.perf_counter()
    f0 = space.h(space.start, space.start_live)
    if f0 > tau:
        return SearchOutcome(EXHAUSTED, None, None, f0, 0, time.perf_counter() - t0)
    visited = {space.start: f0}
    came: dict[int, int] = {}
    stack = [(space.start, space.start_live, space.start_ready, f0)]
    cut_off = None
    expanded = 0
    while stack:
        done, live, ready, f = stack.pop()
        if done == space.goal:
            return SearchOutcome(SOLVED, _trace(came, space.start, done), f, 0, expanded,
                                 time.perf_counter() - t0)
        if expanded % _CLOCK_EVERY == 0:
            if past(deadline):
                return SearchOutcome(TIMEOUT, None, None, 0, expanded, time.perf_counter() - t0)
            if bar is not None and expanded:
                bar.update(_CLOCK_EVERY)
        expanded += 1
        children = []
        for v, st in space.steps(done, live, ready, tau, visited):
            child = done | (1 << v)
            need = max(st.mem_during, space.h(child, st.live_after))
            if need > tau:
                cut_off = need if cut_off is None else min(cut_off, need)
                continue
            children.append((st.mem_during, st.live_after, v, child))
        # Explore the cheapest step first: pushed last, popped first.
        for mem, live_after, v, child in sorted(children, reverse=True):
            visited[child] = max(f, mem)
            came[child] = v
            stack.append((child, live_after, space.next_ready(ready, child, v), max(f, mem)))
    lower = tau + 1 if cut_off is None else cut_off
    return SearchOutcome(EXHAUSTED, None, None, lower, expanded, time.perf_counter() - t0)


def descent(space: SearchSpace, upper_bound: int, deadline: float | None = None,
            progress: bool | None = None) -> tuple[SearchOutcome, list[tuple[int, str]]]:
    """Lower the budget below the best known peak until no order fits: each decision asks
    :func:`feasible` for an order strictly better than the best so far (``tau = best - 1``);
    a "yes" brings one (the depth-first dive usually finds it fast), the final "no" proves the
    best optimal. ``upper_bound`` is the peak of a known order.

    SOLVED: an optimal order. EXHAUSTED: nothing beats ``upper_bound`` (the known order is
    optimal). TIMEOUT: ``order``/``peak`` hold the best order found below ``upper_bound`` (or
    None) and ``lower_bound`` the root bound. Also returns the (budget, outcome) trajectory.
    """
    t0 = time.perf_counter()
    best: tuple[list[int], int] | None = None
    peak = upper_bound
    trajectory: list[tuple[int, str]] = []
    expanded = 0
    with _bar(show_progress(progress), "descent") as bar:
        while True:
            bar.set_postfix(peak=peak, refresh=False)
            outcome = feasible(space, peak - 1, deadline, bar)
            expanded += outcome.expanded
            trajectory.append((peak - 1, outcome.status))
            if outcome.status != SOLVED:
                break
            best = (outcome.order, outcome.peak)
            peak = outcome.peak
    seconds = time.perf_counter() - t0
    if outcome.status == TIMEOUT:
        order = best[0] if best is not None else None
        return (SearchOutcome(TIMEOUT, order, None if best is None else peak,
                              space.h(space.start, space.start_live), expanded, seconds),
                trajectory)
    if best is None:
        return SearchOutcome(EXHAUSTED, None, None, upper_bound, expanded, seconds), trajectory
    return SearchOutcome(SOLVED, best[0], peak, peak, expanded, seconds), trajectory


# ------------------------------------------------------------------------------ incumbents
def greedy_order(graph: Graph, model: MemoryModel | None = None,
                 deadline: float | None = None) -> list[str] | None:
    """Run, at each step, the ready node with the smallest ``mem_during`` (then the smallest
    ``live_after``, then stored order): a cheap upper bound for the exact searches. None if
    ``deadline`` passes first.

    All ready nodes see the same live bytes, so they are ranked by what they add to it; that
    changes only when a node becomes the last reader of one of its inputs. A heap of those
    increments (stale entries skipped) makes this O(edges log n).
    """
    model = model or MemoryModel.of(graph)
    exe = Execution(model)
    missing = [sum(not model.is_input[p] for p in ps) for ps in model.preds]
    ran = list(model.is_input)
    version = [0] * model.n
    heap: list[tuple[int, int, int, int]] = []

    def push(v: int) -> None:
        st = exe.peek(v)
        version[v] += 1
        heapq.heappush(heap, (st.mem_during - exe.live, st.live_after - exe.live, v,
                              version[v]))

    for v in model.op_indices:
        if missing[v] == 0:
            push(v)
    order: list[str] = []
    while heap:
        *_, v, ver = heapq.heappop(heap)
        if ver != version[v]:
            continue
        if len(order) % _CLOCK_EVERY == 0 and past(deadline):
            return None
        exe.run(v)
        ran[v] = True
        order.append(model.names[v])
        if len(order) == 1 and model.dangling:   # they were freed at the first step: re-rank
            for _, _, u, ver_u in list(heap):
                if ver_u == version[u]:
                    push(u)
        for p in model.preds[v]:
            if exe.waiting[p] == 1:   # its one reader left now frees it: re-rank that reader
                c = next(c for c in model.consumers[p] if not ran[c])
                if missing[c] == 0:
                    push(c)
        for c in model.consumers[v]:
            missing[c] -= 1
            if missing[c] == 0:
                push(c)
    return order


def heuristic_orders(graph: Graph, model: MemoryModel,
                     deadline: float | None = None) -> dict[str, list[str]]:
    """The cheap orders whose best peak is the searches' starting upper bound (near linear);
    past ``deadline`` the ones not computed yet are left out (``stored`` always comes), and so
    is an order equal to an earlier one (on a chain they all are: one simulation, not five)."""
    orders = {"stored": baselines.stored_order(graph)}
    for name, make in (("kahn", lambda: baselines.kahn_order(graph)),
                       ("dfs", lambda: baselines.dfs_order(graph)),
                       ("rpo", lambda: baselines.rpo_order(graph)),
                       ("greedy", lambda: greedy_order(graph, model, deadline))):
        order = None if past(deadline) else make()
        if order is not None and order not in orders.values():
            orders[name] = order
    return orders


def best_heuristic(graph: Graph, model: MemoryModel,
                   deadline: float | None = None) -> tuple[str, list[str], int]:
    """(name, order, peak) of the heuristic order with the lowest peak."""
    scored = [(simulate(graph, order, model.inplace, model).peak_bytes, name, order)
              for name, order in heuristic_orders(graph, model, deadline).items()]
    peak, name, order = min(scored, key=lambda s: s[0])
    return name, order, peak


# --------------------------------------------------------------------------------- methods
def run_whole_graph(graph: Graph, method: str, search, inplace: bool,
                    time_limit: Deadline | float | None, progress: bool | None,
                    use_incumbent: bool = True) -> ScheduleResult:
    """Run ``search(space, limit, deadline, progress)`` on the whole graph; fall back to the
    best heuristic order when the search proves it optimal or runs out of time. Bounds,
    heuristics and search all poll one deadline (``time_limit``, :mod:`.stop`)."""
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit).end
    model = MemoryModel.of(graph, inplace)
    bounds = node_bounds(graph, inplace, deadline)
    static_lb = lower_bound_bytes(graph, inplace, bounds=bounds)
    name, incumbent, incumbent_peak = best_heuristic(graph, model, deadline)
    if past(deadline):          # not even time to build the search's bitmasks
        outcome = SearchOutcome(TIMEOUT, None, None, 0, 0, 0.0)
    else:
        space = SearchSpace(model, bounds=bounds)
        limit = incumbent_peak - 1 if use_incumbent else None
        outcome = search(space, limit=limit, deadline=deadline, progress=progress)
    details = {"expanded_states": outcome.expanded, "static_lower_bound_bytes": static_lb}
    if outcome.status == SOLVED:
        order, lb, optimal = space.order_names(outcome.order), outcome.peak, True
    elif outcome.order is not None:          # stopped early with an order better than ours
        order, lb, optimal = space.order_names(outcome.order), outcome.lower_bound, False
        details["timed_out"] = True
    else:
        order, optimal = incumbent, outcome.status == EXHAUSTED
        lb = incumbent_peak if optimal else max(static_lb, outcome.lower_bound)
        details["fallback_order"] = name
        if outcome.status == TIMEOUT:
            details["timed_out"] = True
    return make_result(graph, order, method, time.perf_counter() - t0, inplace,
                       optimal=optimal, lower_bound=lb, **details)


def dp_method(graph: Graph, *, inplace: bool = True, time_limit: Deadline | float | None = None,
              seed: int = 0, progress: bool | None = None) -> ScheduleResult:
    """Level-by-level DP with bound pruning and dominance, whole graph (no splitting)."""
    return run_whole_graph(graph, "dp", level_dp, inplace, time_limit, progress)


def astar_method(graph: Graph, *, inplace: bool = True, time_limit: Deadline | float | None = None,
                 seed: int = 0, progress: bool | None = None) -> ScheduleResult:
    """Best-first (A*) search over scheduled sets, whole graph (no splitting)."""
    return run_whole_graph(graph, "astar", best_first, inplace, time_limit, progress)


def descent_method(graph: Graph, *, inplace: bool = True,
                   time_limit: Deadline | float | None = None,
                   seed: int = 0, progress: bool | None = None) -> ScheduleResult:
    """Budget descent with depth-first decisions (:func:`descent`), whole graph."""
    trajectory: list[tuple[int, str]] = []

    def search(space, limit, deadline, progress):
        outcome, steps = descent(space, limit + 1, deadline, progress)
        trajectory.extend(steps)
        return outcome

    result = run_whole_graph(graph, "descent", search, inplace, time_limit, progress)
    result.details["descent_trajectory"] = [{"tau": t, "outcome": o} for t, o in trajectory]
    return result


def textbook_method(graph: Graph, *, inplace: bool = True,
                    time_limit: Deadline | float | None = None,
                    seed: int = 0, progress: bool | None = None) -> ScheduleResult:
    """The paper's plain level DP: every downset, no bounds, no pruning."""
    def plain(space, limit, deadline, progress):
        return level_dp(space, prune=False, deadline=deadline, progress=progress)
    return run_whole_graph(graph, "textbook", plain, inplace, time_limit, progress,
                           use_incumbent=False)


def greedy_method(graph: Graph, *, inplace: bool = True,
                  time_limit: Deadline | float | None = None, seed: int = 0) -> ScheduleResult:
    """The greedy order (smallest next step first); the searches' usual first upper bound.
    Past the deadline it falls back to the stored order (``details['timed_out']``)."""
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit).end
    order = greedy_order(graph, MemoryModel.of(graph, inplace), deadline)
    details = {} if order is not None else {"timed_out": True, "fallback_order": "stored"}
    return make_result(graph, order or graph.op_names, "greedy", time.perf_counter() - t0,
                       inplace, deadline=deadline, **details)
