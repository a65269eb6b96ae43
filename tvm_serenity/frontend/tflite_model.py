"""Read a ``.tflite`` flatbuffer into a small, typed, validated model (no TVM, no interpreter).

:func:`load_tflite` (a path) and :func:`parse_tflite` (bytes) return a :class:`TFLiteModel`:

* ``tensors``: :class:`Tensor` with name, shape, dtype (numpy name: ``"int8"``, ``"float32"``,
  ...), :class:`Quantization` (scale/zero point, per tensor or per channel along ``axis``) and,
  for constants (weights, biases, shapes, paddings, axes), the data as a read-only numpy array;
* ``operators``: :class:`Operator` in flatbuffer (stored) order, which is the order TFLite and
  TFLite Micro execute; ``op`` is the builtin name (``"CONV_2D"``) and ``options`` the builtin
  options as a dict with snake_case keys (``stride_h``, ``padding`` as ``"SAME"``/``"VALID"``,
  ``fused_activation_function`` as ``"NONE"``/``"RELU"``/``"RELU6"``/..., ``depth_multiplier``,
  ``keep_dims``, ``align_corners``, ``half_pixel_centers``, ...). Options are decoded generically
  from the schema classes of the ``tflite`` package, so every builtin operator loads;
* ``inputs`` / ``outputs``: the graph's input and output tensor indices.

Options that are no builtin option of the operator (tvm-serenity's own, e.g. the
``"arithmetic": "onnxruntime"`` of an ONNX model's operators) travel in the model's metadata
entry :data:`OPTIONS_METADATA` (JSON: ``{"operators": {"<position>": {option: value}}}``),
which TFLite's own interpreters ignore; reading merges them into ``options``.

Only the first subgraph (the main graph) is read. Anything malformed (unreadable file, wrong
file identifier, truncated or random bytes, offsets or indices out of range, missing subgraph,
constant data whose size does not match its shape) raises :class:`TFLiteError` naming the file
and the problem; the flatbuffer library's own exceptions never escape. Operators a consumer
cannot handle are reported with :class:`UnsupportedOperatorError` (see
:func:`check_operators`), which names the operator and its index so callers may fall back.
Whether the operators are well formed (what TFLite Micro's ``Prepare`` checks) is
:func:`.reference.validate`'s business: reading only checks the file.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import SerenityError
from ..text import counted

__all__ = ["TFLiteError", "UnsupportedOperatorError", "Quantization", "Tensor", "Operator",
           "TFLiteModel", "load_tflite", "parse_tflite", "check_operators",
           "BUILTIN_OPS", "TENSOR_TYPES", "FILE_IDENTIFIER", "OPTIONS_METADATA"]

FILE_IDENTIFIER = b"TFL3"
OPTIONS_METADATA = "tvm_serenity.operator_options"   # operators' non-builtin options (JSON)


class TFLiteError(SerenityError, ValueError):
    """A ``.tflite`` file is unreadable or malformed; the message names the file and the fault."""


class UnsupportedOperatorError(TFLiteError):
    """An operator (or one of its tensors) is outside what the consumer supports."""

    def __init__(self, message: str, op: str, index: int):
        super().__init__(message)
        self.op = op
        self.index = index


def _enum_names(cls) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


def _schema():
    # Import lazily: the tflite package is a few hundred small modules.
    import tflite
    return tflite


def _builtin_ops() -> dict[int, str]:
    return _enum_names(_schema().BuiltinOperator)


#: Builtin operator code -> name, from the schema (tflite==2.18.0).
BUILTIN_OPS: dict[int, str] = _builtin_ops()

_NUMPY_TYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "FLOAT64": "float64",
                "INT8": "int8", "UINT8": "uint8", "INT16": "int16", "UINT16": "uint16",
                "INT32": "int32", "UINT32": "uint32", "INT64": "int64", "UINT64": "uint64",
                "BOOL": "bool"}

#: TensorType code -> dtype name (numpy name when numpy has the type, else the schema name).
TENSOR_TYPES: dict[int, str] = {code: _NUMPY_TYPES.get(name, name.lower())
                                for code, name in _enum_names(_schema().TensorType).items()}


@dataclass(frozen=True)
class Quantization:
    """Affine quantization ``real = scale * (q - zero_point)``, per tensor or along ``axis``."""

    scale: np.ndarray          # float32, shape (n,)
    zero_point: np.ndarray     # int64, shape (n,)
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    @property
    def scalar_scale(self) -> float:
        """The per-tensor scale as a float32-valued Python float (error if per channel)."""
        if self.per_channel:
            raise TFLiteError("per-channel quantization has no single scale")
        return float(self.scale[0])

    @property
    def scalar_zero_point(self) -> int:
        if self.per_channel and np.any(self.zero_point != self.zero_point[0]):
            raise TFLiteError("per-channel quantization has no single zero point")
        return int(self.zero_point[0])


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: Quantization | None = None
    data: np.ndarray | None = field(default=None, repr=False)   # constants only, read-only

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def to_json(self) -> dict:
        """Name, shape, dtype, bytes and the per-tensor quantization (None when unquantized)."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "bytes": self.nbytes,
                "scale": self.quant.scalar_scale if self.quant else None,
                "zero_point": self.quant.scalar_zero_point if self.quant else None}


@dataclass(frozen=True)
class Operator:
    index: int
    op: str                                   # builtin name, e.g. "CONV_2D"; "CUSTOM" for custom
    inputs: tuple[int, ...]                   # tensor indices; -1 marks an omitted optional input
    outputs: tuple[int, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    version: int = 1


@dataclass(frozen=True)
class TFLiteModel:
    name: str
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    source: str = "<bytes>"
    description: str = ""

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]

    def operator(self, index: int) -> Operator:
        """The operator whose index in the file is ``index`` (a model derived from another,
        e.g. an integer core without its float edges, keeps the file's numbering)."""
        for op in self.operators:
            if op.index == index:
                return op
        raise KeyError(f"{self.source}: no operator {index}")

    def where(self, op: Operator) -> str:
        """``"<source>: operator 12 (CONV_2D)"``: how every message names an operator."""
        return f"{self.source}: operator {op.index} ({op.op})"

    def consumers(self) -> dict[int, list[int]]:
        """Tensor index -> indices of the operators that read it, in stored order."""
        out: dict[int, list[int]] = {}
        for op in self.operators:
            for t in dict.fromkeys(op.inputs):
                if t >= 0:
                    out.setdefault(t, []).append(op.index)
        return out

    def __repr__(self) -> str:
        return (f"TFLiteModel({self.name!r}, {len(self.operators)} operators, "
                f"{len(self.tensors)} tensors)")


# ------------------------------------------------------------------------------- loading
def load_tflite(path: str | os.PathLike, name: str | None = None) -> TFLiteModel:
    """Read and validate a ``.tflite`` file. Raises :class:`TFLiteError` on any problem."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as e:
        raise TFLiteError(f"cannot read TFLite file '{path}': {e.strerror}") from None
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return parse_tflite(buf, source=os.fspath(path), name=name or stem)


def parse_tflite(buf: bytes, source: str = "<bytes>", name: str | None = None) -> TFLiteModel:
    """Parse flatbuffer bytes (see :func:`load_tflite`); ``source`` names them in errors."""
    buf = bytes(buf)
    where = f"TFLite file '{source}'"
    if len(buf) < 8:
        raise TFLiteError(f"{where}: only {len(buf)} bytes, too short for a flatbuffer")
    ident = buf[4:8]
    if ident != FILE_IDENTIFIER:
        raise TFLiteError(f"{where}: not a TFLite flatbuffer (file identifier {ident!r}, "
                          f"expected {FILE_IDENTIFIER!r})")
    root = struct.unpack_from("<I", buf, 0)[0]
    if not 8 <= root <= len(buf) - 4:
        raise TFLiteError(f"{where}: corrupt flatbuffer (root table offset {root} outside the "
                          f"{len(buf)}-byte file)")
    try:
        return _Reader(buf, source, name or os.path.splitext(os.path.basename(source))[0]).read()
    except TFLiteError:
        raise
    except (struct.error, LookupError, ValueError, TypeError, OverflowError, AttributeError,
            ImportError, MemoryError, RecursionError) as e:
        raise TFLiteError(f"{where}: corrupt or truncated flatbuffer ({type(e).__name__}: "
                          f"{e})") from None


class _Reader:
    def __init__(self, buf: bytes, source: str, name: str):
        self.buf = buf
        self.source = source
        self.where = f"TFLite file '{source}'"
        self.name = name

    def fail(self, what: str) -> TFLiteError:
        return TFLiteError(f"{self.where}: {what}")

    def length(self, n: int, elem_bytes: int, what: str) -> int:
        """A vector length, checked against the file size before anything iterates over it."""
        if n < 0 or n * elem_bytes > len(self.buf):
            raise self.fail(f"corrupt flatbuffer ({what} claims {n} elements, more than the "
                            f"{len(self.buf)}-byte file holds)")
        return n

    def read(self) -> TFLiteModel:
        schema = _schema()
        model = schema.Model.GetRootAs(self.buf, 0)
        version = model.Version()
        if version != 3:
            raise self.fail(f"unsupported schema version {version} (expected 3)")
        n_sub = self.length(model.SubgraphsLength(), 4, "subgraphs")
        if n_sub == 0:
            raise self.fail("model has no subgraph")
        n_codes = self.length(model.OperatorCodesLength(), 4, "operator codes")
        codes = [self.opcode(model.OperatorCodes(i), i) for i in range(n_codes)]
        n_buffers = self.length(model.BuffersLength(), 4, "buffers")
        description = (model.Description() or b"").decode("utf-8", "replace")
        sub = model.Subgraphs(0)
        n_tensors = self.length(sub.TensorsLength(), 4, "tensors")
        tensors = tuple(self.tensor(model, sub.Tensors(i), i, n_buffers) for i in range(n_tensors))
        n_ops = self.length(sub.OperatorsLength(), 4, "operators")
        extra = self.extra_options(model, n_buffers)
        operators = tuple(self.operator(sub.Operators(i), i, codes, n_tensors,
                                        extra.get(str(i), {})) for i in range(n_ops))
        inputs = self.indices(sub.InputsAsNumpy(), n_tensors, "subgraph inputs")
        outputs = self.indices(sub.OutputsAsNumpy(), n_tensors, "subgraph outputs")
        if not outputs:
            raise self.fail("subgraph has no outputs")
        return TFLiteModel(self.name, tensors, operators, inputs, outputs, self.source,
                           description)

    def opcode(self, code_fb, i: int) -> tuple[str, int]:
        code = max(code_fb.BuiltinCode(), code_fb.DeprecatedBuiltinCode())
        if code not in BUILTIN_OPS:
            raise UnsupportedOperatorError(
                f"{self.where}: operator code {i} has builtin code {code}, unknown to the "
                "TFLite schema this package reads (tflite 2.18)", f"builtin#{code}", -1)
        return BUILTIN_OPS[code], code_fb.Version()

    def indices(self, arr, n_tensors: int, what: str, allow_omitted: bool = False
                ) -> tuple[int, ...]:
        vals = tuple(int(v) for v in (arr if isinstance(arr, np.ndarray) else ()))
        lo = -1 if allow_omitted else 0
        for v in vals:
            if not lo <= v < n_tensors:
                raise self.fail(f"{what}: tensor index {v} out of range (model has "
                                f"{counted(n_tensors, 'tensor')})")
        return vals

    def tensor(self, model, t_fb, index: int, n_buffers: int) -> Tensor:
        name = (t_fb.Name() or b"").decode("utf-8", "replace")
        where = f"tensor {index} ('{name}')"
        shape_arr = t_fb.ShapeAsNumpy()
        shape = tuple(int(d) for d in shape_arr) if isinstance(shape_arr, np.ndarray) else ()
        if any(d < 0 for d in shape):
            raise self.fail(f"{where}: negative dimension in shape {list(shape)} (dynamic "
                            "shapes are not supported)")
        ttype = t_fb.Type()
        if ttype not in TENSOR_TYPES:
            raise self.fail(f"{where}: unknown tensor type code {ttype}")
        dtype = TENSOR_TYPES[ttype]
        quant = self.quantization(t_fb.Quantization(), shape, where)
        data = None
        b = t_fb.Buffer()
        if not 0 <= b < max(n_buffers, 1):
            raise self.fail(f"{where}: buffer index {b} out of range "
                            f"({counted(n_buffers, 'buffer')})")
        raw = self.buffer_bytes(model.Buffers(b), where) if n_buffers else b""
        if raw:
            try:
                np_dtype = np.dtype(dtype).newbyteorder("<")
            except TypeError:
                raise self.fail(f"{where}: constant data of type {dtype.upper()} is not "
                                "supported (no numpy equivalent)") from None
            count = int(np.prod(shape, dtype=np.int64))
            if len(raw) != count * np_dtype.itemsize:
                raise self.fail(f"{where}: constant data has {counted(len(raw), 'byte')}, shape "
                                f"{list(shape)} of {dtype} needs {count * np_dtype.itemsize}")
            data = np.frombuffer(raw, dtype=np_dtype).astype(np_dtype.newbyteorder("="))
            data = data.reshape(shape)
            data.flags.writeable = False
        return Tensor(index, name, shape, dtype, quant, data)

    def buffer_bytes(self, buf_fb, where: str) -> bytes:
        offset, size = buf_fb.Offset(), buf_fb.Size()
        if offset > 1:   # data stored after the flatbuffer (models > 2 GB)
            if offset + size > len(self.buf):
                raise self.fail(f"{where}: external buffer [{offset}, {offset + size}) lies "
                                f"outside the {len(self.buf)}-byte file")
            return self.buf[offset:offset + size]
        n = self.length(buf_fb.DataLength(), 1, f"{where} data")
        if n == 0:
            return b""
        return buf_fb.DataAsNumpy().tobytes()

    def quantization(self, q_fb, shape: tuple[int, ...], where: str) -> Quantization | None:
        if q_fb is None:
            return None
        scale = q_fb.ScaleAsNumpy()
        if not isinstance(scale, np.ndarray) or scale.size == 0:
            return None
        zp = q_fb.ZeroPointAsNumpy()
        zero_point = (np.asarray(zp, dtype=np.int64) if isinstance(zp, np.ndarray) and zp.size
                      else np.zeros(scale.size, dtype=np.int64))
        if zero_point.size != scale.size:
            raise self.fail(f"{where}: {counted(scale.size, 'quantization scale')} but "
                            f"{counted(zero_point.size, 'zero point')}")
        axis = q_fb.QuantizedDimension()
        if scale.size > 1 and not (0 <= axis < len(shape) and shape[axis] == scale.size):
            raise self.fail(f"{where}: {scale.size} per-channel scales do not match axis {axis} "
                            f"of shape {list(shape)}")
        scale = np.asarray(scale, dtype=np.float32).copy()
        scale.flags.writeable = False
        zero_point.flags.writeable = False
        return Quantization(scale, zero_point, axis)

    def extra_options(self, model, n_buffers: int) -> dict[str, dict]:
        """The operators' non-builtin options, by position (the :data:`OPTIONS_METADATA`
        entry; none without it)."""
        for k in range(self.length(model.MetadataLength(), 4, "metadata")):
            entry = model.Metadata(k)
            if (entry.Name() or b"").decode("utf-8", "replace") != OPTIONS_METADATA:
                continue
            if not 0 <= entry.Buffer() < n_buffers:
                raise self.fail(f"metadata '{OPTIONS_METADATA}': buffer {entry.Buffer()} out "
                                "of range")
            raw = self.buffer_bytes(model.Buffers(entry.Buffer()), f"metadata "
                                    f"'{OPTIONS_METADATA}'")
            try:
                operators = json.loads(raw.decode("utf-8"))["operators"]
            except (UnicodeDecodeError, ValueError, KeyError, TypeError):
                raise self.fail(f"metadata '{OPTIONS_METADATA}' is not the JSON of operator "
                                "options") from None
            return {str(k): dict(v) for k, v in operators.items()}
        return {}

    def operator(self, op_fb, index: int, codes: list[tuple[str, int]], n_tensors: int,
                 extra: dict | None = None) -> Operator:
        ci = op_fb.OpcodeIndex()
        if not 0 <= ci < len(codes):
            raise self.fail(f"operator {index}: opcode index {ci} out of range "
                            f"({counted(len(codes), 'operator code')})")
        op, version = codes[ci]
        where = f"operator {index} ({op})"
        inputs = self.indices(op_fb.InputsAsNumpy(), n_tensors, f"{where} inputs", True)
        outputs = self.indices(op_fb.OutputsAsNumpy(), n_tensors, f"{where} outputs")
        if op == "CUSTOM":
            options: dict[str, Any] = {}
        else:
            options = _decode_options(op_fb)
        wanted = _OPTIONS_OF.get(op)
        if wanted is not None:
            cls = _options_class("BuiltinOptions", op_fb.BuiltinOptionsType())
            if cls is None or cls.__name__ != wanted:
                found = "none" if cls is None else cls.__name__
                raise self.fail(f"{where}: its builtin options must be {wanted}, found {found} "
                                "(TFLite Micro would run it with zeroed options)")
        return Operator(index, op, inputs, outputs, {**options, **(extra or {})}, version)


# ------------------------------------------------------------------------------- options
# The builtin options each operator needs (the ones the kernels read); TFLite Micro zero-fills
# missing options (stride 0, ...), so a model without them has no defined result.
_OPTIONS_OF = {"CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
               "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions",
               "FULLY_CONNECTED": "FullyConnectedOptions", "ADD": "AddOptions",
               "MUL": "MulOptions", "CONCATENATION": "ConcatenationOptions",
               "SOFTMAX": "SoftmaxOptions", "MEAN": "ReducerOptions",
               "STRIDED_SLICE": "StridedSliceOptions",
               "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions"}
_ENUM_FIELDS = {"padding": "Padding", "fused_activation_function": "ActivationFunctionType"}
_SKIP_METHODS = {"Init", "GetRootAs"}


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _options_class(union_name: str, type_code: int):
    schema = _schema()
    names = _enum_names(getattr(schema, union_name))
    cls_name = names.get(type_code)
    if cls_name is None or cls_name == "NONE":
        return None
    return getattr(importlib.import_module(f"tflite.{cls_name}"), cls_name)


def _decode_options(op_fb) -> dict[str, Any]:
    """Builtin options as a dict, read field by field through the schema's generated class."""
    cls = _options_class("BuiltinOptions", op_fb.BuiltinOptionsType())
    table = op_fb.BuiltinOptions() if cls is not None else None
    if cls is None:
        cls = _options_class("BuiltinOptions2", op_fb.BuiltinOptions2Type())
        table = op_fb.BuiltinOptions2() if cls is not None else None
    if cls is None or table is None:
        return {}
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    return _read_fields(obj)


def _read_fields(obj) -> dict[str, Any]:
    cls = type(obj)
    methods = [m for m in vars(cls) if not m.startswith("_") and m not in _SKIP_METHODS
               and callable(getattr(cls, m)) and not m.startswith("GetRootAs")
               and not m.endswith("BufferHasIdentifier")]
    vectors = {m[:-len("AsNumpy")] for m in methods if m.endswith("AsNumpy")}
    out: dict[str, Any] = {}
    for m in methods:
        fn = getattr(cls, m)
        if m in vectors or (m.endswith(("Length", "IsNone"))
                            and m[:-6] in vectors):
            continue
        if m.endswith("AsNumpy"):
            arr = getattr(obj, m)()
            out[_snake(m[:-len("AsNumpy")])] = (tuple(arr.tolist()) if isinstance(arr, np.ndarray)
                                                 else ())
            continue
        if fn.__code__.co_argcount != 1:
            continue
        value = getattr(obj, m)()
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif not isinstance(value, (bool, int, float)):
            continue                      # nested tables (StableHLO ops): not needed here
        key = _snake(m)
        if key in _ENUM_FIELDS:
            value = _enum_names(getattr(_schema(), _ENUM_FIELDS[key])).get(value, value)
        out[key] = value
    return out


# ----------------------------------------------------------------------------- checking
def check_operators(model: TFLiteModel, supported: Iterable[str], consumer: str) -> None:
    """Raise :class:`UnsupportedOperatorError` for the first operator not in ``supported``."""
    allowed = set(supported)
    bad = [op for op in model.operators if op.op not in allowed]
    if bad:
        first = bad[0]
        others = sorted({op.op for op in bad} - {first.op})
        more = f" (also unsupported: {', '.join(others)})" if others else ""
        raise UnsupportedOperatorError(
            f"{model.where(first)} is not supported by the {consumer}{more}", first.op,
            first.index)
