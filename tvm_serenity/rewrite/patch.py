"""Patch-based execution of a network's first layers (MCUNetV2-style, issue #16): the plan.

The first layers of a CNN hold its largest activations. Computing a *segment* of window
layers part by part means only one part's intermediate tensors (or a few rows of each layer)
exist at a time; the segment's full output is assembled in place. Two kinds of segment:

* **recomputed halos** (MCUNetV2): the segment's output in an ``n x m`` grid of patches, each
  computed from its own input region through all the segment's layers; overlapping halos are
  recomputed, so a patch's intermediates are small but MACs are spent again;
* **cached rows** (line buffers): the output in ``R`` full-width row strips, top to bottom;
  every layer computes each of its rows once and keeps, in a buffer of a few rows, the rows
  its readers still need for the next strip: no extra MACs, only memmoves and more kernel
  calls. A buffer holds about ``k + (new rows - 1) * stride`` rows of its layer, however
  deep the segment is, but all the segment's buffers coexist: segments are short (a stage's
  first layers, an inverted-residual block), one after the other.

This module finds a chain of such segments, prices it with the one memory model and checks it
is exact with the numpy reference interpreter; :mod:`tvm_serenity.codegen.graph_c` emits the
patched graph as C (``compile --patch``).

Receptive fields
----------------
A *window layer* is CONV_2D, DEPTHWISE_CONV_2D (any kernel, 1x1 included), AVERAGE/MAX_POOL_2D
(kernel ``k``, stride ``s``, dilation ``d``, padding ``[top, bottom, left, right]``; a folded
PAD is part of its padding), an explicit spatial PAD (a 1x1 window whose padding is the PAD's),
a one-input elementwise operator (QUANTIZE, RELU, RELU6, HARD_SWISH, LOGISTIC, and ADD/MUL
with a constant: a 1x1 window, no padding) and the ADD of two same-shaped layers that closes a
residual block. Along one axis, output rows ``[a, b)`` of a layer read the padded input rows
``[a*s - p, (b-1)*s - p + (k-1)*d + 1)``: that range clipped to the input tensor is the
region's input, and whatever lies outside the tensor is the padding this region sees (only at
true tensor borders: never more than the full layer's own padding). Running the layer on the
region with that padding gives exactly rows ``[a, b)`` of the full output (the taps are the
same values, in the same order).

*Recomputed halos* (:func:`patch_regions`): the segment's output is split into an ``n x m``
grid (row and column sizes differing by at most one) and the regions are propagated
backwards, last layer first: a layer's output region is the bounding box of the input regions
its readers in the segment need (a residual block's input: the block's first layer's, with
the halo of the depthwise after it, and the ADD's, a part of it). The halo recomputation costs
``sum over patches and layers of region MACs - unpatched segment MACs``, reported as a
fraction of the whole network's MACs (conv, depthwise, fully connected; pools count their
taps).

*Cached rows* (:func:`strip_regions`): with ``b_L(s)`` the rows of layer ``L`` computed by
the end of strip ``s`` (the last layer's: the strip's end; any other layer's: the most its
readers' rows ``[0, b_C(s))`` read), ``L`` computes the new rows ``[b_L(s-1), b_L(s))`` at
strip ``s`` (full width, from the input rows they read) and its buffer then holds ``[a_L(s),
b_L(s))``, ``a_L(s)`` the first row a reader still reads from strip ``s`` on (a residual
block's input spans the expand conv's rows and, lagging by the depthwise halo, the ADD's).
The last layer writes its new rows into the full output.

The patched graph
-----------------
In the graph IR, judged by :mod:`tvm_serenity.memory` like any other graph. The segment's
output is a chain ``Y0 -> Y1 -> ... -> YP``: ``Y0`` an allocation (no inputs, the full
output's bytes) and patch (strip) ``p``'s last-layer node an ``"alias"`` over ``Y(p-1)``
that also reads patch ``p``'s layers before it, so the full output is live from the first
patch on and each patch writes its part into it (``mem_during = live_before``). The rest of
the network is unchanged and reads ``YP``. Every other layer has, per patch, one node of its
region's bytes reading the nodes of the layers it reads (or the segment's input); for cached
rows, one node per strip where it computes new rows, of its buffer's bytes, and, where it
keeps rows, an ``"alias"`` over its node of the strip before (which moves the kept rows to
its start: one allocation live from the layer's first strip to its readers' last one when
the scheduler runs them in sequence, a fresh one otherwise; the move is right either way).
Each patch node keeps its layer's attributes with the region's input shape and padding (what
its kernel is built from) and says in ``attrs["patch"]`` where it reads and writes: a region
of a wider buffer (the whole input, a producer's patch or buffer, the full output) by its
offset and row pitch, and the rows it keeps. A window layer's node that reads the whole of a
patch tensor of its own gets the in-place workspace RiP computes for the region's geometry
(``inplace``, as the full layer has one), so the in-place rules apply inside a patch as
everywhere else. With ``stream_input=True`` the segment reading the graph input takes it as
input-region nodes (no inputs, the region's bytes, one per patch or strip), i.e. the input
arrives part by part (a camera, a streamed file) instead of being resident from the start; a
strip's region is all the rows its new rows read, the kept ones read again (the same bytes
as caching them, and no move).

The search
----------
:func:`prefix_chain` lists the layers a plan may cover in topological order from the input;
:func:`cuts` the positions after which exactly one tensor leaves (inside a residual block two
do: its input and the branch). A segment spans two such positions. :func:`plan_patches`
prices segments *alone*: the segment applied to the unpatched graph, ordered as the
unpatched schedule (the project's scheduler, ``serenity`` by default) with the segment's
layers replaced by its nodes in sequence, and its peak is the most bytes one of its own steps
needs. On a chain of single-tensor cuts the peak of a plan is then the largest of its
segments' peaks and of the unpatched steps left: a dynamic program over the positions (each
stretch between two is one segment or left unpatched) finds the chain with the lowest peak,
then the fewest extra MACs within ``max_overhead`` (cached rows cost none), then the fewest
nodes. It prices, within one deadline: every segment in cached strips of one row (the least
memory of that kind); then the grids ``n x m`` up to 8x8 of recomputed patches, for the
segments that can still lower the best chain's peak (the stretch needs that peak unpatched,
its input and output leave room below it, and it ends by the first position from which no
layer needs it); then taller strips (2-4 rows: fewer kernel calls) for the best chain's
cached segments. The chosen chain is ordered as a whole by the scheduler (or in sequence,
where that is lower): :func:`plan_patches` returns a :class:`PatchPlan`, or None when no plan
has a lower peak than the unpatched network under the same scheduler; :func:`plan_for`
prices given segments (``"8x8"``, ``"22x1c"``, ``"none"`` for layers left as they are:
:func:`parse_grid`; :attr:`PatchPlan.layout` is what forces a plan found by the search).

Exactness
---------
:func:`run_patched` runs each segment patch by patch or strip by strip with the reference
interpreter's integer kernels on the regions (each input sliced out of what its producer's
patch or buffer holds, padded only where the full layer pads), writes each part into the
full output, and runs the rest of the model with the interpreter. Tests compare it byte for
byte with :func:`tvm_serenity.frontend.reference.run`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import time
from dataclasses import dataclass

import numpy as np

from ..errors import SerenityError
from ..graph import Graph, Node
from ..memory import simulate
from ..rip import inplace_workspace_bytes
from ..schedule import Deadline, ScheduleResult, make_result, schedule
from ..frontend import reference
from ..frontend.tflite_model import TFLiteModel

__all__ = ["PatchError", "Window", "LayerRegion", "Segment", "PatchPlan", "window_of",
           "prefix_chain", "cuts", "split_extent", "input_range", "patch_regions",
           "strip_regions", "parse_grid", "source_region", "prefix_macs", "network_macs",
           "patched_graph", "why_no_plan", "without_inplace", "plan_patches", "plan_for",
           "run_patched", "GRID_MAX", "STRIP_HEIGHTS", "UNPATCHED"]

GRID_MAX = 8
_CONVS = ("conv2d", "depthwise_conv2d")
_POOLS = ("avg_pool2d", "max_pool2d")
_PADS = ("pad", "padv2")
_ELEMENTWISE = ("quantize", "relu", "relu6", "relu_n1_to_1", "hard_swish", "logistic",
                "add", "mul")
_ELEMENTWISE_TFLITE = {"QUANTIZE", "RELU", "RELU6", "RELU_N1_TO_1", "HARD_SWISH", "LOGISTIC",
                       "ADD", "MUL"}


class PatchError(SerenityError, ValueError):
    """A patch plan does not fit the graph or model it is applied to."""


Span = tuple[int, int]                    # [start, stop) along one axis


@dataclass(frozen=True)
class Window:
    """One prefix layer's geometry (a 1x1 window without padding for elementwise layers)."""

    name: str
    op: str
    tflite_index: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]    # top, bottom, left, right
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    out_pixel_bytes: int                  # bytes of one output pixel (all channels)
    in_channels: int
    macs_per_pixel: int                   # MACs (pool: taps) per output pixel
    inputs: tuple[str, ...] = ()          # the nodes it reads (two for a residual ADD)


@dataclass(frozen=True)
class LayerRegion:
    """What one patch computes of one layer: output rows/cols, the input region it reads and
    the padding that region sees (top, bottom, left, right; nonzero only at true borders)."""

    layer: str
    out_rows: Span
    out_cols: Span
    in_rows: Span
    in_cols: Span
    padding: tuple[int, int, int, int]
    # a cached strip: the rows the layer's buffer holds once the strip's new rows
    # ``out_rows`` are written (None: a recomputed patch holds just ``out_rows``)
    buffer_rows: Span | None = None

    @property
    def out_pixels(self) -> int:
        return (self.out_rows[1] - self.out_rows[0]) * (self.out_cols[1] - self.out_cols[0])

    @property
    def in_pixels(self) -> int:
        return (self.in_rows[1] - self.in_rows[0]) * (self.in_cols[1] - self.in_cols[0])


@dataclass(frozen=True)
class Segment:
    """One run of patches: the layers ``windows`` read from node ``input`` (the graph input,
    or the full output an earlier segment wrote), computed in a ``grid`` of patches, or
    (``cached``) in ``grid[0]`` full-width row strips whose layers keep the rows their
    readers still need (no recomputation)."""

    input: str
    windows: tuple[Window, ...]
    grid: tuple[int, int]                 # patch rows x patch columns (cached: strips x 1)
    regions: tuple[tuple[LayerRegion, ...], ...]   # per patch (row-major), per layer
    extra_macs: int
    cached: bool = False

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.windows)

    @property
    def label(self) -> str:
        """The grid as the CLI spells it: ``RxC`` (recomputed halos), ``Rx1c`` (cached)."""
        return f"{self.grid[0]}x{self.grid[1]}{'c' if self.cached else ''}"

    @property
    def exit(self) -> str:
        """The node of the patched graph holding this segment's full output."""
        return f"{self.windows[-1].name}.patch{len(self.regions) - 1}"

    def apply(self, graph: Graph, stream_input: bool = False) -> Graph:
        return patched_graph(graph, self.input, list(self.windows), list(self.regions),
                             stream_input, self.cached)


@dataclass(frozen=True)
class PatchPlan:
    """A chosen patch plan and its figures (bytes from the memory model): one or more
    segments, each starting where the one before ends."""

    segments: tuple[Segment, ...]
    stream_input: bool                    # the objective: input streamed per patch or resident
    peak_unpatched: int
    peak_full_input: int                  # patched, the whole input resident from the start
    peak_streamed: int                    # patched, the input arriving patch by patch
    extra_macs: int
    extra_macs_fraction: float            # of the whole network's MACs
    prefix_overhead: float                # of the patched layers' MACs
    order: tuple[str, ...]                # the schedule of the objective's patched graph
    seconds: float
    # (layers, grid) of each stretch from the input: a segment's label or UNPATCHED; what
    # plan_for (the CLI's --patch-layers / --patch-grid) takes to force this plan
    layout: tuple[tuple[int, str], ...]
    schedule: ScheduleResult = dataclasses.field(compare=False, repr=False, default=None)

    @property
    def input(self) -> str:
        """The graph input the first segment reads."""
        return self.segments[0].input

    @property
    def layers(self) -> tuple[str, ...]:
        """Every patched layer, first to last."""
        return tuple(n for seg in self.segments for n in seg.layers)

    @property
    def windows(self) -> tuple[Window, ...]:
        return tuple(w for seg in self.segments for w in seg.windows)

    @property
    def grid(self) -> tuple[int, int]:
        """The first segment's grid (the one that reads the input)."""
        return self.segments[0].grid

    @property
    def regions(self) -> tuple[tuple[LayerRegion, ...], ...]:
        """The first segment's regions."""
        return self.segments[0].regions

    def graph(self, graph: Graph, stream_input: bool | None = None) -> Graph:
        """The patched ``graph`` this plan was made for (the objective's, by default)."""
        return _apply(graph, self.segments,
                      self.stream_input if stream_input is None else stream_input)

    @property
    def peak_bytes(self) -> int:
        return self.peak_streamed if self.stream_input else self.peak_full_input


# --------------------------------------------------------------------------- geometry
def _hw(shape) -> tuple[int, int]:
    return int(shape[1]), int(shape[2])


def window_of(graph: Graph, name: str) -> Window | None:
    """The window geometry of node ``name``, or None when it is no NHWC window layer."""
    node = graph[name]
    a = node.attrs
    if node.shape is None or len(node.shape) != 4 or node.shape[0] != 1 \
            or "tflite_index" not in a or "patch" in a or "rewrite" in a:
        return None
    out_hw = _hw(node.shape)
    pixel = node.bytes // (out_hw[0] * out_hw[1]) if out_hw[0] * out_hw[1] else 0
    if len(node.inputs) == 2 and node.op == "add":       # a residual connection's ADD
        shapes = [graph[i].shape for i in node.inputs]
        if any(sh is None or tuple(sh) != tuple(node.shape) for sh in shapes):
            return None
        return Window(name, node.op, a["tflite_index"], (1, 1), (1, 1), (1, 1), (0, 0, 0, 0),
                      out_hw, out_hw, pixel, int(node.shape[3]), 0, tuple(node.inputs))
    if len(node.inputs) != 1:
        return None
    inputs = tuple(node.inputs)
    if node.op in _CONVS + _POOLS:
        kernel, stride = tuple(a["kernel"]), tuple(a["stride"])
        dilation = tuple(a.get("dilation", (1, 1)))
        cout = int(node.shape[3])
        if node.op == "conv2d":
            per_pixel = kernel[0] * kernel[1] * (int(a["in_shape"][3]) // a["groups"]) * cout
        else:
            per_pixel = kernel[0] * kernel[1] * cout
        return Window(name, node.op, a["tflite_index"], kernel, stride, dilation,
                      tuple(a["padding"]), _hw(a["in_shape"]), out_hw, pixel,
                      int(a["in_shape"][3]), per_pixel, inputs)
    in_shapes = a.get("in_shapes")
    if not in_shapes or len(in_shapes[0]) != 4:
        return None
    in_hw = _hw(in_shapes[0])
    if node.op in _PADS:
        p = a.get("paddings")
        if p is None or p[0] != [0, 0] or p[3] != [0, 0] or min(p[1] + p[2]) < 0:
            return None
        return Window(name, node.op, a["tflite_index"], (1, 1), (1, 1), (1, 1),
                      (p[1][0], p[1][1], p[2][0], p[2][1]), in_hw, out_hw, pixel,
                      int(in_shapes[0][3]), 0, inputs)
    if node.op in _ELEMENTWISE and in_hw == out_hw:
        return Window(name, node.op, a["tflite_index"], (1, 1), (1, 1), (1, 1), (0, 0, 0, 0),
                      in_hw, out_hw, pixel, int(in_shapes[0][3]), 0, inputs)
    return None


def prefix_chain(graph: Graph, ops=None, start: str | None = None) -> tuple[str, list[Window]]:
    """The graph input and the layers a patch plan may cover, in the graph's (topological)
    order: from the input on, every node whose inputs are the graph input or earlier such
    layers, while it is a window layer or a residual ADD of two of them (:func:`window_of`);
    ``ops`` (TFLite operator names), when given, limits them to what a
    back end can run on a patch. A prefix is the first ``k`` of them where :func:`cuts`
    allows. ``start``: a node other than the graph input the layers start from (a later
    segment of a plan starts from the tensor the one before wrote). ``("", [])`` when the
    graph has no such start."""
    if start is None:
        inputs = graph.input_names
        if len(inputs) != 1:
            return "", []
        start = inputs[0]
    taken = {start}
    chain: list[Window] = []
    names = graph.op_names
    after = names.index(start) + 1 if start in names else 0
    for name in names[after:]:
        node = graph[name]
        window = window_of(graph, name)
        if window is None or not set(node.inputs) <= taken \
                or (ops is not None and node.attrs.get("tflite_op") not in ops):
            break
        chain.append(window)
        taken.add(name)
    return start, chain


def cuts(graph: Graph, input_name: str, chain: list[Window]) -> list[int]:
    """The prefix lengths ``k`` of ``chain`` that end where one tensor leaves: the first
    ``k`` layers read every reader of the graph input, and of their tensors only the last
    one's is read after them (or is a graph output)."""
    out = []
    inside: set[str] = set()
    for k, w in enumerate(chain, 1):
        inside.add(w.name)
        escaping = [v.name for v in chain[:k] if v.name in graph.outputs
                    or any(c not in inside for c in graph.consumers[v.name])]
        if escaping == [w.name] and set(graph.consumers[input_name]) <= inside:
            out.append(k)
    return out


def split_extent(extent: int, parts: int) -> list[Span]:
    """``[0, extent)`` in ``parts`` consecutive spans whose sizes differ by at most one."""
    bounds = [extent * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def input_range(out: Span, in_extent: int, kernel: int, stride: int, dilation: int,
                pad_before: int) -> tuple[Span, int, int]:
    """Input rows (clipped to the tensor) that output rows ``out`` read, and the padding
    before and after them that this region sees (rows entirely in an explicit PAD's padding
    read no input row: an empty span at the border)."""
    lo = out[0] * stride - pad_before
    hi = (out[1] - 1) * stride - pad_before + (kernel - 1) * dilation + 1
    start = min(max(lo, 0), in_extent)
    stop = max(min(hi, in_extent), start)
    return (start, stop), max(0, min(hi, 0) - lo), max(0, hi - max(lo, in_extent))


def _union(a: tuple[Span, Span] | None, b: tuple[Span, Span]) -> tuple[Span, Span]:
    if a is None:
        return b
    return ((min(a[0][0], b[0][0]), max(a[0][1], b[0][1])),
            (min(a[1][0], b[1][0]), max(a[1][1], b[1][1])))


def patch_regions(windows: list[Window], grid: tuple[int, int]
                  ) -> list[tuple[LayerRegion, ...]]:
    """Per patch of the last layer's ``grid`` (row-major), per layer: its region. The layers
    are visited last to first; a layer's output region is the bounding box of what its
    readers in the prefix need (a residual connection's input is needed by the block's first
    layer, with its halo, and by the ADD)."""
    last = windows[-1]
    out = []
    for patch_rows in split_extent(last.out_hw[0], grid[0]):
        for patch_cols in split_extent(last.out_hw[1], grid[1]):
            need = {last.name: (patch_rows, patch_cols)}
            regions = {}
            for w in reversed(windows):
                rows, cols = need[w.name]
                in_rows, top, bottom = input_range(rows, w.in_hw[0], w.kernel[0], w.stride[0],
                                                   w.dilation[0], w.padding[0])
                in_cols, left, right = input_range(cols, w.in_hw[1], w.kernel[1], w.stride[1],
                                                   w.dilation[1], w.padding[2])
                regions[w.name] = LayerRegion(w.name, rows, cols, in_rows, in_cols,
                                              (top, bottom, left, right))
                for src in w.inputs:
                    need[src] = _union(need.get(src), (in_rows, in_cols))
            out.append(tuple(regions[w.name] for w in windows))
    return out


def strip_regions(windows: list[Window], strips: int) -> list[tuple[LayerRegion, ...]]:
    """Per strip of a cached segment (``strips`` full-width row strips of the last layer's
    output, top to bottom), per layer: its region. A layer computes each of its rows once,
    at the first strip whose rows need it (``out_rows``, empty when it computes nothing new),
    from the input rows those new rows read; its buffer then holds ``buffer_rows``, from the
    first row a reader still needs (now or at a later strip) to its last computed row."""
    last = windows[-1]
    none = last.in_hw[0] + max(w.in_hw[0] for w in windows)        # above every row index
    ends = {last.name: [b for _, b in split_extent(last.out_hw[0], strips)]}
    firsts: dict[str, list[int]] = {}   # per layer and strip: first row its readers read
    reads: dict[str, list] = {}
    for w in reversed(windows):
        end = list(itertools.accumulate(ends[w.name], max))
        ends[w.name] = end
        spans = list(zip([0] + end[:-1], end))
        reads[w.name] = [input_range(span, w.in_hw[0], w.kernel[0], w.stride[0], w.dilation[0],
                                     w.padding[0]) if span[0] < span[1] else None
                         for span in spans]
        for src in w.inputs:
            src_end = ends.setdefault(src, [0] * strips)
            src_first = firsts.setdefault(src, [none] * strips)
            for s, read in enumerate(reads[w.name]):
                if read is not None:
                    src_end[s] = max(src_end[s], read[0][1])
                    src_first[s] = min(src_first[s], read[0][0])
    out: list[list[LayerRegion]] = [[] for _ in range(strips)]
    for w in windows:
        in_cols, left, right = input_range((0, w.out_hw[1]), w.in_hw[1], w.kernel[1],
                                           w.stride[1], w.dilation[1], w.padding[2])
        # from each strip on, the first row a reader still reads (suffix minimum)
        needed = list(itertools.accumulate(reversed(firsts.get(w.name, [none] * strips)),
                                           min))[::-1]
        held = None
        for s, read in enumerate(reads[w.name]):
            new = (ends[w.name][s - 1] if s else 0, ends[w.name][s])
            if read is None:
                region = LayerRegion(w.name, new, (0, w.out_hw[1]), (0, 0), in_cols,
                                     (0, 0, 0, 0), held)
            else:
                (in_rows, top, bottom) = read
                if w is not last:
                    held = (min(new[0], needed[s]), new[1])
                region = LayerRegion(w.name, new, (0, w.out_hw[1]), in_rows, in_cols,
                                     (top, bottom, left, right), held)
            out[s].append(region)
    return [tuple(regions) for regions in out]


def source_region(windows: list[Window], patch: tuple[LayerRegion, ...], source: str
                  ) -> tuple[Span, Span] | None:
    """Rows and columns of ``source`` (a layer, or the graph input) that one patch reads
    (None when it reads none: a cached strip whose readers of it compute nothing new)."""
    box = None
    for w, r in zip(windows, patch):
        if source in w.inputs and r.out_rows[0] < r.out_rows[1]:
            box = _union(box, (r.in_rows, r.in_cols))
    return box


def prefix_macs(windows: list[Window], regions=None) -> int:
    """MACs of the prefix: unpatched, or summed over the patches' ``regions``."""
    if regions is None:
        return sum(w.out_hw[0] * w.out_hw[1] * w.macs_per_pixel for w in windows)
    return sum(r.out_pixels * w.macs_per_pixel
               for patch in regions for w, r in zip(windows, patch))


def network_macs(graph: Graph) -> int:
    """MACs of the whole network: windows (pool taps) and fully connected layers."""
    total = 0
    for name, node in graph.nodes.items():
        w = window_of(graph, name)
        if w is not None:
            total += w.out_hw[0] * w.out_hw[1] * w.macs_per_pixel
        elif node.op == "fully_connected":
            total += int(np.prod(node.attrs["in_shapes"][0])) * node.attrs["units"]
    return total


# ------------------------------------------------------------------------- graph IR
def _window_of_buffer(region: tuple[Span, Span], buffer: tuple[Span, Span], channels: int
                      ) -> tuple[int, int | None]:
    """Where ``region`` starts in a row-major ``buffer`` holding rows x cols (elements), and
    the pitch of its rows (None when the region spans the buffer's width: contiguous)."""
    (rows, cols), (buffer_rows, buffer_cols) = region, buffer
    width = buffer_cols[1] - buffer_cols[0]
    offset = ((rows[0] - buffer_rows[0]) * width + cols[0] - buffer_cols[0]) * channels
    return offset, None if cols == buffer_cols else width * channels


def _region_attrs(orig: Node, w: Window, r: LayerRegion, p: int, sources, target,
                  is_exit: bool = False, keep: tuple[int, int] | None = None) -> dict:
    """Patch node attributes: the layer's own with its input shape and padding those of the
    region (what a kernel for the region is built from), and ``"patch"``: which layer and
    patch, and where it reads and writes. ``sources``: per input of ``w``, the rows and
    columns the buffer it reads holds (the graph input, its streamed region, the patch or
    cached buffer of the layer before); ``target``: the rows and columns of the tensor the
    output rows are written into (the full prefix output when ``is_exit``, a cached buffer;
    None: a patch tensor of its own). A region of a wider buffer starts ``*_offset``
    elements into it and its rows are ``*_row_pitch`` elements apart (None: contiguous).
    ``keep``: a cached buffer's rows kept from the layer's buffer before it, as (offset,
    elements) in that buffer; they move to the start of this one."""
    in_shape = [1, r.in_rows[1] - r.in_rows[0], r.in_cols[1] - r.in_cols[0], w.in_channels]
    attrs = dict(orig.attrs)
    if w.op in _CONVS + _POOLS:
        attrs.update(in_shape=in_shape, padding=list(r.padding))
    else:
        attrs["in_shapes"] = [in_shape] * len(w.inputs) + \
            list(orig.attrs.get("in_shapes", []))[len(w.inputs):]
        if w.op in _PADS:
            top, bottom, left, right = r.padding
            attrs["paddings"] = [[0, 0], [top, bottom], [left, right], [0, 0]]
    reads = [_window_of_buffer((r.in_rows, r.in_cols), box, w.in_channels) for box in sources]
    out_offset, out_pitch = 0, None
    if target is not None:
        out_offset, out_pitch = _window_of_buffer((r.out_rows, r.out_cols), target,
                                                  int(orig.shape[3]))
    attrs["patch"] = {"of": w.name, "index": p, "exit": is_exit,
                      "rows": list(r.out_rows), "cols": list(r.out_cols),
                      "in_rows": list(r.in_rows), "in_cols": list(r.in_cols),
                      "in_offsets": [o for o, _ in reads],
                      "in_row_pitches": [pitch for _, pitch in reads],
                      "out_offset": out_offset, "out_row_pitch": out_pitch,
                      "keep": None if keep is None else list(keep)}
    return attrs


#: RiP's workspace of a geometry (pure; a search asks for the same regions many times)
_workspace = functools.lru_cache(maxsize=4096)(inplace_workspace_bytes)


def _region_inplace(orig: Node, w: Window, r: LayerRegion) -> int | None:
    """The in-place workspace of a window layer's patch that reads a patch tensor of its own
    (the whole of it): RiP's for the region's geometry, as the full layer's (None when the
    full layer has none, e.g. with ``without_inplace``)."""
    if orig.inplace is None or orig.inplace == "alias" or w.op not in _CONVS + _POOLS:
        return None
    a = orig.attrs
    hwc = (r.in_rows[1] - r.in_rows[0], r.in_cols[1] - r.in_cols[0], w.in_channels)
    groups = a.get("groups", w.in_channels if w.op != "conv2d" else 1)
    return _workspace(w.op, hwc, int(orig.shape[3]), w.kernel, w.stride, w.dilation,
                      r.padding, groups, np.dtype(orig.dtype or "int8").itemsize)


def patched_graph(graph: Graph, input_name: str, windows: list[Window],
                  regions: list[tuple[LayerRegion, ...]], stream_input: bool = False,
                  cached: bool = False) -> Graph:
    """The graph with the prefix ``windows`` computed patch by patch, or strip by strip with
    cached rows (``cached``, ``regions`` of :func:`strip_regions`; module docstring). Every
    patch node keeps its layer's ``tflite_index`` and attributes, with the region's input
    shape and padding, and says in ``attrs["patch"]`` which layer and patch it is and where
    it reads and writes (:func:`_region_attrs`)."""
    last = windows[-1]
    input_node = graph[input_name]
    prefix = {w.name for w in windows}
    in_hw = _hw(input_node.shape)
    in_pixel = input_node.bytes // (in_hw[0] * in_hw[1])
    whole_input = ((0, in_hw[0]), (0, in_hw[1]))
    full_output = ((0, last.out_hw[0]), (0, last.out_hw[1]))
    alloc = Node(f"{last.name}.alloc", "patch_output", (), graph[last.name].bytes,
                 graph[last.name].shape, graph[last.name].dtype, {"patch_output": last.name})
    if stream_input and not input_node.is_input:
        raise PatchError(f"node '{input_name}': only a graph input can be streamed")
    names = list(graph.nodes)
    # the nodes up to the one the prefix reads stay first, the patches follow it
    before = names[:names.index(input_name) + 1]
    nodes: list[Node] = [graph[n] for n in before
                         if n not in prefix and not (stream_input and n == input_name)]
    nodes.append(alloc)
    y = alloc.name
    held = {}                 # layer -> (node, rows x cols it holds); kept across strips
    for p, patch in enumerate(regions):
        tag = f"patch{p}"
        if not cached or not held:
            held = {input_name: (input_name, whole_input)}
        box = source_region(windows, patch, input_name) if stream_input else None
        if box is not None:   # the input rows this patch reads, read again where they overlap
            (rows, cols) = box
            held[input_name] = (f"{input_name}.{tag}", box)
            nodes.append(Node(held[input_name][0], "input_region", (),
                              (rows[1] - rows[0]) * (cols[1] - cols[0]) * in_pixel,
                              (1, rows[1] - rows[0], cols[1] - cols[0], input_node.shape[3]),
                              input_node.dtype,
                              {"streamed_input": input_name, "patch": p, "rows": list(rows),
                               "cols": list(cols),
                               "tensor_index": input_node.attrs.get("tensor_index")}))
        for w, r in zip(windows, patch):
            if r.out_rows[0] == r.out_rows[1]:
                continue        # a cached strip that needs no new row of this layer
            orig = graph[w.name]
            srcs = tuple(held[i][0] for i in w.inputs)
            sources = [held[i][1] for i in w.inputs]
            name = f"{w.name}.{tag}"
            if w is last:
                attrs = _region_attrs(orig, w, r, p, sources, full_output, is_exit=True)
                nodes.append(Node(name, orig.op, (y, *srcs), orig.bytes, orig.shape,
                                  orig.dtype, attrs, "alias"))
                y = name
                continue
            rows = r.buffer_rows or r.out_rows
            buffer = (rows, r.out_cols)
            shape = (1, rows[1] - rows[0], r.out_cols[1] - r.out_cols[0], orig.shape[3])
            nbytes = shape[1] * shape[2] * w.out_pixel_bytes
            before_rows = held[w.name][1][0] if w.name in held else (0, 0)
            keep = None
            if rows[0] < before_rows[1]:            # rows kept from the strip before
                width = shape[2] * shape[3]
                keep = ((rows[0] - before_rows[0]) * width, (before_rows[1] - rows[0]) * width)
            attrs = _region_attrs(orig, w, r, p, sources,
                                  buffer if r.buffer_rows is not None else None, keep=keep)
            if keep is not None:      # the buffer before, its kept rows moved to the start
                nodes.append(Node(name, orig.op, (held[w.name][0], *srcs), nbytes, shape,
                                  orig.dtype, attrs, "alias"))
            else:
                own = len(srcs) == 1 and srcs[0] != input_name \
                    and sources[0] == (r.in_rows, r.in_cols)
                nodes.append(Node(name, orig.op, srcs, nbytes, shape, orig.dtype, attrs,
                                  _region_inplace(orig, w, r) if own else None))
            held[w.name] = (name, buffer)
    rename = {last.name: y}
    for name in names[len(before):]:
        node = graph[name]
        if name in prefix:
            continue
        nodes.append(dataclasses.replace(
            node, inputs=tuple(rename.get(s, s) for s in node.inputs)))
    return Graph(nodes, [rename.get(o, o) for o in graph.outputs], f"{graph.name}.patched")


# --------------------------------------------------------------------------- search
def why_no_plan(graph: Graph, ops=None) -> str:
    """Why :func:`plan_patches` can find nothing to patch in ``graph`` before any search, or
    "" when it has layers to try."""
    input_name, chain = prefix_chain(graph, ops)
    if not input_name:
        return f"the model has {len(graph.input_names)} inputs; a patch plan starts from one"
    if not cuts(graph, input_name, chain):
        return (f"no window layer or residual block starts from its input "
                f"'{input_name}'")
    return ""


def without_inplace(graph: Graph) -> Graph:
    """``graph`` with every node plain (no RiP workspace, no alias)."""
    return Graph([dataclasses.replace(n, inplace=None) for n in graph.nodes.values()],
                 graph.outputs, graph.name)


#: The grid of a forced plan's stretch of layers left unpatched
UNPATCHED = "none"
#: Rows per cached strip at a segment's output that the search tries (1 needs the least
#: memory, more rows fewer kernel calls and memmoves).
STRIP_HEIGHTS = (1, 2, 3, 4)


def _grids(window: Window, grid_max: int) -> list[tuple[int, int]]:
    """The grids of patches tried for a segment ending in ``window``, fewest first."""
    grids = [(n, m) for n in range(1, min(grid_max, window.out_hw[0]) + 1)
             for m in range(1, min(grid_max, window.out_hw[1]) + 1) if n * m > 1]
    return sorted(grids, key=lambda g: (g[0] * g[1], abs(g[0] - g[1])))


def _apply(graph: Graph, segments, streamed: bool) -> Graph:
    """``graph`` with ``segments`` applied in turn; ``streamed``: the one reading the graph
    input takes it region by region."""
    for seg in segments:
        graph = seg.apply(graph, streamed and seg.input in graph.input_names)
    return graph


def _spliced(order, patched: Graph, segments) -> list[str]:
    """``order`` (of the graph before patching) with each segment's layers replaced by its
    nodes in ``patched``, in their stored order (patch by patch, strip by strip), where the
    first of its layers ran."""
    owner = {w.name: k for k, seg in enumerate(segments) for w in seg.windows}
    groups: dict[int, list[str]] = {}
    for name in patched.op_names:
        node = patched[name]
        patch = node.attrs.get("patch")
        if node.op == "input_region":
            groups.setdefault(0, []).append(name)
        elif node.op == "patch_output":
            groups.setdefault(owner[node.attrs["patch_output"]], []).append(name)
        elif isinstance(patch, dict):
            groups.setdefault(owner[patch["of"]], []).append(name)
    out = []
    for name in order:
        k = owner.get(name)
        if k is None:
            out.append(name)
        elif k in groups:
            out.extend(groups.pop(k))
    return out


def _ordered(graph: Graph, segments, streamed: bool, method: str, deadline: Deadline,
             order: list[str] | None) -> ScheduleResult:
    """The patched graph ordered by ``method``, or by ``order`` (of the unpatched graph,
    :func:`_spliced`) where that has the lower peak."""
    g = _apply(graph, segments, streamed)
    res = schedule(g, method, time_limit=deadline)
    if order is not None:
        spliced = _spliced(order, g, segments)
        if simulate(g, spliced).peak_bytes < res.peak_bytes:
            res = make_result(g, spliced, f"{method}, patches in sequence", res.seconds,
                              lower_bound=res.lower_bound_bytes)
    return res


@dataclass(frozen=True)
class _Candidate:
    """A segment over chain positions ``[start, stop)`` priced alone: the peak over its own
    steps in the unpatched order (patches in sequence where its layers ran), its extra MACs
    and how many nodes it adds."""

    start: int
    stop: int
    grid: tuple[int, int]
    cached: bool
    peak: int
    extra_macs: int
    nodes: int


class _Search:
    """The candidates of :func:`plan_patches` and the chain of segments they allow."""

    def __init__(self, graph: Graph, base: ScheduleResult, input_name: str,
                 chain: list[Window], streamed: bool, budget: float, max_segments):
        self.graph, self.order, self.chain = graph, list(base.order), chain
        self.input_name, self.streamed, self.budget = input_name, streamed, budget
        self.max_segments = max_segments
        self.stops = cuts(graph, input_name, chain)
        self.positions = [0] + [k for k in self.stops if k < len(chain)]
        steps = dict(zip(self.order, simulate(graph, self.order).step_bytes))
        self.layer_bytes = [steps[w.name] for w in chain]
        inside = {w.name for w in chain}
        # steps no segment changes: the floor of every plan's peak
        self.floor = max((b for n, b in steps.items() if n not in inside), default=0)
        self.candidates: dict[tuple, _Candidate] = {}

    def start(self, p: int) -> str:
        return self.input_name if p == 0 else self.chain[p - 1].name

    def lower_bound(self, p: int, q: int) -> int:
        """Bytes every step of a segment over ``[p, q)`` cannot go below at its last patch:
        its full output, and its input unless streamed."""
        streamed = self.streamed and p == 0
        return self.graph[self.chain[q - 1].name].bytes + \
            (0 if streamed else self.graph[self.start(p)].bytes)

    def unpatched(self, p: int, q: int) -> int:
        """The most bytes a step of chain positions ``[p, q)`` needs unpatched."""
        return max(self.layer_bytes[p:q])

    def may_lower(self, p: int, q: int, peak: int) -> bool:
        """Can a segment over ``[p, q)`` be part of a chain whose peak is below ``peak``?
        Only when the stretch needs ``peak`` unpatched, its input and output leave room
        below it, and it ends by the first position from which no layer needs ``peak`` (a
        longer segment only adds halo)."""
        last = max((t for t, b in enumerate(self.layer_bytes) if b >= peak), default=-1)
        reach = min((k for k in self.stops if k > last), default=len(self.chain))
        return self.unpatched(p, q) >= peak and self.lower_bound(p, q) < peak and q <= reach

    def price(self, p: int, q: int, grid: tuple[int, int], cached: bool
              ) -> _Candidate | None:
        """The segment over ``[p, q)`` in ``grid`` priced alone (None beyond the budget)."""
        key = (p, q, grid, cached)
        if key not in self.candidates:
            seg = _make_segment(self.start(p), self.chain[p:q], grid, cached)
            # (rows of a cached segment nobody reads are not computed: no saving to rank)
            extra = max(0, seg.extra_macs)
            if extra > self.budget:
                return None
            g = seg.apply(self.graph, self.streamed and p == 0)
            order = _spliced(self.order, g, [seg])
            new = set(g.nodes) - set(self.graph.nodes)
            peak = max(b for n, b in zip(order, simulate(g, order).step_bytes) if n in new)
            self.candidates[key] = _Candidate(p, q, grid, cached, peak, extra, len(new))
        return self.candidates[key]

    def pairs(self):
        """Every segment the chain allows, ``(start, stop)`` positions, shortest first."""
        return sorted(((p, q) for p in self.positions for q in self.stops if q > p),
                      key=lambda pq: (pq[1] - pq[0], pq[0]))

    def best(self):
        """(peak, extra MACs, nodes, candidates) of the best chain of the candidates priced
        so far: the lowest peak, then among the chains reaching it the fewest extra MACs,
        then the fewest nodes."""
        first = self._chain(self.floor)
        return first if first[0] == self.floor else self._chain(first[0])

    def _chain(self, floor: int):
        """The best chain when every peak below ``floor`` counts as ``floor``: a dynamic
        program over the chain's positions (each stretch between two is one segment or left
        unpatched) keeping Pareto fronts of peak and extra MACs within the budget."""
        n = len(self.chain)
        ends = sorted(set(self.positions) | {n})
        by_start: dict[int, list[_Candidate]] = {}
        for c in self.candidates.values():
            by_start.setdefault(c.start, []).append(c)
        front = {n: [(floor, 0, 0, ())]}
        for i in range(len(ends) - 2, -1, -1):
            p, q = ends[i], ends[i + 1]
            options = [(max(self.unpatched(p, q), e[0]), *e[1:]) for e in front[q]]
            for c in by_start.get(p, ()):
                for e in front[c.stop]:
                    if c.extra_macs + e[1] <= self.budget and (
                            self.max_segments is None or len(e[3]) < self.max_segments):
                        options.append((max(c.peak, e[0]), c.extra_macs + e[1],
                                        c.nodes + e[2], (c, *e[3])))
            front[p] = _pareto(options, self.max_segments is not None)
        return min(front[0], key=lambda e: e[:3])

    def plan(self, ops) -> tuple[Segment, ...]:
        """The segments of :meth:`best`, each built on the graph the ones before patched."""
        segments, g, stop = [], self.graph, None
        for c in self.best()[3]:
            start = segments[-1].exit if segments and stop == c.start else \
                (None if c.start == 0 else self.start(c.start))
            grid = f"{c.grid[0]}x{c.grid[1]}{'c' if c.cached else ''}"
            segments.append(_segment(g, start, c.stop - c.start, grid, ops))
            g = segments[-1].apply(g, self.streamed and c.start == 0)
            stop = c.stop
        return tuple(segments)


def _pareto(options, by_count: bool) -> list:
    """The options no other beats on both peak and extra MACs (the fewest nodes among
    equal ones; ``by_count``: separately for each number of segments)."""
    kept, best_macs = [], {}
    for option in sorted(options, key=lambda o: o[:3]):
        group = len(option[3]) if by_count else 0
        if option[1] < best_macs.get(group, float("inf")):
            kept.append(option)
            best_macs[group] = option[1]
    return kept


def plan_patches(graph: Graph, *, max_overhead: float = 0.2, stream_input: bool = False,
                 method: str = "serenity", inplace: bool = True, grid_max: int = GRID_MAX,
                 time_limit: float | Deadline | None = 120.0, ops=None,
                 max_segments: int | None = None) -> PatchPlan | None:
    """The patch plan with the lowest whole-network peak (module docstring), or None when
    none is below the unpatched peak within ``max_overhead`` extra MACs (a fraction of the
    network's MACs, all segments together). ``stream_input`` picks the objective; both
    figures are reported. Scheduling always runs the memory model with in-place execution
    (the output chain's aliases are what writing a patch into the full output means);
    ``inplace=False`` drops the network's own in-place flags (RiP workspaces, aliases)
    first, for both the unpatched and the patched figures. ``ops``: as for
    :func:`prefix_chain`. At most ``max_segments`` segments (None: any number)."""
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit)
    graph = graph if inplace else without_inplace(graph)
    input_name, chain = prefix_chain(graph, ops)
    if not chain or not cuts(graph, input_name, chain):
        return None
    base = schedule(graph, method, time_limit=deadline.share(0.2))
    search = _Search(graph, base, input_name, chain, stream_input,
                     max_overhead * network_macs(graph), max_segments)
    pricing = deadline.share(0.6)
    pairs = search.pairs()
    # 1. every segment in cached strips of one row (no extra MACs, the least memory of
    # their kind)
    for p, q in pairs:
        if pricing.expired():
            break
        search.price(p, q, (chain[q - 1].out_hw[0], 1), True)
    # 2. the grids of recomputed patches, for the segments that can lower the best chain's
    # peak (the stretch with the most bytes unpatched first, then the shortest), until
    # none is left
    tried: set[tuple[int, int]] = set()
    while not pricing.expired():
        best = search.best()[0]
        todo = [pq for pq in pairs if pq not in tried and search.may_lower(*pq, best)]
        if not todo:
            break
        p, q = max(todo, key=lambda pq: (search.unpatched(*pq), pq[0] - pq[1]))
        tried.add((p, q))
        for grid in _grids(chain[q - 1], grid_max):
            if pricing.expired():
                break
            search.price(p, q, grid, False)
    # 3. taller strips where the best chain has cached ones: fewer kernel calls and
    # memmoves where the peak allows
    for c in search.best()[3]:
        for rows in STRIP_HEIGHTS[1:] if c.cached else ():
            search.price(c.start, c.stop, (-(-chain[c.stop - 1].out_hw[0] // rows), 1), True)
    found = search.best()
    if found[0] >= base.peak_bytes or not found[3]:
        return None
    return _priced(graph, search.plan(ops), stream_input, method,
                   Deadline.of(max(1.0, deadline.remaining())), base, t0)


def plan_for(graph: Graph, prefix_length, grid, *, stream_input: bool = False,
             method: str = "serenity", inplace: bool = True,
             time_limit: float | Deadline | None = 60.0, ops=None) -> PatchPlan:
    """The plan patching the first ``prefix_length`` layers of :func:`prefix_chain` with
    ``grid``, both patched graphs (input resident, streamed) ordered by ``method``. Lists of
    lengths and grids give several stretches, each from the output of the one before: a
    segment, or layers left unpatched (grid :data:`UNPATCHED`)."""
    t0 = time.perf_counter()
    deadline = Deadline.of(time_limit)
    graph = graph if inplace else without_inplace(graph)
    lengths = [prefix_length] if isinstance(prefix_length, int) else list(prefix_length)
    one = isinstance(grid, str) or (isinstance(grid, (tuple, list)) and len(grid) > 0
                                    and isinstance(grid[0], int))
    grids = [grid] if one else list(grid)
    if len(lengths) != len(grids) or not lengths:
        raise PatchError(f"{len(lengths)} prefix lengths for {len(grids)} grids: one grid per "
                         "segment")
    segments, g, start = [], graph, None
    for k, grid in zip(lengths, grids):
        if parse_grid(grid) is None:            # layers left unpatched
            start = _stretch(g, start, k, ops)[1][-1].name
            continue
        segments.append(_segment(g, start, k, grid, ops))
        g = segments[-1].apply(g, stream_input and start is None)
        start = segments[-1].exit
    if not segments:
        raise PatchError(f"graph '{graph.name}': every grid is '{UNPATCHED}', no segment to "
                         "patch")
    base = schedule(graph, method, time_limit=deadline.share(0.3))
    return _priced(graph, tuple(segments), stream_input, method, deadline, base, t0)


def _segment(graph: Graph, start: str | None, prefix_length: int, grid, ops) -> Segment:
    """The segment of the first ``prefix_length`` layers from ``start`` in ``grid``, after
    checking it is one (one line naming the layer otherwise)."""
    input_name, windows = _stretch(graph, start, prefix_length, ops)
    rows, cols, cached = parse_grid(grid)
    if not (rows <= windows[-1].out_hw[0] and cols <= windows[-1].out_hw[1]):
        raise PatchError(f"layer '{windows[-1].name}': grid "
                         f"{rows}x{cols}{'c' if cached else ''} does not fit its "
                         f"{windows[-1].out_hw[0]}x{windows[-1].out_hw[1]} output")
    return _make_segment(input_name, windows, (rows, cols), cached)


def _stretch(graph: Graph, start: str | None, prefix_length: int, ops
             ) -> tuple[str, list[Window]]:
    """The node ``start`` names (None: the graph input) and the ``prefix_length`` layers
    chained from it, after checking they end where one tensor leaves them (one line naming
    the layer otherwise)."""
    input_name, chain = prefix_chain(graph, ops, start)
    if not input_name:
        raise PatchError(f"graph '{graph.name}' has {len(graph.input_names)} inputs; a patch "
                         "plan starts from a single input")
    where = f"graph '{graph.name}'" if start is None else f"after '{start}'"
    if not 1 <= prefix_length <= len(chain):
        raise PatchError(f"{where}: prefix length {prefix_length} is not within the "
                         f"{len(chain)} window layers chained from "
                         f"{'its input' if start is None else 'there'}")
    if prefix_length not in cuts(graph, input_name, chain):
        inside = {v.name for v in chain[:prefix_length]}
        leaving = [w.name for w in chain[:prefix_length - 1] if w.name in graph.outputs
                   or any(c not in inside for c in graph.consumers[w.name])] or [input_name]
        raise PatchError(f"layer '{chain[prefix_length - 1].name}': a prefix of "
                         f"{prefix_length} layers cannot end there, '{leaving[0]}' is read "
                         f"after it (possible lengths: "
                         f"{', '.join(map(str, cuts(graph, input_name, chain)))})")
    return input_name, chain[:prefix_length]


def _make_segment(input_name: str, windows: list[Window], grid: tuple[int, int],
                  cached: bool) -> Segment:
    regions = strip_regions(windows, grid[0]) if cached else patch_regions(windows, grid)
    extra = prefix_macs(windows, regions) - prefix_macs(windows)
    return Segment(input_name, tuple(windows), tuple(grid), tuple(regions), extra, cached)


def parse_grid(grid) -> tuple[int, int, bool] | None:
    """``(rows, columns, cached)`` of a segment's grid, given as ``(rows, columns)`` or as
    text: ``"RxC"`` (``R x C`` patches, halos recomputed) or ``"Rx1c"`` (``R`` full-width
    row strips, rows cached); None for :data:`UNPATCHED` (a stretch of layers a forced plan
    leaves as they are); refused in one line otherwise."""
    if isinstance(grid, str) and grid.strip() == UNPATCHED:
        return None
    match = re.fullmatch(r"(\d+)x(\d+)(c?)", grid.strip().lower()) \
        if isinstance(grid, str) else None
    if match:
        rows, cols, cached = int(match[1]), int(match[2]), match[3] == "c"
    elif isinstance(grid, (tuple, list)) and len(grid) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in grid):
        rows, cols, cached = int(grid[0]), int(grid[1]), False
    else:
        raise PatchError(f"grid {grid!r} is neither (rows, columns) of integers nor the "
                         "text ROWSxCOLS (patches, e.g. 4x4), ROWSx1c (cached row strips, "
                         f"e.g. 22x1c) or {UNPATCHED} (layers left unpatched)")
    if rows < 1 or cols < 1:
        raise PatchError(f"grid {grid!r}: rows and columns must be positive")
    if cached and cols != 1:
        raise PatchError(f"grid {grid!r}: cached row strips span the full width "
                         f"({rows}x1c)")
    return rows, cols, cached


def _priced(graph: Graph, segments: tuple[Segment, ...], stream_input: bool, method: str,
            deadline: Deadline, base: ScheduleResult, started: float) -> PatchPlan:
    """The plan of ``segments`` with both peaks (input resident, streamed), each patched
    graph ordered by ``method`` or as ``base`` (the unpatched graph's schedule) ran its
    layers, whichever has the lower peak (:func:`_ordered`)."""
    results = {streamed: _ordered(graph, segments, streamed, method,
                                  deadline.share(0.6 if streamed == stream_input else 1.0),
                                  base.order)
               for streamed in (stream_input, not stream_input)}
    extra = sum(seg.extra_macs for seg in segments)
    total = network_macs(graph)
    patched = sum(prefix_macs(list(seg.windows)) for seg in segments)
    names = [w.name for w in prefix_chain(graph)[1]]
    layout, at = [], 0
    for seg in segments:
        first = names.index(seg.layers[0])
        layout += [(first - at, UNPATCHED)] if first > at else []
        layout.append((len(seg.layers), seg.label))
        at = first + len(seg.layers)
    return PatchPlan(segments, stream_input, base.peak_bytes, results[False].peak_bytes,
                     results[True].peak_bytes, extra, extra / total if total else 0.0,
                     extra / patched if patched else 0.0, tuple(results[stream_input].order),
                     time.perf_counter() - started, tuple(layout), results[stream_input])


# ------------------------------------------------------------------- numpy execution
def _layer_on_region(model: TFLiteModel, kernels: dict, w: Window, region: LayerRegion,
                     xs: list[np.ndarray]) -> np.ndarray:
    """Layer ``w`` on its input regions ``xs`` (one per input) with the region's padding: the
    patch's output (``kernels``: the interpreter's prepared kernel of each operator index)."""
    op = model.operator(w.tflite_index)
    pad = region.padding
    x = xs[0]
    if w.op in _CONVS:
        params = dataclasses.replace(reference.conv_params(model, op), padding=pad)
        weights = model.tensors[op.inputs[1]].data
        cout = model.tensors[op.outputs[0]].shape[3]
        bias = model.tensors[op.inputs[2]].data.reshape(cout) \
            if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        fn = reference.conv2d_int8 if w.op == "conv2d" else reference.depthwise_conv2d_int8
        return fn(x, weights, bias, params)
    out = model.tensors[op.outputs[0]]
    if w.op in _POOLS:
        act = op.options.get("fused_activation_function", "NONE")
        q = out.quant
        params = reference.PoolParams(w.kernel, w.stride, pad, *reference.activation_range(
            act, q.scalar_scale, q.scalar_zero_point))
        fn = reference.average_pool_int8 if w.op == "avg_pool2d" else reference.max_pool_int8
        return fn(x, params)
    if w.op in _PADS:
        value = out.quant.scalar_zero_point if out.dtype == "int8" else 0
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            value = model.tensors[op.inputs[2]].data.reshape(-1)[0]
        return reference.pad(x, [[0, 0], [pad[0], pad[1]], [pad[2], pad[3]], [0, 0]], value)
    if op.op not in _ELEMENTWISE_TFLITE:
        raise PatchError(f"{model.where(op)}: {op.op} is no patchable layer")
    args, activations = [], iter(xs)
    for i in op.inputs:
        t = model.tensors[i] if i >= 0 else None
        if t is None or t.data is None:
            args.append(next(activations) if t is not None else None)
        elif t.data.ndim == 4 and t.data.shape[1:3] == tuple(w.out_hw):
            args.append(t.data[:, slice(*region.out_rows), slice(*region.out_cols)])
        else:
            args.append(t.data)
    return np.asarray(kernels[op.index](args)).astype(out.dtype, copy=False)


def run_patched(model: TFLiteModel, plan: PatchPlan, inputs) -> list[np.ndarray]:
    """The model's outputs with the plan's segments computed patch by patch or strip by
    strip (module docstring), each where its first layer runs, the other operators by the
    interpreter; ``inputs`` as for :func:`tvm_serenity.frontend.reference.run`."""
    interp = reference.Interpreter(model)
    values = interp._feed(inputs)
    kernels = {op.index: k for op, k in zip(model.operators, interp._kernels)}
    tensors = model.tensors
    if len(model.inputs) != 1:
        raise PatchError(f"{model.source}: a patch plan needs a model with one input, this "
                         f"one has {len(model.inputs)}")
    skipped = _prefix_ops(model, {w.tflite_index for w in plan.windows})
    producer = {op.outputs[0]: op for op in model.operators}
    first = {seg.windows[0].tflite_index: seg for seg in plan.segments}
    for op, kernel in zip(model.operators, interp._kernels):
        seg = first.get(op.index)
        if seg is not None:       # the tensor the segment reads (before a folded PAD)
            source = op.inputs[0]
            while source in producer and producer[source].op in ("PAD", "PADV2") \
                    and producer[source].index in skipped:
                source = producer[source].inputs[0]
            last = model.operator(seg.windows[-1].tflite_index)
            values[last.outputs[0]] = _run_segment(model, kernels, seg, values[source],
                                                   tensors[last.outputs[0]])
        if op.index in skipped:
            continue
        args = [None if i < 0 else (tensors[i].data if tensors[i].data is not None
                                    else values[i]) for i in op.inputs]
        t = tensors[op.outputs[0]]
        values[op.outputs[0]] = np.asarray(kernel(args)).astype(t.dtype, copy=False) \
            .reshape(t.shape)
    return [values[i] for i in model.outputs]


def _run_segment(model: TFLiteModel, kernels: dict, seg: Segment, x: np.ndarray, out
                 ) -> np.ndarray:
    """The full output (tensor ``out``) of segment ``seg`` reading ``x``, patch by patch or
    strip by strip."""
    y = np.zeros(out.shape, dtype=out.dtype)
    # layer -> (its patch's values or cached rows, the first row and column they hold)
    held = {}
    for patch in seg.regions:
        if not seg.cached or not held:
            held = {seg.input: (x, 0, 0)}
        for w, region in zip(seg.windows, patch):
            if region.out_rows[0] == region.out_rows[1]:
                continue        # a cached strip that needs no new row of this layer
            xs = []
            for src in w.inputs:
                a, r0, c0 = held[src]
                xs.append(a[:, region.in_rows[0] - r0:region.in_rows[1] - r0,
                            region.in_cols[0] - c0:region.in_cols[1] - c0])
            v = _layer_on_region(model, kernels, w, region, xs)
            want = (1, region.out_rows[1] - region.out_rows[0],
                    region.out_cols[1] - region.out_cols[0])
            if v.shape[:3] != want:
                raise PatchError(f"layer '{w.name}': patch output {list(v.shape)} is not "
                                 f"the region {list(want)}")
            if w is seg.windows[-1]:
                y[:, slice(*region.out_rows), slice(*region.out_cols)] = v
            elif region.buffer_rows is None:
                held[w.name] = (v, region.out_rows[0], region.out_cols[0])
            else:       # the rows kept from the strip before, then the new ones
                top = region.buffer_rows[0]
                kept = held[w.name][0][:, top - held[w.name][1]:] if w.name in held \
                    else v[:, :0]
                held[w.name] = (np.concatenate([kept, v], axis=1), top, 0)
    return y


def _prefix_ops(model: TFLiteModel, layer_ops: set[int]) -> set[int]:
    """The prefix's operators: its layers and the (folded) PADs only they read."""
    consumers = model.consumers()
    skipped = set(layer_ops)
    for op in reversed(model.operators):
        if op.index in skipped or op.op not in ("PAD", "PADV2"):
            continue
        readers = consumers.get(op.outputs[0], [])
        if readers and all(r in skipped for r in readers) \
                and op.outputs[0] not in model.outputs:
            skipped.add(op.index)
    return skipped
