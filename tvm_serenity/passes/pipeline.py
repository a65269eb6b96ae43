"""The ``"serenity"`` Relax pipeline: TVM's CPU pipeline with the memory passes inserted.

Stages, in order (``tvm.relax.backend.cpu_generic.pipeline`` supplies TVM's lists)::

    library dispatch
    BEFORE_LEGALIZE passes         (integer lowering, pad folding, identity graph rewriting)
    legalize, incl. FuseOps/FuseTIR (the integer kernels are PrimFunc calls already: unchanged)
    MemoryAwareSchedule            (after fusion: it reorders the fused bindings)
    AFTER_SCHEDULE passes          (in-place / RiP lowering for the chosen order)
    ShareKernels                   (one function per distinct kernel; descriptions dropped)
    dataflow lower                 (ToNonDataflow, CallTIRRewrite, ...)
    ArenaPlan                      (instead of StaticPlanBlockMemory)
    the rest of finalize           (LowerAllocTensor, KillAfterLastUse, VMShapeLower, ...)

With ``rip="auto"`` (the default) the stages from AFTER_SCHEDULE on run twice, with and without
RiP lowering, and :class:`SmallerArena` keeps the module with the smaller arena.

Extension points: other parts of tvm-serenity append *factories* to :data:`BEFORE_LEGALIZE` and
:data:`AFTER_SCHEDULE` when they are imported (and ``tvm_serenity.passes`` imports them). A
factory is called with the pipeline's options as keyword arguments (it takes what it needs and
``**_`` for the rest) and returns one pass; the pipeline calls them in list order each time it is
built.

``tvm.compile(mod, target="llvm", relax_pipeline="serenity")`` uses the defaults;
``serenity_pipeline(**options)`` builds the same pipeline with options (TVM's ``PassContext``
config accepts no new keys, so options are constructor arguments).
"""

from __future__ import annotations

import json
from typing import Callable

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu

from . import arena, schedule
from .arena import HOST_ALIGNMENT, ArenaPlan
from .convert import PassError
from .schedule import MemoryAwareSchedule, read_report
from .share import ShareKernels

__all__ = ["BEFORE_LEGALIZE", "AFTER_SCHEDULE", "serenity_pipeline", "PIPELINE_NAME",
           "pipeline_report", "SmallerArena", "RIP_CHOICE_ATTR"]

PIPELINE_NAME = "serenity"

PassFactory = Callable[..., tvm.transform.Pass]
#: Passes that rewrite the imported graph before TVM legalizes it (list of factories).
BEFORE_LEGALIZE: list[PassFactory] = []
#: Passes that lower for the order MemoryAwareSchedule chose, before dataflow lowering.
AFTER_SCHEDULE: list[PassFactory] = []


RIP_CHOICE_ATTR = "serenity.rip_choice"
RIP_OPTIONS = (False, True, "auto")


def serenity_pipeline(*, method: str = "serenity", time_limit: float | None = None,
                      inplace: bool = True, planner: str = "optimal",
                      alignment: int = HOST_ALIGNMENT, plan_time_limit: float | None = None,
                      target: tvm.target.Target | str | None = None,
                      rip: bool | str = "auto", rewrite: bool = True
                      ) -> tvm.transform.Sequential:
    """The serenity pipeline as one ``Sequential`` (see the module docstring).

    ``method``, ``time_limit``, ``inplace``: :class:`MemoryAwareSchedule`; ``planner``,
    ``alignment``, ``plan_time_limit``: :class:`ArenaPlan`; ``target``: handed to TVM's stage
    lists (default: the current target, else ``llvm``); ``rip``: :class:`~.rip.RiPLowering`
    on (``True``: ArenaPlan runs its kernels in the arena where its plan lays a group in place,
    on two buffers where not), off (``False``), or ``"auto"`` (default): everything after
    the schedule runs both ways and :class:`SmallerArena` keeps the smaller arena (RiP's
    workspaces and explicit int32 scratch can cost more than they save);
    ``rewrite``: :class:`~.rewrite.IdentityGraphRewrite` (``method`` and ``time_limit`` also
    judge its trials).
    """
    if not (isinstance(rip, bool) or rip == "auto"):
        raise PassError(f"serenity_pipeline: rip must be one of {RIP_OPTIONS}, got {rip!r}")
    options = {"method": method, "time_limit": time_limit, "inplace": inplace,
               "planner": planner, "alignment": alignment, "plan_time_limit": plan_time_limit,
               "rip": bool(rip), "rewrite": rewrite}
    if isinstance(target, str):
        target = tvm.target.Target(target)
    target = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")

    def after_schedule(with_rip: bool) -> list[tvm.transform.Pass]:
        finalize = [ArenaPlan(planner=planner, alignment=alignment, time_limit=plan_time_limit)
                    if p.info.name == "StaticPlanBlockMemory" else p
                    for p in cpu.finalize_passes(target)]
        return [*(factory(**{**options, "rip": with_rip}) for factory in AFTER_SCHEDULE),
                ShareKernels(), *cpu.dataflow_lower_passes(target), *finalize]

    if rip == "auto":
        tail = [SmallerArena({
            "plain": tvm.transform.Sequential(after_schedule(False), name="serenity.plain"),
            "rip": tvm.transform.Sequential(after_schedule(True), name="serenity.with_rip")})]
    else:
        tail = after_schedule(rip)
    passes = [*cpu.library_dispatch_passes(target),
              *(factory(**options) for factory in BEFORE_LEGALIZE),
              *cpu.legalize_passes(target),
              MemoryAwareSchedule(method=method, time_limit=time_limit, inplace=inplace),
              *tail]
    return tvm.transform.Sequential(passes, name=PIPELINE_NAME)


def _arena_bytes(mod: tvm.IRModule) -> int | None:
    report = read_report(mod, arena.REPORT_ATTR)
    return None if report is None else sum(f["arena_bytes"] for f in report["functions"])


@tvm.transform.module_pass(opt_level=0, name="serenity.SmallerArena")
class SmallerArena:
    """Run each candidate pass (label -> pass, each ending in :class:`ArenaPlan`) on the module
    and return the result whose ArenaPlan arena is smallest, the first candidate on a tie (or
    when no candidate planned an arena). What it changes: nothing of its own; it adds the module
    attribute ``"serenity.rip_choice"``: ``{"chosen": label, "arena_bytes": {label: bytes}}``
    (the XLA way: several algorithms, one memory model judging, keep the best)."""

    def __init__(self, candidates: dict[str, tvm.transform.Pass]):
        if not candidates:
            raise PassError("SmallerArena: no candidate passes")
        self.candidates = dict(candidates)

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        results = {label: candidate(mod) for label, candidate in self.candidates.items()}
        sizes = {label: _arena_bytes(m) for label, m in results.items()}
        chosen = min(results, key=lambda label: (sizes[label] is None, sizes[label] or 0))
        return results[chosen].with_attr(RIP_CHOICE_ATTR, json.dumps(
            {"chosen": chosen, "arena_bytes": sizes}))


def register() -> None:
    """Register :func:`serenity_pipeline` as the Relax pipeline ``"serenity"`` (idempotent)."""
    if PIPELINE_NAME not in relax.pipeline.PIPELINE_MAP:
        relax.register_pipeline(PIPELINE_NAME)(serenity_pipeline)


def pipeline_report(mod: tvm.IRModule) -> dict:
    """What the pipeline's passes decided for ``mod`` (the module the pipeline returned):
    ``{"rewrite": ..., "schedule": ..., "arena": ..., "rip": ...}``, each the pass's JSON
    report or None if it did not run (``rip``: :class:`SmallerArena`'s choice)."""
    from .rewrite import REPORT_ATTR as REWRITE_ATTR     # rewrite registers into this module
    return {"rewrite": read_report(mod, REWRITE_ATTR),
            "schedule": read_report(mod, schedule.REPORT_ATTR),
            "arena": read_report(mod, arena.REPORT_ATTR),
            "rip": read_report(mod, RIP_CHOICE_ATTR)}
