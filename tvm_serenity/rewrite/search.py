"""Apply identity rewrites only where the exact scheduler says the optimal peak drops.

Algorithm (greedy, each trial judged by one scheduler call)
-----------------------------------------------------------
1. Schedule the graph (``serenity``: divide and conquer + exact search); its peak is the
   incumbent ``P``.
2. Group the candidates (:func:`.patterns.find_candidates`, of the pattern ``kinds`` asked
   for) by concat (an expand-depthwise fusion is a group of its own, keyed by its expand conv).
   For each group, in stored order, the trial units are: all its rewritable consumers
   together, then, when there are several, each one alone. Rewriting every reader of a concat is what lets the concat (and
   the unary chain after it) disappear; rewriting one reader only may still pay when the others
   need the concat late. A unit whose consumers were already rewritten is skipped.
3. A trial applies the unit to the current graph (:func:`.patterns.apply_rewrite`, inputs
   accumulated in the order the incumbent schedule produces them: graph inputs first, then by
   the step that computes them, so partials run as early as the incumbent allows), schedules
   the result, and keeps it iff its peak is strictly below ``P`` (``P`` becomes that peak).
4. A rewrite that cannot lower the peak while another part of the graph dominates may pay once
   that part has improved, so after a pass that kept something, the units rejected at a higher
   incumbent are tried again; the search stops after a pass that keeps nothing.

The peak therefore never increases, every kept rewrite lowered it when it was kept, and the
result's schedule is the scheduler's order for the final graph.

``time_limit`` bounds the whole search (one :class:`~tvm_serenity.schedule.stop.Deadline`,
default 60 s): each scheduler call gets an equal share of what is left among itself and the
trials still queued in its pass, and no trial starts once the deadline has passed. A call may
then stop before proving optimality; "lower" compares the peaks of the orders found (each is
achievable), and :attr:`RewriteResult.optimal` says whether the final one is proven.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..graph import Graph
from ..schedule import Deadline, ScheduleResult, schedule
from .patterns import (ACCUMULATOR_BYTES, PATTERNS, Candidate, Fusion, apply_rewrite,
                       concat_branches, find_candidates)

__all__ = ["Trial", "RewriteResult", "rewrite_graph", "accumulation_order"]


@dataclass(frozen=True)
class Trial:
    """One scheduler call: ``candidates`` applied on top of the rewrites kept before it."""

    candidates: tuple[Candidate | Fusion, ...]
    peak_bytes: int
    optimal: bool
    kept: bool
    seconds: float

    def to_json(self) -> dict:
        return {"rewrites": [{"pattern": c.pattern, "nodes": list(c.nodes)}
                             for c in self.candidates],
                "peak_bytes": self.peak_bytes, "optimal": self.optimal, "kept": self.kept,
                "seconds": round(self.seconds, 6)}


@dataclass
class RewriteResult:
    graph: Graph                                   # the rewritten graph
    applied: list[tuple[str, tuple[str, ...]]]     # (pattern, original nodes), in kept order
    peak_before: int                               # scheduler's peak of the input graph
    peak_after: int                                # scheduler's peak of ``graph``
    schedule: ScheduleResult                       # the scheduler's result for ``graph``
    schedule_before: ScheduleResult                # ... and for the input graph
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def optimal(self) -> bool:
        """The final peak is proven optimal for the final graph."""
        return self.schedule.optimal

    def to_json(self) -> dict:
        return {"applied": [{"pattern": p, "nodes": list(nodes)} for p, nodes in self.applied],
                "peak_before_bytes": self.peak_before, "peak_after_bytes": self.peak_after,
                "optimal": self.optimal, "trials": [t.to_json() for t in self.trials],
                "seconds": round(self.seconds, 6)}


def accumulation_order(graph: Graph, candidate: Candidate | Fusion, order) -> list[int] | None:
    """Concat input indices sorted by when ``order`` (a schedule of ``graph``) computes them;
    graph inputs first, ties in concat order (None for a fusion: nothing to order)."""
    if isinstance(candidate, Fusion):
        return None
    step = {name: k for k, name in enumerate(order)}
    branches = concat_branches(graph, candidate.concat)
    return sorted(range(len(branches)), key=lambda i: step.get(branches[i].source, -1))


def _units(candidates: list[Candidate | Fusion]) -> list[tuple[Candidate | Fusion, ...]]:
    by_concat: dict[str, list[Candidate | Fusion]] = {}
    for c in candidates:
        by_concat.setdefault(c.nodes[0], []).append(c)
    units = []
    for group in by_concat.values():
        units.append(tuple(group))
        if len(group) > 1:
            units.extend((c,) for c in group)
    return units


def rewrite_graph(graph: Graph, inplace: bool = True,
                  time_limit: Deadline | float | None = None, method: str = "serenity",
                  accumulator_bytes: int = ACCUMULATOR_BYTES,
                  requantize_inplace: bool = True, kinds=PATTERNS) -> RewriteResult:
    """Rewrite ``graph`` where it lowers the scheduler's peak (module docstring).

    ``kinds``: the patterns offered (:data:`.patterns.PATTERNS`; a consumer of what is
    rewritten that cannot run a kind leaves it out, e.g. the Relax pass offers no fusion).

    ``time_limit`` bounds the whole search (seconds or a Deadline; None: 60 s); ``method`` is
    the scheduling method judging the trials (an exact one, so that "lower" means a lower
    optimum); ``accumulator_bytes`` and ``requantize_inplace`` as in
    :func:`.patterns.apply_rewrite` (keep the default accumulator: int32).
    """
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit)
    units = _units(find_candidates(graph, kinds))
    before = schedule(graph, method, inplace=inplace,
                      time_limit=deadline.share(1 / (len(units) + 1)))
    current, best = graph, before
    applied: list[tuple[str, tuple[str, ...]]] = []
    trials: list[Trial] = []
    tried: dict[tuple[Candidate, ...], int] = {}     # unit -> incumbent peak it was tried at
    while not deadline.expired():
        kept_any = False
        candidates = find_candidates(current, kinds)
        available = set(candidates)                 # shrinks as kept rewrites consume them
        units = _units(candidates)
        for k, unit in enumerate(units):
            if deadline.expired():
                break
            if tried.get(unit) == best.peak_bytes or not available.issuperset(unit):
                continue
            tried[unit] = best.peak_bytes
            trial_graph = current
            for cand in unit:
                trial_graph = apply_rewrite(trial_graph, cand,
                                            accumulation_order(current, cand, best.order),
                                            accumulator_bytes, requantize_inplace)
            result = schedule(trial_graph, method, inplace=inplace,
                              time_limit=deadline.share(1 / (len(units) - k)))
            kept = result.peak_bytes < best.peak_bytes
            trials.append(Trial(unit, result.peak_bytes, result.optimal, kept, result.seconds))
            if kept:
                current, best, kept_any = trial_graph, result, True
                applied.extend((c.pattern, c.nodes) for c in unit)
                available = set(find_candidates(current, kinds))
        if not kept_any:
            break
    return RewriteResult(current, applied, before.peak_bytes, best.peak_bytes, best, before,
                         trials, time.perf_counter() - t0)
