"""Seeded ``.tflite`` mutants of three small models, and the cases that compile, run and check
them.

Seeds: the demo model (:func:`tvm_serenity.demo.demo_model_bytes`), a Keras-like cell built here
(two branches, concatenation, a strided convolution, MEAN), and ``vww.tflite`` from the shared
models (read in place, never copied into the repository; skipped when absent).

Mutations (:func:`mutate`, deterministic in its ``random.Random``):

* byte level: flip bytes (mostly in the flatbuffer's tables, not in the weights), truncate, splice
  a chunk of another seed in, write special 32-bit values at aligned offsets;
* structured, on TFLite Micro's flatbuffer object API (unpack, edit, repack): strides, dilations,
  filter sizes, padding and fused-activation enums, depth multipliers, concatenation axes,
  scales (0, NaN, inf, denormal, 1e27, negative), zero points, per-channel vector lengths,
  quantized dimensions, shapes and ranks, tensor types, operator codes and opcode indices,
  tensor indices (-1, out of range, another tensor), extra/missing operator inputs and outputs,
  graph inputs/outputs, MEAN axes, buffers (missing, truncated, out of range), options of the
  wrong type or absent, operators deleted/duplicated/reordered, versions.

Each case: ``compile MUT --target host -o out --time-limit 2`` (a third of them with one of
:data:`COMPILE_FLAGS`: ``--rewrite``, ``--no-rip``, another schedule or planner); when it exits
0, ``run out --host`` (must pass: the C output equals the reference interpreter's) and the
``tflm`` check (:mod:`tests.fuzz.checks`: TFLite Micro accepts the model and agrees).
"""

from __future__ import annotations

import functools
import math
import random
import struct
from pathlib import Path

import numpy as np

from .runner import Case, Step

VWW = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "tinyengine" / \
    "vww.tflite"
SEED_WEIGHTS = {"demo": 0.4, "cell": 0.45, "vww": 0.15}

I32 = (0, -1, -7, 2, 1000, 2**31 - 1, -2**31)
COMPILE_FLAGS = [("--rewrite",), ("--no-rip",), ("--schedule", "stored"), ("--planner", "greedy"),
                 ("--schedule", "kahn", "--planner", "bestfit")]
SCALES = (0.0, math.nan, math.inf, -math.inf, 1e-45, 1e-40, 1e27, 3.4e38, -0.05)
ZERO_POINTS = (128, -129, 255, 1000, -2**31, 2**40, 127, -128)


# ----------------------------------------------------------------------------------- seeds
def cell_model_bytes(seed: int = 0) -> bytes:
    """x 8x8x4 -> (conv1x1 6ch | depthwise3x3) -> concat 10ch -> conv3x3/2 8ch -> MEAN."""
    from tests.tflite_cases import add_conv
    from tvm_serenity.frontend.builder import ModelBuilder
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    shape, q = (1, 8, 8, 4), (0.06, -5)
    x = b.add_tensor(shape, scale=0.05, zero_point=-3, name="input")
    a, _ = add_conv(b, rng, x, shape, "CONV_2D", 6, (1, 1), (1, 1), "VALID", "RELU", q)
    d, _ = add_conv(b, rng, x, shape, "DEPTHWISE_CONV_2D", 4, (3, 3), (1, 1), "SAME", "RELU6", q)
    cat = b.add_tensor((1, 8, 8, 10), scale=q[0], zero_point=q[1], name="concat")
    b.add_operator("CONCATENATION", [a, d], [cat],
                   {"axis": 3, "fused_activation_function": "NONE"})
    y, _ = add_conv(b, rng, cat, (1, 8, 8, 10), "CONV_2D", 8, (3, 3), (2, 2), "SAME", "NONE",
                    (0.1, 2))
    axes = b.add_tensor((2,), "int32", data=np.array([1, 2]), name="mean/axes")
    m = b.add_tensor((1, 8), scale=0.05, zero_point=1, name="mean")
    b.add_operator("MEAN", [y, axes], [m], {"keep_dims": False})
    return b.build([x], [m])


@functools.cache
def seed_bytes(name: str) -> bytes:
    if name == "demo":
        from tvm_serenity.demo import demo_model_bytes
        return demo_model_bytes()
    if name == "cell":
        return cell_model_bytes()
    return VWW.read_bytes()


def seed_names() -> list[str]:
    return [n for n in SEED_WEIGHTS if n != "vww" or VWW.is_file()]


@functools.cache
def _table_bytes(name: str) -> np.ndarray:
    """Offsets of ``name``'s flatbuffer outside its buffers' data (tables, vectors, strings)."""
    import tflite
    buf = seed_bytes(name)
    model = tflite.Model.GetRootAsModel(buf, 0)
    mask = np.ones(len(buf), dtype=bool)
    for i in range(model.BuffersLength()):
        tab = model.Buffers(i)._tab
        o = tab.Offset(4)
        if o:
            start = tab.Vector(o)
            mask[start:start + tab.VectorLen(o)] = False
    return np.flatnonzero(mask)


# ------------------------------------------------------------------------- byte mutations
def _flip(rng, buf: bytearray, seed: str) -> str:
    tables = _table_bytes(seed)
    where = []
    for _ in range(rng.randint(1, 6)):
        pos = int(tables[rng.randrange(len(tables))]) if rng.random() < 0.85 else \
            rng.randrange(len(buf))
        buf[pos] ^= rng.randint(1, 255)
        where.append(pos)
    return f"bytes flipped at {where}"


def _truncate(rng, buf: bytearray, seed: str) -> str:
    n = rng.choice([0, 3, 8, rng.randrange(len(buf))])
    del buf[n:]
    return f"truncated to {n} bytes"


def _splice(rng, buf: bytearray, seed: str) -> str:
    other = seed_bytes(rng.choice(seed_names()))
    n = rng.randint(4, 256)
    src, dst = rng.randrange(max(1, len(other) - n)), rng.randrange(len(buf))
    buf[dst:dst + n] = other[src:src + n]
    return f"{n} bytes of another model spliced in at {dst}"


def _special_word(rng, buf: bytearray, seed: str) -> str:
    tables = _table_bytes(seed)
    pos = int(tables[rng.randrange(len(tables))]) & ~3
    value = rng.choice([0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(buf), len(buf) - 4, 1])
    buf[pos:pos + 4] = struct.pack("<I", value)
    return f"u32 {value:#x} written at {pos}"


BYTE_MUTATIONS = [_flip, _truncate, _splice, _special_word]


# ------------------------------------------------------------------- structured mutations
def _schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    return schema


def _pick(rng, items):
    items = list(items)
    return rng.choice(items) if items else None


def _ops_with(sg, attr):
    return [(i, op) for i, op in enumerate(sg.operators)
            if op.builtinOptions is not None and hasattr(op.builtinOptions, attr)]


def _op_name(m, op) -> str:
    code = m.operatorCodes[op.opcodeIndex].builtinCode
    names = {v: k for k, v in vars(_schema().BuiltinOperator).items() if not k.startswith("_")}
    return names.get(code, str(code))


def _set_option(attrs, values):
    def mutation(rng, m, sg):
        found = [(i, op, a) for a in attrs for i, op in _ops_with(sg, a)]
        if not found:
            return None
        i, op, attr = rng.choice(found)
        value = rng.choice(values)
        setattr(op.builtinOptions, attr, value)
        return f"operator {i} ({_op_name(m, op)}): {attr} = {value}"
    mutation.__name__ = f"set_{attrs[0]}"
    return mutation


def _name(t) -> str:
    return t.name.decode("utf-8", "replace") if isinstance(t.name, bytes) else str(t.name)


def _quantized(sg):
    return [(i, t) for i, t in enumerate(sg.tensors)
            if t.quantization is not None and t.quantization.scale is not None]


def _scale(rng, m, sg):
    i, t = _pick(rng, _quantized(sg)) or (None, None)
    if t is None:
        return None
    k = rng.randrange(len(t.quantization.scale))
    value = rng.choice(SCALES)
    t.quantization.scale = np.array(t.quantization.scale, dtype=np.float32)
    t.quantization.scale[k] = value
    return f"tensor {i} ({_name(t)!r}): scale[{k}] = {value}"


def _zero_point(rng, m, sg):
    i, t = _pick(rng, _quantized(sg)) or (None, None)
    if t is None or t.quantization.zeroPoint is None:
        return None
    zp = np.array(t.quantization.zeroPoint, dtype=np.int64)
    k = rng.randrange(len(zp))
    zp[k] = rng.choice(ZERO_POINTS)
    t.quantization.zeroPoint = zp
    return f"tensor {i} ({_name(t)!r}): zero_point[{k}] = {zp[k]}"


def _quant_structure(rng, m, sg):
    i, t = _pick(rng, _quantized(sg)) or (None, None)
    if t is None:
        return None
    q, kind = t.quantization, rng.randrange(4)
    if kind == 0:
        t.quantization = None
        return f"tensor {i} ({_name(t)!r}): quantization removed"
    if kind == 1:
        q.scale = np.append(q.scale, np.float32(0.01))
        return f"tensor {i} ({_name(t)!r}): one scale more than channels"
    if kind == 2:
        q.zeroPoint = np.zeros(len(q.scale) + rng.choice([1, 2]), dtype=np.int64)
        return f"tensor {i} ({_name(t)!r}): zero points longer than scales"
    q.quantizedDimension = rng.choice([5, -1, 2**31 - 1, 3])
    return f"tensor {i} ({_name(t)!r}): quantized_dimension = {q.quantizedDimension}"


def _shape(rng, m, sg):
    i = rng.randrange(len(sg.tensors))
    t = sg.tensors[i]
    shape = [int(d) for d in (t.shape if t.shape is not None else [])]
    kind = rng.randrange(5)
    if kind == 0 and shape:
        k = rng.randrange(len(shape))
        shape[k] = rng.choice([0, -1, -5, 2**30, shape[k] + 1, max(1, shape[k] - 1), 2**31 - 1])
    elif kind == 1:
        shape.insert(rng.randrange(len(shape) + 1), rng.choice([1, 2]))
    elif kind == 2 and shape:
        del shape[rng.randrange(len(shape))]
    elif kind == 3:
        shape = []
    else:
        shape = shape[::-1]
    old, t.shape = t.shape, np.array(shape, dtype=np.int32)
    old = None if old is None else [int(d) for d in old]
    return f"tensor {i} ({_name(t)!r}): shape {old} -> {shape}"


def _tensor_type(rng, m, sg):
    i = rng.randrange(len(sg.tensors))
    t = sg.tensors[i]
    value = rng.choice([0, 2, 3, 7, 9, 10, 16, 99, -1])
    old, t.type = t.type, value
    return f"tensor {i} ({_name(t)!r}): type {old} -> {value}"


def _opcode(rng, m, sg):
    i = rng.randrange(len(sg.operators))
    op = sg.operators[i]
    kind = rng.randrange(3)
    if kind == 0:
        op.opcodeIndex = rng.choice([len(m.operatorCodes), 2**31, rng.randrange(
            len(m.operatorCodes))])
        return f"operator {i}: opcode_index = {op.opcodeIndex}"
    if kind == 1:
        j = rng.randrange(len(sg.operators))
        op.opcodeIndex, sg.operators[j].opcodeIndex = sg.operators[j].opcodeIndex, op.opcodeIndex
        return f"operators {i} and {j}: opcode indices swapped"
    code = m.operatorCodes[op.opcodeIndex]
    code.builtinCode = rng.choice([0, 3, 4, 9, 14, 18, 22, 25, 28, 32, 40, 41, 49, 83, 117, 150,
                                   205, 500, -1])
    code.deprecatedBuiltinCode = max(-128, min(code.builtinCode, 127))
    return f"operator code {op.opcodeIndex} (used by operator {i}): builtin {code.builtinCode}"


def _tensor_index(rng, m, sg):
    i = rng.randrange(len(sg.operators))
    op = sg.operators[i]
    field = rng.choice(["inputs", "outputs"])
    vec = [int(v) for v in getattr(op, field)]
    if not vec:
        return None
    k = rng.randrange(len(vec))
    vec[k] = rng.choice([-1, -2, len(sg.tensors), len(sg.tensors) + 7, 2**31 - 1,
                         rng.randrange(len(sg.tensors)), int(getattr(op, "outputs")[0])])
    setattr(op, field, np.array(vec, dtype=np.int32))
    return f"operator {i} ({_op_name(m, op)}): {field}[{k}] = {vec[k]}"


def _arity(rng, m, sg):
    i = rng.randrange(len(sg.operators))
    op = sg.operators[i]
    field = rng.choice(["inputs", "inputs", "outputs"])
    vec = [int(v) for v in getattr(op, field)]
    if rng.random() < 0.5 and vec:
        vec.pop(rng.randrange(len(vec)))
        what = "one removed"
    else:
        vec.append(rng.choice([rng.randrange(len(sg.tensors)), -1]))
        what = f"{vec[-1]} appended"
    setattr(op, field, np.array(vec, dtype=np.int32))
    return f"operator {i} ({_op_name(m, op)}): {field} {what} -> {vec}"


def _graph_io(rng, m, sg):
    field = rng.choice(["inputs", "outputs"])
    vec = [int(v) for v in getattr(sg, field)]
    kind = rng.randrange(4)
    if kind == 0:
        vec = []
    elif kind == 1:
        vec.append(rng.randrange(len(sg.tensors)))
    elif kind == 2:
        vec[0] = rng.choice([-1, len(sg.tensors), 2**31 - 1])
    else:
        vec[0] = rng.randrange(len(sg.tensors))
    setattr(sg, field, np.array(vec, dtype=np.int32))
    return f"subgraph {field} = {vec}"


def _mean_axes(rng, m, sg):
    means = [op for op in sg.operators if _op_name(m, op) == "MEAN"]
    if not means:
        return None
    op = rng.choice(means)
    t = sg.tensors[op.inputs[1]]
    axes = rng.choice([[4], [-5], [100], [1, 1], [3, 0], [-1, -2], [], [1, 2, 3, 0, 1],
                       [2**31 - 1]])
    m.buffers[t.buffer].data = np.array(axes, dtype=np.int32).view(np.uint8)
    if rng.random() < 0.5:
        t.shape = np.array([len(axes)], dtype=np.int32)
    return f"MEAN axes = {axes} (shape {[int(d) for d in t.shape]})"


def _buffer(rng, m, sg):
    consts = [(i, t) for i, t in enumerate(sg.tensors)
              if t.buffer and m.buffers[t.buffer].data is not None]
    i, t = _pick(rng, consts) or (None, None)
    if t is None:
        return None
    kind = rng.randrange(4)
    if kind == 0:
        t.buffer = 0
        return f"tensor {i} ({_name(t)!r}): constant data removed (buffer 0)"
    if kind == 1:
        t.buffer = rng.choice([len(m.buffers), 2**31 - 1])
        return f"tensor {i} ({_name(t)!r}): buffer index {t.buffer} out of range"
    if kind == 2:
        data = m.buffers[t.buffer].data
        m.buffers[t.buffer].data = data[:rng.randrange(len(data))]
        return f"tensor {i} ({_name(t)!r}): buffer truncated to {len(m.buffers[t.buffer].data)}"
    j, other = rng.choice(consts)
    t.buffer = other.buffer
    return f"tensor {i} ({_name(t)!r}): shares tensor {j}'s buffer"


def _options(rng, m, sg):
    i = rng.randrange(len(sg.operators))
    op = sg.operators[i]
    schema = _schema()
    if rng.random() < 0.5 or op.builtinOptions is None:
        op.builtinOptions, op.builtinOptionsType = None, 0
        return f"operator {i} ({_op_name(m, op)}): builtin options removed"
    op.builtinOptions = schema.ReducerOptionsT() if rng.random() < 0.5 else \
        schema.Conv2DOptionsT()
    op.builtinOptionsType = (schema.BuiltinOptions.ReducerOptions
                             if isinstance(op.builtinOptions, schema.ReducerOptionsT)
                             else schema.BuiltinOptions.Conv2DOptions)
    return (f"operator {i} ({_op_name(m, op)}): options of type "
            f"{type(op.builtinOptions).__name__}")


def _operators(rng, m, sg):
    ops, kind = sg.operators, rng.randrange(3)
    i = rng.randrange(len(ops))
    if kind == 0 and len(ops) > 1:
        name = _op_name(m, ops[i])
        del ops[i]
        return f"operator {i} ({name}) deleted"
    if kind == 1:
        ops.insert(i, ops[i])
        return f"operator {i} ({_op_name(m, ops[i])}) duplicated"
    j = rng.randrange(len(ops))
    ops[i], ops[j] = ops[j], ops[i]
    return f"operators {i} and {j} swapped (stored order)"


def _version(rng, m, sg):
    if rng.random() < 0.5:
        m.version = rng.choice([0, 1, 2, 4, 2**31 - 1])
        return f"model version = {m.version}"
    code = rng.choice(m.operatorCodes)
    code.version = rng.choice([0, -1, 100])
    return f"operator code {code.builtinCode}: version = {code.version}"


def _subgraphs(rng, m, sg):
    if rng.random() < 0.5:
        m.subgraphs = []
        return "no subgraphs"
    sg.operators = []
    return "main subgraph has no operators"


STRUCTURED_MUTATIONS = [
    _set_option(["strideH", "strideW"], I32),
    _set_option(["dilationHFactor", "dilationWFactor"], I32),
    _set_option(["filterHeight", "filterWidth"], I32),
    _set_option(["padding"], [2, 3, 127, -1]),
    _set_option(["fusedActivationFunction"], [4, 5, 6, 7, 50, 127, -1, -128]),
    _set_option(["depthMultiplier"], [0, -1, 2, 3, 2**31 - 1]),
    _set_option(["axis"], [4, -5, 7, -1, 0, 2**31 - 1]),
    _set_option(["keepDims"], [True]),
    _scale, _scale, _zero_point, _quant_structure, _shape, _shape, _tensor_type, _opcode,
    _tensor_index, _tensor_index, _arity, _graph_io, _mean_axes, _mean_axes, _buffer,
    _options, _operators, _version, _subgraphs,
]


def _repack(m) -> bytes:
    import flatbuffers
    from tvm_serenity.frontend.tflite_model import FILE_IDENTIFIER
    b = flatbuffers.Builder(1 << 16)
    b.Finish(m.Pack(b), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def mutate(rng: random.Random, seed: str) -> tuple[bytes, str]:
    """One mutant of seed model ``seed``: (its bytes, what was done)."""
    buf = seed_bytes(seed)
    if rng.random() < 0.35:
        out = bytearray(buf)
        what = rng.choice(BYTE_MUTATIONS)(rng, out, seed)
        return bytes(out), f"{seed}: {what}"
    schema = _schema()
    for _ in range(20):                 # a mutation may not apply or not be representable
        m = schema.ModelT.InitFromPackedBuf(buf, 0)
        sg = m.subgraphs[0]
        fns = [rng.choice(STRUCTURED_MUTATIONS) for _ in range(1 if rng.random() < 0.8 else 2)]
        done = [fn(rng, m, sg) for fn in fns]
        if any(d is None for d in done):
            continue
        try:
            return _repack(m), f"{seed}: " + "; ".join(done)
        except (struct.error, OverflowError, ValueError, TypeError, IndexError):
            continue
    return buf, f"{seed}: unmutated (no mutation applied)"


def tflite_cases(seed: int, count: int, target: str = "host") -> list[Case]:
    """``count`` mutant cases; case ``i`` depends only on ``seed`` and ``i``."""
    names = seed_names()
    weights = [SEED_WEIGHTS[n] for n in names]
    cases = []
    for i in range(count):
        rng = random.Random(f"{seed}/tflite/{i}")
        model = rng.choices(names, weights)[0]
        flags = rng.choice(COMPILE_FLAGS) if rng.random() < 0.3 else ()
        cases.append(Case(
            "tflite", f"tflite-{i:04d}", f"{model}: (not generated)",
            [Step(("compile", "mut.tflite", "--target", target, "-o", "out", "--time-limit",
                   "2", *flags), timeout=180),
             Step(("run", "out", "--host"), must_pass=True, timeout=120),
             Step(("tflm", "mut.tflite", "out"), kind="check", timeout=180)],
            setup=functools.partial(_write_mutant, rng_state=rng.getstate(), seed=model)))
    return cases


def _write_mutant(case: Case, sandbox: Path, rng_state, seed: str) -> None:
    rng = random.Random()
    rng.setstate(rng_state)
    data, case.description = mutate(rng, seed)
    flags = case.steps[0].args[8:]
    if flags:
        case.description += f" [compile {' '.join(flags)}]"
    (sandbox / "mut.tflite").write_bytes(data)
