"""Plain C99 kernels for microcontrollers: no TVM runtime, no packed calling convention.

``tvm.tirx.build(f, target="c")`` normally emits TVM's packed ABI (``TVMBackend*`` calls,
``DLTensor`` arguments).  For an MCU we want ``void f(int8_t *ws, const int8_t *weight, ...)``,
so :func:`emit_c_kernel`

1. turns every buffer parameter into a pointer parameter with a ``DeclBuffer`` on it
   (:func:`pointer_params`),
2. lowers with the ``"serenity_plain_c"`` TIR pipeline: ``FlattenBuffer`` and
   ``LowerIntrin``, nothing else.  The
   generated kernels are already scheduled loop nests over flat buffers with no large
   allocation, so the s_tir pipeline's scheduling passes have nothing to do; ``MakePackedAPI``
   and ``LowerTVMBuiltin`` (packed ABI, ``TVMBackendAllocWorkspace``) are exactly what we
   must not run; and ``StmtSimplify`` would re-inline the let-bound requantization
   temporaries, leaving unused C locals that ``-Wall -Werror`` rejects,
3. cuts the function definition out of CodeGenC's translation unit (dropping the TVM
   headers, ``TVM_DLL`` and the trailing ``__tvm_ffi_main`` stub) and gives it the ABI's
   ``const``-qualified prototype (:func:`c_prototype`).

A RiP kernel is emitted as its dual-layout TIR lowered this way and a one-line wrapper that
calls it on ``ws + S - N_in`` and ``ws`` (:func:`emit_c_kernel`), so both layouts run the same
machine code; the RiP TIR itself (views on the workspace) is what the host build and the
Relax in-place lowering run.

:func:`emit_c_function` is the same lowering for any other PrimFunc (e.g. the partial
convolutions of :mod:`.partial` that identity graph rewriting emits): a ``static void``
definition whose buffer parameters are pointers of their element type, with chosen parameters
``const``-qualified or given another C element type.

The result needs only ``<stdint.h>``.  On Cortex-M0+ the only external symbols are libgcc's
``__aeabi_*`` helpers (``__aeabi_idiv`` for AVERAGE_POOL's per-output division; the
requantization needs no 64-bit arithmetic).  Right shifts of negative ``int32_t`` are assumed
arithmetic and conversions to a narrower or signed integer type modular (true of GCC and
Clang on every target).

:func:`requantize_c_function` lowers :func:`.kernels.requantize` the same way into a
``static inline`` C function, the expression every generated kernel inlines, on its own: what
the tests run on edge values and millions of random ones.
"""

from __future__ import annotations

import functools
import re
from typing import Collection, Mapping

import tvm
from tvm import tirx
from tvm.tirx import compilation_pipeline

from .kernels import (REQUANTIZE_SYMBOL, default_kernel_name, make_prim_func,
                      requantize_prim_func)
from .ops import OpKernel
from .spec import CodegenError, LayerSpec, kernel_params

PIPELINE = "serenity_plain_c"


def _plain_c_pipeline():
    lower = tvm.transform.Sequential([tirx.transform.FlattenBuffer()],
                                     name="serenity.PlainCLowering")

    def finalize_host():
        return tvm.transform.Sequential([tirx.transform.LowerIntrin()])

    return lower, finalize_host, compilation_pipeline.finalize_device_passes


compilation_pipeline.register_tir_pipeline(PIPELINE, _plain_c_pipeline)


def pointer_params(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each buffer parameter replaced by a same-named pointer parameter that the
    buffer is declared on (CodeGenC then prints ``int8_t* ws`` instead of a ``DLTensor``)."""
    params, declarations = [], []
    for param in func.params:
        if isinstance(param.ty, tirx.BufferType):
            pointer = tirx.Var(param.name, tvm.ir.PointerType(param.ty.dtype))
            params.append(pointer)
            declarations.append(tirx.DeclBuffer(param, data=pointer))
        else:
            params.append(param)
    return tirx.PrimFunc(params, tirx.SeqStmt(declarations + [func.body]), func.ret_type,
                         func.attrs)


def c_prototype(spec: LayerSpec, layout: str, name: str) -> str:
    """``void name(<ABI parameters>)`` without the semicolon."""
    args = ", ".join(p.c_declaration for p in kernel_params(spec, layout))
    return f"void {name}({args})"


def _abi_comment(spec: LayerSpec, layout: str) -> str:
    g = spec.geometry
    lines = [f"{spec.op}: input {g.in_height}x{g.in_width}x{g.in_channels} -> output "
             f"{g.out_height}x{g.out_width}x{g.out_channels} (int8 NHWC), kernel "
             f"{g.kernel[0]}x{g.kernel[1]}, stride {g.stride[0]}x{g.stride[1]}, dilation "
             f"{g.dilation[0]}x{g.dilation[1]}, padding t{g.padding[0]} b{g.padding[1]} "
             f"l{g.padding[2]} r{g.padding[3]}."]
    if layout == "rip":
        lines.append(f"RiP: ws[{spec.rip_workspace_bytes}] holds the input at ws + "
                     f"{spec.rip_input_offset} ({spec.input_bytes} B) and receives the output "
                     f"at ws + 0 ({spec.output_bytes} B).")
    else:
        lines.append(f"Dual buffer: input[{spec.input_bytes}], output[{spec.output_bytes}].")
    sizes = ", ".join(f"{p.name}[{p.elements}]" for p in kernel_params(spec, layout)
                      if p.name not in ("ws", "input", "output"))
    if spec.inplace_kind == "channel":
        lines.append(f"Channel-wise in place: one channel at a time through an int8 channel "
                     f"buffer of {spec.channel_buffer_bytes} B in scratch.")
    if sizes:
        lines.append(f"Element counts: {sizes}.")
    if spec.op in ("conv2d", "depthwise_conv2d"):
        lines.append(f"Baked: input_zero_point {spec.input_zero_point}, output_zero_point "
                     f"{spec.output_zero_point}, clamp [{spec.act_min}, {spec.act_max}]; "
                     "multipliers must lie in (-2^31, 2^31).")
    return "/* " + "\n * ".join(lines) + "\n */"


def emit_c_kernel(spec: LayerSpec, layout: str = "rip", name: str | None = None) -> str:
    """A C99 definition of ``spec``'s kernel, preceded by ``#include <stdint.h>``, a comment
    stating its ABI and its prototype (see ``spec.py`` for the parameter order).

    A RiP kernel is the dual-layout function ``<name>_body`` (external linkage, so GCC keeps
    it out of line) and ``<name>``, which calls it with ``input = ws + S - N_in`` and
    ``output = ws``.  Both layouts thus run the same machine code: compiled separately, the
    RiP function's one workspace pointer and the dual one's two parameters make GCC allocate
    registers differently (measured up to 2% more rp2040js cycles either way).  The body may
    take overlapping buffers: the C has no ``restrict``, so the compiler keeps every read of
    ``input`` before the writes of ``output`` that follow it in the loops, which is the order
    the RiP safety argument is about (``spec.py``)."""
    symbol = name or default_kernel_name(spec, layout)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", symbol):
        raise CodegenError(f"kernel name {symbol!r} is not a C identifier")
    prototype = c_prototype(spec, layout, symbol)
    head = f"#include <stdint.h>\n\n{_abi_comment(spec, layout)}\n{prototype};\n\n"
    if layout == "dual":
        return head + _dual_definition(spec, symbol)
    body = f"{symbol}_body"
    args = [f"ws + {spec.rip_input_offset}", "ws"] + [p.name for p in
                                                      kernel_params(spec, layout)[1:]]
    return (head + f"{c_prototype(spec, 'dual', body)};\n\n" + _dual_definition(spec, body)
            + f"\n{prototype} {{\n  {body}({', '.join(args)});\n}}\n")


def _dual_definition(spec: LayerSpec, symbol: str) -> str:
    """The definition of the dual-layout kernel ``symbol``, lowered from its TIR."""
    params = kernel_params(spec, "dual")
    args, body = _lower_to_c(pointer_params(make_prim_func(spec, "dual", symbol)), symbol,
                             "void")
    emitted = [arg.rsplit("*", 1)[-1].strip() for arg in args.split(",")]
    if emitted != [p.name for p in params]:
        raise CodegenError(f"CodeGenC parameters {emitted} differ from the ABI "
                           f"{[p.name for p in params]}")
    return f"{c_prototype(spec, 'dual', symbol)} {{\n{body}"


def emit_c_function(func: tirx.PrimFunc, symbol: str, *, const: Collection[str] = (),
                    types: Mapping[str, str] | None = None, storage: str = "static") -> str:
    """``func`` lowered by the plain-C pipeline (``FlattenBuffer``: multi-dimensional buffers
    become flat row-major arrays) into one dependency-free C99 definition
    ``<storage> void symbol(<type> *<param>, ...) { ... }``.

    Each buffer parameter becomes a pointer to its element type (:func:`pointer_params`), with
    the PrimFunc's parameter names; those named in ``const`` point to ``const`` data and
    ``types`` replaces the element type of the named parameters (e.g. an unaligned ``int32_t``
    typedef the caller defines). Scalar parameters are kept as they are. ``storage`` is the
    definition's storage class (``""``: external linkage)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", symbol):
        raise CodegenError(f"kernel name {symbol!r} is not a C identifier")
    types = dict(types or {})
    args, body = _lower_to_c(pointer_params(func.with_attr("global_symbol", symbol)), symbol,
                             "void")
    params, seen = [], set()
    for arg in (a.strip() for a in args.split(",") if a.strip()):
        if "*" not in arg:
            params.append(arg)
            continue
        ctype, name = (part.strip() for part in arg.rsplit("*", 1))
        seen.add(name)
        qualifier = "const " if name in const else ""
        params.append(f"{qualifier}{types.get(name, ctype)} *{name}")
    unknown = (set(const) | set(types)) - seen
    if unknown:
        raise CodegenError(f"{symbol} has no pointer parameters {sorted(unknown)} "
                           f"(it has {sorted(seen)})")
    head = f"{storage} void" if storage else "void"
    return f"{head} {symbol}({', '.join(params)}) {{\n{body}"


def op_kernel(name: str, comment: str, func: tirx.PrimFunc, const: Collection[str] = (),
              **scratch) -> OpKernel:
    """``func`` as the C function ``name`` of an operator kernel, after a ``/* comment */``
    (``scratch``: the :class:`~.ops.OpKernel` scratch it needs)."""
    return OpKernel(name, f"/* {comment} */\n" + emit_c_function(func, name, const=const),
                    **scratch)


def _lower_to_c(func: tirx.PrimFunc, symbol: str, return_type: str) -> tuple[str, str]:
    """``func`` lowered by the plain-C pipeline: its parameter list and its body (after the
    opening brace, closing brace included), cut out of CodeGenC's translation unit."""
    source = tvm.tirx.build(func, target="c", pipeline=PIPELINE).inspect_source()
    header = re.search(rf"^TVM_DLL {return_type} {symbol}\((?P<args>[^)]*)\) {{\n", source,
                       re.M)
    if header is None:
        raise CodegenError(f"CodeGenC emitted no definition of {symbol}")
    end = source.index("\n}\n", header.end())
    body = source[header.end():end + 3]
    if re.search(r"tvm|TVM", body):
        raise CodegenError(f"{symbol} still refers to the TVM runtime")
    return header["args"], body


@functools.cache
def requantize_c_function() -> str:
    """``static inline int32_t serenity_mbqm(int32_t x, int32_t multiplier, int32_t shift)``:
    TFLite's ``MultiplyByQuantizedMultiplier`` for multipliers in ``(-2^31, 2^31)``, lowered from
    :func:`.kernels.requantize` (the expression every generated kernel inlines)."""
    args, body = _lower_to_c(requantize_prim_func(), REQUANTIZE_SYMBOL, "int32_t")
    return (f"/* TFLite MultiplyByQuantizedMultiplier (double rounding) for multipliers in "
            f"(-2^31, 2^31),\n * generated from tvm_serenity.codegen.kernels.requantize. */\n"
            f"static inline int32_t {REQUANTIZE_SYMBOL}({args}) {{\n{body}")
