"""What every scheduling method returns, with its peak computed by the one memory model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..graph import Graph
from ..memory import lower_bound_bytes, simulate

__all__ = ["ScheduleResult", "make_result"]


@dataclass
class ScheduleResult:
    order: list[str]
    peak_bytes: int
    optimal: bool
    lower_bound_bytes: int
    seconds: float
    method: str
    inplace: bool = True
    inplace_nodes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)   # method-specific facts

    @property
    def gap(self) -> float:
        """Relative distance of ``peak_bytes`` above the lower bound (0.0 when proven tight)."""
        if self.optimal or self.peak_bytes == 0:
            return 0.0
        return (self.peak_bytes - self.lower_bound_bytes) / self.peak_bytes

    def to_json(self) -> dict:
        return {"order": list(self.order), "peak_bytes": self.peak_bytes,
                "optimal": self.optimal, "lower_bound_bytes": self.lower_bound_bytes,
                "gap": round(self.gap, 6), "seconds": round(self.seconds, 6),
                "method": self.method, "inplace": self.inplace,
                "inplace_nodes": list(self.inplace_nodes), **self.details}


def make_result(graph: Graph, order, method: str, seconds: float, inplace: bool = True,
                optimal: bool = False, lower_bound: int | None = None,
                deadline: float | None = None, **details: Any) -> ScheduleResult:
    """Simulate ``order`` with the memory model and package it. ``optimal`` is also set when
    the peak meets the lower bound (then it is proven whatever the method); the bound is
    computed within ``deadline`` (a ``perf_counter`` value) when not given."""
    sim = simulate(graph, order, inplace)
    lb = lower_bound_bytes(graph, inplace, deadline) if lower_bound is None else lower_bound
    return ScheduleResult(order=list(order), peak_bytes=sim.peak_bytes,
                          optimal=optimal or sim.peak_bytes <= lb, lower_bound_bytes=lb,
                          seconds=seconds, method=method, inplace=inplace,
                          inplace_nodes=list(sim.inplace_nodes), details=dict(details))
