"""What an arena plan is, and the geometry every planner and the verifier share.

An arena plan gives every tensor of a graph (graph inputs and outputs included: they live in
the arena too) a byte offset in one static arena, for one operator order. It is valid when no
two tensors live at the same step overlap in address, except an **in-place pair** laid out by
the rule below.

Alignment ``a`` (1 for MCU int8, 64 for the TVM host path): every offset is a multiple of
``a`` and every tensor is packed as ``padded(bytes) = ceil(bytes / a) * a`` bytes, so the arena
(the highest padded end) is a multiple of ``a`` too.

In-place rule. For an :class:`~tvm_serenity.memory.InPlaceStep` ``(k, u, v, S)`` the memory
model lets node ``v`` (step ``k``) write its output over its input ``u``, which dies at ``k``:
the output sits at ``o`` and the input right-aligned in the workspace ``[o, o + S)``, i.e. at
``o + S - bytes(u)`` (docs/rip.md). With ``a > 1`` the input sits at ``o + gap`` with
``gap = ceil((S - bytes(u)) / a) * a``: the smallest aligned distance that is at least the
distance RiP needs (a larger distance only leaves the output more room). The memory model only
declares pairs with ``S < bytes(u) + bytes(v)``, so ``gap <= padded(v)``: the output and the
input touch or overlap, and at step ``k`` the pair occupies exactly the contiguous region
``[o, o + region)``, ``region = max(gap + padded(u), padded(v))``.

Physical right shift (a :class:`Move`). A plan may also keep ``u`` at an offset ``p`` chosen for
the rest of its lifetime and, at step ``k`` just before ``v`` runs, ``memmove`` it right by
``gap`` to ``p + gap``; ``v`` is then written at ``o = p``. This is the only kind of move a plan
may contain, and it is exactly the in-place layout at step ``k``. What is occupied at step
``k``: the input's old bytes ``[p, p + bytes(u))`` (read by the memmove), its new bytes
``[p + gap, p + gap + bytes(u))`` and, once the move is done, the output ``[p, p +
bytes(v))``: together the region ``[p, p + region)``. The output may overlap the input's old
place (it is written after the move) and its new place (the in-place rule); every other
tensor live at step ``k`` must avoid both places of the input. Before step ``k`` the input is
at ``p`` only. Each move costs one ``memmove`` of ``bytes(u)`` at run time; plans count them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import SerenityError
from ..memory import InPlaceStep, Liveness

__all__ = ["PlanError", "Move", "ArenaPlan", "Sharing", "label", "padded", "sharings",
           "arena_lower_bound"]


class PlanError(SerenityError, ValueError):
    """An arena plan is invalid (or cannot be made); the message names the tensors and step."""


def label(graph) -> str:
    """How messages name what is planned: ``graph 'name'``, or the buffer list (None)."""
    return "the buffer list" if graph is None else f"graph '{graph.name}'"


def padded(nbytes: int, alignment: int) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-nbytes // alignment) * alignment


@dataclass(frozen=True)
class Sharing:
    """The geometry of one in-place step under an alignment (see the module docstring)."""

    pair: InPlaceStep
    gap: int          # the input's offset minus the output's offset
    region: int       # bytes of [o, o + region) the pair occupies at its step
    input_bytes: int  # padded
    output_bytes: int  # padded


def sharings(liveness: Liveness, alignment: int) -> list[Sharing]:
    """One :class:`Sharing` per in-place step of ``liveness``, in step order."""
    out = []
    for p in liveness.inplace:
        nu = liveness.lifetimes[p.input].bytes
        pu = padded(nu, alignment)
        pv = padded(liveness.lifetimes[p.output].bytes, alignment)
        gap = padded(p.workspace_bytes - nu, alignment)
        out.append(Sharing(p, gap, max(gap + pu, pv), pu, pv))
    return out


def arena_lower_bound(liveness: Liveness, alignment: int = 1) -> int:
    """No plan of this order can use a smaller arena: the max over steps of the padded bytes
    live at that step, an in-place pair counted as its region. With ``alignment == 1`` this is
    the liveness peak of the memory model."""
    if not liveness.order:
        return 0
    delta = [0] * (liveness.num_steps + 1)
    for lt in liveness.lifetimes.values():
        size = padded(lt.bytes, alignment)
        delta[lt.start] += size
        delta[lt.end + 1] -= size
    saved = {s.pair.step: s.input_bytes + s.output_bytes - s.region
             for s in sharings(liveness, alignment)}
    best, live = 0, 0
    for k in range(liveness.num_steps):
        live += delta[k]
        best = max(best, live - saved.get(k, 0))
    return best


@dataclass(frozen=True)
class Move:
    """Before step ``step``, in-place input ``tensor`` is memmoved right from ``src`` to
    ``dst = src + gap``; the step's ``output`` is then written at ``src``."""

    step: int
    tensor: str
    output: str
    src: int
    dst: int

    def to_json(self) -> dict:
        return {"step": self.step, "tensor": self.tensor, "output": self.output,
                "src": self.src, "dst": self.dst}


@dataclass
class ArenaPlan:
    """Offsets for every tensor of one order, and how good they are.

    ``inplace`` lists the in-place steps laid out by the in-place rule (moved ones included);
    every other in-place step of the liveness is planned with input and output disjoint.
    ``lower_bound_bytes`` (:func:`arena_lower_bound`, or the solver's better bound) is what
    ``gap`` is measured against; ``liveness_peak_bytes`` is the memory model's peak for the
    same order. ``status`` is ``"heuristic"`` (no claim), ``"bound"`` (the arena meets the lower
    bound: optimal whatever the planner), ``"optimal"`` (proven by the solver) or
    ``"time_limit"`` (the solver stopped early; ``gap`` is then its proven gap).
    """

    planner: str
    order: tuple[str, ...]
    alignment: int
    offsets: dict[str, int]
    arena_bytes: int
    inplace: tuple[InPlaceStep, ...]
    moves: tuple[Move, ...]
    liveness_peak_bytes: int
    lower_bound_bytes: int
    status: str
    optimal: bool
    gap: float
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def num_moves(self) -> int:
        return len(self.moves)

    def to_json(self) -> dict:
        return {"planner": self.planner, "arena_bytes": self.arena_bytes,
                "liveness_peak_bytes": self.liveness_peak_bytes,
                "lower_bound_bytes": self.lower_bound_bytes, "alignment": self.alignment,
                "status": self.status, "optimal": self.optimal, "gap": round(self.gap, 6),
                "seconds": round(self.seconds, 6), "order": list(self.order),
                "offsets": dict(self.offsets),
                "inplace": [{"step": p.step, "input": p.input, "output": p.output,
                             "workspace_bytes": p.workspace_bytes} for p in self.inplace],
                "moves": [m.to_json() for m in self.moves], **self.details}

    @classmethod
    def from_json(cls, data: dict, where: str = "arena plan") -> "ArenaPlan":
        """The plan :meth:`to_json` wrote (``where`` names it in errors). Only the types are
        checked here: :func:`~.verify.verify_plan` says whether it is valid for a graph."""
        def field_of(entry: dict, key: str, kind, what: str):
            value = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise PlanError(f"{where}: field '{what}{key}' must be "
                                f"{getattr(kind, '__name__', kind)}, got {value!r:.40}")
            return value

        fields = {"planner": str, "arena_bytes": int, "liveness_peak_bytes": int,
                  "lower_bound_bytes": int, "alignment": int, "status": str, "optimal": bool,
                  "gap": (int, float), "seconds": (int, float), "order": list,
                  "offsets": dict, "inplace": list, "moves": list}
        values = {k: field_of(data, k, kind, "") for k, kind in fields.items()}
        inplace = tuple(InPlaceStep(*(field_of(p, k, kind, f"inplace[{i}].") for k, kind in (
            ("step", int), ("input", str), ("output", str), ("workspace_bytes", int))))
            for i, p in enumerate(values.pop("inplace")))
        moves = tuple(Move(*(field_of(m, k, kind, f"moves[{i}].") for k, kind in (
            ("step", int), ("tensor", str), ("output", str), ("src", int), ("dst", int))))
            for i, m in enumerate(values.pop("moves")))
        details = {k: v for k, v in data.items() if k not in fields}
        return cls(order=tuple(values.pop("order")), inplace=inplace, moves=moves,
                   offsets=dict(values.pop("offsets")), details=details, **values)


def make_plan(planner: str, liveness: Liveness, alignment: int, offsets: dict[str, int],
              inplace, moves, seconds: float, status: str = "heuristic",
              solver_bound: int = 0, **details: Any) -> ArenaPlan:
    """Package offsets as a plan: the arena is the highest padded end (moved copies included);
    the plan is optimal when it meets the lower bound or the solver proved it."""
    ends = [offsets[n] + padded(lt.bytes, alignment) for n, lt in liveness.lifetimes.items()]
    ends += [m.dst + padded(liveness.lifetimes[m.tensor].bytes, alignment) for m in moves]
    arena = max(ends, default=0)
    bound = max(arena_lower_bound(liveness, alignment), solver_bound)
    if arena <= bound and status in ("heuristic", "time_limit"):
        status = "bound"
    optimal = status in ("bound", "optimal")
    gap = 0.0 if optimal or arena == 0 else (arena - bound) / arena
    return ArenaPlan(planner=planner, order=tuple(liveness.order), alignment=alignment,
                     offsets=dict(offsets), arena_bytes=arena, inplace=tuple(inplace),
                     moves=tuple(moves), liveness_peak_bytes=liveness.peak_bytes,
                     lower_bound_bytes=bound, status=status, optimal=optimal, gap=gap,
                     seconds=seconds, details=dict(details))
