"""``FoldPad``: fold an explicit int8 PAD into the padding of the convolutions that read it.

What it changes, in every Relax function (not inside kernels): a binding ``xp = pad(x)`` that
calls a *pad kernel* (a function with attribute ``Primitive`` whose body is one constant-mode
``R.nn.pad`` of a 4-D NHWC tensor by non-negative amounts along H and W only) disappears when
every use of ``xp`` is as the input of an *integer convolution kernel* that shifts it by the pad
value before its ``conv2d`` (``conv2d(int16(xp) - v, w, ...)``, the form
:mod:`tvm_serenity.frontend.relax_import` and :class:`~.fakequant.LowerFakeQuant` emit). Each such
call then reads ``x`` through a copy of its kernel, named ``<kernel>_padded``, whose ``conv2d``
padding is larger by the PAD's (kernels are added with ``BlockBuilder.add_func``, so identical
copies are shared), and kernels no longer called are removed (``DeadCodeElimination``). Nothing
else changes; a PAD read by anything else (pooling, an output, a different shift) stays.

Why it is exact: TFLite's int8 PAD fills with the output zero point ``z`` and the convolution
sums ``w * (x - z)``, so a padded tap contributes ``w * 0``, exactly what the convolution's own
padding contributes to the shifted input. Pooling cannot absorb a PAD: AVERAGE_POOL divides by
the in-bounds tap count and MAX_POOL ignores padding, while an explicit PAD's ``z`` values take
part (:func:`tvm_serenity.frontend.to_graph.foldable_pads` states the same rule for the graph IR).

Run it before ``LegalizeOps`` (the pipeline has it in ``BEFORE_LEGALIZE``, after
``LowerFakeQuant``). The names of the PAD bindings it removed are kept on the instance as
``.folded`` (``function:variable``).
"""

from __future__ import annotations

import tvm
from tvm import relax

from .convert import is_op, relax_functions
from .pipeline import BEFORE_LEGALIZE

__all__ = ["FoldPad"]

_SHIFT_DTYPES = ("int16", "int32")


def _pad_kernel(func) -> tuple[tuple[int, int, int, int], float] | None:
    """``((top, bottom, left, right), value)`` if ``func`` is a pad kernel (module docstring)."""
    if not (isinstance(func, relax.Function) and func.attrs is not None
            and "Primitive" in func.attrs and len(func.params) == 1
            and len(func.body.blocks) == 1 and len(func.body.blocks[0].bindings) == 1):
        return None
    binding = func.body.blocks[0].bindings[0]
    call = binding.value
    if not (is_op(call, "relax.nn.pad") and call.args[0].same_as(func.params[0])
            and func.body.body.same_as(binding.var) and call.attrs.pad_mode == "constant"):
        return None
    ty = binding.var.ty
    widths = [int(w) for w in call.attrs.pad_width]
    if not (isinstance(ty, relax.TensorType) and ty.ndim == 4 and ty.dtype == "int8"
            and len(widths) == 8 and widths[:2] == [0, 0] and widths[6:] == [0, 0]
            and min(widths) >= 0):
        return None
    return (widths[2], widths[3], widths[4], widths[5]), float(call.attrs.pad_value)


def _scalar(expr) -> float | None:
    if isinstance(expr, tvm.ir.Constant) and isinstance(expr.ty, relax.TensorType) \
            and expr.ty.ndim == 0:
        return float(expr.value.numpy())
    return None


def _uses(bindings) -> dict[relax.Var, list[relax.Binding]]:
    """Variable -> the bindings whose value uses it (once per use)."""
    out: dict[relax.Var, list[relax.Binding]] = {}
    for b in bindings:
        if not isinstance(b.value, relax.Call):
            for v in relax.analysis.free_vars(b.value):
                out.setdefault(v, []).append(b)
            continue
        for arg in b.value.args:
            for v in arg.fields if isinstance(arg, relax.Tuple) else [arg]:
                if isinstance(v, relax.Var):
                    out.setdefault(v, []).append(b)
    return out


def _padded_conv(func: relax.Function, index: int, value: float) -> relax.Binding | None:
    """The ``conv2d`` binding of kernel ``func`` whose data is ``int16(param[index]) - value``
    and nothing else reads that parameter (see the module docstring), or None."""
    if not (isinstance(func, relax.Function) and func.attrs is not None
            and "Primitive" in func.attrs and len(func.body.blocks) == 1):
        return None
    bindings = func.body.blocks[0].bindings
    uses = _uses(bindings)
    chain = []
    var = func.params[index]
    for check in (lambda c: is_op(c, "relax.astype") and c.attrs.dtype in _SHIFT_DTYPES,
                  lambda c: is_op(c, "relax.subtract") and c.args[0].same_as(chain[-1].var)
                  and _scalar(c.args[1]) == value,
                  lambda c: is_op(c, "relax.nn.conv2d") and c.args[0].same_as(chain[-1].var)
                  and c.attrs.data_layout == "NHWC"):
        readers = uses.get(var, [])
        if len(readers) != 1 or var.same_as(func.body.body) or not check(readers[0].value):
            return None
        chain.append(readers[0])
        var = readers[0].var
    return chain[-1]


def _with_input(func: relax.Function, index: int, ty: relax.TensorType, conv: relax.Binding,
                pads) -> relax.Function:
    """``func`` with parameter ``index`` of type ``ty`` and ``conv``'s padding grown by
    ``pads`` = (top, bottom, left, right); every binding re-emitted so types follow."""
    params = list(func.params)
    params[index] = relax.Var(params[index].name, ty)
    subst = {func.params[index]: params[index]}

    def arg(a):
        if isinstance(a, relax.Tuple):
            return relax.Tuple([arg(f) for f in a.fields])
        return subst.get(a, a)

    top, bottom, left, right = pads
    kb = relax.BlockBuilder()
    with kb.function("kernel", params, func.attrs, private=True):
        with kb.dataflow():
            for b in func.body.blocks[0].bindings:
                call = b.value
                if b.same_as(conv):
                    a = call.attrs
                    p = [int(v) for v in a.padding]
                    value = relax.op.nn.conv2d(
                        arg(call.args[0]), arg(call.args[1]), a.strides,
                        (p[0] + top, p[1] + left, p[2] + bottom, p[3] + right), a.dilation,
                        int(a.groups), a.data_layout, a.kernel_layout, a.out_layout,
                        a.out_dtype)
                else:
                    value = relax.Call(call.op, [arg(x) for x in call.args], call.attrs,
                                       call.ty_args)
                emit = kb.emit_output if b.var.same_as(func.body.body) else kb.emit
                subst[b.var] = emit(value, b.var.name)
        kb.emit_func_output(subst[func.body.body])
    return kb.get()["kernel"]


@tvm.transform.module_pass(opt_level=0, name="serenity.FoldPad")
class FoldPad:
    """Fold explicit int8 PADs into the padding of the convolutions reading them (see the module
    docstring for the exact conditions)."""

    def __init__(self):
        self.folded: list[str] = []

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        self.folded = []
        bb = relax.BlockBuilder(mod)
        updates = {}
        for gvar, func in relax_functions(mod):
            new = self._fold_function(bb, func, gvar.name_hint)
            if new is not None:
                updates[gvar] = new
        if not updates:
            return mod
        for gvar, func in updates.items():
            bb.update_func(gvar, func)
        return relax.transform.DeadCodeElimination()(bb.get())

    def _fold_function(self, bb: relax.BlockBuilder, func: relax.Function, fname: str):
        """``func`` with its foldable PADs folded, or None if it has none."""
        bindings = [b for block in func.body.blocks for b in block.bindings]
        uses = _uses(bindings)
        escaping = set(relax.analysis.free_vars(func.body.body))
        replaced: dict[relax.Binding, relax.Call] = {}
        for b in bindings:
            pad = (_pad_kernel(bb.get()[b.value.op]) if isinstance(b.value, relax.Call)
                   and isinstance(b.value.op, tvm.ir.GlobalVar) else None)
            if pad is None or b.var in escaping or not uses.get(b.var):
                continue
            source = b.value.args[0]
            calls = {}
            for reader in uses[b.var]:
                call = replaced.get(reader, reader.value)
                positions = [k for k, a in enumerate(call.args) if a.same_as(b.var)]
                kernel = bb.get()[call.op] if isinstance(call.op, tvm.ir.GlobalVar) else None
                conv = (_padded_conv(kernel, positions[0], pad[1])
                        if kernel is not None and len(positions) == 1 else None)
                if conv is None:
                    break
                gv = bb.add_func(_with_input(kernel, positions[0], source.ty, conv, pad[0]),
                                 f"{call.op.name_hint}_padded")
                args = [source if a.same_as(b.var) else a for a in call.args]
                calls[reader] = relax.Call(gv, args)
            else:
                replaced.update(calls)
                self.folded.append(f"{fname}:{b.var.name}")
        if not replaced:
            return None
        blocks = [type(block)([relax.VarBinding(b.var, replaced[b]) if b in replaced else b
                               for b in block.bindings]) for block in func.body.blocks]
        new = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty,
                             func.is_pure, func.attrs, func.span)
        return relax.BlockBuilder().normalize(new)


BEFORE_LEGALIZE.append(lambda **_: FoldPad())
