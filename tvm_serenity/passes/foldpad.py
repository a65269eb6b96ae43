"""``FoldPad``: fold an explicit int8 PAD into the padding of the convolutions that read it.

What it changes, in every Relax function (not inside kernels): a binding ``xp = PAD(x)`` (a
described kernel call, :mod:`.described`, of a PAD or a PADV2 of the output zero point that pads
only H and W of a 4-D int8 tensor by non-negative amounts) disappears when every use of ``xp``
is as the data input of a CONV_2D or DEPTHWISE_CONV_2D kernel call that pads nothing else
first. Each such call then reads ``x`` through the kernel of the same convolution whose
padding is larger by the PAD's: its description says so (``pad``: the PAD the kernel applies,
read back by :func:`~tvm_serenity.frontend.relax_lift.operators_of` as the PAD and the
convolution), and its kernel is :func:`~tvm_serenity.codegen.kernel_call.kernel_call`'s for
that geometry (the microcontroller's folded convolution). Kernels no longer called are removed
(``DeadCodeElimination``). Nothing else changes; a PAD read by anything else (pooling, an
output, a PADV2 of another value) stays.

Why it is exact: TFLite's int8 PAD fills with the output zero point ``z`` and the convolution
sums ``w * (x - z)``, so a padded tap contributes ``w * 0``, exactly what the convolution's own
padding contributes (a tap it skips). Pooling cannot absorb a PAD: AVERAGE_POOL divides by the
in-bounds tap count and MAX_POOL ignores padding, while an explicit PAD's ``z`` values take part
(:func:`tvm_serenity.frontend.to_graph.foldable_pads` states the same rule for the graph IR).

Run it before ``LegalizeOps`` (the pipeline has it in ``BEFORE_LEGALIZE``, after
``LowerFakeQuant``). The names of the PAD bindings it removed are kept on the instance as
``.folded`` (``function:variable``).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..frontend.relax_import import operator_call
from .convert import relax_functions
from .described import DescribedCall, described_call
from .pipeline import BEFORE_LEGALIZE

__all__ = ["FoldPad"]

_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def _spatial_pad(call: DescribedCall) -> tuple[int, int, int, int] | None:
    """``(top, bottom, left, right)`` of a PAD the convolutions reading it can absorb (module
    docstring), or None."""
    d = call.description
    if d.op not in ("PAD", "PADV2") or d.inputs[0] is None or "arg" not in d.inputs[0]:
        return None
    out = d.outputs[0]
    quant = out.get("quant")
    if out["dtype"] != "int8" or not isinstance(quant, dict) or len(out["shape"]) != 4:
        return None
    model, op = call.model()
    paddings = model.tensors[op.inputs[1]].data
    if paddings is None or paddings.shape != (4, 2):
        return None
    p = [[int(v) for v in row] for row in paddings]
    if p[0] != [0, 0] or p[3] != [0, 0] or min(p[1] + p[2]) < 0:
        return None
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        value = model.tensors[op.inputs[2]].data
        if value is None or int(np.asarray(value).reshape(-1)[0]) != quant["zero_point"][0]:
            return None
    return p[1][0], p[1][1], p[2][0], p[2][1]


def _uses(bindings) -> dict[relax.Var, list[relax.Binding]]:
    """Variable -> the bindings whose value uses it (once per use)."""
    out: dict[relax.Var, list[relax.Binding]] = {}
    for b in bindings:
        for v in relax.analysis.free_vars(b.value):
            out.setdefault(v, []).append(b)
    return out


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
        mod = bb.get()
        bindings = [b for block in func.body.blocks for b in block.bindings]
        uses = _uses(bindings)
        escaping = set(relax.analysis.free_vars(func.body.body))
        replaced: dict[relax.Binding, relax.Expr] = {}
        for b in bindings:
            pad_call = described_call(mod, b.value)
            pads = _spatial_pad(pad_call) if pad_call is not None else None
            if pads is None or b.var in escaping or not uses.get(b.var):
                continue
            calls = {}
            for reader in uses[b.var]:
                conv = described_call(mod, reader.value)
                data = conv.arg(0) if conv is not None else None
                if conv is None or conv.op not in _CONVS or conv.description.pad is not None \
                        or data is None or not data.same_as(b.var) \
                        or sum(a.same_as(b.var) for a in conv.args) != 1:
                    break
                model, op = conv.model()
                calls[reader] = operator_call(bb, model, op, {op.inputs[0]: pad_call.arg(0)},
                                              name=f"{conv.kernel.name_hint}_padded",
                                              pre_pad=pads, index=conv.description.index,
                                              pad_index=pad_call.description.index)
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
