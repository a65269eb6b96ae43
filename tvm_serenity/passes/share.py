"""``ShareKernels``: one kernel function per distinct computation, for TVM's own build.

Every integer kernel the importers write says which operator it computes
(:class:`~tvm_serenity.frontend.relax_import.OperatorDescription`: its tensors, quantization and
constants), so two operators whose kernels are identical up to their constant arguments (two
ReLU6 tables, two convolutions of one geometry and zero points) are two functions. The
microcontroller route reads those descriptions; TVM's llvm build does not need them, and would
compile (and plan memory for) each copy.

What it changes: the description attributes are removed from every kernel (a PrimFunc or a
``Primitive`` Relax function), then kernels that are structurally equal (parameters, body,
remaining attributes) are merged into the first of them: every call of another one
(``R.call_tir`` or direct) calls it instead, and the others are removed. Nothing a kernel
computes changes. The ``"serenity"`` pipeline runs it after the passes that read or write
descriptions (the last, :class:`~.rip.RiPLowering`, after the schedule).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..frontend.relax_import import CONSTANTS_ATTR, KERNEL_HASH_ATTR, OPERATOR_ATTR

__all__ = ["ShareKernels"]

_DESCRIPTION = (OPERATOR_ATTR, CONSTANTS_ATTR, KERNEL_HASH_ATTR)


def _kernel(func) -> bool:
    """Whether ``func`` is a kernel: a PrimFunc or a ``Primitive`` Relax function."""
    return isinstance(func, tirx.PrimFunc) or (
        isinstance(func, relax.Function) and func.attrs is not None and "Primitive" in func.attrs)


def _bare(func):
    for key in _DESCRIPTION:
        if func.attrs is not None and key in func.attrs:
            func = func.without_attr(key)
    return func


@mutator
class _Redirect(PyExprMutator):
    """Calls of merged kernels call their representative."""

    def __init__(self, mod: tvm.IRModule, target: dict):
        super().__init__(mod)
        self.target = target

    def visit_call_(self, call):
        call = super().visit_call_(call)
        op = self.target.get(call.op, call.op) if isinstance(call.op, tvm.ir.GlobalVar) \
            else call.op
        args = [self.target.get(a, a) if isinstance(a, tvm.ir.GlobalVar) else a
                for a in call.args]
        if op.same_as(call.op) and all(a.same_as(b) for a, b in zip(args, call.args)):
            return call
        return relax.Call(op, args, call.attrs, call.ty_args)


@tvm.transform.module_pass(opt_level=0, name="serenity.ShareKernels")
class ShareKernels:
    """Drop operator descriptions and merge identical kernels (module docstring). How many
    functions were merged away is kept on the instance as ``.merged``."""

    def __init__(self):
        self.merged = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        bare = {gv: _bare(f) if _kernel(f) else f for gv, f in mod.functions.items()}
        buckets: dict[int, list[tvm.ir.GlobalVar]] = {}
        target: dict[tvm.ir.GlobalVar, tvm.ir.GlobalVar] = {}
        for gv, func in bare.items():
            if not _kernel(func):
                continue
            bucket = buckets.setdefault(tvm_ffi.structural_hash(func, map_free_vars=True), [])
            first = next((g for g in bucket
                          if tvm_ffi.structural_equal(bare[g], func, map_free_vars=True)), None)
            if first is None:
                bucket.append(gv)
            else:
                target[gv] = first
        out = tvm.IRModule({gv: f for gv, f in bare.items() if gv not in target}, attrs=mod.attrs)
        if target:
            redirect = _Redirect(out, target)
            for gv, func in list(out.functions.items()):
                if isinstance(func, relax.Function) and not _kernel(func):
                    out[gv] = redirect.visit_expr(func)
        self.merged = len(target)
        return out
