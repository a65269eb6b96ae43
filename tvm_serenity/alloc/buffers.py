"""Arena planning for a plain list of buffers (no graph): the static allocation problem.

A :class:`Buffer` ``(start, end, size)`` is live on the **half-open** interval ``[start, end)``
of abstract time, MiniMalloc's convention (google/minimalloc ``src/minimalloc.h``: ``Lifespan
lifespan // Half-open``; its README example places ``b1 [0, 3)`` and ``b2 [3, 9)`` at the same
offset): two buffers need disjoint addresses iff ``start1 < end2 and start2 < end1``. A buffer
needs ``start < end``; a zero-size one occupies nothing (offset 0).

:func:`buffer_liveness` turns the list into a :class:`~tvm_serenity.memory.Liveness` (no in-place
steps) by ranking the distinct times: step ``k`` is ``[t_k, t_k+1)`` and a buffer lives on the
steps ``rank(start) .. rank(end) - 1``, which keeps exactly the overlap relation with at most
``2n - 1`` steps (the instances' times run to 2^20). :func:`plan_buffers` then runs the same path
as :func:`tvm_serenity.alloc.plan_arena` (:func:`.core.run_planner`: a planner of
:data:`~tvm_serenity.alloc.PLANNERS`, then :func:`~tvm_serenity.alloc.verify_plan`), with the
lifetimes' own lengths for the canonical search's preorder and ``capacity`` as the optimal
planner's second target. :func:`read_minimalloc_csv` reads MiniMalloc's ``id,lower,upper,size``
files.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..memory import Lifetime, Liveness
from ..schedule.stop import Deadline
from .core import check_planner, run_planner
from .optimal import DEFAULT_TIME_LIMIT
from .plan import ArenaPlan, PlanError, arena_lower_bound

__all__ = ["Buffer", "BufferPlan", "buffer_liveness", "plan_buffers", "read_minimalloc_csv"]


@dataclass(frozen=True)
class Buffer:
    """``size`` bytes live on ``[start, end)``; ``name`` identifies it in messages."""

    start: int
    end: int
    size: int
    name: str = ""


@dataclass
class BufferPlan:
    """Offsets for a buffer list (``offsets[i]`` for ``buffers[i]``) and how good they are:
    ``arena_bytes``, the proven ``lower_bound_bytes`` and ``gap``, ``optimal`` (proven),
    ``fits`` (``arena_bytes <= capacity``; None without a capacity). ``plan`` is the verified
    :class:`~tvm_serenity.alloc.ArenaPlan` behind it (its status, solver details)."""

    planner: str
    offsets: tuple[int, ...]
    arena_bytes: int
    lower_bound_bytes: int
    gap: float
    optimal: bool
    capacity: int | None
    fits: bool | None
    seconds: float
    plan: ArenaPlan

    @property
    def status(self) -> str:
        return self.plan.status

    def to_json(self) -> dict[str, Any]:
        return {"planner": self.planner, "offsets": list(self.offsets),
                "arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "gap": round(self.gap, 6), "optimal": self.optimal, "status": self.status,
                "capacity": self.capacity, "fits": self.fits,
                "seconds": round(self.seconds, 6)}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _buffers(buffers) -> list[Buffer]:
    """Checked :class:`Buffer` objects from Buffers or ``(start, end, size)`` triples."""
    if isinstance(buffers, (str, bytes)):
        raise PlanError("plan_buffers: buffers must be a list of (start, end, size) buffers")
    out = []
    for i, b in enumerate(buffers):
        if not isinstance(b, Buffer):
            if not isinstance(b, (tuple, list)) or len(b) != 3:
                raise PlanError(f"buffer {i}: expected (start, end, size), got {b!r}")
            b = Buffer(*b, name=str(i))
        name = b.name or str(i)
        for field in ("start", "end", "size"):
            value = getattr(b, field)
            if not _is_int(value) or value < 0:
                raise PlanError(f"buffer '{name}': {field} must be a non-negative integer, "
                                f"got {value!r}")
        if b.end <= b.start:
            raise PlanError(f"buffer '{name}': lifetime [{b.start}, {b.end}) is empty (end "
                            f"must be after start)")
        out.append(replace(b, name=name))
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PlanError(f"buffer '{dup}': the name is given twice")
    return out


def buffer_liveness(buffers: list[Buffer]) -> Liveness:
    """The liveness of checked buffers: steps are the intervals between distinct times (module
    docstring); the step names are their start times."""
    times = sorted({t for b in buffers for t in (b.start, b.end)})
    rank = {t: k for k, t in enumerate(times)}
    lifetimes = {b.name: Lifetime(b.name, b.size, rank[b.start], rank[b.end] - 1)
                 for b in buffers}
    live = Liveness(tuple(str(t) for t in times[:-1]), lifetimes, (), 0)
    return replace(live, peak_bytes=arena_lower_bound(live))


def plan_buffers(buffers, capacity: int | None = None, planner: str = "optimal",
                 alignment: int = 1,
                 time_limit: Deadline | float | None = DEFAULT_TIME_LIMIT) -> BufferPlan:
    """Plan one arena for ``buffers`` (:class:`Buffer` objects or ``(start, end, size)``
    triples, half-open lifetimes) with ``planner`` (``optimal``, ``bestfit``, ``greedy``,
    ``linear``) and verify it. ``capacity``: the memory available (bytes): the result says
    whether the arena fits, and the optimal planner aims for it when it cannot prove the lower
    bound reachable; ``alignment`` and ``time_limit`` as for
    :func:`tvm_serenity.alloc.plan_arena`. Wrong arguments raise a one-line SerenityError."""
    check_planner(planner, alignment)
    if capacity is not None and (not _is_int(capacity) or capacity < 0):
        raise PlanError(f"plan_buffers: capacity must be a non-negative integer or None, "
                        f"got {capacity!r}")
    checked = _buffers(buffers)
    live = buffer_liveness(checked)
    widths = {b.name: b.end - b.start for b in checked}
    plan = run_planner(None, live, planner, alignment, time_limit, capacity=capacity,
                       widths=widths)
    return BufferPlan(planner, tuple(plan.offsets[b.name] for b in checked), plan.arena_bytes,
                      plan.lower_bound_bytes, plan.gap, plan.optimal, capacity,
                      None if capacity is None else plan.arena_bytes <= capacity,
                      plan.seconds, plan)


def read_minimalloc_csv(path: str | Path) -> list[Buffer]:
    """MiniMalloc's CSV (``id,lower,upper,size`` rows, ``[lower, upper)``) as buffers."""
    path = Path(path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            out.append(Buffer(int(row["lower"]), int(row["upper"]), int(row["size"]),
                              row.get("id") or str(line - 2)))
        except (KeyError, TypeError, ValueError):
            raise PlanError(f"{path.name} line {line}: expected integer columns lower, "
                            f"upper, size, got {row!r}") from None
    return out
