"""Divide and conquer, and the ``serenity`` method (the best scheduler in this package).

Cut points
----------
A node ``t`` is a *cut* when every other node is its ancestor or its descendant. Then every
topological order runs all of ``t``'s ancestors, then ``t``, then all of its descendants: the
orders of the graph are exactly the concatenations of an order of the part up to ``t`` and an
order of the part after it. With cuts ``t1 < t2 < ...`` (they are pairwise comparable, so they
form a chain) the graph splits into segments, and every order of the graph is a concatenation
of one order per segment, each segment starting from the same scheduled set in every order.

Why that is exact, in place and all
-----------------------------------
Each step's memory is a function of the scheduled set and the node run
(``MemoryModel.step``). Segments are searched *on the whole graph's model*, starting from the
set "graph inputs + all earlier segments" (the same in every order) and ending when the
segment's nodes are done. A segment's step costs thus include everything live across it: graph
inputs read later, graph outputs produced earlier, tensors whose last reader comes later,
in-place execution (decided by the set, like everything else). Since the choice inside one
segment changes neither the sets nor the costs seen by another, the best peak of the whole is
the max over segments of the best peak of each, reached by concatenating optimal segment
orders. No "single live tensor" condition is needed for this argument (that condition is what
makes a segment schedulable as a separate graph; we never build one), so graph outputs,
multiple graph inputs and in-place nodes at or across a cut are all safe. Nodes that are not
cuts are never used to split.

The ``serenity`` method
-----------------------
1. split at every cut;
2. per segment, the best heuristic order restricted to the segment (any order's restriction is
   a valid segment order, see above) gives the incumbent;
3. the budget descent (:func:`.dp.descent`: budgeted depth-first decisions with the
   budget-strengthened dominance rule, each asking for an order better than the best known,
   searched forwards and backwards in turns) proves the incumbent optimal or finds an optimal
   segment order;
4. if a time limit makes the search stop, adaptive soft budgeting (:mod:`.budget`) gets the rest
   of the segment's time, seeded with the search's lower bound;
5. concatenate. The lower bound is the max of the static cut bound and every segment's proven
   bound, so the result is optimal when the peak segment is, even if another was cut short.

Segments are searched highest incumbent peak first. The graph's optimum is the max over
segments, so a segment whose incumbent is already at or below the bound proven so far cannot
change it: it keeps its incumbent order unsearched (status "within graph bound"). In stacked
networks only the critical cells are searched. Every phase polls the call's one deadline
(:mod:`.stop`): each searched segment gets a share of the remaining time proportional to its
size among the segments still to search, and a segment reached with no time left keeps its
incumbent (status "time limit"). Cuts are found in linear time (:func:`cut_nodes`) and the
heuristics are near-linear, so long graphs (10^5 nodes) get their order within the limit.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass

from ..graph import Graph
from ..memory import MemoryModel, lower_bound_bytes, mask_of_indices, node_bounds, simulate
from .budget import soft_budgeting, step_timeout_for
from .dp import EXHAUSTED, SOLVED, SearchSpace, descent, heuristic_orders
from .result import ScheduleResult, make_result
from .stop import Deadline, past

__all__ = ["cut_nodes", "segments", "SegmentResult", "serenity_method"]



def cut_nodes(model: MemoryModel) -> list[int]:
    """Non-input nodes comparable with every non-input node, in execution order (they form a
    chain, so topological order is the order every schedule runs them in). Linear time.

    Stored order is topological, so an op ``v`` at position ``i`` among the ops is a cut iff
    every op before it is an ancestor and every op after it a descendant. The first holds iff
    every op before ``i`` has a consumer at a position ``<= i`` (induction downwards from
    ``i - 1``: its consumer there is ``v`` or an ancestor of ``v``), the second iff every op
    after ``i`` has an input at a position ``>= i``; running maxima and minima check both.
    """
    ops = model.op_indices
    position = {v: i for i, v in enumerate(ops)}
    count = len(ops)
    first_reader = [min((position[c] for c in model.consumers[v]), default=count) for v in ops]
    last_input = [max((position[p] for p in model.preds[v] if p in position), default=-1)
                  for v in ops]
    after_ok = [True] * count          # after_ok[i]: every op after i reads one at >= i
    lowest = count
    for i in range(count - 1, -1, -1):
        after_ok[i] = lowest >= i
        lowest = min(lowest, last_input[i])
    cuts, reach = [], -1               # reach: the highest first reader among ops before i
    for i, v in enumerate(ops):
        if reach <= i and after_ok[i]:
            cuts.append(v)
        reach = max(reach, first_reader[i])
    return cuts


def segments(model: MemoryModel) -> list[list[int]]:
    """The ops between consecutive cuts (a cut ends its segment), in execution order: stored
    order, as every cut's ancestors are exactly the ops stored before it. Their union is every
    non-input node."""
    cuts = set(cut_nodes(model))
    result, current = [], []
    for v in model.op_indices:
        current.append(v)
        if v in cuts:
            result.append(current)
            current = []
    if current:
        result.append(current)
    return result


@dataclass
class SegmentResult:
    nodes: int
    order: list[int]
    peak: int
    lower_bound: int
    status: str             # "optimal", "incumbent optimal" (the search proved it),
    #                         "within graph bound" (not searched: it cannot raise the peak),
    #                         or "time limit"
    search: str             # which searches ran
    expanded: int
    seconds: float
    budget_trajectory: list | None = None

    def to_json(self) -> dict:
        obj = {"nodes": self.nodes, "peak_bytes": self.peak, "lower_bound_bytes": self.lower_bound,
               "status": self.status, "search": self.search, "expanded_states": self.expanded,
               "seconds": round(self.seconds, 4)}
        if self.budget_trajectory is not None:
            obj["budget_trajectory"] = self.budget_trajectory
        return obj


def _solve_segment(space: SearchSpace, incumbent: list[int], incumbent_peak: int,
                   deadline: float | None, step_timeout: float | None,
                   progress: bool | None) -> SegmentResult:
    t0 = time.perf_counter()
    search_deadline = None if deadline is None else t0 + (deadline - t0) / 2
    found, _ = descent(space, incumbent_peak, search_deadline, progress)
    expanded = found.expanded
    if found.status == SOLVED:
        return SegmentResult(space.size, found.order, found.peak, found.peak, "optimal",
                             "descent", expanded, time.perf_counter() - t0)
    if found.status == EXHAUSTED:
        return SegmentResult(space.size, incumbent, incumbent_peak, incumbent_peak,
                             "incumbent optimal", "descent", expanded,
                             time.perf_counter() - t0)
    if found.order is not None:                      # stopped, but with a better order
        incumbent, incumbent_peak = found.order, found.peak
    remaining = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
    budgeted, steps = soft_budgeting(space, incumbent_peak,
                                     step_timeout_for(remaining, step_timeout), deadline,
                                     found.lower_bound, progress)
    expanded += budgeted.expanded
    record = [s.to_json() for s in steps]
    if budgeted.status == SOLVED:
        return SegmentResult(space.size, budgeted.order, budgeted.peak, budgeted.peak,
                             "optimal", "descent+budget", expanded,
                             time.perf_counter() - t0, record)
    return SegmentResult(space.size, incumbent, incumbent_peak,
                         max(found.lower_bound, budgeted.lower_bound), "time limit",
                         "descent+budget", expanded, time.perf_counter() - t0, record)


def serenity_method(graph: Graph, *, inplace: bool = True,
                    time_limit: Deadline | float | None = None, seed: int = 0,
                    progress: bool | None = None,
                    step_timeout: float | None = None) -> ScheduleResult:
    """Divide and conquer + budget descent + soft budgeting fallback (module docstring).

    ``step_timeout`` is the soft budgeting ``T`` (:func:`.budget.step_timeout_for`)."""
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit).end
    model = MemoryModel.of(graph, inplace)
    bounds = node_bounds(graph, inplace, deadline)
    static_lb = lower_bound_bytes(graph, inplace, bounds=bounds)
    parts = segments(model)
    heuristics = [simulate(graph, order, inplace, model)
                  for order in heuristic_orders(graph, model, deadline).values()]
    # Segment k occupies the same positions in every order, and starts from the same state.
    offsets, start = [], 0
    for seg in parts:
        offsets.append(start)
        start += len(seg)
    incumbents = []
    for seg, off in zip(parts, offsets):
        end = off + len(seg)
        best = min(heuristics, key=lambda sim: max(sim.step_bytes[off:end]))
        incumbents.append(([model.index[x] for x in best.order[off:end]],
                           max(best.step_bytes[off:end])))
    solved: dict[int, SegmentResult] = {}
    lower = static_lb
    # Highest incumbent first: once its optimum is proven, a segment whose incumbent does not
    # exceed the proven bound cannot change the graph's optimum and is not searched.
    queue = sorted(range(len(parts)), key=lambda k: incumbents[k][1], reverse=True)
    # Time shares: the segments still to search are those left in the queue whose incumbent
    # exceeds the bound (a prefix of it, as incumbents decrease and the bound only grows).
    neg_peaks = [-incumbents[k][1] for k in queue]
    searched_before = list(itertools.accumulate(
        (len(parts[k]) if len(parts[k]) > 1 else 0 for k in queue), initial=0))
    for position, k in enumerate(queue):
        order, peak = incumbents[k]
        if len(order) == 1:                          # its only order: optimal
            solved[k] = SegmentResult(1, order, peak, peak, "optimal", "none", 0, 0.0)
            lower = max(lower, peak)
            continue
        if peak <= lower:
            bound = max(bounds[model.names[v]] for v in order)
            solved[k] = SegmentResult(len(order), order, peak, bound, "within graph bound",
                                      "none", 0, 0.0)
            continue
        now = time.perf_counter()
        rest = searched_before[bisect.bisect_left(neg_peaks, -lower)] - searched_before[position]
        seg_deadline = now + max(0.0, deadline - now) * len(order) / rest
        if past(seg_deadline):
            solved[k] = SegmentResult(len(order), order, peak,
                                      max(bounds[model.names[v]] for v in order),
                                      "time limit", "none", 0, 0.0)
            continue
        first = parts[k][0]
        before = model.input_mask | ((1 << first) - 1)   # every node stored before the segment
        live = heuristics[0].live_after_bytes[offsets[k] - 1] if offsets[k] \
            else model.initial_live_bytes
        space = SearchSpace(model, mask_of_indices(parts[k]), (before, live), bounds)
        solved[k] = _solve_segment(space, order, peak, seg_deadline, step_timeout, progress)
        lower = max(lower, solved[k].lower_bound)
    order = [model.names[v] for k in range(len(parts)) for v in solved[k].order]
    results = [solved[k] for k in range(len(parts))]
    details = {"segments": len(parts), "largest_segment": max(s.nodes for s in results),
               "expanded_states": sum(s.expanded for s in results),
               "static_lower_bound_bytes": static_lb,
               "segment_results": [s.to_json() for s in results if s.nodes > 1]}
    if any(s.status == "time limit" for s in results):
        details["timed_out"] = True
    return make_result(graph, order, "serenity", time.perf_counter() - t0, inplace,
                       lower_bound=lower, **details)
