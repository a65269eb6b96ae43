"""Turn a TFLite model into tvm-serenity's graph IR (:class:`tvm_serenity.graph.Graph`).

One node per operator that produces an activation, in stored (TFLite execution) order, plus one
``input`` node per graph input; weights and other constants are not nodes. Each node carries
its output tensor's bytes (elements x itemsize), shape and dtype, and attrs: ``tflite_op`` (the
builtin name), ``tflite_index`` (operator index), ``tensor`` (TFLite tensor name) and the
op-specific geometry below. Op names follow :mod:`tvm_serenity.zoo`: ``conv2d``,
``depthwise_conv2d``, ``avg_pool2d``, ``max_pool2d``, ``fully_connected``, ``mean``, ``add``,
``mul``, ``concatenation``, ``strided_slice``, ..., else the lower-cased TFLite name.

* conv2d / depthwise_conv2d: ``kernel``, ``stride``, ``dilation``, ``padding`` as
  ``[top, bottom, left, right]`` (TFLite ``SAME`` puts the odd row/column at the bottom/right),
  ``groups``, ``in_shape``, ``out_shape``, ``activation`` (fused, lower-case, absent if none);
* avg_pool2d / max_pool2d: ``kernel``, ``stride``, ``padding``, shapes;
* strided_slice: ``begin``, ``end``, ``strides`` (the constant operands as stored),
  ``begin_mask``, ``end_mask``, ``shrink_axis_mask`` (and ``offset`` when set), shapes;
* others: ``in_shapes``/``out_shape`` and their parameters (``axis``, ``perm``, ...).

The model is first checked by :func:`.reference.validate` (what TFLite Micro's ``Prepare``
refuses is refused here, naming the operator), so the geometry read below is consistent.

In-place flags (graph IR semantics, docs/rip.md): convolutions, depthwise convolutions, pooling
and global MEAN (axes 1 and 2) get ``inplace = inplace_workspace_bytes(...)`` (the one rule of
:mod:`tvm_serenity.rip`: the Right In-Place workspace, or the zero-gap channel-wise kind for a
depthwise convolution; pooling and MEAN as depthwise windows); FULLY_CONNECTED gets
``fully_connected_inplace_bytes(...)`` (in place only where the arena saving beats the row
gather it needs in place, so never for a single row);
elementwise operators whose first input has the output's exact size (ADD, MUL, RELU, RELU6,
HARD_SWISH, LOGISTIC, SOFTMAX and LOG_SOFTMAX of int8 or float32, int8->int8 QUANTIZE) are ``"alias"``; a float32 <-> int8
QUANTIZE / DEQUANTIZE gets the workspace ``max(in, out)`` bytes (the int8 tensor at its start
or end); ARG_MAX is an ``"alias"`` (its smaller int32 output starting where the input starts)
over float32, or over int8 along the last axis of at least 4 values, as its kernel proves
(:mod:`tvm_serenity.codegen.ops`); RESHAPE is an ``"alias"`` too, which the memory model
charges nothing for (``W = bytes``) whenever it is its input's last reader. Everything else is
plain.

``fold_pad=True`` removes an explicit PAD/PADV2 whose only readers are CONV_2D /
DEPTHWISE_CONV_2D (as their data input) and adds its spatial padding to theirs. That is exact
in TFLite's int8 arithmetic: PAD fills with the output zero point ``z``, and the convolution
subtracts ``z`` from every tap (``acc += w * (x - z)``), so a padded tap contributes
``w * 0``, exactly like a tap the kernel skips as out of bounds (tests check this against the
reference interpreter). Pooling cannot absorb a PAD: AVERAGE_POOL excludes padding from its
divisor and MAX_POOL ignores it, while an explicit PAD's ``z`` values take part.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..graph import Graph, Node
from ..rip import fully_connected_inplace_bytes, inplace_workspace_bytes
from .reference import same_padding, validate
from ..text import counted
from .tflite_model import Operator, TFLiteModel, UnsupportedOperatorError, load_tflite

__all__ = ["tflite_to_graph", "foldable_pads", "operator_node", "GRAPH_OPS"]

#: TFLite builtin -> graph IR op name (others: the TFLite name lower-cased).
GRAPH_OPS = {"CONV_2D": "conv2d", "DEPTHWISE_CONV_2D": "depthwise_conv2d",
             "AVERAGE_POOL_2D": "avg_pool2d", "MAX_POOL_2D": "max_pool2d",
             "STRIDED_SLICE": "strided_slice"}

_ELEMENTWISE = {"ADD", "MUL", "RELU", "RELU6", "RELU_N1_TO_1", "HARD_SWISH", "LOGISTIC",
                "SOFTMAX", "LOG_SOFTMAX", "QUANTIZE", "RESHAPE"}
_CONVS = {"CONV_2D", "DEPTHWISE_CONV_2D"}


def _spatial_pads(model: TFLiteModel, op: Operator) -> tuple[int, int, int, int] | None:
    """``(top, bottom, left, right)`` of a PAD that pads only H and W of a 4-D tensor."""
    src = model.tensors[op.inputs[0]]
    paddings = model.tensors[op.inputs[1]].data if len(op.inputs) > 1 else None
    if paddings is None or len(src.shape) != 4 or paddings.shape != (4, 2):
        return None
    p = [[int(v) for v in row] for row in paddings]
    if p[0] != [0, 0] or p[3] != [0, 0] or min(p[1] + p[2]) < 0:
        return None
    return p[1][0], p[1][1], p[2][0], p[2][1]


def foldable_pads(model: TFLiteModel) -> dict[int, tuple[int, int, int, int]]:
    """PAD operator index -> spatial padding, for every PAD the convolutions reading it can
    absorb (see the module docstring for the conditions)."""
    consumers = model.consumers()
    outputs = set(model.outputs)
    out: dict[int, tuple[int, int, int, int]] = {}
    for op in model.operators:
        if op.op not in ("PAD", "PADV2"):
            continue
        dst = model.tensors[op.outputs[0]]
        if dst.dtype != "int8" or dst.quant is None or op.outputs[0] in outputs:
            continue
        pads = _spatial_pads(model, op)
        if pads is None:
            continue
        if op.op == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            value = model.tensors[op.inputs[2]].data
            if value is None or int(value.reshape(-1)[0]) != dst.quant.scalar_zero_point:
                continue
        readers = [model.operator(i) for i in consumers.get(op.outputs[0], [])]
        if readers and all(r.op in _CONVS and r.inputs[0] == op.outputs[0]
                           and op.outputs[0] not in r.inputs[1:] for r in readers):
            out[op.index] = pads
    return out


def tflite_to_graph(model: TFLiteModel | str | os.PathLike, fold_pad: bool = True,
                    name: str | None = None) -> Graph:
    """The graph IR of ``model`` (a :class:`TFLiteModel` or a ``.tflite`` path)."""
    if not isinstance(model, TFLiteModel):
        model = load_tflite(model)
    validate(model)
    folded = foldable_pads(model) if fold_pad else {}
    node_of: dict[int, str] = {}           # activation tensor index -> producing node name
    extra_pad: dict[int, tuple[int, int, int, int]] = {}   # tensor read through a folded PAD
    nodes: list[Node] = []
    for k, t_index in enumerate(model.inputs):
        t = model.tensors[t_index]
        node_of[t_index] = f"input_{k}"
        nodes.append(Node(f"input_{k}", "input", (), t.nbytes, t.shape, t.dtype,
                          {"tensor": t.name, "tensor_index": t_index}))
    for op in model.operators:
        if op.index in folded:
            src = op.inputs[0]
            node_of[op.outputs[0]] = node_of[src]
            extra_pad[op.outputs[0]] = folded[op.index]
            continue
        if len(op.outputs) != 1:
            raise UnsupportedOperatorError(
                f"{model.where(op)} has {counted(len(op.outputs), 'output')}; the graph IR "
                "needs one tensor per node", op.op, op.index)
        inputs = []
        for i in op.inputs:
            if i < 0 or model.tensors[i].data is not None:
                continue
            if i not in node_of:
                raise UnsupportedOperatorError(
                    f"{model.where(op)} reads tensor {i} ('{model.tensors[i].name}'), which "
                    "no operator writes", op.op, op.index)
            inputs.append(node_of[i])
        nodes.append(_node(model, op, tuple(inputs), extra_pad))
        node_of[op.outputs[0]] = nodes[-1].name
    outputs = [node_of[i] for i in model.outputs]
    return Graph(nodes, outputs, name or model.name)


def operator_node(model: TFLiteModel, op: Operator,
                  pre_pad: tuple[int, int, int, int] | None = None) -> Node:
    """The node of ``op`` alone (no inputs): its bytes, shape, geometry and in-place flag as
    :func:`tflite_to_graph` gives them, with ``pre_pad`` (``(top, bottom, left, right)``) the
    padding of a PAD a convolution (or a PADV2 of -128 a MAX_POOL_2D) absorbs: the window's
    geometry is then on the tensor before the PAD, ``op``'s input."""
    return _node(model, op, (), {} if pre_pad is None else {op.inputs[0]: tuple(pre_pad)})


def _node(model: TFLiteModel, op: Operator, inputs: tuple[str, ...],
          extra_pad: dict[int, tuple[int, int, int, int]]) -> Node:
    out = model.tensors[op.outputs[0]]
    acts = [model.tensors[i] for i in op.inputs if i >= 0 and model.tensors[i].data is None]
    attrs: dict[str, Any] = {"tflite_op": op.op, "tflite_index": op.index, "tensor": out.name}
    inplace: str | int | None = None
    o = op.options
    if op.op in _CONVS:
        attrs_conv, inplace = _conv(model, op, extra_pad.get(op.inputs[0]))
        attrs.update(attrs_conv)
    elif op.op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        (n, h, w, c) = acts[0].shape
        kernel = (o["filter_height"], o["filter_width"])
        stride = (o["stride_h"], o["stride_w"])
        padding = same_padding(o.get("padding", "VALID"), (h, w), kernel, stride)
        pre_pad = extra_pad.get(op.inputs[0])
        if pre_pad is not None:     # a PADV2 of -128 a MAX_POOL_2D absorbs (its own padding)
            padding = tuple(a + b for a, b in zip(padding, pre_pad))
            h, w = h - pre_pad[0] - pre_pad[1], w - pre_pad[2] - pre_pad[3]
        inplace = inplace_workspace_bytes(GRAPH_OPS[op.op], (h, w, c), c, kernel, stride,
                                          (1, 1), padding, c, out.itemsize)
        attrs.update(kernel=list(kernel), stride=list(stride), padding=list(padding),
                     in_shape=[n, h, w, c], out_shape=list(out.shape), **_activation(op))
    else:
        attrs.update(in_shapes=[list(t.shape) for t in acts], out_shape=list(out.shape))
        attrs.update(_params(model, op))
        inplace = _simple_inplace(model, op, acts, out)
    name = GRAPH_OPS.get(op.op, op.op.lower())
    return Node(f"{name}_{op.index}", name, inputs, out.nbytes, out.shape, out.dtype, attrs,
                inplace)


def _conv(model: TFLiteModel, op: Operator, pre_pad) -> tuple[dict[str, Any], int]:
    x = model.tensors[op.inputs[0]]
    w = model.tensors[op.inputs[1]]
    out = model.tensors[op.outputs[0]]
    o = op.options
    _, h, wd, c = x.shape
    if op.op == "CONV_2D":
        kh, kw, groups = w.shape[1], w.shape[2], c // w.shape[3]
    else:
        kh, kw, groups = w.shape[1], w.shape[2], c
    stride = (o.get("stride_h", 1), o.get("stride_w", 1))
    dilation = (o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1))
    padding = same_padding(o.get("padding", "VALID"), (h, wd), (kh, kw), stride, dilation)
    in_shape = list(x.shape)
    if pre_pad is not None:   # the PAD this conv absorbs: geometry on the unpadded input
        padding = tuple(a + b for a, b in zip(padding, pre_pad))
        h, wd = h - pre_pad[0] - pre_pad[1], wd - pre_pad[2] - pre_pad[3]
        in_shape = [x.shape[0], h, wd, c]
    cout = out.shape[3]
    # a grouped CONV_2D and a depthwise one with a depth multiplier run as the dense
    # convolution (codegen.kernel_call): its workspace
    dense = op.op == "CONV_2D" or cout != c
    workspace = inplace_workspace_bytes("conv2d" if dense else GRAPH_OPS[op.op], (h, wd, c),
                                        cout, (kh, kw), stride, dilation, padding,
                                        1 if dense else groups, out.itemsize)
    attrs = {"kernel": [kh, kw], "stride": list(stride), "dilation": list(dilation),
             "padding": list(padding), "groups": groups, "in_shape": in_shape,
             "out_shape": list(out.shape), **_activation(op)}
    if pre_pad is not None:
        attrs["folded_pad"] = list(pre_pad)
    return attrs, workspace


def _params(model: TFLiteModel, op: Operator) -> dict[str, Any]:
    """Constant operands and options worth keeping, as JSON-friendly values."""
    o = op.options

    def const(i: int):
        t = model.tensors[op.inputs[i]] if i < len(op.inputs) and op.inputs[i] >= 0 else None
        return None if t is None or t.data is None else np.asarray(t.data).tolist()

    if op.op == "MEAN":
        return {"axis": const(1), "keep_dims": bool(o.get("keep_dims", False))}
    if op.op in ("PAD", "PADV2"):
        return {"paddings": const(1)}
    if op.op == "TRANSPOSE":
        return {"perm": const(1)}
    if op.op == "STRIDED_SLICE":
        attrs = {"begin": const(1), "end": const(2), "strides": const(3),
                 **{k: int(o.get(k, 0)) for k in ("begin_mask", "end_mask",
                                                  "shrink_axis_mask")}}
        if o.get("offset"):
            attrs["offset"] = True
        return attrs
    if op.op == "CONCATENATION":
        return {"axis": o.get("axis", 0)}
    if op.op == "RESIZE_NEAREST_NEIGHBOR":
        return {"size": const(1), "align_corners": bool(o.get("align_corners", False)),
                "half_pixel_centers": bool(o.get("half_pixel_centers", False))}
    if op.op == "FULLY_CONNECTED":
        return {"units": model.tensors[op.inputs[1]].shape[0], **_activation(op)}
    return _activation(op)


def _activation(op: Operator) -> dict[str, str]:
    """A fused activation as :mod:`tvm_serenity.zoo` writes it (``{"activation": "relu6"}``)."""
    act = op.options.get("fused_activation_function", "NONE")
    return {} if act == "NONE" else {"activation": act.lower()}


def _simple_inplace(model: TFLiteModel, op: Operator, acts, out) -> str | int | None:
    if not acts:
        return None
    first = acts[0]
    if op.op in ("QUANTIZE", "DEQUANTIZE") and first.itemsize != out.itemsize:
        # float32 <-> int8 edge: one elementwise pass over a workspace of the larger tensor,
        # the narrower one at its start (QUANTIZE) or end (DEQUANTIZE); front-to-back order
        # never overwrites an element before it is read (rip.md, a 1x1 window)
        return max(first.nbytes, out.nbytes)
    if op.op == "ARG_MAX":
        axis = int(model.tensors[op.inputs[1]].data.reshape(-1)[0]) % len(first.shape)
        over_int8 = axis == len(first.shape) - 1 and first.shape[axis] >= 4
        return "alias" if first.dtype == "float32" or over_int8 else None
    if op.op in _ELEMENTWISE:
        return "alias" if first.nbytes == out.nbytes and (
            op.op not in ("ADD", "MUL") or first.shape == out.shape) else None
    if op.op == "MEAN":
        axis = model.tensors[op.inputs[1]].data
        axes = [] if axis is None else sorted({int(a) % len(first.shape) for a in axis.ravel()})
        if len(first.shape) == 4 and axes == [1, 2]:
            _, h, w, c = first.shape
            return inplace_workspace_bytes("mean", (h, w, c), c, (h, w), (1, 1), (1, 1),
                                           (0, 0, 0, 0), c, out.itemsize)
        return None
    if op.op == "FULLY_CONNECTED":
        units = model.tensors[op.inputs[1]].shape[0]
        rows = out.size // units           # batches: one "pixel" per input row
        return fully_connected_inplace_bytes(rows, first.size // rows, units, out.itemsize)
    return None
