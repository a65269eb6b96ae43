"""The arena plan verifier: every planner's output must pass it.

:func:`verify_plan` checks a plan against the liveness it was made for (a graph's, or a
buffer list's: :mod:`tvm_serenity.alloc.buffers`) (module docstring of
:mod:`tvm_serenity.alloc.plan` for the rules) and raises :class:`PlanError` naming the culprit:

* every tensor of the liveness has an integer offset, and nothing else has one;
* every offset is a non-negative multiple of the alignment, and every tensor (and every moved
  copy) lies inside ``[0, arena_bytes)``;
* every in-place step the plan claims is declared by the liveness, appears once, and is laid
  out by the rule: input at output offset + gap; a moved one has ``src`` = the input's offset,
  ``dst = src + gap`` and the output at ``src``; every move belongs to a claimed step;
* at every step, the tensors (buffers) live at that step are pairwise disjoint in address
  (zero-byte tensors occupy nothing), except the output of a claimed in-place step and its
  input (both of the input's places at that step, when it was moved). An in-place pair's
  region is the union of its tensors' extents, so it is inside the arena when they are.
"""

from __future__ import annotations

import bisect

from ..graph import Graph
from ..memory import Liveness
from .plan import ArenaPlan, PlanError, label, sharings

__all__ = ["verify_plan"]


def verify_plan(graph: Graph | None, liveness: Liveness, plan: ArenaPlan) -> None:
    """Raise :class:`PlanError` unless ``plan`` is a valid arena plan for ``liveness``
    (``graph`` None: a plain buffer list, :func:`tvm_serenity.alloc.buffers.buffer_liveness`)."""
    who = f"plan '{plan.planner}'"
    a = plan.alignment
    if isinstance(a, bool) or not isinstance(a, int) or a < 1:
        raise PlanError(f"{who}: alignment must be a positive integer, got {a!r}")
    arena = plan.arena_bytes
    if isinstance(arena, bool) or not isinstance(arena, int) or arena < 0:
        raise PlanError(f"{who}: arena_bytes must be a non-negative integer, got {arena!r}")
    lifetimes = liveness.lifetimes
    missing = [n for n in lifetimes if n not in plan.offsets]
    if missing:
        raise PlanError(f"{who}: tensor '{missing[0]}' has no offset "
                        f"({len(missing)} tensors unplaced)")
    extra = [n for n in plan.offsets if n not in lifetimes]
    if extra:
        raise PlanError(f"{who}: offset given for '{extra[0]}', which is no tensor of "
                        f"{label(graph)}")

    def check_extent(what: str, offset, nbytes: int) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise PlanError(f"{who}: {what} has offset {offset!r}, not an integer")
        if offset < 0:
            raise PlanError(f"{who}: {what} has negative offset {offset}")
        if offset % a:
            raise PlanError(f"{who}: {what} at offset {offset} is not aligned to {a} bytes")
        if offset + nbytes > arena:
            raise PlanError(f"{who}: {what} [{offset}, {offset + nbytes}) lies outside the "
                            f"arena of {arena} bytes")

    for name, lt in lifetimes.items():
        check_extent(f"tensor '{name}'", plan.offsets[name], lt.bytes)

    declared = {s.pair: s for s in sharings(liveness, a)}
    claimed = {}
    for pair in plan.inplace:
        if pair not in declared:
            raise PlanError(f"{who}: in-place step {pair.step} ('{pair.input}' -> "
                            f"'{pair.output}') is not an in-place step of this order")
        if pair.step in claimed:
            raise PlanError(f"{who}: in-place step {pair.step} ('{pair.input}' -> "
                            f"'{pair.output}') is listed twice")
        claimed[pair.step] = declared[pair]
    moved = {}
    for m in plan.moves:
        s = claimed.get(m.step)
        if s is None or (s.pair.input, s.pair.output) != (m.tensor, m.output):
            raise PlanError(f"{who}: move of '{m.tensor}' at step {m.step} belongs to no "
                            f"claimed in-place step")
        if m.step in moved:
            raise PlanError(f"{who}: '{m.tensor}' is moved twice at step {m.step}")
        what = f"right shift of '{m.tensor}' before step {m.step}"
        if m.src != plan.offsets[m.tensor]:
            raise PlanError(f"{who}: {what} starts at {m.src}, but the tensor is at "
                            f"{plan.offsets[m.tensor]}")
        if m.dst != m.src + s.gap or plan.offsets[m.output] != m.src:
            raise PlanError(f"{who}: {what} must move it from {m.src} to {m.src + s.gap} "
                            f"(gap {s.gap}) with '{m.output}' written at {m.src}; got dst "
                            f"{m.dst} and '{m.output}' at {plan.offsets[m.output]}")
        check_extent(f"moved copy of '{m.tensor}'", m.dst, lifetimes[m.tensor].bytes)
        moved[m.step] = m
    for k, s in claimed.items():
        if k in moved:
            continue
        o, x = plan.offsets[s.pair.output], plan.offsets[s.pair.input]
        if x != o + s.gap:
            raise PlanError(f"{who}: in-place step {k} ('{s.pair.input}' -> "
                            f"'{s.pair.output}', workspace {s.pair.workspace_bytes} B): "
                            f"output at {o} needs the input at {o + s.gap}, found {x}")
    _check_overlaps(who, liveness, plan, claimed, moved, graph is None)


def _check_overlaps(who, liveness, plan, claimed, moved, buffers: bool) -> None:
    """Two lifetimes that overlap do so at the later one's first step, so each step checks
    only the extents starting there (and a moved copy) against those live, kept sorted by
    offset: an overlap of ``[lo, hi)`` is among the extents with ``lo - largest < lo' < hi``.
    O(n log n) for plans whose tensors are not dwarfed by their neighbours."""
    starts: dict[int, list[str]] = {}
    for name, lt in liveness.lifetimes.items():
        if lt.bytes > 0:
            starts.setdefault(lt.start, []).append(name)
    largest = max((lt.bytes for lt in liveness.lifetimes.values()), default=0)
    ends: dict[int, list[tuple]] = {}
    live: list[tuple] = []     # (lo, hi, tensor, label), sorted
    for k in range(liveness.num_steps):
        for extent in ends.pop(k - 1, ()):
            del live[bisect.bisect_left(live, extent)]
        new = []
        for n in starts.get(k, ()):
            lo = plan.offsets[n]
            new.append(((lo, lo + liveness.lifetimes[n].bytes, n, f"'{n}'"),
                        liveness.lifetimes[n].end))
        m = moved.get(k)
        if m is not None:
            nbytes = liveness.lifetimes[m.tensor].bytes
            new.append(((m.dst, m.dst + nbytes, m.tensor, f"'{m.tensor}' (moved copy)"), k))
        pair = claimed[k].pair if k in claimed else None
        for extent, end in new:
            lo, hi, t, _ = extent
            i = bisect.bisect_left(live, (hi,))
            while i > 0 and live[i - 1][0] > lo - largest:
                i -= 1
                other = live[i]
                if other[1] <= lo or other[2] == t or (
                        pair is not None and {t, other[2]} == {pair.input, pair.output}):
                    continue
                (lo1, hi1, _, label1), (lo2, hi2, _, label2) = sorted((extent, other))
                when = (f"time {liveness.order[k]}" if buffers else
                        f"step {k} (node '{liveness.order[k]}')")
                raise PlanError(f"{who}: {'buffers' if buffers else 'tensors'} {label1} "
                                f"[{lo1}, {hi1}) and {label2} [{lo2}, {hi2}) overlap at {when}")
            bisect.insort(live, extent)
            ends.setdefault(end, []).append(extent)
