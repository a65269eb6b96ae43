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
message naming the offending node or field; it never returns a malformed graph.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .errors import SerenityError

__all__ = ["GraphError", "Node", "Graph", "INPUT_OP", "unique_name"]

INPUT_OP = "input"


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
    """A validated, immutable DAG of :class:`Node` in stored (frontend) order."""

    def __init__(self, nodes: Iterable[Node], outputs: Iterable[str], name: str = "graph"):
        self.name = name
        node_list = list(nodes)
        if not node_list:
            raise GraphError(f"graph '{name}': has no nodes")
        self.nodes: dict[str, Node] = {}
        for node in node_list:
            if node.name in self.nodes:
                raise GraphError(f"node '{node.name}': duplicate name")
            self.nodes[node.name] = node
        self.outputs: tuple[str, ...] = tuple(outputs)
        self._validate()
        self.consumers: dict[str, tuple[str, ...]] = {n: () for n in self.nodes}
        acc: dict[str, list[str]] = {n: [] for n in self.nodes}
        for node in node_list:
            for src in dict.fromkeys(node.inputs):
                acc[src].append(node.name)
        self.consumers = {n: tuple(c) for n, c in acc.items()}
        self._check_acyclic()

    # ----------------------------------------------------------------------------- validation
    def _validate(self) -> None:
        for node in self.nodes.values():
            where = f"node '{node.name}'"
            if not isinstance(node.name, str) or not node.name:
                raise GraphError(f"node {node.name!r}: name must be a non-empty string")
            if not isinstance(node.op, str) or not node.op:
                raise GraphError(f"{where}: field 'op' must be a non-empty string")
            if isinstance(node.bytes, bool) or not isinstance(node.bytes, int):
                raise GraphError(f"{where}: field 'bytes' must be an integer, got {node.bytes!r}")
            if node.bytes < 0:
                raise GraphError(f"{where}: field 'bytes' is negative ({node.bytes})")
            if node.is_input and node.inputs:
                raise GraphError(f"{where}: an 'input' node cannot have inputs")
            for src in node.inputs:
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
                        raise GraphError(f"{where}: inplace workspace_bytes {ws} is smaller "
                                         f"than max(input, output) = {need}")
        if all(node.is_input for node in self.nodes.values()):
            raise GraphError(f"graph '{self.name}': has no operators (only inputs)")
        if not self.outputs:
            raise GraphError(f"graph '{self.name}': 'outputs' is empty")
        for out in self.outputs:
            if out not in self.nodes:
                raise GraphError(f"graph '{self.name}': output '{out}' is not a node")
        if len(set(self.outputs)) != len(self.outputs):
            raise GraphError(f"graph '{self.name}': 'outputs' lists a node twice")

    def _check_acyclic(self) -> None:
        indegree = {n: len(set(node.inputs)) for n, node in self.nodes.items()}
        ready = [n for n, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            name = ready.pop()
            seen += 1
            for c in self.consumers[name]:
                indegree[c] -= 1
                if indegree[c] == 0:
                    ready.append(c)
        if seen == len(self.nodes):
            return
        # Walk backwards inside the unresolved part until a node repeats: it is on a cycle.
        stuck = {n for n, d in indegree.items() if d > 0}
        name = next(iter(stuck))
        path: list[str] = []
        while name not in path:
            path.append(name)
            name = next(s for s in self.nodes[name].inputs if s in stuck)
        cycle = path[path.index(name):][::-1]   # we walked against the edges
        raise GraphError(f"node '{cycle[0]}': on a cycle "
                         f"({' -> '.join(cycle)} -> {cycle[0]})")

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
        with open(path, "w") as f:
            f.write(self.dumps())

    @classmethod
    def from_json(cls, obj: Any) -> "Graph":
        """Build from a parsed JSON object (dict). Raises GraphError on any malformation."""
        if not isinstance(obj, dict):
            raise GraphError(f"graph JSON must be an object, got {type(obj).__name__}")
        name = obj.get("name", "graph")
        if not isinstance(name, str):
            raise GraphError(f"graph field 'name' must be a string, got {name!r}")
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
        except (json.JSONDecodeError, RecursionError) as e:
            raise GraphError(f"graph JSON does not parse: {e}") from None
        return cls.from_json(obj)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Graph":
        try:
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
    if not isinstance(name, str) or not name:
        raise GraphError(f"nodes[{index}]: field 'name' must be a non-empty string")
    where = f"node '{name}'"
    unknown = sorted(set(obj) - _NODE_FIELDS)
    if unknown:
        raise GraphError(f"{where}: unknown field '{unknown[0]}'")
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
