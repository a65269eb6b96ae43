"""Read the integer operators of a Relax module back as the operator list the MCU back end
compiles: the Relax -> microcontroller step of the one route (#18).

Every integer kernel this project writes into Relax (:func:`~.relax_import.from_tflite`,
:class:`~tvm_serenity.passes.LowerFakeQuant`, :func:`~.relax_import.emit_operator` for a
``BlockBuilder``) carries the operator it computes (:class:`~.relax_import.OperatorDescription`:
TFLite's builtin, options, each input's tensor and quantization and where its value is).
:func:`operators_of` walks ``main``'s bindings **in the order they have now** (so after
:class:`~tvm_serenity.passes.MemoryAwareSchedule`, in the scheduled order) and rebuilds a
:class:`~.tflite_model.TFLiteModel`:

* ``main``'s parameters are the model's inputs (their name and quantization: what their first
  reader says), its result (one tensor or a tuple) the outputs;
* each binding ``y = R.call_tir(kernel, (args...), ...)`` (or ``y = kernel(args...)``, a
  Relax function) is one operator whose inputs are the tensors of the arguments the
  description names (a constant argument, e.g. the constant operand of a MUL, becomes a
  constant tensor) and the description's own constants (the kernel's other arguments, its
  tables, are the same constants in the kernel's layout); ``y`` is its output tensor;
  ``y = x`` (a variable alias) and ``t = (a, b)`` (the result's tuple) add nothing;
* a kernel that pads its input first (the description's ``pad``) is read as a PAD or PADV2
  and the operator after it, both for the one binding;
* tensors are numbered in order of appearance; operators keep their source file's number when
  the description has one (so graph node names, ``conv2d_5``, are the file's).

Every tensor's quantization is stated twice, by its producer and by each reader: they must
agree, as must shapes and dtypes with the Relax types (a kernel that computes in its input's
quantization without knowing it, e.g. the integer average pool TVM's TFLite frontend writes,
says ``"quant": "inherit"``: its input is what the producer says, its output the same).
Anything else in ``main`` (a float op left by a front end, a kernel without description as
``RiPLowering`` and ``IdentityGraphRewrite`` write them, one a pass changed) is refused
with :class:`LiftError` naming the binding and what it computes. The result is checked by the
reference interpreter, the specification every back end is checked against (its errors name
the operator).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..errors import SerenityError
from .reference import Interpreter
from .relax_import import (INHERIT, OperatorDescription, described_tensor, kernel_callee,
                           quant_description)
from .tflite_model import Operator, Tensor, TFLiteModel

__all__ = ["LiftError", "operators_of", "read_main", "INHERIT"]


_PLAIN = ("relax.permute_dims", "relax.reshape", "relax.dequantize")


def _static_shape(ty) -> list[int] | None:
    """The dimensions of a tensor type, or None when it has no static shape."""
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr) \
            or not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return None
    return [int(d) for d in ty.shape.values]


def _scalar(expr) -> float | None:
    if isinstance(expr, tvm.ir.Constant) and expr.ty.ndim == 0:
        return expr.value.numpy().item()
    return None


class LiftError(SerenityError):
    """A Relax module holds something the microcontroller route cannot compile."""


def _what(value) -> str:
    if isinstance(value, relax.Call):
        callee = kernel_callee(value)[0]
        if callee is not None:
            return f"kernel '{callee.name_hint}'"
        if isinstance(value.op, tvm.ir.Op):
            return value.op.name.removeprefix("relax.")
        return "a call"
    return type(value).__name__


class _Lift:
    def __init__(self, mod: tvm.IRModule, name: str, source: str):
        self.mod, self.name, self.source = mod, name, source
        self.tensors: list[Tensor] = []
        self.of_var: dict[relax.Var, int] = {}
        self.entries: dict[int, tuple[dict | None, str]] = {}   # tensor -> (quant, who said)
        self.params: set[int] = set()
        self.follows: dict[int, int] = {}   # a moved graph input's tensor -> the input
        self.bindings: list[relax.Binding] = []               # one per operator
        self.operators: list[Operator] = []

    def fail(self, what: str) -> LiftError:
        return LiftError(f"{self.source}: {what}")

    def new_tensor(self, entry: dict, data=None) -> int:
        index = len(self.tensors)
        self.tensors.append(described_tensor(index, entry, data))
        return index

    def check_type(self, entry: dict, ty, who: str) -> None:
        shape = _static_shape(ty)
        if shape is not None:
            dtype = str(ty.dtype.dtype)
            if shape != list(entry["shape"]) or dtype != entry["dtype"]:
                raise self.fail(f"{who}: the kernel says tensor '{entry['name']}' is "
                                f"{entry['dtype']} {list(entry['shape'])}, Relax has it as "
                                f"{dtype} {shape}")

    def read(self, index: int, entry: dict, who: str) -> None:
        """``entry`` (a reader's view of tensor ``index``) agrees with what is known."""
        t = self.tensors[index]
        if list(t.shape) != list(entry["shape"]) or t.dtype != entry["dtype"]:
            raise self.fail(f"{who} reads '{t.name}' as {entry['dtype']} "
                            f"{list(entry['shape'])}, it is {t.dtype} {list(t.shape)}")
        if index not in self.entries:
            # a graph input (or a transpose / reshape of one): its first reader says how it is
            # quantized (and what a graph input is called)
            if entry.get("quant") == INHERIT:
                raise self.fail(f"{who} reads the graph input '{t.name}' in whatever "
                                "quantization it has, and nothing says which")
            self.state(index, entry.get("quant"), who,
                       entry["name"] if index in self.params else t.name)
            return
        known, said = self.entries[index]
        if entry.get("quant") == INHERIT:
            return
        if known != entry.get("quant"):
            raise self.fail(f"{who} reads '{t.name}' quantized as {entry.get('quant')}, "
                            f"{said} as {known}")

    def state(self, index: int, quant: dict | None, who: str, name: str) -> None:
        """Tensor ``index`` (not stated yet) is quantized as ``quant``, ``who`` says; so is the
        graph input it moves, if any."""
        t = self.tensors[index]
        self.tensors[index] = described_tensor(index, {"name": name, "shape": list(t.shape),
                                                       "dtype": t.dtype, "quant": quant}, t.data)
        self.entries[index] = (quant, who)
        if index in self.follows:
            source = self.follows.pop(index)
            self.state(source, quant, who, self.tensors[source].name)

    def plain(self, position: int, var: relax.Var, call: relax.Call) -> Operator | None:
        """A Relax data-movement op on a tensor of main, read as the TFLite operator it is
        (``permute_dims`` TRANSPOSE, ``reshape`` RESHAPE, keeping the quantization, and
        ``dequantize`` of int8 by scalars DEQUANTIZE), or None."""
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        if name not in _PLAIN or not call.args or call.args[0] not in self.of_var:
            return None
        source = self.tensors[self.of_var[call.args[0]]]
        shape = _static_shape(var.ty)
        if shape is None:
            raise self.fail(f"main: binding '{var.name}' has no static shape")
        stated = source.index in self.entries
        entry = {"name": var.name, "shape": shape, "dtype": str(var.ty.dtype.dtype),
                 "quant": self.entries[source.index][0] if stated else None}
        inputs = [source.index]
        if name == "relax.permute_dims":
            axes = call.attrs.axes
            perm = list(range(len(source.shape)))[::-1] if axes is None else \
                [int(a) for a in axes]
            inputs.append(self.new_tensor({"name": f"{var.name}_perm", "shape": [len(perm)],
                                           "dtype": "int32", "quant": None},
                                          np.asarray(perm, np.int32)))
            op, options = "TRANSPOSE", {}
        elif name == "relax.reshape":
            inputs.append(self.new_tensor({"name": f"{var.name}_shape", "shape": [len(shape)],
                                           "dtype": "int32", "quant": None},
                                          np.asarray(shape, np.int32)))
            op, options = "RESHAPE", {"new_shape": tuple(shape)}
        else:
            scale, zero_point = (_scalar(a) for a in call.args[1:3])
            if scale is None or zero_point is None or source.dtype != "int8":
                return None
            q = quant_description(scale, zero_point)
            self.read(source.index, {"name": source.name, "shape": list(source.shape),
                                     "dtype": "int8", "quant": q}, f"main: binding "
                      f"'{var.name}' (DEQUANTIZE)")
            op, options, entry, stated = "DEQUANTIZE", {}, {**entry, "quant": None}, True
        out = self.new_tensor(entry)
        if stated:
            self.entries[out] = (entry["quant"], f"main: binding '{var.name}' ({op})")
        else:                           # quantized as the graph input it moves: its reader
            self.follows[out] = source.index                                 # will say
        self.of_var[var] = out
        return Operator(position, op, tuple(inputs), (out,), options)

    def operator(self, position: int, var: relax.Var, call: relax.Call) -> list[Operator]:
        """The operator ``var = call`` computes (after the PAD its kernel applies, if any)."""
        who = f"main: binding '{var.name}'"
        plain = self.plain(position, var, call)
        if plain is not None:
            return [plain]
        callee, args = kernel_callee(call)
        func = self.mod[callee] if callee is not None else None
        desc = OperatorDescription.of(func) if func is not None else None
        if desc is None:
            why = ("which does not say which integer operator it computes (kernels of "
                   "from_tflite, LowerFakeQuant, emit_operator and FoldPad do; RiPLowering and "
                   "IdentityGraphRewrite write kernels only the llvm route compiles)"
                   if func is not None else
                   "not an integer kernel (a float or unlowered operator: run LowerFakeQuant, "
                   "or import with from_tflite)")
            raise self.fail(f"{who} computes {_what(call)}, {why}")
        who = f"{who} ({desc.op})"
        pads = [] if desc.pad is None else [self.pad_operator(desc, call, who)]
        inputs = []
        for entry in desc.inputs:
            if entry is None:
                inputs.append(-1)
            elif "constant" in entry:
                inputs.append(self.new_tensor(entry, desc.constants[entry["constant"]]))
            else:
                arg = args[entry["arg"]]
                if pads and not inputs:                 # the first input, padded
                    inputs.append(pads[0].outputs[0])
                elif isinstance(arg, relax.Var) and arg in self.of_var:
                    self.read(self.of_var[arg], entry, who)
                    inputs.append(self.of_var[arg])
                elif isinstance(arg, tvm.ir.Constant):
                    inputs.append(self.new_tensor(entry, arg.value.numpy()))
                else:
                    raise self.fail(f"{who}: argument {entry['arg']} ({_what(arg)}) is "
                                    "neither a tensor of main nor a constant")
        if len(desc.outputs) != 1:
            raise self.fail(f"{who}: {len(desc.outputs)} outputs, the route takes one")
        self.check_type(desc.outputs[0], var.ty, who)
        output = desc.outputs[0]
        if output.get("quant") == INHERIT:          # quantized as its first input
            first = self.tensors[inputs[0]].quant
            output = {**output, "quant": None if first is None else quant_description(
                first.scale, first.zero_point, first.axis)}
        out = self.new_tensor(output)
        self.entries[out] = (output.get("quant"), who)
        self.of_var[var] = out
        index = position + len(pads) if desc.index is None else desc.index
        return [*pads, Operator(index, desc.op, tuple(inputs), (out,), dict(desc.options))]

    def pad_operator(self, desc: OperatorDescription, call: relax.Call, who: str) -> Operator:
        """The PAD (or PADV2, for a value other than the zero point) a kernel applies to its
        first input before the operator (``desc.pad``)."""
        entry = desc.inputs[0]
        arg = kernel_callee(call)[1][entry["arg"]]
        if not (isinstance(arg, relax.Var) and arg in self.of_var):
            raise self.fail(f"{who}: a padded input must be a tensor of main")
        source = self.of_var[arg]
        self.read(source, entry, who)
        paddings = np.asarray(desc.pad["paddings"], np.int32)
        shape = [n + int(a) + int(b) for n, (a, b) in zip(entry["shape"], paddings)]
        value = int(desc.pad["value"])
        quant = entry.get("quant")
        zero_point = quant["zero_point"][0] if quant else 0
        inputs = [source, self.new_tensor({"name": f"{entry['name']}_paddings",
                                           "shape": [len(shape), 2], "dtype": "int32",
                                           "quant": None}, paddings)]
        op = "PAD"
        if value != zero_point:
            op = "PADV2"
            inputs.append(self.new_tensor({"name": f"{entry['name']}_pad_value", "shape": [1],
                                           "dtype": entry["dtype"], "quant": quant},
                                          np.asarray([value], entry["dtype"])))
        out = self.new_tensor({**entry, "name": f"{entry['name']}_padded", "shape": shape})
        self.entries[out] = (quant, who)
        return Operator(desc.pad.get("index", len(self.operators)), op, tuple(inputs), (out,),
                        {})

    def lift(self) -> TFLiteModel:
        if not any(gv.name_hint == "main" for gv in self.mod.functions):
            raise self.fail("the module has no 'main' function")
        main = self.mod["main"]
        if not isinstance(main, relax.Function):
            raise self.fail("'main' is not a Relax function")
        inputs = []
        for p in main.params:
            shape = _static_shape(p.ty)
            if shape is None:
                raise self.fail(f"main: parameter '{p.name}' is not a tensor of static shape "
                                f"({p.ty}); a microcontroller build has fixed shapes")
            inputs.append(self.new_tensor({"name": p.name, "dtype": str(p.ty.dtype.dtype),
                                           "shape": shape, "quant": None}))
            self.of_var[p] = inputs[-1]
            self.params.add(inputs[-1])
        operators = self.operators
        tuples: dict[relax.Var, relax.Tuple] = {}     # the result, bound as a tuple
        for block in main.body.blocks:
            for b in block.bindings:
                if isinstance(b.value, relax.Var) and b.value in self.of_var:
                    self.of_var[b.var] = self.of_var[b.value]
                    continue
                if isinstance(b.value, relax.Tuple):
                    tuples[b.var] = b.value
                    continue
                if isinstance(b.value, relax.Var) and b.value in tuples:
                    tuples[b.var] = tuples[b.value]
                    continue
                if not isinstance(b, relax.VarBinding) or not isinstance(b.value, relax.Call):
                    raise self.fail(f"main: binding '{b.var.name}' computes "
                                    f"{_what(b.value)}, not an integer kernel")
                for op in self.operator(len(operators), b.var, b.value):
                    operators.append(op)
                    self.bindings.append(b)
        indices = [op.index for op in operators]
        if len(set(indices)) != len(indices):
            operators = [Operator(k, op.op, op.inputs, op.outputs, op.options)
                         for k, op in enumerate(operators)]
        result = main.body.body
        result = tuples.get(result, result)
        fields = result.fields if isinstance(result, relax.Tuple) else [result]
        outputs = []
        for f in fields:
            if not isinstance(f, relax.Var) or f not in self.of_var:
                raise self.fail(f"main returns {_what(f)}, not a tensor a kernel computes")
            outputs.append(self.of_var[f])
        model = TFLiteModel(self.name, tuple(self.tensors), tuple(operators), tuple(inputs),
                            tuple(outputs), source=self.source)
        Interpreter(model)          # the specification's checks (errors name the operator)
        return model


def operators_of(mod: tvm.IRModule, name: str = "model", source: str | None = None
                 ) -> TFLiteModel:
    """The integer operator list ``main`` of ``mod`` computes, in its binding order (module
    docstring); ``name`` names the model, ``source`` it in messages (default: ``name``)."""
    return read_main(mod, name, source)[0]


def read_main(mod: tvm.IRModule, name: str = "model", source: str | None = None
              ) -> tuple[TFLiteModel, list[relax.Binding]]:
    """:func:`operators_of` and, for each operator, the binding of ``main`` it was read from."""
    lift = _Lift(mod, name, source or name)
    return lift.lift(), lift.bindings
