"""Reading and re-emitting *described* kernel calls: how the passes see an integer operator.

Every integer kernel of this project (:mod:`tvm_serenity.frontend.relax_import`) is called as
``R.call_tir(kernel, (args...), out)`` of a PrimFunc that carries its
:class:`~tvm_serenity.frontend.relax_import.OperatorDescription` (the float32 kernels after the
int8 core are Relax functions called directly). :func:`described_call` reads a binding's value
as a :class:`DescribedCall`; :meth:`DescribedCall.model` is the one-operator TFLite model of the
description (the tensors it reads, the constants it has), from which a pass states the
operator anew and emits it with :func:`~tvm_serenity.frontend.relax_import.operator_call` -- so a
pass that changes an operator (folds a PAD into a convolution, runs it in place) changes its
description and gets the kernel of :func:`~tvm_serenity.codegen.kernel_call.kernel_call` for
it, the one kernel family the microcontroller C prints too.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm

from ..frontend.relax_import import OperatorDescription, kernel_callee, operator_model
from ..frontend.tflite_model import Operator, TFLiteModel

__all__ = ["DescribedCall", "described_call"]


@dataclass(frozen=True)
class DescribedCall:
    """A call of a described kernel: the kernel, its description and the call's arguments."""

    kernel: tvm.ir.GlobalVar
    description: OperatorDescription
    args: tuple

    @property
    def op(self) -> str:
        return self.description.op

    def arg(self, operand: int):
        """The call's argument holding operator input ``operand`` (None: a constant of the
        description, or an omitted input)."""
        entry = self.description.inputs[operand]
        return None if entry is None or "arg" not in entry else self.args[entry["arg"]]

    def model(self) -> tuple[TFLiteModel, Operator]:
        """The one-operator model of the description (:func:`operator_model`)."""
        return operator_model(self.description, self.args)


def described_call(mod: tvm.IRModule, value) -> DescribedCall | None:
    """``value`` as a :class:`DescribedCall`, or None when it calls no described kernel."""
    gvar, args = kernel_callee(value)
    if gvar is None:
        return None
    description = OperatorDescription.of(mod[gvar])
    return None if description is None else DescribedCall(gvar, description, tuple(args))
