"""int8 kernels as TIR, built for the host (llvm) and emitted as plain C for microcontrollers.

* ``spec``: :class:`LayerSpec` (what a kernel computes: op, geometry, baked quantization) and
  the calling convention, :func:`kernel_params`, shared by the TIR buffers and the C pointers.
* ``kernels``: :func:`make_prim_func` generates the TIR of one layer in the Right In-Place
  layout (one workspace, input right-aligned, output left-aligned, gather before write) or the
  dual-buffer layout, from one generator; :func:`build_llvm` compiles it for the host.
* ``plain_c``: :func:`emit_c_kernel` lowers the same TIR to a C99 function with no TVM runtime
  symbols (the ``"serenity_plain_c"`` TIR pipeline), for the graph-level C emitter and Pico
  firmware; :func:`emit_c_function` does the same for any PrimFunc.
* ``partial``: the kernels of identity graph rewriting (int32 partial convolutions accumulated
  in place, their requantization, depthwise slices written into a shared output).
* ``kernel_call``: which kernel each TFLite operator runs and with which arguments (what
  ``graph_c`` renders as C).
* ``layout_ops``, ``elementwise_ops``: the other int8 operators' kernels as TIR (MEAN,
  FULLY_CONNECTED, data movement; requantization, activations, tables, broadcasting MUL/ADD,
  SOFTMAX, the float32 QUANTIZE/DEQUANTIZE edges).
* ``relax_c``: the Relax-to-C emitter: a planned Relax ``main`` (``ArenaPlan(memory_model=
  "mcu")``) as C, through ``graph_c``.
* ``graph_c``: a whole model as C (one static arena at planned offsets), ``ops``: the shared
  helpers and the float32 SOFTMAX / LOG_SOFTMAX / ARG_MAX kernels, still written as C text.

Window kernels: CONV_2D (any kernel, stride, dilation, asymmetric padding; pointwise is the 1x1
case), DEPTHWISE_CONV_2D (multiplier 1), MAX_POOL_2D, AVERAGE_POOL_2D and same-shape ADD; every
kernel bit-exact with TFLite's int8 reference kernels (``frontend.reference``).
"""

from .kernels import build_llvm, default_kernel_name, make_prim_func
from .partial import (accumulator_requantize_prim_func, conv2d_partial_prim_func,
                      depthwise_slice_prim_func)
from .plain_c import PIPELINE, c_prototype, emit_c_function, emit_c_kernel, pointer_params
from .spec import (LAYOUTS, OPS, AddRescale, CodegenError, KernelParam, LayerSpec,
                   kernel_params, pack_conv2d_weight)

__all__ = [
    "LAYOUTS", "OPS", "AddRescale", "CodegenError", "KernelParam", "LayerSpec", "kernel_params",
    "pack_conv2d_weight",
    "build_llvm", "default_kernel_name", "make_prim_func",
    "PIPELINE", "c_prototype", "emit_c_function", "emit_c_kernel", "pointer_params",
    "conv2d_partial_prim_func", "accumulator_requantize_prim_func", "depthwise_slice_prim_func",
]
