"""The ``"serenity"`` Relax pipeline: TVM's CPU pipeline with the memory passes inserted.

Stages, in order (``tvm.relax.backend.cpu_generic.pipeline`` supplies TVM's lists)::

    library dispatch
    BEFORE_LEGALIZE passes         (integer lowering, pad folding, identity graph rewriting)
    ShareKernels                   (one function per distinct kernel; descriptions dropped)
    legalize, incl. FuseOps/FuseTIR
    MemoryAwareSchedule            (after fusion: it reorders the fused bindings)
    AFTER_SCHEDULE passes          (in-place / RiP lowering for the chosen order)
    dataflow lower                 (ToNonDataflow, CallTIRRewrite, ...)
    ArenaPlan                      (instead of StaticPlanBlockMemory)
    the rest of finalize           (LowerAllocTensor, KillAfterLastUse, VMShapeLower, ...)

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

from typing import Callable

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu

from . import arena, schedule
from .arena import HOST_ALIGNMENT, ArenaPlan
from .schedule import MemoryAwareSchedule, read_report
from .share import ShareKernels

__all__ = ["BEFORE_LEGALIZE", "AFTER_SCHEDULE", "serenity_pipeline", "PIPELINE_NAME",
           "pipeline_report"]

PIPELINE_NAME = "serenity"

PassFactory = Callable[..., tvm.transform.Pass]
#: Passes that rewrite the imported graph before TVM legalizes it (list of factories).
BEFORE_LEGALIZE: list[PassFactory] = []
#: Passes that lower for the order MemoryAwareSchedule chose, before dataflow lowering.
AFTER_SCHEDULE: list[PassFactory] = []


def serenity_pipeline(*, method: str = "serenity", time_limit: float | None = None,
                      inplace: bool = True, planner: str = "optimal",
                      alignment: int = HOST_ALIGNMENT, plan_time_limit: float | None = None,
                      target: tvm.target.Target | str | None = None,
                      rip: bool = False, rewrite: bool = True) -> tvm.transform.Sequential:
    """The serenity pipeline as one ``Sequential`` (see the module docstring).

    ``method``, ``time_limit``, ``inplace``: :class:`MemoryAwareSchedule`; ``planner``,
    ``alignment``, ``plan_time_limit``: :class:`ArenaPlan`; ``target``: handed to TVM's stage
    lists (default: the current target, else ``llvm``); ``rip``: enable
    :class:`~.rip.RiPLowering` (:class:`ArenaPlan` runs its kernels in the arena without
    copies where its plan lays a group in place; off by default: a group laid out apart keeps
    its copies, and on MCUNet-320kb that costs more than RiP saves, see both docstrings);
    ``rewrite``: :class:`~.rewrite.IdentityGraphRewrite` (``method`` and ``time_limit`` also
    judge its trials).
    """
    options = {"method": method, "time_limit": time_limit, "inplace": inplace,
               "planner": planner, "alignment": alignment, "plan_time_limit": plan_time_limit,
               "rip": rip, "rewrite": rewrite}
    if isinstance(target, str):
        target = tvm.target.Target(target)
    target = target or tvm.target.Target.current(allow_none=True) or tvm.target.Target("llvm")
    finalize = [ArenaPlan(planner=planner, alignment=alignment, time_limit=plan_time_limit)
                if p.info.name == "StaticPlanBlockMemory" else p
                for p in cpu.finalize_passes(target)]
    passes = [*cpu.library_dispatch_passes(target),
              *(factory(**options) for factory in BEFORE_LEGALIZE),
              ShareKernels(),
              *cpu.legalize_passes(target),
              MemoryAwareSchedule(method=method, time_limit=time_limit, inplace=inplace),
              *(factory(**options) for factory in AFTER_SCHEDULE),
              *cpu.dataflow_lower_passes(target),
              *finalize]
    return tvm.transform.Sequential(passes, name=PIPELINE_NAME)


def register() -> None:
    """Register :func:`serenity_pipeline` as the Relax pipeline ``"serenity"`` (idempotent)."""
    if PIPELINE_NAME not in relax.pipeline.PIPELINE_MAP:
        relax.register_pipeline(PIPELINE_NAME)(serenity_pipeline)


def pipeline_report(mod: tvm.IRModule) -> dict:
    """What the pipeline's passes decided for ``mod`` (the module the pipeline returned):
    ``{"rewrite": ..., "schedule": ..., "arena": ...}``, each the pass's JSON report or None if
    it did not run."""
    from .rewrite import REPORT_ATTR as REWRITE_ATTR     # rewrite registers into this module
    return {"rewrite": read_report(mod, REWRITE_ATTR),
            "schedule": read_report(mod, schedule.REPORT_ATTR),
            "arena": read_report(mod, arena.REPORT_ATTR)}
