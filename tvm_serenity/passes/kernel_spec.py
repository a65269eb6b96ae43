"""Reading the integer convolution kernels of :mod:`tvm_serenity.frontend.relax_import`.

A kernel is a Relax ``Primitive`` function; :func:`conv_kernel_spec` recognises an int8
convolution by its body (NHWC int8 ``conv2d`` with ``groups == 1``, or depthwise with depth
multiplier 1, of ``int16(x) - z_in``, optional bias, TFLite's requantization and clamp) and
describes it as JSON (geometry, zero points, clamp, which parameter holds each constant);
:func:`conv_kernel_constants` reads those constants off a call. :class:`~.rip.RiPLowering` and
:class:`~.rewrite.IdentityGraphRewrite` lower calls of such kernels.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .convert import is_op

__all__ = ["conv_kernel_spec", "conv_kernel_constants"]


def _scalar(expr):
    if isinstance(expr, tvm.tirx.IntImm):
        return int(expr.value)
    if (isinstance(expr, tvm.ir.Constant) and isinstance(expr.ty, relax.TensorType)
            and expr.ty.ndim == 0):
        return int(expr.value.numpy())
    return None


def conv_kernel_spec(func) -> dict | None:
    """The description of a Relax integer convolution kernel (module docstring), as a JSON
    dict: geometry, zero points, clamp and which parameter holds the weight, bias, multiplier,
    left and right shift (``-1``: absent; a scalar constant inside the body is stored by value
    under ``"<name>_value"``); None if ``func`` is not exactly such a kernel."""
    if not (isinstance(func, relax.Function) and func.attrs is not None
            and "Primitive" in func.attrs and len(func.body.blocks) == 1):
        return None
    params = list(func.params)
    index = {p: i for i, p in enumerate(params)}
    bindings = list(func.body.blocks[0].bindings)
    value_of = {b.var: b.value for b in bindings}
    allowed = {"relax.astype", "relax.subtract", "relax.nn.conv2d", "relax.add",
               "relax.multiply", "relax.right_shift", "relax.left_shift", "relax.less",
               "relax.clip"}
    if not all(isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
               and b.value.op.name in allowed for b in bindings):
        return None
    convs = [b for b in bindings if is_op(b.value, "relax.nn.conv2d")]
    if len(convs) != 1:
        return None
    conv = convs[0].value
    a = conv.attrs
    if not (a.data_layout == "NHWC" and a.kernel_layout == "HWIO" and a.out_layout == "NHWC"
            and a.out_dtype == "int32" and conv.args[1] in index):
        return None
    shifted = value_of.get(conv.args[0])
    if not (is_op(shifted, "relax.subtract") and _scalar(shifted.args[1]) is not None):
        return None
    widened = value_of.get(shifted.args[0])
    if not (is_op(widened, "relax.astype") and widened.attrs.dtype == "int16"
            and widened.args[0].same_as(params[0]) and params[0].ty.dtype == "int8"):
        return None
    x_shape = [int(d) for d in params[0].ty.shape.values]
    w_shape = [int(d) for d in params[index[conv.args[1]]].ty.shape.values]
    if len(x_shape) != 4 or x_shape[0] != 1 or len(w_shape) != 4:
        return None
    kh, kw, cin_g, cout = w_shape
    groups, cin = int(a.groups), x_shape[3]
    if groups == 1 and cin_g == cin:
        op = "conv2d"
    elif groups == cin == cout and cin_g == 1:
        op = "depthwise_conv2d"
    else:
        return None
    spec = {"op": op, "in_hwc": x_shape[1:], "out_channels": cout, "kernel": [kh, kw],
            "stride": [int(s) for s in a.strides], "dilation": [int(d) for d in a.dilation],
            "input_zero_point": _scalar(shifted.args[1]), "params": len(params),
            "weight": index[conv.args[1]]}
    top, left, bottom, right = (int(p) for p in a.padding)
    spec["padding"] = [top, bottom, left, right]

    def operand(call):          # the parameter index or the scalar value of a call's operand
        arg = call.args[1]
        if arg in index:
            return index[arg], None
        return -1, _scalar(arg)

    spec["bias"] = -1
    for b in bindings:
        if is_op(b.value, "relax.add") and b.value.args[0].same_as(convs[0].var):
            spec["bias"] = operand(b.value)[0]
    multiplies = [b.value for b in bindings if is_op(b.value, "relax.multiply")]
    lefts = [b.value for b in bindings if is_op(b.value, "relax.left_shift")]
    rights = [b.value for b in bindings if is_op(b.value, "relax.right_shift")
              and _scalar(b.value.args[1]) != 31]
    if not multiplies or len(lefts) > 1 or len(rights) > 1 or spec["bias"] == -1 and any(
            is_op(b.value, "relax.add") and b.value.args[0].same_as(convs[0].var)
            for b in bindings):
        return None
    for name, calls in (("multiplier", multiplies[:1]), ("left_shift", lefts),
                        ("right_shift", rights)):
        spec[name], spec[f"{name}_value"] = operand(calls[0]) if calls else (-1, 0)
        if spec[name] == -1 and spec[f"{name}_value"] is None:
            return None
    # result = astype(clip(add(v, z_out), lo, hi), int8)
    last = value_of.get(func.body.body)
    clip = value_of.get(last.args[0]) if is_op(last, "relax.astype") else None
    add = value_of.get(clip.args[0]) if is_op(clip, "relax.clip") else None
    if not (is_op(add, "relax.add") and last.attrs.dtype == "int8"
            and _scalar(add.args[1]) is not None and _scalar(clip.args[1]) is not None):
        return None
    spec.update(output_zero_point=_scalar(add.args[1]), act_min=_scalar(clip.args[1]),
                act_max=_scalar(clip.args[2]))
    return spec


def conv_kernel_constants(spec: dict, args) -> dict[str, np.ndarray] | None:
    """The constants of a call to a kernel described by :func:`conv_kernel_spec`, from the
    call's arguments ``args``: ``weight`` (HWIO int8), and per output channel ``bias``,
    ``multiplier`` and ``shift`` (TFLite's signed shift) as int32; None when one of them is
    not a constant or is outside ``MultiplyByQuantizedMultiplier``'s preconditions."""
    def arg(name):
        i = spec[name]
        if i == -1:
            return None
        a = args[i]
        return a.value.numpy() if isinstance(a, tvm.ir.Constant) else False

    cout = spec["out_channels"]
    weight = arg("weight")
    if weight is None or weight is False:
        return None
    values = {}
    for name in ("bias", "multiplier", "left_shift", "right_shift"):
        v = arg(name)
        if v is False:
            return None
        if v is None:
            v = spec.get(f"{name}_value") or 0
        values[name] = np.broadcast_to(np.asarray(v, dtype=np.int64), (cout,))
    shift = values["left_shift"] - values["right_shift"]
    if (np.any((values["left_shift"] > 0) & (values["right_shift"] > 0))
            or np.any(values["multiplier"] < 0) or np.any(values["multiplier"] >= 1 << 31)
            or np.any(shift < -31) or np.any(shift > 30)):
        return None
    return {"weight": np.asarray(weight, dtype=np.int8),
            "bias": values["bias"].astype(np.int32),
            "multiplier": values["multiplier"].astype(np.int32), "shift": shift.astype(np.int32)}
