"""Import an int8 TFLite model into Relax with integer semantics, bit-exact with TFLite Micro.

TVM 0.27's TFLite frontend turns every quantized operator into float arithmetic between
``dequantize`` and ``quantize`` (and refuses quantized PAD, TRANSPOSE and
RESIZE_NEAREST_NEIGHBOR). :func:`from_tflite` instead calls, for each operator, the integer
kernel TFLite Micro's arithmetic is written in for every target of this project: the TIR
kernel :func:`tvm_serenity.codegen.kernel_call.kernel_call` names for it (:mod:`.reference` is
the specification; the microcontroller C is the same PrimFunc printed as C).

**Module layout: one kernel call per TFLite operator.** ``main`` has one dataflow block with one
binding per operator, in stored (TFLite execution) order, each named after the operator's
output tensor (sanitized, see :func:`tensor_var_names`)::

    y = R.call_tir(conv2d_5, (x, weight, bias, multiplier, shift), R.Tensor(y's shape, "int8"))

``conv2d_5`` (named like the operator's node in :func:`~.to_graph.tflite_to_graph`) is the
operator's PrimFunc in the form ``R.call_tir`` calls (:meth:`~tvm_serenity.codegen.kernel_call.
KernelCall.relax_func`: the activations as the tensors they are, its constant tables --
packed weights, biases, per-channel multipliers and shifts, lookup tables -- as flat constant
arguments, its scratch its own). So the tensors between kernels are exactly the TFLite
activation tensors: an int32 accumulator or a lookup index never leaves its kernel, and nothing
of two operators is fused into one kernel. A RESHAPE is a Relax function of one ``R.reshape``
(a view once legalized). The float32 SOFTMAX / LOG_SOFTMAX that models put after their int8
core, whose microcontroller kernels are C (:mod:`tvm_serenity.codegen.ops`: their ``exp`` and
``log`` are C helpers), are Relax functions here too (:func:`softmax_float` and
:func:`log_softmax_float`, below), TFLite's ``reference_ops`` in float32 (on ``llvm``
``exp``/``log`` are the process's libm: glibc's, as TFLite Micro's Python wrapper calls, bit
for bit).

**Every kernel says what it computes.** Each carries its :class:`OperatorDescription` (the
TFLite operator, options, tensors with their quantization, its constants in TFLite's layout,
which call argument holds each activation) and the :func:`kernel_hash` of the kernel described,
as function attributes: the microcontroller route reads ``main`` back as operators through them
(:mod:`.relax_lift`), the passes rewrite a kernel by rewriting its description
(:class:`~tvm_serenity.passes.FoldPad`, :class:`~tvm_serenity.passes.RiPLowering`), and a pass
that changes a kernel but keeps the attributes invalidates its description.
:func:`emit_operator` writes one such call into any ``BlockBuilder`` function, so a model built
by hand deploys like an imported one; :func:`operator_call` is what all of them (and
:class:`~tvm_serenity.passes.LowerFakeQuant`) emit through.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from typing import Callable, Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.script import relax as R

from ..graph import unique_name
from . import reference as ref
from .reference import table_of
from .tflite_model import (Operator, Quantization, Tensor, TFLiteModel, check_operators,
                           load_tflite)
from .to_graph import GRAPH_OPS, operator_node

__all__ = ["from_tflite", "SUPPORTED_OPS", "tensor_var_names", "kernel_function",
           "operator_call", "table_of", "row_max_float", "softmax_float", "log_softmax_float",
           "OperatorDescription", "describe_operator", "quant_description",
           "tensor_description", "described_tensor", "operator_model", "kernel_callee", "INHERIT",
           "spatial_pad",
           "OPERATOR_ATTR", "CONSTANTS_ATTR", "KERNEL_HASH_ATTR", "kernel_hash",
           "emit_operator"]


# ====================================== float32 operators after the int8 core (Relax functions)
#: float32's lowest value (``std::numeric_limits<float>::lowest()``, TFLite's initial maximum).
_FLOAT32_LOWEST = float(np.finfo(np.float32).min)


def _first_max_index(x: relax.Expr, axis: int) -> relax.Expr:
    """The int64 index (``keepdims``) along ``axis`` of the first value no later value
    exceeds, comparing as TFLite does (a NaN and -inf below every other value), from float64
    keys above ``argmax``'s identity: NaN and -inf become ``-2 * FLT_MAX``."""
    key = R.astype(x, "float64")
    if x.ty.dtype == "float32":
        low = R.logical_or(R.isnan(x), R.equal(x, relax.const(-np.inf, "float32")))
        key = R.where(low, relax.const(2.0 * _FLOAT32_LOWEST, "float64"), key)
    return R.argmax(key, axis=axis, keepdims=True)


def row_max_float(x: relax.Expr) -> relax.Expr:
    """:func:`.reference.row_max_float` (``keepdims``): the first maximal value of each row,
    its sign included (``-0`` before ``+0`` stays), ``lowest()`` for a row of NaN and -inf."""
    first = R.gather_elements(x, _first_max_index(x, -1), axis=-1)
    low = R.logical_or(R.isnan(first), R.equal(first, relax.const(-np.inf, "float32")))
    return R.where(low, relax.const(_FLOAT32_LOWEST, "float32"), first)


def softmax_float(x: relax.Expr, beta: float) -> relax.Expr:
    """:func:`.reference.softmax_float`: ``exp((x - max) * beta)``, summed along the last
    axis, each divided by the sum, in float32."""
    e = R.exp(R.multiply(R.subtract(x, row_max_float(x)), relax.const(np.float32(beta),
                                                                        "float32")))
    return R.divide(e, R.sum(e, axis=-1, keepdims=True))


def log_softmax_float(x: relax.Expr) -> relax.Expr:
    """:func:`.reference.log_softmax_float`: ``(x - max) - log(sum exp(x - max))``."""
    d = R.subtract(x, row_max_float(x))
    return R.subtract(d, R.log(R.sum(R.exp(d), axis=-1, keepdims=True)))


# ==================================================================== operator descriptions
DESCRIPTION_PREFIX = "serenity"
INHERIT = "inherit"     # a description's quantization: the producer's / the first input's
OPERATOR_ATTR = "serenity.operator"      # the description as JSON text
CONSTANTS_ATTR = "serenity.constants"    # its constant tensors, in TFLite's layout
KERNEL_HASH_ATTR = "serenity.kernel_hash"   # the kernel it describes (a pass may change it)


def kernel_hash(func) -> str:
    """The structural hash of a kernel (a Relax function or a PrimFunc) without its
    attributes: parameters, body and type."""
    if isinstance(func, tirx.PrimFunc):
        bare = tirx.PrimFunc(func.params, func.body, func.ret_type)
    else:
        bare = relax.Function(func.params, func.body, func.ret_ty, func.is_pure)
    return str(tvm_ffi.structural_hash(bare, map_free_vars=True))


def _json_value(value):
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_json_value(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _options_value(value):
    return tuple(_options_value(v) for v in value) if isinstance(value, list) else value


def quant_description(scale, zero_point=0, axis: int = 0) -> dict:
    """Affine quantization as a description holds it: the float32 scales (exactly, as Python
    floats), the zero points broadcast to them, the axis."""
    scales = np.atleast_1d(np.asarray(scale, np.float32))
    zero_points = np.broadcast_to(np.asarray(zero_point, np.int64), scales.shape)
    return {"scale": [float(v) for v in scales], "zero_point": [int(z) for z in zero_points],
            "axis": int(axis)}


def tensor_description(t: Tensor) -> dict:
    """Name, shape, dtype and quantization of ``t`` as JSON (:func:`quant_description`)."""
    quant = None if t.quant is None else quant_description(t.quant.scale, t.quant.zero_point,
                                                           t.quant.axis)
    return {"name": t.name, "shape": [int(d) for d in t.shape], "dtype": t.dtype,
            "quant": quant}


def described_tensor(index: int, entry: dict, data: np.ndarray | None = None) -> Tensor:
    """The :class:`Tensor` ``index`` that :func:`tensor_description` gave ``entry``."""
    q = entry.get("quant")
    quant = None if q is None else Quantization(
        np.asarray(q["scale"], np.float32), np.asarray(q["zero_point"], np.int64),
        int(q.get("axis", 0)))
    if data is not None:
        data = np.asarray(data).reshape(entry["shape"])
        data.setflags(write=False)
    return Tensor(index, entry["name"], tuple(entry["shape"]), entry["dtype"], quant, data)


@dataclasses.dataclass(frozen=True)
class OperatorDescription:
    """The integer operator a kernel computes, in the terms of TFLite's int8 operator set
    (:mod:`.reference` is the specification): the builtin name, its options and, per operator
    input, the tensor (:func:`tensor_description`) plus where its value is: ``"arg": k``,
    argument ``k`` of the kernel's call (an activation, or a constant operand of ADD/MUL/
    CONCATENATION), or ``"constant": j``, ``constants[j]`` (weights, biases, shapes, axes in
    TFLite's own layout, which the kernel has already folded into its own form); ``None`` for
    an omitted optional input. ``pad``: ``{"paddings": [[before, after], ...], "value": v}``
    when the kernel pads its first input with ``v`` before the operator (whose own padding is
    then VALID): read back as a PAD (``v`` the zero point) or PADV2 before it, for a window
    whose explicit padding TFLite's SAME/VALID cannot say (``"index"``: the PAD's own number in
    its source file, when a pass folded one). ``index`` is the operator's number in its
    source file (None: none). Kept as function attributes with the kernel's
    :func:`kernel_hash`, so it holds for as long as no pass changes the kernel (a pass that
    does, keeping the attributes, leaves a kernel without description);
    :func:`tvm_serenity.frontend.relax_lift.operators_of` reads it back."""

    op: str
    options: dict
    inputs: tuple[dict | None, ...]
    outputs: tuple[dict, ...]
    constants: tuple[np.ndarray, ...] = ()
    index: int | None = None
    pad: dict | None = None

    def attrs(self, prefix: str = DESCRIPTION_PREFIX) -> dict:
        """The attributes holding the description (keys ``<prefix>.operator`` and
        ``<prefix>.constants``)."""
        text = json.dumps({"op": self.op, "options": _json_value(self.options),
                           "inputs": list(self.inputs), "outputs": list(self.outputs),
                           "index": self.index, "pad": self.pad})
        return {f"{prefix}.operator": text,
                f"{prefix}.constants": [tvm.runtime.tensor(np.ascontiguousarray(c))
                                        for c in self.constants]}

    def describe(self, func, prefix: str = DESCRIPTION_PREFIX):
        """``func`` (a kernel) with this description and its :func:`kernel_hash` as
        attributes; another ``prefix`` keeps it where :meth:`of` with the default does not
        look (a kernel that computes the operator another way, e.g. in place)."""
        for key, value in {**self.attrs(prefix),
                           f"{prefix}.kernel_hash": kernel_hash(func)}.items():
            func = func.with_attr(key, value)
        return func

    @staticmethod
    def of(func, prefix: str = DESCRIPTION_PREFIX) -> OperatorDescription | None:
        """The description in the attributes of ``func`` (None when it has none, or when a
        pass changed the kernel after it was described and kept the attributes)."""
        key = f"{prefix}.operator"
        if not isinstance(func, (relax.Function, tirx.PrimFunc)) or func.attrs is None \
                or key not in func.attrs \
                or str(func.attrs.get(f"{prefix}.kernel_hash", "")) != kernel_hash(func):
            return None
        d = json.loads(str(func.attrs[key]))
        consts = tuple(c.numpy() for c in func.attrs[f"{prefix}.constants"]) \
            if f"{prefix}.constants" in func.attrs else ()
        options = {k: _options_value(v) for k, v in d["options"].items()}
        return OperatorDescription(d["op"], options, tuple(d["inputs"]), tuple(d["outputs"]),
                                   consts, d.get("index"), d.get("pad"))


def describe_operator(model: TFLiteModel, op: Operator, positions: Mapping[int, int],
                      index: int | None = -1, pad: dict | None = None) -> OperatorDescription:
    """The description of ``op`` whose kernel call passes operator input ``i`` as argument
    ``positions[i]`` (an activation, or a constant operand passed as data); its other inputs
    are constants. ``index``: the operator number kept (-1: ``op.index``); ``pad``: as
    :class:`OperatorDescription` says."""
    inputs, constants = [], []
    for k, i in enumerate(op.inputs):
        if i < 0:
            inputs.append(None)
            continue
        t = model.tensors[i]
        entry = tensor_description(t)
        if k in positions:
            entry["arg"] = positions[k]
        elif t.data is not None:
            entry["constant"] = len(constants)
            constants.append(t.data)
        else:
            raise ValueError(f"{model.where(op)}: activation input {k} is not passed")
        inputs.append(entry)
    outputs = tuple(tensor_description(model.tensors[i]) for i in op.outputs)
    return OperatorDescription(op.op, dict(op.options), tuple(inputs), outputs,
                               tuple(constants), op.index if index == -1 else index, pad)


# ========================================================================= kernel functions
def kernel_function(name: str, inputs: Sequence[relax.Expr],
                    body: Callable[..., relax.Expr],
                    operator: OperatorDescription | None = None
                    ) -> tuple[relax.Function, list[relax.Expr]]:
    """One kernel: a private Relax function with attribute ``Primitive`` computing
    ``body(*params)`` (one parameter per input, typed like it), and the arguments to call it
    with. ``FuseTIR`` accepts no tensor constant inside a primitive function, so every
    non-scalar constant ``body`` uses becomes a parameter of its own (arguments: ``inputs``,
    then those constants); scalars stay inline, where ``LegalizeOps`` folds them into the
    elementwise ops. ``body`` must not compute anything from constants alone (``FoldConstant``
    would make that a tensor constant again): a constant operand is an input. ``operator``:
    the integer operator the kernel computes, kept in its attributes
    (:class:`OperatorDescription`; ``arg`` ``k`` of it is ``inputs[k]``)."""
    params = [relax.Var(v.name if isinstance(v, relax.Var) else f"x{i}", v.ty)
              for i, v in enumerate(inputs)]
    kb = relax.BlockBuilder()
    with kb.function(name, params, {"Primitive": True}, private=True):
        with kb.dataflow():
            out = kb.emit_output(body(*params))
        kb.emit_func_output(out)
    func = kb.get()[name]
    consts: list[tvm.ir.Constant] = []
    const_params: list[relax.Var] = []

    def lift(arg):
        if (isinstance(arg, tvm.ir.Constant) and isinstance(arg.ty, relax.TensorType)
                and arg.ty.ndim > 0):
            consts.append(arg)
            const_params.append(relax.Var(f"c{len(consts) - 1}", arg.ty))
            return const_params[-1]
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([lift(f) for f in arg.fields])
        return arg

    bindings = []
    for b in func.body.blocks[0].bindings:
        value = b.value
        if isinstance(value, relax.Call):
            value = relax.Call(value.op, [lift(a) for a in value.args], value.attrs,
                               value.ty_args)
        bindings.append(relax.VarBinding(b.var, value))
    func = relax.Function(params + const_params,
                          relax.SeqExpr([relax.DataflowBlock(bindings)], func.body.body),
                          func.ret_ty, func.is_pure, func.attrs)
    func = relax.BlockBuilder().normalize(func)
    if operator is not None:
        func = operator.describe(func)
    return func, [*inputs, *consts]


# ============================================================================ TFLite import
def _sanitize(name: str) -> str:
    name = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_")
    return name if name[:1].isalpha() or name[:1] == "_" else f"t_{name}"


def tensor_var_names(model: TFLiteModel) -> dict[int, str]:
    """Tensor index -> Relax variable name, for every non-constant tensor: the TFLite name up to
    its first ``;`` (converters join the names of fused nodes with ``;``), without a first path
    component that most names share (``MobileNetV3Small_1/``), non-identifier characters as
    ``_``; repeated names get ``_1``, ``_2``... suffixes."""
    heads = {t.index: (t.name.split(";")[0] or f"tensor_{t.index}") for t in model.tensors
             if t.data is None}
    firsts = Counter(h.split("/")[0] for h in heads.values() if "/" in h)
    common = [p for p, n in firsts.items() if 2 * n > len(heads)]
    out: dict[int, str] = {}
    taken: set[str] = set()
    for index, head in heads.items():
        if common and head.startswith(common[0] + "/"):
            head = head[len(common[0]) + 1:]
        name = unique_name(_sanitize(head) or f"tensor_{index}", taken, start=1)
        taken.add(name)
        out[index] = name
    return out


def kernel_callee(value) -> tuple[tvm.ir.GlobalVar | None, list]:
    """The kernel a call calls and its arguments: ``R.call_tir(kernel, (args...), ...)`` or
    ``kernel(args...)`` (a Relax function); ``(None, [])`` for anything else."""
    if not isinstance(value, relax.Call):
        return None, []
    if isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.call_tir" \
            and isinstance(value.args[0], tvm.ir.GlobalVar) and len(value.args) == 2:
        return value.args[0], list(value.args[1].fields)
    if isinstance(value.op, tvm.ir.GlobalVar):
        return value.op, list(value.args)
    return None, []


def operator_model(description: OperatorDescription, args: Sequence | None = None,
                   source: str = "description") -> tuple[TFLiteModel, Operator]:
    """The one-operator :class:`TFLiteModel` of ``description`` (activations are its graph
    inputs, constants its constant tensors; with a ``pad``, the operator reads the padded
    tensor) and the operator. ``args``: the call's arguments, for a data operand passed as a
    constant (its value is read off the constant); ``source``: what messages name it by."""
    tensors, inputs, graph_inputs = [], [], []
    for k, entry in enumerate(description.inputs):
        if entry is None:
            inputs.append(-1)
            continue
        if k == 0 and description.pad is not None:     # the operator reads the padded tensor
            entry = {**entry, "shape": [n + int(a) + int(b) for n, (a, b) in
                                        zip(entry["shape"], description.pad["paddings"])]}
        data = description.constants[entry["constant"]] if "constant" in entry else None
        if data is None and args is not None:
            arg = args[entry["arg"]]
            if isinstance(arg, tvm.ir.Constant):
                data = arg.value.numpy()
        tensors.append(described_tensor(len(tensors), entry, data))
        inputs.append(tensors[-1].index)
        if data is None:
            graph_inputs.append(tensors[-1].index)
    out = described_tensor(len(tensors), description.outputs[0])
    tensors.append(out)
    op = Operator(0 if description.index is None else description.index, description.op,
                  tuple(inputs), (out.index,), dict(description.options))
    model = TFLiteModel(description.outputs[0]["name"], tuple(tensors), (op,),
                        tuple(graph_inputs), (out.index,), source=source)
    return model, op


def spatial_pad(description: OperatorDescription) -> tuple[int, int, int, int] | None:
    """``(top, bottom, left, right)`` of the PAD a described window applies first (None)."""
    if description.pad is None:
        return None
    (top, bottom), (left, right) = description.pad["paddings"][1:3]
    return int(top), int(bottom), int(left), int(right)


def operator_call(bb: relax.BlockBuilder, model: TFLiteModel, op: Operator,
                  values: Mapping[int, relax.Expr], *, name: str | None = None,
                  pre_pad=None, pad_index: int | None = None, index: int | None = -1,
                  inherit: bool = False) -> relax.Expr:
    """The call of ``op``'s integer kernel (module docstring) on ``values`` (tensor index ->
    Relax expression, for its activation inputs), the kernel added to ``bb``'s module as
    ``name`` (default: the operator's node name) with its description; ``pre_pad``: a PAD the
    window applies first (``(top, bottom, left, right)``, the description's ``pad``;
    ``pad_index``: the number of the PAD operator in its source file, if it had one);
    ``index``: the operator number the description keeps (-1: the operator's own);
    ``inherit``: the operator computes in whatever quantization its input has (its
    activations and output are described as :data:`INHERIT`)."""
    from ..codegen.kernel_call import Operand, kernel_call
    node = operator_node(model, op, pre_pad)
    fname = name or node.name
    out = model.tensors[op.outputs[0]]
    out_ty = relax.TensorType(tuple(out.shape), out.dtype)
    kc = kernel_call(model, op, node, name=fname)
    pad = None if pre_pad is None else {
        "paddings": [[0, 0], [pre_pad[0], pre_pad[1]], [pre_pad[2], pre_pad[3]], [0, 0]],
        "value": ref.INT8_MIN if op.op == "MAX_POOL_2D"
        else model.tensors[op.inputs[0]].quant.scalar_zero_point,
        **({} if pad_index is None else {"index": pad_index})}
    if kc.spec is None and kc.prim_func is None:    # RESHAPE; float SOFTMAX, LOG_SOFTMAX
        args = [values[i] for i in op.inputs if i >= 0 and model.tensors[i].data is None]
        positions = {k: n for n, k in enumerate(
            k for k, i in enumerate(op.inputs) if i >= 0 and model.tensors[i].data is None)}
        description = describe_operator(model, op, positions, index, pad)
        func, call_args = kernel_function(fname, args, _FLOAT_LOWER[op.op](model, op),
                                          description)
        return relax.Call(bb.add_func(func, fname), call_args)
    types = [_passed_type(values.get(i), model.tensors[i]) if i >= 0 else None
             for i in op.inputs]
    func, inputs = kc.relax_func(types, (tuple(out.shape), out.dtype))
    positions = {a.index if isinstance(a, Operand) else a.operand: k
                 for k, a in enumerate(inputs)
                 if isinstance(a, Operand) or a.operand is not None}
    description = describe_operator(model, op, positions, index, pad)
    if pad is not None:         # the kernel reads the tensor before the PAD
        first = {**description.inputs[0], "shape": list(types[0][0])}
        description = dataclasses.replace(description,
                                          inputs=(first, *description.inputs[1:]))
    if inherit:
        description = dataclasses.replace(
            description,
            inputs=tuple({**e, "quant": INHERIT} if e is not None and "arg" in e else e
                         for e in description.inputs),
            outputs=tuple({**e, "quant": INHERIT} for e in description.outputs))
    func = description.describe(func.without_attr("global_symbol"))
    args = [values[op.inputs[a.index]] if isinstance(a, Operand) else
            relax.const(np.ascontiguousarray(a.values, a.dtype).reshape(-1), a.dtype)
            for a in inputs]
    return relax.op.call_tir(bb.add_func(func, fname), relax.Tuple(args), out_ty)


def _passed_type(value: relax.Expr | None, tensor: Tensor) -> tuple[tuple[int, ...], str]:
    """``(shape, dtype)`` of the Relax tensor passed for ``tensor`` (its own without one)."""
    ty = getattr(value, "ty", None)
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        return tuple(int(d) for d in ty.shape.values), str(ty.dtype.dtype)
    return tuple(tensor.shape), tensor.dtype


def _float_softmax(model: TFLiteModel, op: Operator):
    if op.op == "LOG_SOFTMAX":
        return log_softmax_float
    beta = op.options.get("beta", 1.0)
    return lambda x: softmax_float(x, beta)


#: The operators whose kernel here is a Relax function (module docstring): RESHAPE (a view)
#: and the float32 SOFTMAX / LOG_SOFTMAX after the int8 core.
_FLOAT_LOWER = {"SOFTMAX": _float_softmax, "LOG_SOFTMAX": _float_softmax,
                "RESHAPE": lambda model, op: lambda x: R.reshape(
                    x, tuple(model.tensors[op.outputs[0]].shape))}


def _supported_ops():
    from ..codegen.kernel_call import KERNEL_OPS
    return frozenset(KERNEL_OPS)


#: TFLite operators :func:`from_tflite` imports (int8 activations; QUANTIZE from float32 and
#: DEQUANTIZE to float32 at the edges, float32 SOFTMAX / LOG_SOFTMAX, ARG_MAX): those with a
#: kernel of :func:`~tvm_serenity.codegen.kernel_call.kernel_call`.
SUPPORTED_OPS = _supported_ops()


def emit_operator(bb: relax.BlockBuilder, op: str, inputs: Sequence, output: Sequence,
                  options: dict | None = None, name: str | None = None) -> relax.Var:
    """Emit one integer operator of :data:`SUPPORTED_OPS` into ``bb``'s current dataflow
    block, as :func:`from_tflite` writes it (a described kernel, so the module deploys to a
    microcontroller too), and return its variable. Building a model with ``BlockBuilder``::

        y = emit_operator(bb, "CONV_2D", [(x, 0.05, -3), (w, w_scales), (b, b_scales)],
                          ((1, 8, 8, 16), "int8", 0.1, -128),
                          {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                           "fused_activation_function": "RELU6"})

    Each input is ``(value, scale, zero_point=0, axis=0)``, ``(value,)`` (no quantization) or
    None (an omitted optional input): ``value`` a Relax tensor expression of ``bb`` (an
    activation) or a numpy array (a constant, in TFLite's layout: OHWI filters, ``1 x KH x KW
    x C`` depthwise filters, per-channel scales along axis 0 / 3); ``output`` is ``(shape,
    dtype, scale, zero_point)``; ``options`` the TFLite builtin options (snake_case, as
    :mod:`.tflite_model` reads them). The operator is checked as TFLite Micro's ``Prepare``
    would (the reference interpreter's checks); errors name it."""
    tensors, op_inputs, values = [], [], {}
    for k, spec in enumerate(inputs):
        if spec is None:
            op_inputs.append(-1)
            continue
        value, *quant = spec
        scale, zero_point, axis = (list(quant) + [None, 0, 0][len(quant):])[:3]
        q = None if scale is None else Quantization(
            np.atleast_1d(np.asarray(scale, np.float32)),
            np.broadcast_to(np.atleast_1d(np.asarray(zero_point, np.int64)),
                            np.atleast_1d(scale).shape).copy(), int(axis))
        if isinstance(value, np.ndarray):
            data = np.ascontiguousarray(value)
            data.setflags(write=False)
            tensors.append(Tensor(len(tensors), f"{name or op.lower()}_input{k}", value.shape,
                                  str(value.dtype), q, data))
        else:
            ty = value.ty
            tname = value.name if isinstance(value, relax.Var) else f"input{k}"
            tensors.append(Tensor(len(tensors), tname,
                                  tuple(int(d) for d in ty.shape.values), str(ty.dtype.dtype), q))
            values[tensors[-1].index] = value
        op_inputs.append(tensors[-1].index)
    shape, dtype, scale, zero_point = output
    out_q = None if scale is None else Quantization(np.asarray([scale], np.float32),
                                                    np.asarray([zero_point], np.int64))
    out_name = name or op.lower()
    tensors.append(Tensor(len(tensors), out_name, tuple(shape), dtype, out_q))
    operator = Operator(0, op, tuple(op_inputs), (len(tensors) - 1,), dict(options or {}))
    model = TFLiteModel(out_name, tuple(tensors), (operator,), tuple(values),
                        (len(tensors) - 1,), source=f"emit_operator({op})")
    check_operators(model, SUPPORTED_OPS, "Relax importer")
    ref.Interpreter(model)                      # the reference's checks, as from_tflite's
    call = operator_call(bb, model, operator, values,
                         name=f"{GRAPH_OPS.get(op, op.lower())}_{out_name}", index=None)
    return bb.emit(call, name_hint=out_name)


def from_tflite(model: TFLiteModel | str | os.PathLike) -> tvm.IRModule:
    """Import an int8 TFLite model (a :class:`TFLiteModel` or a ``.tflite`` path) as a Relax
    module with integer semantics, bit-exact with TFLite Micro (see the module docstring).

    ``main`` takes the model's inputs (named after their tensors) in model order and returns its
    output, or a tuple of its outputs. Raises :class:`~.tflite_model.UnsupportedOperatorError`
    for an operator outside :data:`SUPPORTED_OPS` and :class:`~.reference.ReferenceError` (or
    the former) for one the reference interpreter rejects (same checks, same messages).
    """
    if not isinstance(model, TFLiteModel):
        model = load_tflite(model)
    check_operators(model, SUPPORTED_OPS, "Relax importer")
    ref.Interpreter(model)                      # the reference's validation of every operator
    names = tensor_var_names(model)
    values: dict[int, relax.Expr] = {}
    params = []
    for i in model.inputs:
        t = model.tensors[i]
        values[i] = relax.Var(names[i], relax.TensorType(t.shape, t.dtype))
        params.append(values[i])
    outputs = set(model.outputs)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for op in model.operators:
                call = operator_call(bb, model, op, values)
                out = op.outputs[0]
                emit = bb.emit_output if out in outputs else bb.emit
                values[out] = emit(call, name_hint=names[out])
        results = [values[i] for i in model.outputs]
        bb.emit_func_output(results[0] if len(results) == 1 else relax.Tuple(results))
    return bb.get()
