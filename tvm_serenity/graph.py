"""The graph IR every algorithm in tvm-serenity works on.

A graph is a DAG of operators. Each node produces exactly one activation tensor named like the
node, of ``bytes`` bytes. Nodes with ``op == "input"`` are graph inputs (live from the start);
names listed in ``outputs`` stay live to the end. Weights and constants are not activations and
do not appear.

A node may run *in place* only when it says so:

* ``inplace="alias"``: the output overwrites its first input exactly (elementwise ops, pooling);
* ``inplace={"workspace_bytes": S}``: input and output share one workspace of ``S`` bytes
  (Right In-Place convolution, docs/rip.md).

Either applies only when the node is its first input's last consumer (the memory model decides
that per order, so ordering and in-place execution are optimised together).

The interchange JSON (stable)::

    {"name": "cell",
     "nodes": [{"name": "x", "op": "input", "inputs": [], "bytes": 3072,
                "shape": [1, 32, 32, 3], "dtype": "int8"}, ...],
     "outputs": ["y"]}

``Graph.from_json`` validates everything and raises :class:`GraphError` with a one-line
message naming the offending node or field; it never returns a malformed graph. So does
``Graph(nodes, outputs, name)`` for graphs built in Python.

* Order: nodes may be listed in any order that is a DAG. The *stored* order (``graph.nodes``,
  the ``stored`` schedule, ``to_json``) is a stable topological order: the given order where
  it is one, otherwise each node moves just late enough to follow its inputs (Kahn's algorithm
  taking the ready node listed first). A cycle is refused, naming it.
* Limits: every ``bytes`` and ``workspace_bytes`` is an integer in ``[0, 2^40]`` and all
  tensors' bytes together are at most ``2^40`` (1 TiB), at most ``2^20`` nodes: what the
  arena solver's 64-bit model holds with room (``arena * (shifts + 1)`` stays below 2^62).
* Names (graph, nodes, ops, inputs, outputs, dtype) are non-empty strings without control
  characters (newline, ESC, ...), line separators or lone surrogates: such a name is refused
  at load, the node named by its index (``nodes[3]``), so that every message and every line
  of text output stays one printable line.
"""

from __future__ import annotations

import heapq
import json
import os
import stat
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .errors import SerenityError

__all__ = ["GraphError", "Node", "Graph", "INPUT_OP", "unique_name", "MAX_BYTES", "MAX_NODES"]

INPUT_OP = "input"
MAX_BYTES = 2 ** 40     # per tensor and workspace, and all tensors together (module docstring)
MAX_NODES = 2 ** 20

# Characters that would break the one-line rule of error messages and text output, or cannot
# be encoded: C0/C1 controls (newline, ESC, ...), line/paragraph separators, lone surrogates.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _check_text(where: str, field: str, value) -> None:
    """GraphError unless ``value`` is a non-empty string of printable characters."""
    if not isinstance(value, str) or not value:
        raise GraphError(f"{where}: field '{field}' must be a non-empty string")
    bad = _UNPRINTABLE.search(value)
    if bad:
        raise GraphError(f"{where}: field '{field}' contains the control or surrogate "
                         f"character U+{ord(bad.group()):04X}")


def _number(value: int) -> str:
    """An integer for a message; huge ones by magnitude (str() refuses over 4300 digits)."""
    return str(value) if abs(value) < 10 ** 30 else f"about 2^{abs(value).bit_length() - 1}"


def unique_name(base: str, taken, *, start: int = 2, sep: str = "_") -> str:
    """``base`` if it is not in ``taken``, else the first free one of ``base<sep><start>``,
    ``base<sep><start + 1>``, ... (how every producer of node names keeps them unique)."""
    name, k = base, start
    while name in taken:
        name = f"{base}{sep}{k}"
        k += 1
    return name


class GraphError(SerenityError, ValueError):
    """A graph, order or plan is malformed; the message names the culprit."""


@dataclass(frozen=True)
class Node:
    """One operator and the tensor it produces."""

    name: str
    op: str
    inputs: tuple[str, ...]
    bytes: int
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    # None (plain), "alias", or the RiP workspace size in bytes.
    inplace: str | int | None = None

    @property
    def is_input(self) -> bool:
        return self.op == INPUT_OP

    def to_json(self) -> dict:
        obj: dict[str, Any] = {"name": self.name, "op": self.op, "inputs": list(self.inputs),
                               "bytes": self.bytes}
        if self.shape is not None:
            obj["shape"] = list(self.shape)
        if self.dtype is not None:
            obj["dtype"] = self.dtype
        if self.attrs:
            obj["attrs"] = dict(self.attrs)
        if self.inplace == "alias":
            obj["inplace"] = "alias"
        elif self.inplace is not None:
            obj["inplace"] = {"workspace_bytes": self.inplace}
        return obj


class Graph:
    """A validated, immutable DAG of :class:`Node` in stored order (a topological order)."""

    def __init__(self, nodes: Iterable[Node], outputs: Iterable[str], name: str = "graph"):
        _check_text("graph", "name", name)
        self.name = name
        if isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Iterable):
            raise GraphError(f"graph '{name}': nodes must be a list of Node, "
                             f"got {type(nodes).__name__}")
        node_list = list(nodes)
        if not node_list:
            raise GraphError(f"graph '{name}': has no nodes")
        if len(node_list) > MAX_NODES:
            raise GraphError(f"graph '{name}': {len(node_list)} nodes, more than the limit of "
                             f"{MAX_NODES}")
        given: dict[str, Node] = {}
        for i, node in enumerate(node_list):
            if not isinstance(node, Node):
                raise GraphError(f"nodes[{i}]: must be a Node, got {type(node).__name__}")
            _check_text(f"nodes[{i}]", "name", node.name)
            if node.name in given:
                raise GraphError(f"node '{node.name}': duplicate name")
            given[node.name] = node
        if isinstance(outputs, (str, bytes, Mapping)) or not isinstance(outputs, Iterable):
            raise GraphError(f"graph '{name}': 'outputs' must be a list of node names")
        self.outputs: tuple[str, ...] = tuple(outputs)
        for k, out in enumerate(self.outputs):
            _check_text(f"graph '{name}'", f"outputs[{k}]", out)
        self.nodes = given
        self._validate()
        self.nodes = self._topological(node_list)
        acc: dict[str, list[str]] = {n: [] for n in self.nodes}
        for node in self.nodes.values():
            for src in dict.fromkeys(node.inputs):
                acc[src].append(node.name)
        self.consumers: dict[str, tuple[str, ...]] = {n: tuple(c) for n, c in acc.items()}
        self.derived: dict = {}   # data computed from the graph on demand (memory models)

    # ----------------------------------------------------------------------------- validation
    def _validate(self) -> None:
        total = 0
        for node in self.nodes.values():
            where = f"node '{node.name}'"
            _check_text(where, "op", node.op)
            if isinstance(node.bytes, bool) or not isinstance(node.bytes, int):
                raise GraphError(f"{where}: field 'bytes' must be an integer, got {node.bytes!r}")
            if node.bytes < 0:
                raise GraphError(f"{where}: field 'bytes' is negative ({_number(node.bytes)})")
            if node.bytes > MAX_BYTES:
                raise GraphError(f"{where}: field 'bytes' must be at most 2^40, got "
                                 f"{_number(node.bytes)}")
            total += node.bytes
            if total > MAX_BYTES:
                raise GraphError(f"{where}: the graph's tensors reach {_number(total)} bytes "
                                 f"together, more than the limit of 2^40")
            if node.dtype is not None:
                _check_text(where, "dtype", node.dtype)
            if not isinstance(node.inputs, tuple):
                raise GraphError(f"{where}: field 'inputs' must be a tuple of node names")
            if node.is_input and node.inputs:
                raise GraphError(f"{where}: an 'input' node cannot have inputs")
            for k, src in enumerate(node.inputs):
                _check_text(where, f"inputs[{k}]", src)
                if src not in self.nodes:
                    raise GraphError(f"{where}: unknown input '{src}'")
                if src == node.name:
                    raise GraphError(f"{where}: consumes itself (cycle)")
            if node.inplace is not None:
                if node.is_input or not node.inputs:
                    raise GraphError(f"{where}: 'inplace' needs a node with an input")
                if node.inplace != "alias":
                    ws = node.inplace
                    if isinstance(ws, bool) or not isinstance(ws, int):
                        raise GraphError(f"{where}: field 'inplace' must be \"alias\" or "
                                         f"{{\"workspace_bytes\": int}}, got {ws!r}")
                    need = max(node.bytes, self.nodes[node.inputs[0]].bytes)
                    if ws < need:
                        raise GraphError(f"{where}: inplace workspace_bytes {_number(ws)} is "
                                         f"smaller than max(input, output) = {need}")
                    if ws > MAX_BYTES:
                        raise GraphError(f"{where}: inplace workspace_bytes must be at most "
                                         f"2^40, got {_number(ws)}")
        if all(node.is_input for node in self.nodes.values()):
            raise GraphError(f"graph '{self.name}': has no operators (only inputs)")
        if not self.outputs:
            raise GraphError(f"graph '{self.name}': 'outputs' is empty")
        for out in self.outputs:
            if out not in self.nodes:
                raise GraphError(f"graph '{self.name}': output '{out}' is not a node")
        if len(set(self.outputs)) != len(self.outputs):
            raise GraphError(f"graph '{self.name}': 'outputs' lists a node twice")

    def _topological(self, node_list: list[Node]) -> dict[str, Node]:
        """The nodes in a stable topological order: the given order wherever it is one (the
        ready node given first runs first), or GraphError naming a cycle."""
        position = {node.name: i for i, node in enumerate(node_list)}
        indegree = [len(set(node.inputs)) for node in node_list]
        readers: list[list[int]] = [[] for _ in node_list]
        for i, node in enumerate(node_list):
            for src in dict.fromkeys(node.inputs):
                readers[position[src]].append(i)
        ready = [i for i, d in enumerate(indegree) if d == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for c in readers[i]:
                indegree[c] -= 1
                if indegree[c] == 0:
                    heapq.heappush(ready, c)
        if len(order) < len(node_list):
            # Walk backwards inside the unresolved part until a node repeats: it is on a cycle.
            stuck = {node_list[i].name for i, d in enumerate(indegree) if d > 0}
            name = next(n.name for n in node_list if n.name in stuck)
            path: list[str] = []
            seen: set[str] = set()
            while name not in seen:
                path.append(name)
                seen.add(name)
                name = next(s for s in self.nodes[name].inputs if s in stuck)
            cycle = path[path.index(name):][::-1]   # we walked against the edges
            raise GraphError(f"node '{cycle[0]}': on a cycle "
                             f"({' -> '.join(cycle)} -> {cycle[0]})")
        return {node_list[i].name: node_list[i] for i in order}

    # ------------------------------------------------------------------------------- queries
    @property
    def input_names(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.is_input]

    @property
    def op_names(self) -> list[str]:
        """Non-input nodes in stored order: what a schedule must order."""
        return [n for n, node in self.nodes.items() if not node.is_input]

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.op_names)} ops, {len(self.input_names)} inputs)"

    # ----------------------------------------------------------------------------------- I/O
    def to_json(self) -> dict:
        return {"name": self.name, "nodes": [n.to_json() for n in self.nodes.values()],
                "outputs": list(self.outputs)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    def save(self, path: str | os.PathLike) -> None:
        try:
            with open(path, "w") as f:
                f.write(self.dumps())
        except OSError as e:      # a directory, a missing folder, no permission, disk full
            raise GraphError(f"cannot write graph file '{path}': {e.strerror}") from None

    @classmethod
    def from_json(cls, obj: Any) -> "Graph":
        """Build from a parsed JSON object (dict). Raises GraphError on any malformation."""
        if not isinstance(obj, dict):
            raise GraphError(f"graph JSON must be an object, got {type(obj).__name__}")
        name = obj.get("name", "graph")
        _check_text("graph", "name", name)
        nodes_json = obj.get("nodes")
        if not isinstance(nodes_json, list):
            raise GraphError(f"graph '{name}': field 'nodes' must be a list")
        outputs = obj.get("outputs")
        if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
            raise GraphError(f"graph '{name}': field 'outputs' must be a list of node names")
        return cls([_node_from_json(i, n) for i, n in enumerate(nodes_json)], outputs, name)

    @classmethod
    def loads(cls, text: str) -> "Graph":
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:   # ValueError: also over 4300 digits
            raise GraphError(f"graph JSON does not parse: {str(e).splitlines()[0]}") from None
        return cls.from_json(obj)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Graph":
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):   # a FIFO or device would block
                raise GraphError(f"graph file '{path}' is not a regular file")
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise GraphError(f"cannot read graph file '{path}': {e.strerror}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GraphError(f"graph file '{path}' is not UTF-8 JSON") from None
        return cls.loads(text)


_NODE_FIELDS = {"name", "op", "inputs", "bytes", "shape", "dtype", "attrs", "inplace"}


def _node_from_json(index: int, obj: Any) -> Node:
    if not isinstance(obj, dict):
        raise GraphError(f"nodes[{index}]: must be an object, got {type(obj).__name__}")
    name = obj.get("name")
    _check_text(f"nodes[{index}]", "name", name)
    where = f"node '{name}'"
    unknown = sorted(set(obj) - _NODE_FIELDS)
    if unknown:
        raise GraphError(f"{where}: unknown field {ascii(unknown[0])}")
    op = obj.get("op")
    if not isinstance(op, str) or not op:
        raise GraphError(f"{where}: field 'op' must be a non-empty string")
    inputs = obj.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(s, str) for s in inputs):
        raise GraphError(f"{where}: field 'inputs' must be a list of node names")
    if "bytes" not in obj:
        raise GraphError(f"{where}: field 'bytes' is missing")
    nbytes = obj["bytes"]
    if isinstance(nbytes, float) and nbytes.is_integer():
        nbytes = int(nbytes)
    shape = obj.get("shape")
    if shape is not None:
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise GraphError(f"{where}: field 'shape' must be a list of non-negative integers")
        shape = tuple(shape)
    dtype = obj.get("dtype")
    if dtype is not None and not isinstance(dtype, str):
        raise GraphError(f"{where}: field 'dtype' must be a string")
    attrs = obj.get("attrs", {})
    if not isinstance(attrs, dict):
        raise GraphError(f"{where}: field 'attrs' must be an object")
    inplace = obj.get("inplace")
    if isinstance(inplace, dict):
        if set(inplace) != {"workspace_bytes"}:
            raise GraphError(f"{where}: field 'inplace' object must have exactly "
                             "'workspace_bytes'")
        inplace = inplace["workspace_bytes"]
        if isinstance(inplace, bool) or not isinstance(inplace, int):
            raise GraphError(f"{where}: inplace workspace_bytes must be an integer")
    elif inplace is not None and inplace != "alias":
        raise GraphError(f"{where}: field 'inplace' must be \"alias\" or "
                         f"{{\"workspace_bytes\": int}}, got {inplace!r}")
    return Node(name=name, op=op, inputs=tuple(inputs), bytes=nbytes, shape=shape,
                dtype=dtype, attrs=attrs, inplace=inplace)
