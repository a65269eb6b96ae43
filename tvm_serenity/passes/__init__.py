"""TVM Relax passes of tvm-serenity and the registered pipeline ``"serenity"``.

* :class:`LowerFakeQuant`: rewrites dequantize -> float op -> quantize into integer kernels;
* :class:`FoldPad`: folds explicit int8 PADs into the padding of the convolutions reading them;
* :class:`IdentityGraphRewrite`: channel-/kernel-wise partitioning of concat -> conv where the
  optimal peak drops;
* :class:`MemoryAwareSchedule`: reorders every dataflow block for minimum peak memory;
* :class:`PatchExecution`: a microcontroller build's first layers run patch by patch where
  that lowers the peak (the graph the MCU back end compiles, :mod:`.mcu_graph`);
* :class:`RiPLowering`: int8 convolutions that are their input's last consumer run as
  in-place Right-in-Place kernels (``R.call_tir_inplace``);
* :class:`ShareKernels`: drops the kernels' operator descriptions (the MCU route's) and merges
  the kernels that are then identical, so TVM builds each once;
* :class:`ArenaPlan`: replaces ``StaticPlanBlockMemory`` with one arena at planned offsets;
  with ``memory_model="mcu"`` it plans ``main``'s microcontroller arena instead (a module
  attribute the Relax-to-C emitter, :mod:`tvm_serenity.codegen.relax_c`, writes C from);
* :func:`serenity_pipeline`: TVM's CPU pipeline with these inserted (and the extension points
  :data:`BEFORE_LEGALIZE` / :data:`AFTER_SCHEDULE`); importing this package registers it, so
  ``tvm.compile(mod, target="llvm", relax_pipeline="serenity")`` works;
* :mod:`.convert`: Relax binding blocks to the graph IR and back, for every pass.

Each pass also runs alone, e.g. inside ``tvm.transform.Sequential``.
"""

from ..errors import register_with_tvm
from .arena import ArenaPlan, ArenaReport, FunctionArena, static_plan_bytes
from .convert import (BlockGraph, ConversionError, PassError, block_graph, graph_of_bindings,
                      with_blocks)
from .fakequant import LowerFakeQuant
from .foldpad import FoldPad
from .patch import PatchExecution
from .pipeline import (AFTER_SCHEDULE, BEFORE_LEGALIZE, PIPELINE_NAME, SmallerArena,
                       pipeline_report, register, serenity_pipeline)
from .schedule import BlockSchedule, MemoryAwareSchedule, ScheduleReport, read_report
from .rewrite import BlockRewrite, IdentityGraphRewrite, RewriteReport
from .rip import RiPLowering
from .share import ShareKernels

register()

__all__ = ["LowerFakeQuant", "FoldPad", "MemoryAwareSchedule", "ScheduleReport", "BlockSchedule",
           "ArenaPlan", "ArenaReport", "FunctionArena", "static_plan_bytes", "serenity_pipeline",
           "pipeline_report", "read_report", "BEFORE_LEGALIZE", "AFTER_SCHEDULE", "PIPELINE_NAME",
           "BlockGraph", "ConversionError", "PassError", "block_graph", "graph_of_bindings",
           "with_blocks", "RiPLowering", "IdentityGraphRewrite", "RewriteReport",
           "BlockRewrite", "ShareKernels", "SmallerArena", "PatchExecution"]

register_with_tvm()     # a pass's errors reach its caller as themselves (tvm_serenity.errors)
