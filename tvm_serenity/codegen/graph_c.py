"""Graph-level C emitter: a TFLite int8 model, its graph IR, an order and an arena plan in,
one portable C99 ``model.c`` + ``model.h`` out.

What ``model.c`` holds (the :mod:`tvm_serenity.micro` contract):

* ``static uint8_t arena[MODEL_ARENA_BYTES]`` (8-byte aligned): the one activation arena,
  exactly the plan's ``arena_bytes``; every activation tensor (the graph inputs and outputs
  included) lives at the plan's offset in it. ``model_run`` never relies on its initial
  contents.
* ``static int32_t scratch32[]`` (and ``static int16_t scratch16[]`` when there is a
  FULLY_CONNECTED): the kernels' gather buffers, sized for the largest layer and shared by all
  of them (outside the arena, as in docs/rip.md; reported separately as
  :attr:`EmittedModel.scratch_bytes`).
* weights, biases and per-channel requantization multipliers/shifts as ``static const``
  arrays (flash on a microcontroller);
* the kernels: convolutions, depthwise convolutions, pooling and same-shape ADD are the TIR
  kernels of :mod:`.kernels` lowered to plain C by :func:`.plain_c.emit_c_kernel` (one function
  per distinct layer specification and layout); the other int8 operators are the TIR kernels
  of :mod:`.layout_ops` (MEAN, FULLY_CONNECTED and the data movement, RESIZE_NEAREST_NEIGHBOR
  with source-offset tables) and :mod:`.elementwise_ops` (HARD_SWISH and LOGISTIC as 256-entry
  tables computed with the reference kernel, so is a MUL or ADD by a constant scalar; MUL and
  broadcasting or constant ADD with NumPy broadcasting up to rank 4; SOFTMAX with exponential
  tables and gemmlowp's reciprocal in 32-bit C), printed as plain C; the float32 SOFTMAX and
  LOG_SOFTMAX and the ARG_MAX that models put after their int8 core are the C kernels of
  :mod:`.ops` (ARG_MAX's int32 indices are an activation like any other,
  ``MODEL_OUTPUT<i>_TYPE`` ``int32_t``);
  which kernel an operator runs and with which arguments is
  :func:`.kernel_call.kernel_call`'s answer (the llvm route runs the same kernels); this module
  renders it as C;
* zero-copy I/O in TFLite Micro's spirit, any number of inputs and outputs:
  ``void *model_input(int i)`` / ``void *model_output(int i)`` return ``arena + offset`` of
  graph input / output ``i`` (an output's offset is where it is after the last step), with
  ``model_input_bytes[]`` / ``model_output_bytes[]``; ``void model_run(void)`` runs the steps
  of ``plan.order`` on what the caller wrote there. ``model.h`` defines
  ``MODEL_NUM_INPUTS``/``MODEL_NUM_OUTPUTS`` and per tensor ``MODEL_INPUT<i>_NAME``,
  ``_TYPE``, ``_BYTES``, ``_OFFSET``, ``_RANK``, ``_SHAPE``, ``_SCALE`` (an exact float
  literal), ``_ZERO_POINT`` (0 for float32, as TFLM), and the ``MODEL_OUTPUT<i>_...`` alike.
  No I/O buffer exists outside the arena; the inputs' bytes are reused once read, so the
  caller writes all inputs before each run and reads the outputs before the next inputs.

Placement per step, from the plan (:mod:`tvm_serenity.alloc.plan` defines the rule):

* an **in-place step** of the plan (``plan.inplace``) runs its RiP-layout kernel on the
  workspace ``ws = arena + o`` (``o`` = the output's offset), where the input already sits at
  ``o + S - N_in``; for an exact alias (ADD, int8 QUANTIZE, RESHAPE) the input is at ``o``. A
  RESHAPE in place is no code at all. The workspace ``S`` (the node's ``inplace``) also picks
  the kernel's traversal (:func:`tvm_serenity.rip.inplace_kind`): a DEPTHWISE_CONV_2D whose
  ``S`` is below RiP's ``S*`` runs the channel-wise in-place kernel (one channel at a time
  through an int8 channel buffer in ``scratch32``).
* a **physical right shift** (``plan.moves``) is a ``memmove`` of the input to ``o + S - N_in``
  just before its step;
* every other step runs the dual-buffer kernel on the two offsets (a RESHAPE is a ``memcpy``).

So a plan made with ``inplace=False`` gives the dual-buffer build of the same model, and the
kernels' loops are identical in both layouts: only their base addresses differ.

Identity graph rewrites (:mod:`tvm_serenity.rewrite`). ``graph`` may be the result of
:func:`~tvm_serenity.rewrite.rewrite_graph` on the model's graph; ``source_graph`` is then the
graph before rewriting, where ``attrs["rewrite"]["of"]`` of every new node names the original
operator whose TFLite constants it uses. The new nodes are emitted by their role:

* ``conv2d_partial`` / ``conv2d_accumulate`` (channel-wise partitioning): the int32 partial
  sums of the consumer CONV_2D over one branch's input channels, with the weight slice
  ``W[:, :, :, C_i]``, by the conv2d kernel's own gather and dot loops
  (:meth:`.spec.LayerSpec.conv2d_partial`); the first assigns the accumulator, the others add
  to it in place;
* ``requantize``: the consumer's bias, per-channel requantization and clamp on the
  accumulator (:func:`.partial.accumulator_requantize_prim_func`), its int8 result written
  front to back over the accumulator when the plan aliases them;
* ``depthwise_conv2d_slice`` / ``..._slice_into`` (kernel-wise partitioning): the consumer
  DEPTHWISE_CONV_2D's output channels of one branch, with its weight, bias and requantization
  slices, written into the shared output (multiplier 1: the depthwise kernel's own row loops,
  :meth:`.spec.LayerSpec.depthwise_slice`; otherwise :func:`.partial.depthwise_slice_prim_func`);
* a pushed-down unary (RELU, RELU6, HARD_SWISH, LOGISTIC): the original operator's kernel
  on one branch;
* ``expand_depthwise_conv2d`` (role ``fused``: expand-depthwise fusion, ``of`` the
  DEPTHWISE_CONV_2D, ``expand`` the 1x1 CONV_2D it reads): the depthwise kernel with the
  expand conv fused in (:meth:`.spec.LayerSpec.expand_depthwise`): per channel, the expand
  conv's output channel into the padded plane in ``scratch32``, then the depthwise channel
  from it; input and output apart (dual layout), the expanded tensor never in the arena.

An aliasing step (accumulate, slice_into, requantize, unary) runs on one address when the plan
lays it out in place; when the plan keeps input and output apart, the accumulate/slice_into
step first copies the partial result to its output. The int32 accumulator lives in the byte
arena at the plan's offset, which need not be a multiple of 4: kernels access it through
``serenity_acc32_t``, an ``int32_t`` typedef with alignment 1 (GCC/Clang; the Cortex-M0+
faults on unaligned word accesses). A rewrite is refused unless its concat is a pure copy
(every operand quantized like the output, no fused activation: :func:`concat_is_copy`), the
condition under which the rewrite is an identity.

Patch plans (:mod:`tvm_serenity.rewrite.patch`, ``compile --patch``). A patch node runs its
layer's kernel for the patch's region: a window layer's :mod:`.kernels` kernel built for the
region's shape and border padding, with row pitches (:attr:`.spec.LayerSpec.input_row_pitch`)
where it reads a window of a wider buffer (the whole input, or a reader's part of a
producer's patch or line buffer) or writes its rows into the segment's full output, in the
RiP layout where the plan runs a patch in place over the patch it reads; an elementwise
layer (a residual ADD too) row by row in that case, otherwise in one call. A cached strip's
node first moves the rows its layer keeps (``attrs["patch"]["keep"]``) from its buffer of
the strip before to the start of its own (a ``memmove``; none when they are already there),
then writes its new rows after them. The patches of a layer share its constant tables. The
``patch_output`` allocation is no code. A streamed input
(``stream_input``) is no arena tensor: each patch's ``input_region`` node is filled through
``model_read_input(i, offset, dst, bytes)``, a function ``model.h`` declares
(``MODEL_STREAMS_INPUT``) and the application defines, one call per row of the region (one
for the whole region when it spans the input's width); ``model_input(i)`` is then NULL.

Float edges. TFLite models with a float32 input or output (e.g. TinyEngine's vww) quantize
and dequantize at the edges. By default (``integer_core(model, float_edges=True)``) those
QUANTIZE/DEQUANTIZE run as C kernels (:func:`.elementwise_ops.float_quantize_kernel`,
:func:`.elementwise_ops.dequantize_kernel`, bit-exact with TFLM's ``AffineQuantize`` /
``Dequantize``) and the float32 tensors live in the arena like any other.
``integer_core(model)`` (``--int8-core``) strips a leading float->int8 QUANTIZE and a trailing
int8->float DEQUANTIZE: ``model_run`` then takes the already-quantized int8 input and returns
the int8 output before DEQUANTIZE, and ``model.h`` documents both tensors' scale and zero
point. After the core, the float32 SOFTMAX and LOG_SOFTMAX run as :mod:`.ops` kernels with
the generated ``serenity_expf`` / ``serenity_logf`` (glibc's algorithm, bit for bit, on every
target: :func:`.ops.float_math_c`); other float operators are refused.

The C needs only ``<stdint.h>`` and ``<string.h>`` (``memcpy``/``memmove``/``memset``; no
libm), builds
for the host and Arm alike, and with ``opt_level`` set (default ``"O2"``) asks GCC to optimise
the model at that level whatever the build's flags (``#pragma GCC optimize``, ignored by other
compilers): the firmware harness builds at ``-Os``, which costs 27% more Cortex-M0+ cycles
on vww (157.4 M vs 123.9 M in rp2040js, RiP build; ``-O3`` costs 1.7% more than ``-O2`` and
244 B more stack).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..alloc import ArenaPlan
from ..graph import Graph
from ..memory import InPlaceStep
from ..alloc.plan import Move
from ..frontend import reference as ref
from ..frontend.reference import conv_params, validate
from ..frontend.tflite_model import Operator, Tensor, TFLiteModel, UnsupportedOperatorError
from ..frontend.to_graph import foldable_pads
from ..text import counted
from .kernel_call import KERNEL_OPS, Operand, Result, Table, kernel_call
from .kernels import default_kernel_name, make_prim_func
from .ops import OpKernel, c_array, c_float, float_math_c
from .partial import accumulator_requantize_prim_func, depthwise_slice_prim_func
from .plain_c import emit_c_function, emit_c_kernel
from .spec import CodegenError, ExpandConv, LayerSpec, pack_conv2d_weight

__all__ = ["SUPPORTED_OPS", "PATCH_OPS", "REWRITE_ROLES", "IntegerCore", "Step", "IOTensor",
           "EmittedModel", "integer_core", "concat_is_copy", "emit_model"]

#: TFLite operators the emitter generates code for (int8 activations; the float edges,
#: float32 SOFTMAX / LOG_SOFTMAX and ARG_MAX as :data:`OUTPUT_TYPES` allows).
SUPPORTED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "ADD", "MUL",
                 "MEAN", "FULLY_CONNECTED", "TRANSPOSE", "RESHAPE", "CONCATENATION", "PAD",
                 "PADV2", "STRIDED_SLICE", "RESIZE_NEAREST_NEIGHBOR", "QUANTIZE", "RELU",
                 "RELU6", "HARD_SWISH", "LOGISTIC", "SOFTMAX", "DEQUANTIZE", "LOG_SOFTMAX",
                 "ARG_MAX")
#: Operators whose output may be other than a quantized int8 tensor, and which types.
OUTPUT_TYPES = {"DEQUANTIZE": ("float32",), "SOFTMAX": ("float32",),
                "LOG_SOFTMAX": ("float32",), "ARG_MAX": ("int32",)}
#: Window layers: run on a patch with row pitches (:mod:`.kernels`).
WINDOW_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D")
#: Operators a patch plan's layers may be (:mod:`tvm_serenity.rewrite.patch`): the window
#: layers and the one-input elementwise ones (row by row). An explicit PAD is no patch layer.
PATCH_OPS = WINDOW_OPS + ("QUANTIZE", "RELU", "RELU6", "HARD_SWISH", "LOGISTIC", "ADD", "MUL")
#: Roles (``attrs["rewrite"]["role"]``) of identity-rewrite nodes the emitter generates code
#: for; a pushed-down unary copy has no role ("pushdown" here).
REWRITE_ROLES = ("partial", "accumulate", "requantize", "slice", "slice_into", "pushdown",
                 "fused")
#: C element type of int32 accumulators in the byte arena (any offset; module docstring).
ACC_TYPE = "serenity_acc32_t"
_ACC_TYPEDEF = f"""\
/* int32 partial-sum accumulators (identity rewrites) live in the byte arena at any offset. */
#if defined(__GNUC__)
typedef int32_t {ACC_TYPE} __attribute__((aligned(1), may_alias));
#else
#error "int32 accumulators at byte offsets of the arena need GCC or Clang (aligned(1))"
#endif
"""


# ------------------------------------------------------------------------------ float edges
@dataclass(frozen=True)
class IntegerCore:
    """What ``model_run`` computes: the model with its float edges, or its int8 core (see
    the module docstring).

    ``model`` has the operators that remain, with their indices in the file (a stripped
    QUANTIZE/DEQUANTIZE is gone: look operators up with ``model.operator(index)``);
    ``stripped`` names what was removed, e.g. ``("QUANTIZE #0", "DEQUANTIZE #62")``.
    """

    model: TFLiteModel
    source: TFLiteModel
    stripped: tuple[str, ...]

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """``model_run``'s inputs, in the model's order (``model_input(i)``)."""
        return tuple(self.model.tensors[i] for i in self.model.inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """``model_run``'s outputs, in the model's order (``model_output(i)``)."""
        return tuple(self.model.tensors[i] for i in self.model.outputs)

    @property
    def input(self) -> Tensor:
        """The first input (the only one of a one-input model)."""
        return self.inputs[0]

    @property
    def output(self) -> Tensor:
        """The first output."""
        return self.outputs[0]


def integer_core(model: TFLiteModel, float_edges: bool = False) -> IntegerCore:
    """What ``model_run`` computes for ``model``: with ``float_edges`` the model as it is (a
    float32 input or output is quantized or dequantized by the firmware); otherwise strip
    float->int8 QUANTIZE ops that read a graph input (and are its only reader) and
    int8->float DEQUANTIZE ops that write a graph output, and every input and output must
    then be int8 (the ``--int8-core`` build). Either way an output may also be int32
    (ARG_MAX's indices). Any number of inputs and outputs. The model is checked by
    :func:`~tvm_serenity.frontend.reference.validate` first; the kept operators keep their
    indices in the file, so every message names an operator as the file numbers it."""
    validate(model)
    consumers = model.consumers()
    inputs, outputs = list(model.inputs), list(model.outputs)
    drop, stripped = set(), []
    for op in () if float_edges else model.operators:
        if op.op not in ("QUANTIZE", "DEQUANTIZE"):
            continue
        src, dst = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
        if (op.op == "QUANTIZE" and op.inputs[0] in inputs and src.dtype == "float32"
                and dst.dtype == "int8" and consumers.get(op.inputs[0]) == [op.index]):
            inputs[inputs.index(op.inputs[0])] = op.outputs[0]
        elif (op.op == "DEQUANTIZE" and op.outputs[0] in outputs and src.dtype == "int8"
              and dst.dtype == "float32"):
            outputs[outputs.index(op.outputs[0])] = op.inputs[0]
        else:
            continue
        drop.add(op.index)
        stripped.append(f"{op.op} #{op.index}")
    allowed = {"input": ("int8", "float32") if float_edges else ("int8",)}
    allowed["output"] = allowed["input"] + ("int32",)      # ARG_MAX's indices
    for what, indices in (("input", inputs), ("output", outputs)):
        for index in indices:
            t = model.tensors[index]
            if t.dtype not in allowed[what] or (t.dtype == "int8" and t.quant is None):
                raise CodegenError(
                    f"{model.source}: the model's {what} '{t.name}' is {t.dtype}"
                    f"{'' if t.quant else ' (not quantized)'}; model_run needs "
                    + (f"{' or '.join(allowed[what])} tensors" if float_edges else
                       "int8 tensors (--int8-core strips only a float QUANTIZE / DEQUANTIZE "
                       "right at the edge)"))
    ops = tuple(op for op in model.operators if op.index not in drop)
    core = dataclasses.replace(model, operators=ops, inputs=tuple(inputs),
                               outputs=tuple(outputs))
    return IntegerCore(core, model, tuple(stripped))


# ------------------------------------------------------------------------------- emission
@dataclass(frozen=True)
class Step:
    """What ``model_run`` does at one step of the order."""

    step: int
    node: str
    op: str                        # TFLite builtin
    kernel: str                    # C function called ("" when the step is no code)
    layout: str                    # "rip" (in place), "dual", "copy" or "alias" (no code)
    output_offset: int
    input_offset: int | None       # of the first activation input, where the kernel reads it
    workspace_bytes: int | None    # in-place steps: the shared region S
    saved_bytes: int               # N_in + N_out - S for in-place steps, else 0
    moved_bytes: int               # bytes memmoved right before this step (a plan move)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class IOTensor:
    """A graph input or output as ``model.h`` describes it: it lives in the arena at
    ``offset`` (``model_input(i)`` / ``model_output(i)``); ``scale``/``zero_point`` are 0 for
    an unquantized (float32) tensor, as in TFLite Micro."""

    name: str
    dtype: str                     # "int8", "float32" or "int32"
    shape: tuple[int, ...]
    bytes: int
    offset: int                    # -1 for a streamed input (not in the arena)
    scale: float
    zero_point: int
    streamed: bool = False         # model_run reads it part by part (model_read_input)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "shape": list(self.shape)}


@dataclass(frozen=True)
class EmittedModel:
    """``model.c``/``model.h`` text and the figures a deployment reports."""

    name: str
    model_c: str
    model_h: str
    arena_bytes: int
    scratch_bytes: int             # static gather buffers outside the arena
    inputs: tuple[IOTensor, ...]
    outputs: tuple[IOTensor, ...]
    steps: tuple[Step, ...]

    @property
    def input_bytes(self) -> int:
        """Bytes of all inputs together."""
        return sum(t.bytes for t in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(t.bytes for t in self.outputs)

    @property
    def kernels(self) -> int:
        return len({s.kernel for s in self.steps if s.kernel})

    def write(self, directory: str | Path) -> Path:
        """Write ``model.c`` and ``model.h`` into ``directory`` (created) and return it."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.c").write_text(self.model_c)
        (out / "model.h").write_text(self.model_h)
        return out


def _call(kernel: str, args: list[str]) -> str:
    return f"{kernel}({', '.join(args)});"


def _c_name(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if re.match(r"[A-Za-z_]", name) else f"n_{name}"


def concat_is_copy(model: TFLiteModel, op: Operator) -> bool:
    """``op`` is a CONCATENATION that only copies bytes: every operand is quantized like the
    output and there is no fused activation (the condition for identity rewrites through it)."""
    if op.op != "CONCATENATION" or op.options.get("fused_activation_function",
                                                  "NONE") != "NONE":
        return False
    out = model.tensors[op.outputs[0]]
    if out.quant is None:
        return False
    key = (out.dtype, out.quant.scalar_scale, out.quant.scalar_zero_point)
    return all(i >= 0 and model.tensors[i].quant is not None
               and (model.tensors[i].dtype, model.tensors[i].quant.scalar_scale,
                    model.tensors[i].quant.scalar_zero_point) == key for i in op.inputs)


def _operator_of(graph: Graph, source: Graph | None) -> dict[str, int]:
    """Graph node name -> TFLite operator index: ``graph``'s own nodes, and every node of the
    graph before rewriting (``source``), whose names ``attrs["rewrite"]["of"]`` refers to."""
    out = {}
    for g in (source, graph):
        for node in (g.nodes.values() if g is not None else ()):
            if "tflite_index" in node.attrs and "rewrite" not in node.attrs:
                out[node.name] = int(node.attrs["tflite_index"])
    return out


def _tensor_nodes(core: TFLiteModel, graph: Graph, operator_of: dict[str, int]) -> dict[int, str]:
    """Activation tensor index -> the graph node holding it (a folded PAD's output is its
    input's node: the convolution reads the unpadded tensor). Of the nodes an identity rewrite
    made, only the last one holds a tensor of the model: the rewritten consumer's output (it
    keeps the consumer's name); partial results and pushed-down copies hold none. Of a patch
    plan's nodes (:mod:`tvm_serenity.rewrite.patch`) the last patch of the prefix's last layer
    holds its output (each patch writes its part of it)."""
    out: dict[int, str] = {}
    for node in graph.nodes.values():
        origin = node.attrs.get("rewrite")
        patch = node.attrs.get("patch")
        if node.op in ("patch_output", "input_region") or (patch is not None
                                                            and not patch["exit"]):
            continue     # a patch's own tensor; the output chain's last patch holds the tensor
        if node.is_input:
            out[int(node.attrs["tensor_index"])] = node.name
        elif origin is None:
            out[core.operator(int(node.attrs["tflite_index"])).outputs[0]] = node.name
        elif origin.get("of") == node.name and node.name in operator_of:
            out[core.operator(operator_of[node.name]).outputs[0]] = node.name
    for index in sorted(foldable_pads(core)):
        op = core.operator(index)
        if op.outputs[0] not in out and op.inputs[0] in out:
            out[op.outputs[0]] = out[op.inputs[0]]
    return out


class _Emitter:
    def __init__(self, core: TFLiteModel, graph: Graph, plan: ArenaPlan,
                 source_graph: Graph | None = None):
        self.core, self.graph, self.plan = core, graph, plan
        self.operator_of = _operator_of(graph, source_graph)
        missing = sorted({n for node in graph.nodes.values() if "rewrite" in node.attrs
                          for n in (node.attrs["rewrite"].get("of"),
                                    node.attrs["rewrite"].get("concat"),
                                    node.attrs["rewrite"].get("expand"))
                          if n is not None and n not in self.operator_of})
        if missing:
            raise CodegenError(f"the graph's rewrite nodes refer to {missing}, which are not "
                               "operators of the graph; pass the graph before rewriting as "
                               "emit_model(..., source_graph=...)")
        self.tensor_node = _tensor_nodes(core, graph, self.operator_of)
        self.prim_names: dict[tuple, str] = {}
        self.accumulators = False          # an int32 accumulator kernel was emitted
        self.float_math: set[str] = set()  # serenity_expf / serenity_logf used
        self.checked_concats: set[str] = set()
        self.consts: list[str] = []
        self.const_values: dict[str, bytes] = {}
        self.patch_kernels: dict[tuple, str] = {}   # (layer, elements) -> elementwise kernel
        self.input_position = {t: k for k, t in enumerate(core.inputs)}   # tensor -> i
        self.definitions: list[str] = []
        self.body: list[str] = []
        self.steps: list[Step] = []
        self.tir_names: dict[tuple[LayerSpec, str], str] = {}
        self.used_names: set[str] = set()
        self.scratch16 = 0
        self.scratch32 = 0
        self.location: dict[str, int] = {}   # node -> where it is read at the current step

    # ----------------------------------------------------------------------- helpers
    def where(self, op: Operator) -> str:
        return self.core.where(op)

    def unsupported(self, op: Operator, why: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(f"{self.where(op)}: {why}", op.op, op.index)

    def bias(self, op: Operator, units: int) -> np.ndarray:
        """The operator's constant int32 bias (operand 2), or zeros when it has none."""
        i = op.inputs[2] if len(op.inputs) > 2 else -1
        return self.core.tensors[i].data if i >= 0 else np.zeros(units, np.int32)

    def output(self, node) -> str:
        """The arena pointer expression of ``node``'s output."""
        return f"ARENA({self.plan.offsets[node.name]})"

    def const(self, name: str, dtype: str, values) -> str:
        """A ``static const`` array, emitted once (the patches of a layer share its tables)."""
        data = np.asarray(values).astype(dtype).tobytes()
        if name in self.const_values:
            if self.const_values[name] != data:
                raise CodegenError(f"two different constant arrays are both named {name}")
            return name
        self.const_values[name] = data
        self.consts.append(c_array(name, dtype, values))
        return name

    def tir_kernel(self, spec: LayerSpec, layout: str) -> str:
        key = (spec, layout)
        if key not in self.tir_names:
            name = self.unique_name(default_kernel_name(spec, layout))
            self.tir_names[key] = name
            source = emit_c_kernel(spec, layout, name)
            self.definitions.append(source.removeprefix("#include <stdint.h>\n\n"))
            self.scratch32 = max(self.scratch32, spec.scratch_elements)
        return self.tir_names[key]

    def free_name(self, base: str) -> str:
        """``base``, or ``base_v2``, ``base_v3``, ... the first no C function has."""
        name, n = base, 1
        while name in self.used_names:
            n += 1
            name = f"{base}_v{n}"
        return name

    def unique_name(self, base: str) -> str:
        """:meth:`free_name`, claimed."""
        name = self.free_name(base)
        self.used_names.add(name)
        return name

    def prim_kernel(self, key: tuple, base: str, make, const=(), accumulator: bool = False
                    ) -> str:
        """The C function of a PrimFunc (``make(name)``), emitted once per ``key``; its
        ``acc`` parameter, if ``accumulator``, has the unaligned int32 type."""
        if key not in self.prim_names:
            name = self.unique_name(base)
            types = {"acc": ACC_TYPE} if accumulator else None
            self.definitions.append(emit_c_function(make(name), name, const=const,
                                                    types=types))
            self.prim_names[key] = name
            self.accumulators |= accumulator
        return self.prim_names[key]

    def op_kernel(self, kernel: OpKernel) -> str:
        if kernel.name in self.used_names:
            raise CodegenError(f"kernel name {kernel.name} is generated twice")
        self.used_names.add(kernel.name)
        self.definitions.append(kernel.source)
        self.scratch16 = max(self.scratch16, kernel.scratch16)
        self.scratch32 = max(self.scratch32, kernel.scratch32)
        return kernel.name

    # ----------------------------------------------------------------------- steps
    def emit_step(self, k: int, name: str, pair: InPlaceStep | None, move: Move | None):
        node = self.graph[name]
        origin = node.attrs.get("rewrite")
        if node.op == "patch_output":
            self.body.append(f"    /* step {k}: {name}: the output of "
                             f"{node.attrs['patch_output']}, written patch by patch */")
            self.location[name] = self.plan.offsets[name]
            return
        if node.op == "input_region":
            self.read_input_region(k, node)
            return
        if "patch" in node.attrs:
            op = self.core.operator(int(node.attrs["tflite_index"]))
            handler = _Emitter.patch_step if op.op in PATCH_OPS else None
            label = f"{op.op}/patch{node.attrs['patch']['index']}"
        elif origin is not None:
            role = origin.get("role", "pushdown")
            op = self.rewritten_operator(node, origin, role)
            handler = _REWRITE_HANDLERS[role]
            label = f"{op.op}/{role}"
        else:
            op = self.core.operator(int(node.attrs["tflite_index"]))
            handler = _Emitter.operator_step if op.op in SUPPORTED_OPS else None
            label = op.op
        out = self.core.tensors[op.outputs[0]]
        out_off = self.plan.offsets[name]
        moved = 0
        if move is not None:
            moved = self.graph[move.tensor].bytes
            self.body.append(f"    memmove(ARENA({move.dst}), ARENA({move.src}), {moved});  "
                             f"/* right shift of {move.tensor} for in-place {name} */")
            self.location[move.tensor] = move.dst
        if pair is not None:
            expected = out_off + pair.workspace_bytes - self.graph[pair.input].bytes
            if self.location[pair.input] != expected:
                raise CodegenError(f"plan places '{pair.input}' at {self.location[pair.input]}"
                                   f", but in-place '{name}' needs it at {expected}")
        if handler is None:
            raise self.unsupported(op, f"not supported by the graph C emitter (supported: "
                                       f"{', '.join(SUPPORTED_OPS)})")
        if (out.dtype != "int8" or out.quant is None) and \
                out.dtype not in OUTPUT_TYPES.get(op.op, ()):
            raise self.unsupported(op, f"output '{out.name}' is {out.dtype}; only int8 "
                                       "activations are supported" + (
                                           f" ({op.op} also writes "
                                           f"{' or '.join(OUTPUT_TYPES[op.op])})"
                                           if op.op in OUTPUT_TYPES else ""))
        in_place = pair is not None
        try:
            kernel, layout, statement = (handler(self, node, op, in_place) if origin is None
                                         else handler(self, node, op, origin, in_place))
        except (CodegenError, ref.ReferenceError) as e:
            # a kernel generator's or a shared helper's refusal, e.g. "act_max must be an
            # int8 value": name the operator (messages that do already pass through)
            if str(e).startswith(self.core.source):
                raise
            raise type(e)(f"{self.where(op)}: {e}") from None
        if pair is not None and layout not in ("rip", "alias"):
            raise CodegenError(f"the plan runs '{name}' ({op.op}) in place, which its "
                               "kernel cannot do")
        comment = f"/* step {k}: {name} ({label}), {layout}"
        if pair is not None:
            comment += f", workspace {pair.workspace_bytes} B at {out_off}"
        comment += " */"
        self.body.append(f"    {comment}")
        if statement:
            self.body.append(f"    {statement}")
        if origin is not None or "patch" in node.attrs:
            in_node = node.inputs[-1]
        else:
            first = next((i for i in op.inputs
                          if i >= 0 and self.core.tensors[i].data is None), None)
            in_node = self.tensor_node.get(first) if first is not None else None
        saved = 0
        if pair is not None and not ("patch" in node.attrs and node.inplace == "alias"):
            # (writing a patch into the full output or a cached buffer saves nothing)
            saved = self.graph[pair.input].bytes + node.bytes - pair.workspace_bytes
        self.steps.append(Step(k, name, label, kernel, layout, out_off,
                               None if in_node is None else self.location[in_node],
                               pair.workspace_bytes if pair else None, saved, moved))
        self.location[name] = out_off

    # ------------------------------------------------------------------ identity rewrites
    def rewritten_operator(self, node, origin, role: str) -> Operator:
        """The TFLite operator whose constants the rewrite node ``node`` uses (the original
        consumer or unary operator), after checking that the rewrite is an identity."""
        if role not in _REWRITE_HANDLERS:
            raise CodegenError(f"rewrite node '{node.name}': role {role!r} is not emitted as C "
                               f"(known: {', '.join(REWRITE_ROLES)})")
        op = self.core.operator(self.operator_of[origin["of"]])
        expected = {"partial": ("CONV_2D",), "accumulate": ("CONV_2D",),
                    "requantize": ("CONV_2D",), "slice": ("DEPTHWISE_CONV_2D",),
                    "slice_into": ("DEPTHWISE_CONV_2D",), "fused": ("DEPTHWISE_CONV_2D",),
                    "pushdown": ("RELU", "RELU6", "HARD_SWISH", "LOGISTIC")}[role]
        if op.op not in expected:
            raise self.unsupported(op, f"rewrite node '{node.name}' ({role}) of a {op.op}: "
                                       f"only {' or '.join(expected)} is emitted")
        concat = origin.get("concat")
        if concat is not None and concat not in self.checked_concats:
            cop = self.core.operator(self.operator_of[concat])
            if not concat_is_copy(self.core, cop):
                raise self.unsupported(cop, "identity rewrites need a concatenation that only "
                                            "copies (operands quantized like the output, no "
                                            "fused activation)")
            self.checked_concats.add(concat)
        return op

    def at(self, name: str) -> str:
        """The arena pointer expression of node ``name`` where it is read at this step."""
        return f"ARENA({self.location[name]})"

    def acc_at(self, offset_expr: str) -> str:
        return f"({ACC_TYPE} *){offset_expr}"

    def conv_partial(self, node, op, origin, in_place):
        """conv2d_partial / conv2d_accumulate: int32 partial sums of one branch's channels,
        by the conv2d kernel's own gather and dot loops (:meth:`.spec.LayerSpec.
        conv2d_partial`)."""
        accumulate = origin["role"] == "accumulate"
        a = node.attrs
        branch = self.graph[node.inputs[-1]]
        if a.get("groups", 1) != 1:
            raise self.unsupported(op, f"grouped convolution (groups={a['groups']})")
        lo, hi = origin["channels"]
        x_shape, out_shape = tuple(branch.shape), tuple(node.shape)
        if len(x_shape) != 4 or x_shape[0] != 1 or x_shape[3] != hi - lo:
            raise CodegenError(f"rewrite node '{node.name}': input {x_shape} is not batch-1 NHWC "
                               f"with the {counted(hi - lo, 'channel')} [{lo}, {hi})")
        spec = LayerSpec.conv2d_partial(
            x_shape[1:], out_shape[3], tuple(a["kernel"]), tuple(a["stride"]),
            tuple(a.get("dilation", (1, 1))), tuple(a["padding"]),
            input_zero_point=conv_params(self.core, op).input_zero_point, accumulate=accumulate)
        kernel = self.prim_kernel(
            ("conv2d_partial", spec),
            f"serenity_conv2d_{'accumulate' if accumulate else 'partial'}",
            lambda n: make_prim_func(spec, "dual", n), const=("input", "weight"),
            accumulator=True)
        self.scratch32 = max(self.scratch32, spec.scratch_elements)
        w = np.asarray(self.core.tensors[op.inputs[1]].data)          # OHWI
        weight = self.const(f"{_c_name(node.name)}_weight", "int32",
                            pack_conv2d_weight(np.ascontiguousarray(w[:, :, :, lo:hi])))
        out = self.output(node)
        statement = _call(kernel, [self.at(branch.name), self.acc_at(out), weight, "scratch32"])
        if accumulate and not in_place:    # the plan keeps the running sum apart: copy it
            statement = (f"memcpy({out}, {self.at(node.inputs[0])}, {node.bytes});\n    "
                         + statement)
        return kernel, "rip" if in_place else "dual", statement

    def conv_requantize(self, node, op, origin, in_place):
        """requantize: bias, per-channel requantization and clamp of the accumulator."""
        acc = self.graph[node.inputs[0]]
        if acc.dtype != "int32" or acc.bytes != 4 * node.bytes:
            raise CodegenError(f"rewrite node '{node.name}': its accumulator '{acc.name}' is "
                               f"{acc.bytes} B {acc.dtype}, not int32 for "
                               f"{counted(node.bytes, 'output')}")
        rq = conv_params(self.core, op).requant
        channels = int(node.shape[3])
        key = ("requantize", tuple(node.shape), rq.output_zero_point, rq.act_min, rq.act_max)
        kernel = self.prim_kernel(
            key, "serenity_requantize",
            lambda n: accumulator_requantize_prim_func(n, node.shape, rq.output_zero_point,
                                                       rq.act_min, rq.act_max),
            const=("bias", "multiplier", "shift"), accumulator=True)
        c = _c_name(node.name)
        args = [self.acc_at(self.at(acc.name)),
                self.const(f"{c}_bias", "int32", self.bias(op, channels)),
                self.const(f"{c}_multiplier", "int32", rq.multiplier),
                self.const(f"{c}_shift", "int32", rq.shift), self.output(node)]
        return kernel, "rip" if in_place else "dual", _call(kernel, args)

    def depthwise_slice(self, node, op, origin, in_place):
        """depthwise_conv2d_slice / _slice_into: one branch's output channels of the
        consumer depthwise convolution, written into the shared output."""
        into = origin["role"] == "slice_into"
        a = node.attrs
        branch = self.graph[node.inputs[-1]]
        params = conv_params(self.core, op)
        rq = params.requant
        lo, hi = origin["out_channels"]
        w = np.asarray(self.core.tensors[op.inputs[1]].data)       # (1, KH, KW, C*M)
        wslice = np.ascontiguousarray(w[0, :, :, lo:hi][:, :, None, :])
        x_shape, out_shape = tuple(branch.shape), tuple(node.shape)
        cin_lo, cin_hi = origin["channels"]
        if len(x_shape) != 4 or x_shape[0] != 1 or x_shape[3] != cin_hi - cin_lo \
                or (hi - lo) % x_shape[3]:
            raise CodegenError(f"rewrite node '{node.name}': input {x_shape} does not supply "
                               f"output channels [{lo}, {hi})")
        geometry = (tuple(a["stride"]), tuple(a.get("dilation", (1, 1))), tuple(a["padding"]))
        quant = dict(input_zero_point=params.input_zero_point,
                     output_zero_point=rq.output_zero_point, act_min=rq.act_min,
                     act_max=rq.act_max)
        c = _c_name(node.name)
        out = self.output(node)
        tables = [self.const(f"{c}_weight", "int8", wslice),
                  self.const(f"{c}_bias", "int32", self.bias(op, w.shape[3])[lo:hi]),
                  self.const(f"{c}_multiplier", "int32", rq.multiplier[lo:hi]),
                  self.const(f"{c}_shift", "int32", rq.shift[lo:hi])]
        if hi - lo == x_shape[3]:       # multiplier 1: the depthwise kernel's own row loops
            spec = LayerSpec.depthwise_slice(x_shape[1:], tuple(a["kernel"]), *geometry,
                                             first_channel=lo, out_channels=out_shape[3],
                                             **quant)
            kernel = self.tir_kernel(spec, "dual")
            statement = _call(kernel, [self.at(branch.name), out, *tables, "scratch32"])
        else:
            kernel = self.prim_kernel(
                ("depthwise_slice", x_shape, wslice.shape, out_shape, lo, geometry,
                 tuple(quant.values())), "serenity_depthwise_slice",
                lambda n: depthwise_slice_prim_func(n, x_shape, wslice.shape, out_shape, lo,
                                                    *geometry, *quant.values()),
                const=("x", "w", "bias", "multiplier", "shift"))
            statement = _call(kernel, [self.at(branch.name), *tables, out])
        if into and not in_place:       # the plan keeps the earlier slices apart: copy them
            statement = (f"memcpy({out}, {self.at(node.inputs[0])}, {node.bytes});\n    "
                         + statement)
        return kernel, "rip" if in_place else "dual", statement

    def expand_depthwise(self, node, op, origin, in_place):
        """expand_depthwise_conv2d: the 1x1 CONV_2D ``origin["expand"]`` fused into the
        DEPTHWISE_CONV_2D ``op`` (its geometry from the node: folded padding included)."""
        eop = self.core.operator(self.operator_of[origin["expand"]])
        x = self.graph[node.inputs[0]]
        ew = np.asarray(self.core.tensors[eop.inputs[1]].data)          # OHWI, 1x1
        if eop.op != "CONV_2D" or ew.shape[1:3] != (1, 1) \
                or self.tensor_node.get(eop.inputs[0]) != x.name:
            raise self.unsupported(eop, f"rewrite node '{node.name}' fuses a 1x1 CONV_2D of "
                                        f"'{x.name}', not this {eop.op}")
        eparams, params = conv_params(self.core, eop), conv_params(self.core, op)
        if eparams.stride != (1, 1) or any(eparams.padding) \
                or eparams.requant.output_zero_point != params.input_zero_point:
            raise self.unsupported(eop, f"rewrite node '{node.name}': the expand conv must be "
                                        "1x1, stride 1, unpadded, feeding the depthwise")
        if in_place:
            raise CodegenError(f"the plan runs '{node.name}' in place; a fused expand-"
                               "depthwise reads its input for every channel")
        a, erq, rq = node.attrs, eparams.requant, params.requant
        channels = int(node.shape[3])
        spec = LayerSpec.expand_depthwise(
            tuple(x.shape[1:]), channels, tuple(a["kernel"]), tuple(a["stride"]),
            tuple(a.get("dilation", (1, 1))), tuple(a["padding"]),
            expand=ExpandConv(int(x.shape[3]), eparams.input_zero_point, erq.act_min,
                              erq.act_max),
            input_zero_point=params.input_zero_point, output_zero_point=rq.output_zero_point,
            act_min=rq.act_min, act_max=rq.act_max)
        kernel = self.tir_kernel(spec, "dual")
        c = _c_name(node.name)
        w = self.core.tensors[op.inputs[1]].data
        tables = [self.const(f"{c}_weight", "int8", w),
                  self.const(f"{c}_bias", "int32", self.bias(op, channels)),
                  self.const(f"{c}_multiplier", "int32", rq.multiplier),
                  self.const(f"{c}_shift", "int32", rq.shift),
                  self.const(f"{c}_expand_weight", "int8", ew),
                  self.const(f"{c}_expand_bias", "int32", self.bias(eop, channels)),
                  self.const(f"{c}_expand_multiplier", "int32", erq.multiplier),
                  self.const(f"{c}_expand_shift", "int32", erq.shift)]
        return kernel, "dual", _call(kernel, [self.at(x.name), self.output(node), *tables,
                                              "scratch32"])

    def pushdown(self, node, op, origin, in_place):
        """A unary operator pushed into one branch of the concat: its kernel on the branch."""
        return self.operator_step(node, op, in_place, x_ptr=self.at(node.inputs[0]))

    # ----------------------------------------------------------------------- patches
    def read_input_region(self, k: int, node):
        """A streamed input's patch region (:mod:`tvm_serenity.rewrite.patch`,
        ``stream_input``): ``model_read_input`` copies its rows into the arena."""
        a = node.attrs
        index = self.input_position[a["tensor_index"]]
        full = self.core.tensors[a["tensor_index"]]
        item = np.dtype(full.dtype).itemsize
        width, channels = int(full.shape[2]), int(full.shape[3])
        (r0, r1), (c0, c1) = a["rows"], a["cols"]
        row = (c1 - c0) * channels * item
        dst = self.plan.offsets[node.name]
        first = ((r0 * width) + c0) * channels * item
        self.body.append(f"    /* step {k}: {node.name}: rows [{r0}, {r1}) x columns [{c0}, "
                         f"{c1}) of input {index}, streamed */")
        if c1 - c0 == width:
            self.body.append(f"    model_read_input({index}, {first}, ARENA({dst}), "
                             f"{row * (r1 - r0)});")
        else:
            self.body.append(f"    for (int r = 0; r < {r1 - r0}; r++) model_read_input("
                             f"{index}, {first} + r * {width * channels * item}, "
                             f"ARENA({dst}) + r * {row}, {row});")
        self.location[node.name] = dst

    def patch_step(self, node, op, in_place):
        """One patch of a prefix layer (:mod:`tvm_serenity.rewrite.patch`): the layer's kernel
        for the patch's region (its padding only at the tensor's borders), each input read out
        of the buffer it lies in (the full input, the patch of the layer before) and the last
        layer's output written into the full output, where the patch says (rows
        ``*_row_pitch`` elements apart). A window layer's kernel takes the pitches; an
        elementwise one (a residual ADD too) runs row by row when any side is a window of a
        wider buffer."""
        patch = node.attrs["patch"]
        sources = node.inputs[1:] if node.inplace == "alias" else node.inputs

        def item(name: str) -> int:
            return np.dtype(self.graph[name].dtype or "int8").itemsize

        in_ptrs = [f"ARENA({self.location[src] + offset * item(src)})"
                   for src, offset in zip(sources, patch["in_offsets"])]
        out_item = np.dtype(node.dtype or "int8").itemsize
        out_ptr = f"ARENA({self.plan.offsets[node.name] + patch['out_offset'] * out_item})"
        rows = patch["rows"][1] - patch["rows"][0]
        cols = patch["cols"][1] - patch["cols"][0]
        channels = int(node.shape[3])
        prefix = ""
        keep = patch.get("keep")
        if keep is not None:          # a cached buffer: the rows kept move to its start
            src = self.location[node.inputs[0]] + keep[0] * out_item
            if src != self.plan.offsets[node.name]:
                prefix = (f"memmove({self.output(node)}, ARENA({src}), {keep[1] * out_item});"
                          "\n    ")
        elif node.inplace == "alias" and not in_place:   # the earlier patches lie elsewhere
            prefix = (f"memcpy({self.output(node)}, {self.at(node.inputs[0])}, "
                      f"{node.bytes});\n    ")
        base = _c_name(patch["of"])
        layout = "alias" if in_place else "dual"
        activations = [i for i, t in enumerate(op.inputs)
                       if t >= 0 and self.core.tensors[t].data is None]
        if op.op in WINDOW_OPS:       # in place: RiP on its own patch, or an alias (the
            rip = in_place and node.inplace != "alias"    # full output, a cached buffer)
            region = dataclasses.replace(node, shape=(1, rows, cols, channels),
                                         bytes=rows * cols * channels * out_item)
            call = kernel_call(self.core, op, region, in_place=rip, name=base)
            kernel = self.tir_kernel(call.spec, call.layout)
            ptrs = dict(zip(activations, in_ptrs))
            args = [self.argument(region, op, arg, ptrs, out_ptr, base) for arg in call.args]
            return kernel, call.layout if rip else layout, prefix + _call(kernel, args)
        pitched = patch["out_row_pitch"] is not None or \
            any(p is not None for p in patch["in_row_pitches"])
        calls = rows if pitched else 1
        elements = rows * cols * channels // calls
        part = dataclasses.replace(node, shape=(1, rows // calls, cols, channels),
                                   bytes=elements * out_item)
        key = (patch["of"], elements)          # one kernel per layer and length
        kernel = self.patch_kernels.get(key) or self.free_name(f"{base}_{elements}")
        call = kernel_call(self.core, op, part, name=kernel)
        if call.spec is not None:               # the same-shape ADD of a residual block
            kernel = self.tir_kernel(call.spec, call.layout)
        elif key not in self.patch_kernels:
            self.op_kernel(call.c_kernel())
        self.patch_kernels[key] = kernel
        if not pitched:
            ptrs = dict(zip(activations, in_ptrs))
            args = [self.argument(part, op, arg, ptrs, out_ptr, base) for arg in call.args]
            return kernel, layout, prefix + _call(kernel, args)
        in_channels = int(node.attrs["in_shapes"][0][3])
        ptrs = {i: f"{ptr} + r * {(pitch or cols * in_channels) * item(src)}"
                for i, ptr, pitch, src in zip(activations, in_ptrs, patch["in_row_pitches"],
                                              sources)}
        out_row = f"{out_ptr} + r * {(patch['out_row_pitch'] or cols * channels) * out_item}"
        args = [self.argument(part, op, arg, ptrs, out_row, base) for arg in call.args]
        return kernel, layout, prefix + f"for (int r = 0; r < {rows}; r++) {_call(kernel, args)}"

    # ----------------------------------------------------------------------- operators
    def operator_step(self, node, op, in_place, x_ptr: str | None = None):
        """An operator's kernel call (:func:`.kernel_call.kernel_call`) as C: its arguments
        rendered as arena pointers, ``static const`` arrays and the shared scratch buffers;
        ``x_ptr`` overrides where operand 0 is read (a pushed-down copy reads one branch of
        the concat its operator read). A RESHAPE is a ``memcpy`` or, at one address, nothing."""
        call = kernel_call(self.core, op, node, in_place=in_place, name=_c_name(node.name))
        args = [self.argument(node, op, arg, x_ptr) for arg in call.args]
        if call.reshape:
            x_ptr, out_ptr = args
            if in_place or x_ptr == out_ptr:
                return "", "alias", ""
            return "", "copy", f"memcpy({out_ptr}, {x_ptr}, {node.bytes});"
        if call.spec is not None:
            kernel = self.tir_kernel(call.spec, call.layout)
        else:
            kernel = self.op_kernel(call.c_kernel())
            self.float_math.update(call.float_math)
        return kernel, call.layout, _call(kernel, args)

    def argument(self, node, op: Operator, arg, x_ptr: str | dict | None,
                 out_ptr: str | None = None, base: str | None = None) -> str:
        """One kernel argument (:mod:`.kernel_call`) as a C expression. ``x_ptr`` overrides
        where operand 0 is read, or (a dict: operand index -> pointer) where each operand
        is; ``out_ptr`` where the result goes; ``base`` names the tables (default: the
        node)."""
        if isinstance(arg, Operand):
            if isinstance(x_ptr, dict):
                return x_ptr[arg.index]
            if x_ptr is not None and arg.index == 0:
                return x_ptr
            return self.at(self.tensor_node[op.inputs[arg.index]])
        if isinstance(arg, Result):
            return out_ptr or self.output(node)
        if isinstance(arg, Table):
            return self.const(f"{base or _c_name(node.name)}_{arg.name}", arg.dtype,
                              arg.values)
        return "scratch16" if arg.dtype == "int16" else "scratch32"


assert set(KERNEL_OPS) == set(SUPPORTED_OPS)
_REWRITE_HANDLERS = {"partial": _Emitter.conv_partial, "accumulate": _Emitter.conv_partial,
                     "requantize": _Emitter.conv_requantize,
                     "slice": _Emitter.depthwise_slice, "slice_into": _Emitter.depthwise_slice,
                     "pushdown": _Emitter.pushdown, "fused": _Emitter.expand_depthwise}
assert set(_REWRITE_HANDLERS) == set(REWRITE_ROLES)


def _io_tensor(t: Tensor, offset: int, streamed: bool = False) -> IOTensor:
    scale, zp = (t.quant.scalar_scale, t.quant.scalar_zero_point) if t.quant else (0.0, 0)
    return IOTensor(t.name, t.dtype, tuple(int(d) for d in t.shape), t.nbytes, offset,
                    scale, zp, streamed)


def _c_string(text: str) -> str:
    """``text`` as a C string literal (UTF-8; quotes, backslashes, ``?`` (trigraphs) and
    non-printable bytes escaped)."""
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        out.append(f"\\{c}" if c in '"\\?' else c if 32 <= b < 127 else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


_C_TYPES = {"int8": "int8_t", "float32": "float", "int32": "int32_t"}


def _io_header(kind: str, tensors: tuple[IOTensor, ...]) -> tuple[list[str], list[str]]:
    """(comment lines, #defines) of the inputs or outputs (``kind``: INPUT or OUTPUT)."""
    comments, defines = [], [f"#define MODEL_NUM_{kind}S {len(tensors)}"]
    for k, t in enumerate(tensors):
        quant = (f", scale {t.scale!r}, zero point {t.zero_point}" if t.scale else "")
        where = "streamed (model_read_input)" if t.streamed else f"at arena offset {t.offset}"
        comments.append(f" * {kind.capitalize()} {k}: '{t.name}' {t.dtype} {list(t.shape)}"
                        f"{quant}, {t.bytes} B {where}")
        m = f"MODEL_{kind}{k}"
        defines += [f"#define {m}_NAME {_c_string(t.name)}",
                    f"#define {m}_TYPE {_C_TYPES[t.dtype]}",
                    f"#define {m}_BYTES {t.bytes}", f"#define {m}_OFFSET {t.offset}",
                    f"#define {m}_RANK {len(t.shape)}",
                    f"#define {m}_SHAPE {{{', '.join(map(str, t.shape)) or '1'}}}",
                    f"#define {m}_SCALE {c_float(t.scale)}",
                    f"#define {m}_ZERO_POINT {t.zero_point}"]
        if t.streamed:
            defines.append(f"#define {m}_STREAMED 1")
    return comments, defines


def _io_functions(kind: str, tensors: tuple[IOTensor, ...]) -> list[str]:
    """``model_<kind>_bytes[]`` and ``void *model_<kind>(int i)`` (a pointer into the arena)."""
    upper = kind.upper()
    n = f"MODEL_NUM_{upper}S"
    return [f"const uint32_t model_{kind}_bytes[{n}] = "
            f"{{{', '.join(f'MODEL_{upper}{k}_BYTES' for k in range(len(tensors)))}}};",
            f"void *model_{kind}(int i) {{",
            f"    static const int32_t offsets[{n}] = "
            f"{{{', '.join(str(t.offset) for t in tensors)}}};",
            f"    return i >= 0 && i < {n} && offsets[i] >= 0 ? (void *)(arena + offsets[i])"
            " : (void *)0;", "}", ""]


def _stream_lines(inputs: tuple[IOTensor, ...]) -> list[str]:
    """model.h's declaration of the callback a streamed input needs (none without one)."""
    if not any(t.streamed for t in inputs):
        return []
    return ["/* A streamed input is not in the arena: model_run asks for it part by part, as",
            " * the patches need it (rows of a region; halo rows more than once). Implement",
            " * this to copy `bytes` bytes of input i, from byte `offset` of its row-major",
            " * layout on, to `dst` (a camera line buffer, flash, a file). */",
            "#define MODEL_STREAMS_INPUT 1",
            "void model_read_input(int i, uint32_t offset, void *dst, uint32_t bytes);"]


def _rewrite_lines(graph: Graph) -> list[str]:
    """Header comment lines naming the identity rewrites ``graph`` carries."""
    rewrites: dict[str, tuple[str, int]] = {}
    for node in graph.nodes.values():
        origin = node.attrs.get("rewrite")
        if origin and origin.get("role") in ("partial", "slice"):
            rewrites[origin["of"]] = (origin["pattern"], origin.get("steps", 0))
    fused = [f" * Identity rewrite: {n.attrs['rewrite']['expand']} fused into {n.name}, "
             "channel by channel." for n in graph.nodes.values()
             if n.attrs.get("rewrite", {}).get("role") == "fused"]
    return [f" * Identity rewrite: {pattern} of {of} ({steps} partial steps over the inputs "
            f"of its concat)." for of, (pattern, steps) in rewrites.items()] + fused


def emit_model(core: IntegerCore, graph: Graph, plan: ArenaPlan, *, opt_level: str | None = "O2",
               name: str | None = None, source_graph: Graph | None = None) -> EmittedModel:
    """Emit ``model.c``/``model.h`` for ``core`` (:func:`integer_core`), its graph IR
    (``tflite_to_graph(core.model, fold_pad=True)``, possibly rewritten by
    :func:`tvm_serenity.rewrite.rewrite_graph`; ``source_graph`` is then the graph before
    rewriting) and a verified arena plan of that graph (``alloc.plan_arena``, alignment 1).
    ``opt_level``: the GCC optimisation level the model's functions get (None: the build's
    own)."""
    model = core.model
    if plan.alignment != 1:
        raise CodegenError(f"the C emitter needs an alignment-1 plan, got {plan.alignment}")
    if opt_level is not None and not re.fullmatch(r"O[0-3s]|Ofast", opt_level):
        raise CodegenError(f"opt_level must be O0..O3, Os or Ofast, got {opt_level!r}")
    name = name or model.name
    emitter = _Emitter(model, graph, plan, source_graph)
    streamed = {n.attrs["tensor_index"] for n in graph.nodes.values()
                if n.op == "input_region"}
    inputs = tuple(_io_tensor(t, -1, streamed=True) if t.index in streamed
                   else _io_tensor(t, plan.offsets[emitter.tensor_node[t.index]])
                   for t in core.inputs)
    for n in graph.input_names:
        emitter.location[n] = plan.offsets[n]
    pairs = {p.step: p for p in plan.inplace}
    moves = {m.step: m for m in plan.moves}
    for k, node in enumerate(plan.order):
        emitter.emit_step(k, node, pairs.get(k), moves.get(k))
    # where each output is once the last step has run (a right shift may have moved it)
    outputs = tuple(_io_tensor(t, emitter.location[emitter.tensor_node[t.index]])
                    for t in core.outputs)
    arena = max(plan.arena_bytes, 1)

    header = [f"/* {name}: generated by tvm_serenity.codegen.graph_c from {model.source}.",
              f" * Order of {len(plan.order)} steps, arena plan '{plan.planner}' "
              f"({plan.status}): {plan.arena_bytes} B (liveness peak "
              f"{plan.liveness_peak_bytes} B), {len(plan.inplace)} in-place steps, "
              f"{len(plan.moves)} right shifts.", *_rewrite_lines(graph), " */"]
    scratch_decls = []
    if emitter.scratch16:
        scratch_decls.append(f"static int16_t scratch16[{emitter.scratch16}];")
    if emitter.scratch32:
        scratch_decls.append(f"static int32_t scratch32[{emitter.scratch32}];")
    pragma_on = pragma_off = []
    if opt_level is not None:
        pragma_on = ["#if defined(__GNUC__) && !defined(__clang__)",
                     "#pragma GCC push_options", f'#pragma GCC optimize("{opt_level}")',
                     "#endif"]
        pragma_off = ["#if defined(__GNUC__) && !defined(__clang__)",
                      "#pragma GCC pop_options", "#endif"]
    run = ["void model_run(void) {", *emitter.body, "}"]
    model_c = "\n".join([
        *header, *pragma_on, "#include <stdint.h>", "#include <string.h>", "",
        '#include "model.h"', "",
        "/* 8-byte aligned, so a tensor at an offset that is a multiple of 4 is word-aligned. */",
        "#if defined(__GNUC__)",
        "static uint8_t arena[MODEL_ARENA_BYTES] __attribute__((aligned(8)));", "#else",
        "static uint8_t arena[MODEL_ARENA_BYTES];", "#endif",
        "#define ARENA(offset) ((int8_t *)(arena + (offset)))", *scratch_decls, "",
        *([_ACC_TYPEDEF] if emitter.accumulators else []),
        *([float_math_c(sorted(emitter.float_math))] if emitter.float_math else []),
        *emitter.consts,
        *emitter.definitions, *_io_functions("input", inputs),
        *_io_functions("output", outputs), *run, *pragma_off, ""])
    scratch_bytes = 2 * emitter.scratch16 + 4 * emitter.scratch32
    guard = "SERENITY_MODEL_H"
    stripped = [f" * Stripped at the edges (--int8-core): {', '.join(core.stripped)} "
                "(float32 <-> int8); the tensors above are the int8 ones."] \
        if core.stripped else []
    in_comments, in_defines = _io_header("INPUT", inputs)
    out_comments, out_defines = _io_header("OUTPUT", outputs)
    model_h = "\n".join([
        f"/* {name}: the model's C interface (tvm_serenity.codegen.graph_c).",
        " * Inputs and outputs live in the arena at the plan's offsets (no copies): write",
        " * input i at model_input(i), call model_run(), read output i at model_output(i).",
        " * model_run reuses the inputs' bytes once they are read, and the next inputs may",
        " * overwrite the outputs: write all inputs before each run, read the outputs before",
        " * writing the next inputs. The pointers are only byte-aligned (arena + offset):",
        " * access a float32 or int32 tensor whose offset is not a multiple of 4 with memcpy.",
        *in_comments, *out_comments, *stripped,
        f" * Static RAM: arena {arena} B + kernel scratch {scratch_bytes} B.", " */",
        f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "",
        *in_defines, *out_defines, f"#define MODEL_ARENA_BYTES {arena}",
        f"#define MODEL_SCRATCH_BYTES {scratch_bytes}", "",
        "extern const uint32_t model_input_bytes[MODEL_NUM_INPUTS];",
        "extern const uint32_t model_output_bytes[MODEL_NUM_OUTPUTS];",
        "/* Where input / output i lives in the arena; NULL when i is out of range (or the",
        " * input is streamed). */",
        "void *model_input(int i);", "void *model_output(int i);", *_stream_lines(inputs),
        "/* Runs the model on the inputs in the arena; the outputs are then in the arena. */",
        "void model_run(void);", "", f"#endif /* {guard} */", ""])
    return EmittedModel(name, model_c, model_h, arena, scratch_bytes, inputs, outputs,
                        tuple(emitter.steps))
