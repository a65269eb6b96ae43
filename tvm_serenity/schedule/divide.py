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
   budget-strengthened dominance rule, each asking for an order better than the best known)
   proves the incumbent optimal or finds an optimal segment order;
4. if a time limit makes the search stop, adaptive soft budgeting (:mod:`.budget`) gets the rest
   of the segment's time, seeded with the search's lower bound;
5. concatenate. The lower bound is the max of the static cut bound and every segment's proven
   bound, so the result is optimal when the peak segment is, even if another was cut short.

Segments are searched highest incumbent peak first. The graph's optimum is the max over
segments, so a segment whose incumbent is already at or below the bound proven so far cannot
change it: it keeps its incumbent order unsearched (status "within graph bound"). In stacked
networks only the critical cells are searched. Under a time limit, each searched segment gets
a share of the remaining time proportional to its size among the segments still to search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..graph import Graph
from ..memory import (MemoryModel, ancestors_descendants, bits, lower_bound_bytes,
                      node_bounds, simulate)
from .budget import soft_budgeting, step_timeout_for
from .dp import EXHAUSTED, SOLVED, SearchSpace, descent, heuristic_orders
from .result import ScheduleResult, make_result

__all__ = ["cut_nodes", "segments", "SegmentResult", "serenity_method"]



def cut_nodes(model: MemoryModel, relations=None) -> list[int]:
    """Non-input nodes comparable with every non-input node, in execution order (they form a
    chain, so topological order is the order every schedule runs them in). ``relations``:
    :func:`ancestors_descendants` of the model, when already computed."""
    ops = model.all_mask & ~model.input_mask
    topo, anc, desc = relations or ancestors_descendants(model)
    return [v for v in topo
            if (ops >> v) & 1 and (ops & ~(anc[v] | desc[v] | (1 << v))) == 0]


def segments(model: MemoryModel) -> list[int]:
    """Bitmasks of the segments between consecutive cuts, in execution order (a cut ends its
    segment); their union is every non-input node."""
    ops = model.all_mask & ~model.input_mask
    relations = ancestors_descendants(model)
    anc = relations[1]
    result, before = [], 0
    for t in cut_nodes(model, relations):
        upto = (anc[t] | (1 << t)) & ops      # t and its ancestors
        result.append(upto & ~before)
        before = upto
    if ops & ~before:
        result.append(ops & ~before)
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


def serenity_method(graph: Graph, *, inplace: bool = True, time_limit: float | None = None,
                    seed: int = 0, progress: bool | None = None,
                    step_timeout: float | None = None) -> ScheduleResult:
    """Divide and conquer + budget descent + soft budgeting fallback (module docstring).

    ``step_timeout`` is the soft budgeting ``T`` (:func:`.budget.step_timeout_for`)."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    model = MemoryModel(graph, inplace)
    bounds = node_bounds(graph, inplace)
    static_lb = lower_bound_bytes(graph, inplace)
    parts = segments(model)
    heuristics = [simulate(graph, order, inplace, model)
                  for order in heuristic_orders(graph, model).values()]
    # Segment k occupies the same positions in every order.
    offsets, start = [], 0
    for mask in parts:
        offsets.append(start)
        start += mask.bit_count()
    incumbents, prefixes = [], []
    for mask, off in zip(parts, offsets):
        end = off + mask.bit_count()
        best = min(heuristics, key=lambda sim: max(sim.step_bytes[off:end]))
        incumbents.append(([model.index[x] for x in best.order[off:end]],
                           max(best.step_bytes[off:end])))
        prefixes.append([model.index[x] for x in heuristics[0].order[:off]])
    solved: dict[int, SegmentResult] = {}
    lower = static_lb
    # Highest incumbent first: once its optimum is proven, a segment whose incumbent does not
    # exceed the proven bound cannot change the graph's optimum and is not searched.
    queue = sorted(range(len(parts)), key=lambda k: incumbents[k][1], reverse=True)
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
        seg_deadline = None
        if deadline is not None:
            now = time.perf_counter()
            rest = [len(incumbents[j][0]) for j in queue[position:]
                    if incumbents[j][1] > lower]
            seg_deadline = now + max(0.0, deadline - now) * len(order) / sum(rest)
        space = SearchSpace(model, parts[k], prefixes[k], bounds)
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
