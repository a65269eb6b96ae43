"""Identity rewrites of ``concat -> conv``, ``concat -> depthwise`` and ``1x1 expand ->
depthwise`` on the graph IR.

What is matched
---------------
A :class:`Candidate` is a consumer ``y`` whose only activation input is a channel
concatenation ``c = concat(x_1, ..., x_n)`` (NHWC, ``axis`` 3 or -1, ``n >= 2``), directly or
through a chain ``u_1 .. u_m`` of elementwise unary operators (ReLU, ReLU6, ...: same shape,
one input). ``x_i`` carries channels ``C_i = [lo_i, hi_i)`` of ``c``. ``y`` is either

* ``conv2d`` with one group and int8/uint8 tensors: **channel-wise partitioning**;
* ``depthwise_conv2d`` (any channel multiplier ``M``, any dtype): **kernel-wise partitioning**.

Why the rewrites are identities (int8, TFLite arithmetic)
---------------------------------------------------------
TFLite's int8 CONCATENATION gives its inputs the output's scale and zero point (the quantizer
restricts them to be equal), so ``c`` is a pure copy and an elementwise ``u`` with per-tensor
parameters commutes with it: ``u(concat(x_i)) = concat(u(x_i))``. The chain is pushed into
every branch (``unary_pushdown`` copies ``u(x_i)``; they are shared by all rewritten consumers
of the same concat). The Relax pass that replays these decisions must check the equal
quantization; the graph IR has no quantization parameters.

* Channel-wise: ``acc[o] = bias[o] + sum_{c in all channels} w[o, c] * (x[c] - z_in)`` over the
  window taps; the sum over channels splits into one sum per ``C_i`` with the weight slice
  ``W[:, :, :, C_i]``, each with the same input zero point ``z_in`` (padding taps contribute
  ``0`` in every partial, as in the whole). int32 addition is associative and commutative
  (modulo 2^32, like the C kernels), so accumulating the partials in any order gives the exact
  int32 accumulator, which is then requantized once (per output channel, with the activation
  clamp): bit-identical int8 output. The bias is added once, by the first partial.
* Kernel-wise: output channel ``c*M + m`` of a depthwise convolution reads input channel ``c``
  only, and requantization is per output channel, so the output slice ``[lo_i*M, hi_i*M)`` is
  ``depthwise(x_i)`` with the weight, bias and requantization slices of ``C_i``.

How the memory is expressed (no second memory model)
----------------------------------------------------
Both rewrites become a chain that allocates the result buffer with its first node and fills it
in place with the others, using only the graph IR's ``inplace = "alias"`` semantics (the output
overwrites its first input, which it must be the last reader of; the memory model charges
``live_before - bytes(u) + max(bytes(u), bytes(v))``):

* channel-wise, in accumulation order ``k = 0 .. n-1``::

      y/part<i0> = conv2d_partial(x_i0)            plain, int32: 4 * elements(y) bytes
      y/part<ik> = conv2d_accumulate(y/part<ik-1>, x_ik)   alias: costs nothing extra
      y          = requantize(y/part<i_n-1>)        alias, int8: writes element j at byte j
                                                    after reading bytes 4j..4j+3, so it is safe
                                                    front to back; frees 3/4 of the buffer

  The int32 accumulator is charged in full from the first partial to the requantize: the
  rewrite pays ``4 * elements(y)`` for letting every ``x_i`` die as soon as it is consumed
  instead of all ``x_i`` plus the materialized concat living together;
* kernel-wise (the "free concat"): the first slice allocates the whole output and writes its
  channel slice, every later slice writes its own slice of the same buffer in place::

      y/part<i0> = depthwise_conv2d_slice(x_i0)                 plain: bytes(y)
      y/part<ik> = depthwise_conv2d_slice_into(y/part<ik-1>, x_ik)   alias
      y          = the last depthwise_conv2d_slice_into

  so no concat of the branch results ever exists: ``bytes(y)`` is live from the first slice
  on, each ``x_i`` dies when its slice is written.

The last node keeps ``y``'s name, so ``y``'s consumers and the graph outputs are unchanged.
``c`` and the unary chain stay as long as something else still reads them (another consumer,
a graph output), and are removed once dead; the scheduler then sees what that costs.

Every new node records its origin in ``attrs["rewrite"]`` (pattern, original node names,
channel ranges, role and step) so a Relax pass can replay the rewrite; a partial keeps ``y``'s
geometry attributes (kernel, stride, dilation, padding, groups) without the shape and
activation entries, which move to the requantize (channel-wise) or stay on every slice
(kernel-wise, each slice requantizes its own channels; its ``groups`` is its channel count).
A pushdown copy is ``"alias"`` when the original unary op was, else plain.

Expand-depthwise fusion (``FUSE``)
----------------------------------
A :class:`Fusion` is a 1x1 ``conv2d`` ``e`` (stride 1, no padding, one group, int8 or uint8)
whose only reader is a ``depthwise_conv2d`` ``d`` with channel multiplier 1 (``e`` is no graph
output). Depthwise channel ``c`` reads only channel ``c`` of ``e``'s output, and that channel is
``e``'s output channel ``c`` alone (the dot over ``e``'s input channels, bias, per-channel
requantization, ``e``'s clamp: per output channel), so computing, for ``c = 0 .. C-1``, the
whole plane ``e[:, :, c]`` into a one-channel buffer and then ``d``'s channel ``c`` from it
gives every output element with exactly the integer operations of the two kernels in sequence:
bit-identical, the same multiply-accumulates (each expanded element is computed once). ``d``'s
padding taps read ``e``'s output zero point, which is what its padding means. The rewrite is
one node::

    d = expand_depthwise_conv2d(x)        plain: x = e's input, bytes(d); x is read for every
                                          channel, so it is never overwritten

with ``d``'s name, geometry and activation, ``attrs["expand"]`` = ``e``'s output channels and
activation, and ``attrs["rewrite"]`` = ``{"pattern": FUSE, "of": d, "expand": e, "role":
"fused"}``. ``e``'s output never exists: the step costs ``bytes(x) + bytes(d)`` where the pair
cost ``bytes(x) + bytes(e)`` and then (in place) ``max(bytes(e), bytes(d))``. The one-channel
plane is kernel scratch outside the arena (:attr:`tvm_serenity.codegen.spec.LayerSpec.
channel_buffer_bytes`), like the channel-wise in-place depthwise kernel's.

Attributes relied on
--------------------
``op`` names ``concatenation``/``concat``, ``conv2d`` (``attrs["groups"]``, default 1) and
``depthwise_conv2d``; the concat's ``attrs["axis"]`` and its 4-D NHWC ``shape``; each concat
input's channel count from its NHWC ``shape``, else from ``bytes`` (bytes per channel of the
concat); ``y``'s element count from ``shape``, else ``bytes`` and ``dtype``; ``dtype`` int8 or
uint8 for channel-wise partitioning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..graph import Graph, GraphError, Node, unique_name

__all__ = ["CHANNEL", "KERNEL", "UNARY", "FUSE", "PATTERNS", "PATTERN_NAMES", "FUSED_OP",
           "CONCAT_OPS",
           "PUSHABLE_OPS", "ACCUMULATOR_BYTES", "Branch", "Candidate", "Fusion",
           "concat_branches", "find_candidates", "apply_rewrite"]

CHANNEL = "channel_partition"
KERNEL = "kernel_partition"
UNARY = "unary_pushdown"
FUSE = "expand_depthwise"
#: The rewrites :func:`find_candidates` can offer (``UNARY`` is a part of the first two).
PATTERNS = (CHANNEL, KERNEL, FUSE)
#: What each rewrite is called in reports.
PATTERN_NAMES = {CHANNEL: "channel-wise partitioning", KERNEL: "kernel-wise partitioning",
                 FUSE: "expand-depthwise fusion"}
#: The op of the node an expand-depthwise fusion makes.
FUSED_OP = "expand_depthwise_conv2d"

CONCAT_OPS = frozenset({"concatenation", "concat"})
#: Elementwise, one input, per-tensor parameters: commute with a same-quantization concat
#: (``lookup_table``: an int8 function given by its 256 values, the Relax importer's form).
PUSHABLE_OPS = frozenset({"relu", "relu6", "relu_n1_to_1", "leaky_relu", "hard_swish",
                          "logistic", "tanh", "lookup_table"})
#: Bytes per element of the partial-sum accumulator (int32 for int8/uint8 convolutions).
ACCUMULATOR_BYTES = 4
_QUANTIZED = frozenset({"int8", "uint8"})
_ITEMSIZE = {"int8": 1, "uint8": 1, "int16": 2, "float16": 2, "int32": 4, "float32": 4}
# Attributes describing the original tensors' shapes: wrong for a slice, so never copied.
_SHAPE_ATTRS = ("in_shape", "in_shapes", "out_shape")


@dataclass(frozen=True)
class Branch:
    """Input ``source`` of a concat supplies its channels ``[lo, hi)``."""

    source: str
    lo: int
    hi: int


@dataclass(frozen=True)
class Candidate:
    """``consumer(unary_m(..unary_1(concat)))`` that ``pattern`` can rewrite."""

    pattern: str                 # CHANNEL or KERNEL
    concat: str
    unary: tuple[str, ...]       # from the concat outwards
    consumer: str

    @property
    def nodes(self) -> tuple[str, ...]:
        """The original nodes of the pattern, concat first."""
        return (self.concat, *self.unary, self.consumer)


@dataclass(frozen=True)
class Fusion:
    """``consumer(expand(x))`` with a 1x1 ``expand`` conv and a depthwise ``consumer``."""

    expand: str
    consumer: str
    pattern: str = FUSE

    @property
    def nodes(self) -> tuple[str, ...]:
        """The original nodes, the expand conv first."""
        return (self.expand, self.consumer)


def _elements(node: Node) -> int | None:
    if node.shape is not None:
        return math.prod(node.shape)
    size = _ITEMSIZE.get(node.dtype or "")
    return node.bytes // size if size and node.bytes % size == 0 else None


def concat_branches(graph: Graph, name: str) -> list[Branch] | None:
    """The channel ranges of a channel concatenation's inputs, or None when ``name`` is not a
    concat along the channels of NHWC tensors with at least two inputs (or its channel split
    cannot be derived)."""
    node = graph[name]
    if node.op not in CONCAT_OPS or len(node.inputs) < 2 or node.shape is None \
            or len(node.shape) != 4 or node.attrs.get("axis") not in (3, -1):
        return None
    total = node.shape[3]
    if total == 0 or node.bytes % total:
        return None
    per_channel = node.bytes // total
    branches, lo = [], 0
    for src in node.inputs:
        x = graph[src]
        if x.dtype is not None and node.dtype is not None and x.dtype != node.dtype:
            return None
        if x.shape is not None and len(x.shape) == 4:
            if tuple(x.shape[:3]) != tuple(node.shape[:3]):
                return None
            channels = x.shape[3]
        elif x.bytes % per_channel == 0:
            channels = x.bytes // per_channel
        else:
            return None
        branches.append(Branch(src, lo, lo + channels))
        lo += channels
    return branches if lo == total else None


def _pushable(graph: Graph, node: Node) -> bool:
    if node.op not in PUSHABLE_OPS or len(node.inputs) != 1:
        return False
    src = graph[node.inputs[0]]
    return node.bytes == src.bytes and node.dtype == src.dtype


def _match(graph: Graph, y: Node) -> Candidate | None:
    if y.op == "conv2d" and y.attrs.get("groups", 1) == 1:
        pattern = CHANNEL
    elif y.op == "depthwise_conv2d":
        pattern = KERNEL
    else:
        return None
    if len(y.inputs) != 1:
        return None
    unary: list[str] = []
    src = graph[y.inputs[0]]
    while _pushable(graph, src):
        unary.insert(0, src.name)
        src = graph[src.inputs[0]]
    if concat_branches(graph, src.name) is None:
        return None
    if pattern == CHANNEL:
        if y.dtype not in _QUANTIZED or src.dtype not in _QUANTIZED or _elements(y) is None:
            return None
    elif y.shape is None or len(y.shape) != 4 or y.shape[3] % src.shape[3]:
        return None
    return Candidate(pattern, src.name, tuple(unary), y.name)


def _match_fusion(graph: Graph, d: Node) -> Fusion | None:
    if d.op != "depthwise_conv2d" or len(d.inputs) != 1 or d.shape is None:
        return None
    e = graph[d.inputs[0]]
    a = e.attrs
    if e.op != "conv2d" or a.get("groups", 1) != 1 or list(a.get("kernel", ())) != [1, 1] \
            or list(a.get("stride", ())) != [1, 1] or any(a.get("padding", (0,))) \
            or len(e.inputs) != 1 or e.dtype not in _QUANTIZED or d.dtype not in _QUANTIZED \
            or e.shape is None or len(e.shape) != 4 or e.name in graph.outputs \
            or d.shape[3] != e.shape[3] \
            or sum(e.name in n.inputs for n in graph.nodes.values()) != 1:
        return None
    return Fusion(e.name, d.name)


def find_candidates(graph: Graph, kinds=PATTERNS) -> list[Candidate | Fusion]:
    """Every rewritable consumer of the patterns in ``kinds``, in stored order (a consumer
    matching both a concat pattern and ``FUSE``, i.e. none, would be offered twice)."""
    unknown = sorted(set(kinds) - set(PATTERNS))
    if unknown:
        raise GraphError(f"rewrite kinds {unknown} are not known (known: {', '.join(PATTERNS)})")
    found: list[Candidate | Fusion] = []
    for y in graph.nodes.values():
        c = _match(graph, y)
        if c is not None and c.pattern in kinds:
            found.append(c)
        f = _match_fusion(graph, y) if FUSE in kinds else None
        if f is not None:
            found.append(f)
    return found


class _Builder:
    """The rewritten node list: names kept unique, each new node placed right after its last
    input (a topological position; the stored order then accumulates as early as possible)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: dict[str, Node] = dict(graph.nodes)
        self.order: list[str] = list(graph.nodes)

    def fresh(self, hint: str) -> str:
        return unique_name(hint, self.nodes)

    def add(self, node: Node, replace: bool = False) -> str:
        if replace:
            self.order.remove(node.name)
        where = max(self.order.index(s) for s in node.inputs) + 1
        self.order.insert(where, node.name)
        self.nodes[node.name] = node
        return node.name

    def pushed(self, unary: str, source: str, attrs: dict) -> str:
        """``unary`` applied to ``source`` alone: an existing pushdown copy when there is one
        (from an earlier rewrite of the same concat), else a new node."""
        for node in self.nodes.values():
            origin = node.attrs.get("rewrite", {})
            if origin.get("pattern") == UNARY and origin.get("of") == unary \
                    and node.inputs == (source,):
                return node.name
        u, x = self.graph[unary], self.nodes[source]
        return self.add(Node(self.fresh(f"{unary}/{source}"), u.op, (source,), x.bytes,
                             x.shape, u.dtype, {**_without(u.attrs, _SHAPE_ATTRS),
                                                "rewrite": attrs},
                             "alias" if u.inplace == "alias" else None))

    def graph_without_dead(self, candidates: Sequence[str], outputs) -> Graph:
        """The graph, after dropping those of ``candidates`` (tried last to first) nobody
        reads any more."""
        for name in reversed(candidates):
            if name in outputs or any(name in self.nodes[n].inputs for n in self.order):
                continue
            self.order.remove(name)
        return Graph([self.nodes[n] for n in self.order], outputs, self.graph.name)


def _without(attrs, keys) -> dict:
    return {k: v for k, v in attrs.items() if k not in keys and k != "rewrite"}


def _apply_fusion(graph: Graph, fusion: Fusion) -> Graph:
    if fusion.consumer not in graph.nodes or _match_fusion(graph, graph[fusion.consumer]) \
            != fusion:
        raise GraphError(f"node '{fusion.consumer}': no longer matches the {FUSE} pattern of "
                         f"conv '{fusion.expand}'")
    e, d = graph[fusion.expand], graph[fusion.consumer]
    attrs = {**_without(d.attrs, ("in_shape", "in_shapes")),
             "in_shape": list(e.shape),
             "expand": {"channels": e.shape[3], "activation": e.attrs.get("activation")},
             "rewrite": {"pattern": FUSE, "of": d.name, "expand": e.name, "role": "fused"}}
    b = _Builder(graph)
    b.order.remove(e.name)
    del b.nodes[e.name]
    b.add(Node(d.name, FUSED_OP, e.inputs, d.bytes, d.shape, d.dtype, attrs), replace=True)
    return Graph([b.nodes[n] for n in b.order], graph.outputs, graph.name)


def apply_rewrite(graph: Graph, candidate: Candidate | Fusion,
                  order: Sequence[int] | None = None,
                  accumulator_bytes: int = ACCUMULATOR_BYTES,
                  requantize_inplace: bool = True) -> Graph:
    """``graph`` with ``candidate`` rewritten (module docstring); ``order`` is the order in
    which the concat's inputs (by index) are accumulated, default their concat order.

    ``accumulator_bytes`` is the size of one accumulator element: 4 (int32) is the only value
    that keeps int8 results bit-identical; 1 prices the accumulator like the int8 output, the
    paper's accounting, for what-if comparisons only. ``requantize_inplace=False`` makes the
    channel-wise requantize a plain node (the int8 result in a buffer of its own, the
    accumulator freed after it): how a target without in-place type-changing calls runs it
    (Relax on the host, see :mod:`tvm_serenity.passes.rewrite`). A :class:`Fusion` takes
    none of these (module docstring)."""
    if isinstance(candidate, Fusion):
        return _apply_fusion(graph, candidate)
    found = _match(graph, graph[candidate.consumer]) if candidate.consumer in graph.nodes \
        else None
    if found != candidate:
        raise GraphError(f"node '{candidate.consumer}': no longer matches the "
                         f"{candidate.pattern} pattern of concat '{candidate.concat}'")
    branches = concat_branches(graph, candidate.concat)
    n = len(branches)
    order = list(range(n)) if order is None else list(order)
    if sorted(order) != list(range(n)):
        raise GraphError(f"rewrite of '{candidate.consumer}': order {order} is not a "
                         f"permutation of the {n} concat inputs")
    y = graph[candidate.consumer]
    b = _Builder(graph)
    common = {"of": y.name, "concat": candidate.concat, "unary": list(candidate.unary),
              "steps": n}
    sources = []
    for br in branches:
        src = br.source
        for u in candidate.unary:
            src = b.pushed(u, src, {"pattern": UNARY, "of": u, "concat": candidate.concat,
                                    "input": br.source, "channels": [br.lo, br.hi]})
        sources.append(src)
    geometry = _without(y.attrs, _SHAPE_ATTRS + ("activation",))
    if candidate.pattern == CHANNEL:
        acc_bytes = accumulator_bytes * _elements(y)
        prev = None
        for step, i in enumerate(order):
            br = branches[i]
            origin = {"pattern": CHANNEL, **common, "input": br.source,
                      "channels": [br.lo, br.hi], "step": step,
                      "role": "partial" if prev is None else "accumulate"}
            node = Node(b.fresh(f"{y.name}/part{i}"),
                        "conv2d_partial" if prev is None else "conv2d_accumulate",
                        (sources[i],) if prev is None else (prev, sources[i]), acc_bytes,
                        y.shape, f"int{8 * accumulator_bytes}", {**geometry, "rewrite": origin},
                        None if prev is None else "alias")
            prev = b.add(node)
        attrs = {"rewrite": {"pattern": CHANNEL, **common, "role": "requantize"}}
        if "activation" in y.attrs:
            attrs["activation"] = y.attrs["activation"]
        b.add(Node(y.name, "requantize", (prev,), y.bytes, y.shape, y.dtype, attrs,
                   "alias" if requantize_inplace else None), replace=True)
    else:
        multiplier = y.shape[3] // graph[candidate.concat].shape[3]
        slice_attrs = _without(y.attrs, _SHAPE_ATTRS)
        prev = None
        for step, i in enumerate(order):
            br = branches[i]
            origin = {"pattern": KERNEL, **common, "input": br.source,
                      "channels": [br.lo, br.hi],
                      "out_channels": [br.lo * multiplier, br.hi * multiplier], "step": step,
                      "role": "slice" if prev is None else "slice_into"}
            last = step == n - 1
            node = Node(y.name if last else b.fresh(f"{y.name}/part{i}"),
                        "depthwise_conv2d_slice" if prev is None
                        else "depthwise_conv2d_slice_into",
                        (sources[i],) if prev is None else (prev, sources[i]), y.bytes,
                        y.shape, y.dtype,
                        {**slice_attrs, "groups": br.hi - br.lo, "rewrite": origin},
                        None if prev is None else "alias")
            prev = b.add(node, replace=last)
    return b.graph_without_dead([candidate.concat, *candidate.unary], graph.outputs)
