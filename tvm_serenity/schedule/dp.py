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
* Each decision searches both ways at once: forwards from the start and backwards from the
  goal (:class:`ReverseSpace`: the same sets and step costs, unrunning the last node of a
  prefix, with the mirrored dominance rule), in turns; the first to finish answers. Which
  sets are reachable within a budget differs wildly between the two: a RandWire cell (many
  sources fed by one input, sinks summed in a fixed order) is wide at its start and narrow at
  its end: proving seed 16's optimum (WS(32, 4)) expands 331k sets forwards and 8k
  backwards, while on other cells forwards wins. Taking turns costs at most twice the better
  direction.

Searches run on one *segment* of the graph (a set of nodes between a start set and a goal set,
see :mod:`.divide`); the methods here use the whole graph as one segment.
"""

from __future__ import annotations

import heapq
import sys
import time
from dataclasses import dataclass
from functools import cached_property

from tqdm import tqdm

from ..graph import Graph
from ..memory import (Execution, MemoryModel, bits, lower_bound_bytes, mask_of_indices,
                      node_bounds, simulate)
from . import baselines
from .result import ScheduleResult, make_result
from .stop import Deadline, past

__all__ = ["SearchSpace", "ReverseSpace", "SearchOutcome", "SOLVED", "EXHAUSTED", "TIMEOUT",
           "MEET", "FORWARD", "BACKWARD", "level_dp", "best_first", "feasible", "descent",
           "greedy_order", "heuristic_orders", "best_heuristic", "show_progress", "bits"]

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
        # What a step of v depends on besides v: which other readers of v's inputs have run.
        self._readers_of_inputs = [0] * model.n
        for v in bits(self.segment):
            for p in model.preds[v]:
                self._readers_of_inputs[v] |= model.consumer_mask[p]
            self._readers_of_inputs[v] &= ~(1 << v)
        self._increments: dict[tuple[int, int], tuple[int, int]] = {}

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

    def increments(self, done: int, v: int) -> tuple[int, int]:
        """``(mem_during, live_after)`` of running ready node ``v`` after ``done`` from 0 live
        bytes (``MemoryModel.step``): what the step adds to the live bytes before it, which
        depends only on which of ``v``'s inputs have no other reader left (cached by that;
        the very first step of an order, which frees unread graph inputs, is not cached)."""
        model = self.model
        if done == model.input_mask:
            st = model.step(done, 0, v)
            return st.mem_during, st.live_after
        key = (v, done & self._readers_of_inputs[v])
        known = self._increments.get(key)
        if known is None:
            st = model.step(done, 0, v)
            known = self._increments[key] = (st.mem_during, st.live_after)
        return known

    def next_ready(self, ready: int, done_after: int, v: int) -> int:
        """Ready set after running ``v`` (``done_after`` includes ``v``)."""
        ready &= ~(1 << v)
        pred_mask = self.model.pred_mask
        for c in bits(self._consumers_in_segment[v]):
            if (pred_mask[c] & done_after) == pred_mask[c]:
                ready |= 1 << c
        return ready

    def steps(self, done: int, live: int, ready: int, f: int, reached: dict[int, int],
              dominance: bool = True) -> list[tuple[int, int, int]]:
        """The moves ``(v, mem_during, live_after)`` to explore from a state whose best
        peak-or-bound is ``f``: every ready node, or only a dominating one (module docstring)
        when ``dominance`` is on.

        A move to a state already ``reached`` (set -> best ``f``) with a value ``<= f`` cannot
        improve it and is left out; if that move dominates, the state needs no expansion at
        all (the state reached covers its best completion).
        """
        increments = self.increments
        moves = []
        dominance = dominance and not (
            self._first_step_frees_inputs and done == self.model.input_mask)
        for v in bits(ready):
            mem, after = increments(done, v)
            mem, after = live + mem, live + after
            known = reached.get(done | (1 << v))
            if dominance and mem <= f and after <= live:
                return [] if known is not None and known <= f else [(v, mem, after)]
            if known is None or known > f:
                moves.append((v, mem, after))
        return moves

    # The interface of the budgeted depth-first search (:func:`feasible`), shared with
    # :class:`ReverseSpace`: a root state, a final set, bounded moves.
    @property
    def root(self) -> tuple[int, int, int]:
        return self.start, self.start_live, self.start_ready

    @property
    def final(self) -> int:
        return self.goal

    next_frontier = next_ready

    def children(self, done: int, live: int, ready: int, tau: int,
                 visited: dict[int, int]) -> tuple[list[tuple[int, int, int, int]], int | None]:
        """``(mem_during, live after, v, child set)`` of every move from ``done`` that can
        still complete within ``tau`` (the dominating one alone, see :meth:`steps`; none to an
        already ``visited`` set), and the smallest peak-or-bound of a move cut off (or None).
        """
        moves, cut = [], None
        for v, mem, after in self.steps(done, live, ready, tau, visited):
            child = done | (1 << v)
            need = max(mem, self.h(child, after))
            if need > tau:
                cut = need if cut is None else min(cut, need)
            else:
                moves.append((mem, after, v, child))
        return moves, cut

    @cached_property
    def reverse(self) -> "ReverseSpace":
        """The same segment searched from its goal back to its start."""
        return ReverseSpace(self)

    def peak_of(self, order: list[int]) -> int:
        """The peak of running ``order`` (the segment's nodes) from the start."""
        done, live, peak = self.start, self.start_live, 0
        for v in order:
            st = self.model.step(done, live, v)
            peak, live = max(peak, st.mem_during), st.live_after
            done |= 1 << v
        return peak

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
                for v, mem, after in space.steps(done, live, ready, f, next_f,
                                                 dominance=prune):
                    child = done | (1 << v)
                    fc = max(f, mem, h(child, after))
                    if limit is not None and fc > limit:
                        continue
                    known = next_f.get(child)
                    if known is not None and known <= fc:
                        continue
                    next_f[child] = fc
                    next_state[child] = (after, space.next_ready(ready, child, v))
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
            for v, mem, after in space.steps(done, live, ready, f, best):
                child = done | (1 << v)
                fc = max(f, mem, space.h(child, after))
                if limit is not None and fc > limit:
                    continue
                known = best.get(child)
                if known is not None and known <= fc:
                    continue
                best[child] = fc
                came[child] = v
                heapq.heappush(heap, (fc, neg_depth - 1, child, after,
                                      space.next_ready(ready, child, v)))
    return SearchOutcome(EXHAUSTED, None, None, threshold, expanded, time.perf_counter() - t0)


class ReverseSpace:
    """The segment of a :class:`SearchSpace` searched backwards, from its goal to its start.

    A state is again a scheduled set ``done`` with its live bytes, now read as "every node of
    the segment outside ``done`` runs at the end, in the order found so far"; a move *unruns*
    a node ``v`` of ``done`` that no node of ``done`` reads (``removable``), i.e. puts it just
    before that suffix. Its cost is the forward step ``MemoryModel.step(done - v, ., v)``: that
    step's increments do not depend on the live bytes before it, so ``step(done - v, 0, v)``
    gives them and ``live(done - v) = live(done) - increment``. The live set of a scheduled
    set is the same whichever way it is reached, so both directions search the same sets with
    the same step costs; only which sets are reachable within a budget differs, often by
    orders of magnitude (a graph with many sources and one sink chain is wide forwards and
    narrow backwards, or the other way round).

    * Bound: the prefix still to run (``done``'s segment nodes) needs every one of their
      :func:`~tvm_serenity.memory.node_bounds`, and its last step at least ``live(done)``
      (a step's ``mem_during`` is never below its ``live_after``: an in-place workspace holds
      at least the output, :class:`~tvm_serenity.graph.Graph` checks it).
    * Dominance, mirrored: a removable ``v`` whose step fits the budget and whose unrunning
      does not grow memory (``live(done - v) <= live(done)``) may be the last node of the
      prefix. Exchange argument: move ``v`` from its place in any order of the prefix to its
      end; every step it moves over sees the set without ``v``, whose live bytes are those
      with ``v`` plus ``v``'s unrunning increment, which is at most the increment at ``done``
      (fewer inputs of ``v`` have all their readers in a smaller set). That step's own cost
      rises only if it is an in-place node ``x`` whose first input ``u`` is also read by
      ``v``: ``x`` stops being ``u``'s last reader and loses at most ``bytes(u)`` of saving
      (its workspace holds at least its output). But then ``u`` has all its readers in
      ``done`` and not in the smaller set, so ``u`` counts in ``v``'s increment at ``done``
      and not in the one at that step: the loss is covered, and the step still costs no more
      than before. The rule is not applied when unconsumed graph inputs are freed by
      whichever node runs first (moving ``v`` would change which step frees them).
    """

    def __init__(self, space: SearchSpace):
        self.forward = space
        model = self.model = space.model
        self.goal, self.start = space.goal, space.start
        done, live = space.start, space.start_live
        for v in bits(space.segment):              # stored order is topological
            live = model.step(done, live, v).live_after
            done |= 1 << v
        self.goal_live = live
        in_segment = space.segment
        self.goal_removable = sum(1 << v for v in bits(in_segment)
                                  if not model.consumer_mask[v] & self.goal)
        self._preds_in_segment = [mask_of_indices(p for p in ps if (in_segment >> p) & 1)
                                  for ps in model.preds]
        # Unread graph inputs are freed by the first step of an order: if it is in this
        # segment, which node runs first matters (the dominance rule is not applied).
        self._dominance = not (model.dangling and space.start == model.input_mask)

    @property
    def root(self) -> tuple[int, int, int]:
        return self.goal, self.goal_live, self.goal_removable

    @property
    def final(self) -> int:
        return self.start

    def h(self, done: int, live: int) -> int:
        """Admissible bound on the peak of every order of the prefix ``done`` (0 if empty)."""
        if done == self.start:
            return 0
        for bound, bit in self.forward._by_bound:
            if done & bit:
                return max(bound, live)
        return live

    def next_frontier(self, removable: int, done_after: int, v: int) -> int:
        """Removable set once ``v`` is unrun (``done_after`` lacks ``v``)."""
        removable &= ~(1 << v)
        cmask = self.model.consumer_mask
        for p in bits(self._preds_in_segment[v]):
            if not cmask[p] & done_after:
                removable |= 1 << p
        return removable

    def children(self, done: int, live: int, removable: int, tau: int,
                 visited: dict[int, int]) -> tuple[list[tuple[int, int, int, int]], int | None]:
        """Moves within ``tau`` from ``done`` (see :meth:`SearchSpace.children`)."""
        increments = self.forward.increments
        dominance = self._dominance
        moves, cut = [], None
        for v in bits(removable):
            before = done ^ (1 << v)
            mem, after = increments(before, v)
            live_before = live - after
            mem += live_before
            dominant = dominance and live_before <= live and mem <= tau
            if before in visited:
                if dominant:
                    return [], None
                continue
            need = max(mem, self.h(before, live_before))
            if dominant:
                return ([], need) if need > tau else ([(mem, live_before, v, before)], None)
            if need > tau:
                cut = need if cut is None else min(cut, need)
            else:
                moves.append((mem, live_before, v, before))
        return moves, cut

    def order(self, came: dict[int, int], done: int) -> list[int]:
        """The nodes unrun on the way from the goal to ``done``, in execution order."""
        order = []
        while done != self.goal:
            v = came[done]
            order.append(v)
            done |= 1 << v
        return order


MEET = "meet"              # a budgeted search reached a set the other direction reached


class _Budgeted:
    """One depth-first budgeted search of :func:`feasible`, in one direction."""

    def __init__(self, side, tau: int):
        self.side, self.tau = side, tau
        self.visited: dict[int, int] = {}      # set -> peak of the path that reached it
        self.came: dict[int, int] = {}         # set -> the node moved to reach it
        self.cut_off: int | None = None        # smallest peak-or-bound cut off
        self.expanded = 0
        self.end: int | None = None            # the final set, or the meeting set

    def run(self, other: "_Budgeted | None"):
        """A generator yielding every ``_CLOCK_EVERY`` expansions; returns SOLVED,
        EXHAUSTED or MEET (``end`` was reached by ``other`` too)."""
        side, tau, visited, came = self.side, self.tau, self.visited, self.came
        done, live, frontier = side.root
        f0 = side.h(done, live)
        if f0 > tau:
            self.cut_off = f0
            return EXHAUSTED
        visited[done] = f0
        stack = [(done, live, frontier, f0)]
        final = side.final
        meet = None if other is None else other.visited
        while stack:
            done, live, frontier, f = stack.pop()
            if done == final:
                self.end = done
                return SOLVED
            if self.expanded % _CLOCK_EVERY == 0 and self.expanded:
                yield
            self.expanded += 1
            children, cut = side.children(done, live, frontier, tau, visited)
            if cut is not None and (self.cut_off is None or cut < self.cut_off):
                self.cut_off = cut
            # Explore the cheapest step first: pushed last, popped first.
            for mem, live_after, v, child in sorted(children, reverse=True):
                visited[child] = max(f, mem)
                came[child] = v
                if meet is not None and child in meet:
                    self.end = child
                    return MEET
                stack.append((child, live_after, side.next_frontier(frontier, child, v),
                              max(f, mem)))
        return EXHAUSTED


FORWARD, BACKWARD = "forward", "backward"


def feasible(space: SearchSpace, tau: int, deadline: float | None = None,
             bar: tqdm | None = None,
             directions: tuple[str, ...] = (FORWARD, BACKWARD)) -> SearchOutcome:
    """Decide whether some order of the segment has a peak ``<= tau``.

    Two depth-first searches, forwards from the start (:meth:`SearchSpace.children`) and
    backwards from the goal (:class:`ReverseSpace`), take turns of ``_CLOCK_EVERY``
    expansions; the first to finish answers (so the cost is about twice that of the better
    direction, whichever it is), and an order is also found when one search reaches a set the
    other reached (its prefix from one, its suffix from the other). ``directions`` restricts
    to one of them.

    With a budget the dominance rule gets stronger: a ready node that does not grow memory
    and whose step fits in ``tau`` may run first in *some* order within ``tau`` if any exists
    (the exchange argument of the module docstring with ``tau`` for ``f``; its mirror image
    backwards). A set visited once is never expanded again (whether it completes within
    ``tau`` does not depend on how it was reached). SOLVED: an order within ``tau`` (not
    necessarily optimal). EXHAUSTED: none exists, and ``lower_bound`` is the smallest
    peak-or-bound the exhausted search cut off, which the optimum cannot undercut (follow an
    optimal order along that search's choices, dominance moves included: it stays within its
    peak until a cut child, whose bound is therefore at most the optimum). ``bar``: a
    progress bar to advance.
    """
    t0 = time.perf_counter()
    sides = {FORWARD: space, BACKWARD: space.reverse}
    searches = [_Budgeted(sides[d], tau) for d in directions]
    other = {id(s): (searches[1 - k] if len(searches) == 2 else None)
             for k, s in enumerate(searches)}
    runs = [(s, s.run(other[id(s)])) for s in searches]
    while True:
        for search, run in runs:
            try:
                next(run)
            except StopIteration as stop:
                return _answer(space, searches, search, stop.value, time.perf_counter() - t0)
        if past(deadline):
            return SearchOutcome(TIMEOUT, None, None, 0, sum(s.expanded for s in searches),
                                 time.perf_counter() - t0)
        if bar is not None:
            bar.update(_CLOCK_EVERY * len(runs))


def _answer(space: SearchSpace, searches: list[_Budgeted], search: _Budgeted, status: str,
            seconds: float) -> SearchOutcome:
    expanded = sum(s.expanded for s in searches)
    if status == EXHAUSTED:
        lower = search.tau + 1 if search.cut_off is None else search.cut_off
        return SearchOutcome(EXHAUSTED, None, None, lower, expanded, seconds)
    ahead = {s.side is space: s for s in searches}
    forward, backward = ahead.get(True), ahead.get(False)
    end = search.end
    prefix = [] if forward is None else _trace(forward.came, space.start, end)
    suffix = [] if backward is None else space.reverse.order(backward.came, end)
    order = prefix + suffix
    return SearchOutcome(SOLVED, order, space.peak_of(order), 0, expanded, seconds)


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
