"""Write small ``.tflite`` flatbuffers: single operators or short chains, for kernel tests.

The kernels tvm-serenity generates must match TFLite Micro bit for bit; the models in
``shared/models`` exercise only the operators they happen to contain. :class:`ModelBuilder`
assembles any int8 graph of builtin operators (schema v3, file identifier ``TFL3``) so tests can
run it through the TFLite interpreters and through :mod:`.reference`. Options are given as the
same snake_case dicts :mod:`.tflite_model` reads back (``padding="SAME"``,
``fused_activation_function="RELU6"``, ``new_shape=[1, 10]``, ...) and are written through the
``tflite`` package's generated schema functions; options that are none of the operator's
builtin options go into the model's :data:`~.tflite_model.OPTIONS_METADATA` metadata entry.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Mapping, Sequence

import flatbuffers
import numpy as np

from .tflite_model import (BUILTIN_OPS, FILE_IDENTIFIER, OPTIONS_METADATA, TENSOR_TYPES,
                           TFLiteModel, _enum_names, _schema)

__all__ = ["ModelBuilder", "tflite_bytes"]

# Options table of each builtin operator this builder can configure.
_OPTIONS_TABLE = {
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions", "ADD": "AddOptions", "MUL": "MulOptions",
    "MEAN": "ReducerOptions", "PAD": "PadOptions", "PADV2": "PadV2Options",
    "RESHAPE": "ReshapeOptions", "TRANSPOSE": "TransposeOptions",
    "CONCATENATION": "ConcatenationOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions", "SOFTMAX": "SoftmaxOptions",
    "HARD_SWISH": "HardSwishOptions", "QUANTIZE": "QuantizeOptions",
    "DEQUANTIZE": "DequantizeOptions", "STRIDED_SLICE": "StridedSliceOptions",
    "LOG_SOFTMAX": "LogSoftmaxOptions", "ARG_MAX": "ArgMaxOptions",
}
_ENUMS = {"padding": "Padding", "fused_activation_function": "ActivationFunctionType",
          "output_type": "TensorType"}


def _camel(key: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in key.split("_"))


def _split_options(op: str, options: Mapping[str, Any]) -> tuple[dict, dict]:
    """(the builtin options of ``op`` among ``options``, the others)."""
    cls_name = _OPTIONS_TABLE.get(op)
    module = None if cls_name is None else importlib.import_module(f"tflite.{cls_name}")
    builtin, extra = {}, {}
    for key, value in options.items():
        known = module is not None and hasattr(module, f"{cls_name}Add{_camel(key)}")
        (builtin if known else extra)[key] = value
    return builtin, extra


class ModelBuilder:
    """Collect tensors and operators, then :meth:`build` the flatbuffer bytes."""

    def __init__(self):
        self._tensors: list[dict[str, Any]] = []
        self._operators: list[tuple[str, list[int], list[int], dict[str, Any], int]] = []
        self._codes = {name: code for code, name in BUILTIN_OPS.items()}
        self._types = {name: code for code, name in TENSOR_TYPES.items()}
        self._extra: dict[str, dict] = {}       # operator position -> non-builtin options

    def add_tensor(self, shape: Sequence[int], dtype: str = "int8", *, scale=None,
                   zero_point=0, axis: int = 0, data=None, name: str | None = None) -> int:
        """Add a tensor; ``data`` makes it a constant. Returns its index.

        ``scale``/``zero_point`` may be scalars or per-channel sequences along ``axis``.
        """
        if dtype not in self._types:
            raise ValueError(f"unknown tensor type {dtype!r}")
        if data is not None:
            data = np.ascontiguousarray(np.asarray(data, dtype=dtype).reshape(shape))
        index = len(self._tensors)
        self._tensors.append({"shape": [int(d) for d in shape], "dtype": dtype,
                              "scale": None if scale is None else np.atleast_1d(scale),
                              "zero_point": np.atleast_1d(zero_point), "axis": axis,
                              "data": data, "name": name or f"t{index}"})
        return index

    def add_operator(self, op: str, inputs: Sequence[int], outputs: Sequence[int],
                     options: Mapping[str, Any] | None = None, version: int = 1, *,
                     omit_options: bool = False) -> None:
        """Append a builtin operator (-1 in ``inputs`` marks an omitted optional input;
        ``omit_options`` writes no options table at all, a malformed model for tests).
        ``options`` that are not builtin options of ``op`` are kept in the metadata."""
        if op not in self._codes:
            raise ValueError(f"unknown builtin operator {op!r}")
        builtin, extra = _split_options(op, options or {})
        if builtin and op not in _OPTIONS_TABLE:
            raise ValueError(f"operator {op} takes no options in this builder")
        if extra:
            self._extra[str(len(self._operators))] = extra
        self._operators.append((op, list(inputs), list(outputs),
                                None if omit_options else builtin, version))

    # ----------------------------------------------------------------------- serialization
    def build(self, inputs: Sequence[int], outputs: Sequence[int],
              description: str = "tvm-serenity ModelBuilder") -> bytes:
        schema = _schema()
        b = flatbuffers.Builder(1024)

        buffers = [self._buffer(b, None)]
        tensors = []
        for t in self._tensors:
            buffer_index = 0
            if t["data"] is not None:
                buffer_index = len(buffers)
                buffers.append(self._buffer(b, t["data"].tobytes()))
            tensors.append(self._tensor(b, t, buffer_index))

        used = list(dict.fromkeys(op for op, *_ in self._operators))
        codes = []
        for name in used:
            code = self._codes[name]
            schema.OperatorCodeStart(b)
            schema.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            schema.OperatorCodeAddBuiltinCode(b, code)
            schema.OperatorCodeAddVersion(b, max(v for o, *_, v in self._operators if o == name))
            codes.append(schema.OperatorCodeEnd(b))

        operators = []
        for name, ins, outs, options, _ in self._operators:
            in_vec = b.CreateNumpyVector(np.array(ins, dtype=np.int32))
            out_vec = b.CreateNumpyVector(np.array(outs, dtype=np.int32))
            opt_type, opt = self._options(b, name, options)
            schema.OperatorStart(b)
            schema.OperatorAddOpcodeIndex(b, used.index(name))
            schema.OperatorAddInputs(b, in_vec)
            schema.OperatorAddOutputs(b, out_vec)
            if opt is not None:
                schema.OperatorAddBuiltinOptionsType(b, opt_type)
                schema.OperatorAddBuiltinOptions(b, opt)
            operators.append(schema.OperatorEnd(b))

        tensors_vec = self._offsets(b, tensors)
        ops_vec = self._offsets(b, operators)
        in_vec = b.CreateNumpyVector(np.array(inputs, dtype=np.int32))
        out_vec = b.CreateNumpyVector(np.array(outputs, dtype=np.int32))
        sub_name = b.CreateString("main")
        schema.SubGraphStart(b)
        schema.SubGraphAddTensors(b, tensors_vec)
        schema.SubGraphAddInputs(b, in_vec)
        schema.SubGraphAddOutputs(b, out_vec)
        schema.SubGraphAddOperators(b, ops_vec)
        schema.SubGraphAddName(b, sub_name)
        subgraph = schema.SubGraphEnd(b)

        metadata = []
        if self._extra:
            name = b.CreateString(OPTIONS_METADATA)
            buffers.append(self._buffer(b, json.dumps({"operators": self._extra},
                                                      sort_keys=True).encode()))
            schema.MetadataStart(b)
            schema.MetadataAddName(b, name)
            schema.MetadataAddBuffer(b, len(buffers) - 1)
            metadata.append(schema.MetadataEnd(b))
        codes_vec = self._offsets(b, codes)
        subgraphs_vec = self._offsets(b, [subgraph])
        buffers_vec = self._offsets(b, buffers)
        metadata_vec = self._offsets(b, metadata) if metadata else None
        desc = b.CreateString(description)
        schema.ModelStart(b)
        schema.ModelAddVersion(b, 3)
        schema.ModelAddOperatorCodes(b, codes_vec)
        schema.ModelAddSubgraphs(b, subgraphs_vec)
        schema.ModelAddDescription(b, desc)
        schema.ModelAddBuffers(b, buffers_vec)
        if metadata_vec is not None:
            schema.ModelAddMetadata(b, metadata_vec)
        b.Finish(schema.ModelEnd(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())

    @staticmethod
    def _offsets(b, items: list[int]) -> int:
        b.StartVector(4, len(items), 4)
        for off in reversed(items):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    @staticmethod
    def _buffer(b, raw: bytes | None) -> int:
        schema = _schema()
        data = None
        if raw:
            b.StartVector(1, len(raw), 16)           # 16-byte aligned, like the converter
            b.head -= len(raw)
            b.Bytes[b.head:b.head + len(raw)] = raw
            b.vectorNumElems = len(raw)
            data = b.EndVector()
        schema.BufferStart(b)
        if data is not None:
            schema.BufferAddData(b, data)
        return schema.BufferEnd(b)

    def _tensor(self, b, t: dict[str, Any], buffer_index: int) -> int:
        schema = _schema()
        quant = None
        if t["scale"] is not None:
            scale = b.CreateNumpyVector(np.asarray(t["scale"], dtype=np.float32))
            zp = b.CreateNumpyVector(np.broadcast_to(np.asarray(t["zero_point"], dtype=np.int64),
                                                     t["scale"].shape).copy())
            schema.QuantizationParametersStart(b)
            schema.QuantizationParametersAddScale(b, scale)
            schema.QuantizationParametersAddZeroPoint(b, zp)
            schema.QuantizationParametersAddQuantizedDimension(b, t["axis"])
            quant = schema.QuantizationParametersEnd(b)
        shape = b.CreateNumpyVector(np.array(t["shape"], dtype=np.int32))
        name = b.CreateString(t["name"])
        schema.TensorStart(b)
        schema.TensorAddShape(b, shape)
        schema.TensorAddType(b, self._types[t["dtype"]])
        schema.TensorAddBuffer(b, buffer_index)
        schema.TensorAddName(b, name)
        if quant is not None:
            schema.TensorAddQuantization(b, quant)
        return schema.TensorEnd(b)

    @staticmethod
    def _options(b, op: str, options: dict[str, Any]) -> tuple[int, int | None]:
        cls_name = _OPTIONS_TABLE.get(op)
        if cls_name is None or options is None:
            return 0, None
        schema = _schema()
        module = importlib.import_module(f"tflite.{cls_name}")
        values: dict[str, Any] = {}
        for key, value in options.items():
            if key in _ENUMS and isinstance(value, str):
                codes = {n: c for c, n in _enum_names(getattr(schema, _ENUMS[key])).items()}
                value = codes[value]
            elif isinstance(value, (list, tuple, np.ndarray)):
                value = b.CreateNumpyVector(np.asarray(value, dtype=np.int32))
            values[key] = value
        getattr(module, f"{cls_name}Start")(b)
        for key, value in values.items():
            adder = getattr(module, f"{cls_name}Add{_camel(key)}", None)
            if adder is None:
                raise ValueError(f"{op}: {cls_name} has no field {key!r}")
            adder(b, value)
        type_code = {n: c for c, n in _enum_names(schema.BuiltinOptions).items()}[cls_name]
        return type_code, getattr(module, f"{cls_name}End")(b)


def tflite_bytes(model: TFLiteModel, description: str = "tvm-serenity") -> bytes:
    """``model`` written back as a ``.tflite`` flatbuffer (tensors in their order, operators
    in the model's order, the options as read): :func:`~.tflite_model.parse_tflite` of the
    result computes what ``model`` does, so TFLite's interpreters can check a model that never
    was a file (one read back from Relax, :mod:`.relax_lift`)."""
    mb = ModelBuilder()
    for t in model.tensors:
        q = t.quant
        mb.add_tensor(t.shape, t.dtype, scale=None if q is None else q.scale,
                      zero_point=0 if q is None else q.zero_point,
                      axis=0 if q is None else q.axis, data=t.data, name=t.name)
    for op in model.operators:
        builtin = _split_options(op.op, op.options)[0]
        mb.add_operator(op.op, op.inputs, op.outputs, op.options, op.version,
                        omit_options=not builtin)        # as read: no table, none written
    return mb.build(model.inputs, model.outputs, description)
