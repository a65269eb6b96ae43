"""Build int8 NHWC (batch 1) graphs the way TensorFlow Lite sees them.

* every tensor is int8, so a node's ``bytes`` is its element count;
* batch norm is folded into the convolution before it; a ReLU/ReLU6 is fused into its producer
  (CONV_2D, DEPTHWISE_CONV_2D, ADD, FULLY_CONNECTED) when that producer's output has no other
  reader, otherwise it stays a RELU op (:meth:`NetBuilder.build` does the fusion);
* weight-free ops with identical operands are built once (the converter's common-subexpression
  elimination): asking twice for ``relu(x)`` or ``max_pool(x)`` gives the same node;
  convolutions never merge (their weights differ);
* 'SAME' padding as TFLite computes it (``top = total // 2``, the extra row at the bottom);
* in-place capability: every windowed op (convolutions incl. depthwise and pointwise,
  pooling) gets its in-place workspace from the one rule,
  :func:`tvm_serenity.rip.inplace_workspace_bytes` (Right In-Place, or the zero-gap
  channel-wise kind for a depthwise convolution), a fully connected layer
  :func:`~tvm_serenity.rip.fully_connected_inplace_bytes`'s (in place only where the saving
  beats its row gather); same-shape elementwise ops (ADD, MUL, RELU) are
  exact aliases of their first input; CONCATENATION is never in place.
"""

from __future__ import annotations

import json

from ..graph import Graph, Node, unique_name
from ..rip import fully_connected_inplace_bytes, inplace_workspace_bytes

__all__ = ["NetBuilder", "same_padding"]

_FUSES_RELU = {"conv2d", "depthwise_conv2d", "add", "fully_connected"}


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int, int]:
    """(output size, pad before, pad after) of TFLite 'SAME' padding along one axis."""
    effective = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return out, total // 2, total - total // 2


class NetBuilder:
    """Accumulates nodes; every method returns the name of the tensor it produced."""

    def __init__(self, name: str):
        self.name = name
        self._nodes: dict[str, Node] = {}
        self.shape: dict[str, tuple[int, int, int]] = {}      # HWC of every tensor
        self._memo: dict[tuple, str] = {}

    # ------------------------------------------------------------------------- plumbing
    def _add(self, hint: str, op: str, inputs: tuple[str, ...], hwc: tuple[int, int, int],
             inplace=None, attrs=None, memo: bool = False) -> str:
        key = (op, inputs, json.dumps(attrs or {}, sort_keys=True))
        if memo and key in self._memo:
            return self._memo[key]
        name = unique_name(hint, self._nodes)
        h, w, c = hwc
        self._nodes[name] = Node(name, op, inputs, h * w * c, shape=(1, h, w, c),
                                 dtype="int8", attrs=dict(attrs or {}), inplace=inplace)
        self.shape[name] = hwc
        if memo:
            self._memo[key] = name
        return name

    def _alias_if_same(self, first: str, hwc) -> str | None:
        return "alias" if self.shape[first] == hwc else None

    # ------------------------------------------------------------------------------ ops
    def input(self, name: str, hwc: tuple[int, int, int]) -> str:
        return self._add(name, "input", (), hwc)

    def conv(self, x: str, out_channels: int, kernel: int | tuple[int, int] = 1, stride: int = 1,
             dilation: int = 1, groups: int = 1, name: str = "conv", same: bool = True) -> str:
        """CONV_2D (``groups == 1``) or DEPTHWISE_CONV_2D (``groups == in_channels``)."""
        h, w, c = self.shape[x]
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        if same:
            oh, top, bottom = same_padding(h, kh, stride, dilation)
            ow, left, right = same_padding(w, kw, stride, dilation)
        else:
            top = bottom = left = right = 0
            oh = (h - (kh - 1) * dilation - 1) // stride + 1
            ow = (w - (kw - 1) * dilation - 1) // stride + 1
        padding = (top, bottom, left, right)
        op = "conv2d" if groups == 1 else "depthwise_conv2d"
        workspace = inplace_workspace_bytes(op, (h, w, c), out_channels, (kh, kw),
                                            (stride, stride), (dilation, dilation), padding,
                                            groups, 1)
        attrs = {"kernel": [kh, kw], "stride": [stride, stride],
                 "dilation": [dilation, dilation], "padding": list(padding), "groups": groups}
        return self._add(name, op, (x,), (oh, ow, out_channels), inplace=workspace, attrs=attrs)

    def depthwise(self, x: str, kernel: int, stride: int = 1, dilation: int = 1,
                  name: str = "dw") -> str:
        return self.conv(x, self.shape[x][2], kernel, stride, dilation,
                         groups=self.shape[x][2], name=name)

    def pool(self, x: str, kind: str, kernel: int, stride: int, name: str | None = None) -> str:
        """MAX_POOL_2D / AVERAGE_POOL_2D with 'SAME' padding."""
        h, w, c = self.shape[x]
        oh, top, bottom = same_padding(h, kernel, stride)
        ow, left, right = same_padding(w, kernel, stride)
        padding = (top, bottom, left, right)
        workspace = inplace_workspace_bytes(f"{kind}_pool2d", (h, w, c), c, (kernel, kernel),
                                            (stride, stride), (1, 1), padding, c, 1)
        attrs = {"kernel": [kernel, kernel], "stride": [stride, stride],
                 "padding": list(padding)}
        return self._add(name or f"{kind}_pool", f"{kind}_pool2d", (x,), (oh, ow, c),
                         inplace=workspace, attrs=attrs, memo=True)

    def global_avg_pool(self, x: str, name: str = "gap") -> str:
        h, w, c = self.shape[x]
        workspace = inplace_workspace_bytes("mean", (h, w, c), c, (h, w), (1, 1), (1, 1),
                                            (0, 0, 0, 0), c, 1)
        return self._add(name, "mean", (x,), (1, 1, c), inplace=workspace,
                         attrs={"axis": [1, 2]}, memo=True)

    def fully_connected(self, x: str, units: int, name: str = "fc") -> str:
        h, w, c = self.shape[x]
        workspace = fully_connected_inplace_bytes(1, h * w * c, units)
        return self._add(name, "fully_connected", (x,), (1, 1, units), inplace=workspace)

    def crop(self, x: str, top: int, left: int, name: str = "slice") -> str:
        """STRIDED_SLICE dropping the first ``top`` rows and ``left`` columns."""
        h, w, c = self.shape[x]
        return self._add(name, "strided_slice", (x,), (h - top, w - left, c),
                         attrs={"begin": [0, top, left, 0]}, memo=True)

    def relu(self, x: str, name: str | None = None, six: bool = False) -> str:
        op = "relu6" if six else "relu"
        return self._add(name or f"{x}_{op}", op, (x,), self.shape[x], inplace="alias",
                         memo=True)

    def add(self, a: str, b: str, name: str = "add", shared: bool = True) -> str:
        """ADD; ``shared=False`` for sums that only look alike (RandWire's weighted sums
        differ by their folded edge weights, so the converter cannot merge them)."""
        if self.shape[a] != self.shape[b]:
            raise ValueError(f"add '{name}': shapes {self.shape[a]} and {self.shape[b]} differ")
        return self._add(name, "add", (a, b), self.shape[a], inplace="alias", memo=shared)

    def scale(self, x: str, name: str = "mul") -> str:
        """MUL by a constant (e.g. the 1/n of a mean)."""
        return self._add(name, "mul", (x,), self.shape[x], inplace="alias")

    def concat(self, xs: list[str], name: str = "concat") -> str:
        h, w, _ = self.shape[xs[0]]
        if any(self.shape[x][:2] != (h, w) for x in xs):
            raise ValueError(f"concat '{name}': spatial shapes differ")
        return self._add(name, "concatenation", tuple(xs),
                         (h, w, sum(self.shape[x][2] for x in xs)), attrs={"axis": 3},
                         memo=True)

    # ----------------------------------------------------------------------------- build
    def build(self, outputs: list[str]) -> Graph:
        """The graph with ReLUs fused into their producers where TFLite fuses them."""
        nodes = dict(self._nodes)
        readers: dict[str, list[str]] = {n: [] for n in nodes}
        for node in nodes.values():
            for src in node.inputs:
                readers[src].append(node.name)
        rename: dict[str, str] = {}
        for node in list(nodes.values()):
            if node.op not in ("relu", "relu6") or node.name in outputs:
                continue
            src = nodes[node.inputs[0]]
            if src.op in _FUSES_RELU and readers[src.name] == [node.name] \
                    and src.name not in outputs and "activation" not in src.attrs:
                nodes[src.name] = Node(src.name, src.op, src.inputs, src.bytes, src.shape,
                                       src.dtype, {**src.attrs, "activation": node.op},
                                       src.inplace)
                del nodes[node.name]
                rename[node.name] = src.name
        rebuilt = []
        for node in nodes.values():
            inputs = tuple(rename.get(s, s) for s in node.inputs)
            rebuilt.append(Node(node.name, node.op, inputs, node.bytes, node.shape, node.dtype,
                                node.attrs, node.inplace))
        return Graph(rebuilt, [rename.get(o, o) for o in outputs], self.name)
