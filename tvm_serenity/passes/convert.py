"""Relax binding blocks to the graph IR and back: the bridge every pass in this package uses.

Reading (:func:`graph_of_bindings`, :func:`block_graph`) turns a straight-line list of Relax
bindings into a :class:`~tvm_serenity.graph.Graph`:

* **one node per binding**, named like its variable (a repeated name gets a ``_1``, ``_2``...
  suffix); ``op`` says what the binding computes (``nn.conv2d``, ``call_tir``, ``alias``...);
* **bytes** from the variable's type: a static ``TensorType`` is elements x dtype bytes, a tuple
  the sum of its fields, anything else (shapes, objects, the unit result of a
  destination-passing call) 0. A tensor whose shape or dtype is not static raises
  :class:`ConversionError`; weights bound as constants are no variables and are not counted;
* **views produce no bytes**: a binding that only renames or regroups existing tensors (``y =
  x``, a tuple literal, a tuple item, the in-place outputs of ``R.call_tir_inplace``) is a
  0-byte node, and whoever uses a view also depends on the tensors the view refers to (its
  *roots*), so the memory model keeps those alive exactly as long as the view is used. This is
  what makes the lowered form after ``CallTIRRewrite`` (``alloc = R.builtin.alloc_tensor(...)``;
  ``f(x, alloc)``; ``y = alloc``) come out right: the allocation is the tensor, live from its
  ``alloc_tensor`` to the last use of any name for it. A caller may declare more bindings views
  of their first argument (``views``: e.g. an ``R.reshape`` the VM runs as a view of its
  input's storage); :attr:`BlockGraph.refs` says which tensors every node refers to;
* **def-use** from ``relax.analysis.free_vars`` of each binding's value; a ``match_cast`` that
  may define symbolic variables (``n`` in ``R.Tensor(("n",))``) is also an input of every later
  binding, since those may use the symbols;
* **inputs**: function parameters and variables bound before the block that the block uses
  become ``input`` nodes (live from the start);
* **outputs**: variables used after the block (by later blocks or the function's result, and
  in a ``DataflowBlock`` every non-dataflow variable) and their roots; a block nothing of which
  is used afterwards keeps its sinks as outputs.

Writing back: :meth:`BlockGraph.rebuild` returns the block with its bindings in a given order,
:func:`with_blocks` the function with new blocks, normalized so that
``relax.analysis.well_formed`` accepts it. Names and variables are unchanged, so a block can be
read, reordered and read again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import prod
from typing import Callable, Collection, Iterable, Mapping, Sequence, Union

import tvm
from tvm import relax

from ..errors import SerenityError
from ..graph import INPUT_OP, Graph, Node, unique_name
from ..memory import validate_order

__all__ = ["PassError", "ConversionError", "BlockGraph", "type_bytes", "graph_of_bindings",
           "block_graph", "vars_used_after", "with_blocks", "relax_functions", "is_op",
           "is_view", "with_report"]

# What a variable refers to in memory: the node names of the tensors holding it, or, for a
# tuple literal, one such reference per field (so that an item of it names only its field).
Ref = Union[frozenset, tuple]

_CALL_TIR_INPLACE = "relax.call_tir_inplace"


class PassError(SerenityError, ValueError):
    """A serenity pass was given an impossible option or module; the message says which."""


class ConversionError(PassError):
    """A Relax block cannot be read as a graph (e.g. a tensor with a symbolic shape)."""


def _static_tensor(ty: relax.TensorType, what: str) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) of a tensor type, or ConversionError if either is not static."""
    if not isinstance(ty.shape, relax.ShapeExpr) or ty.dtype is None:
        raise ConversionError(f"{what}: tensor type {ty} has no static shape and dtype")
    if not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        raise ConversionError(f"{what}: tensor type {ty} has a symbolic dimension")
    return tuple(int(d.value) for d in ty.shape.values), str(ty.dtype.dtype)


def type_bytes(ty, what: str = "value") -> int:
    """Bytes a value of Relax type ``ty`` occupies: static tensors count elements x dtype size
    (booleans one byte each), tuples the sum of their fields, every other type 0."""
    if isinstance(ty, relax.TensorType):
        shape, dtype = _static_tensor(ty, what)
        dt = tvm.DataType(dtype)
        bits = 8 if dt.type_code == tvm.DataTypeCode.BOOL else dt.bits
        return (prod(shape) * bits * dt.lanes + 7) // 8
    if isinstance(ty, tvm.ir.TupleType):
        return sum(type_bytes(f, what) for f in ty.fields)
    return 0


@dataclass(frozen=True)
class BlockGraph:
    """A list of bindings read as a graph, and how to write an order of it back."""

    graph: Graph
    vars: Mapping[str, relax.Var]            # every node (inputs too) -> its variable
    bindings: Mapping[str, relax.Binding]    # every non-input node -> its binding, stored order
    refs: Mapping[str, frozenset]            # every node -> the tensors (node names) it refers
                                             # to: itself, or a view's roots

    def ordered_bindings(self, order: Sequence[str]) -> list[relax.Binding]:
        """The bindings in ``order`` (a topological order of all non-input nodes)."""
        validate_order(self.graph, order)
        return [self.bindings[name] for name in order]

    def rebuild(self, block: relax.BindingBlock, order: Sequence[str]) -> relax.BindingBlock:
        """``block`` (the one this graph was read from) with its bindings in ``order``."""
        bindings = self.ordered_bindings(order)
        if len(bindings) != len(block.bindings):
            raise ConversionError("rebuild: the graph was not read from this whole block")
        if isinstance(block, relax.DataflowBlock):
            return relax.DataflowBlock(bindings)
        return relax.BindingBlock(bindings)


def is_op(value, *names: str) -> bool:
    """Whether ``value`` calls one of the Relax operators ``names`` (e.g. "relax.add")."""
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and value.op.name in names)


def is_view(value) -> bool:
    """Whether a binding of ``value`` only renames or regroups existing values."""
    return isinstance(value, (relax.Var, relax.Tuple, relax.TupleGetItem))


def _callee_name(call: relax.Call) -> str | None:
    target = call.args[0] if is_op(call, "relax.call_tir", _CALL_TIR_INPLACE) else call.op
    return target.name_hint if isinstance(target, tvm.ir.GlobalVar) else None


def _op_name(value) -> str:
    if isinstance(value, relax.Call):
        if isinstance(value.op, tvm.ir.Op):
            return value.op.name.removeprefix("relax.")
        return "call"
    if isinstance(value, relax.Var):
        return "alias"
    if isinstance(value, relax.Tuple):
        return "tuple"
    if isinstance(value, relax.TupleGetItem):
        return "tuple_get_item"
    return type(value).__name__.lower()


def _flatten(ref: Ref) -> frozenset:
    if isinstance(ref, frozenset):
        return ref
    return frozenset().union(*(_flatten(r) for r in ref))


class _Reader:
    """Builds the nodes of one list of bindings (see the module docstring)."""

    def __init__(self, size_of: Callable[[relax.Var], int] | None,
                 views: Collection[relax.Var] = ()):
        self.size_of = size_of
        self.views = views
        self.nodes: list[Node] = []
        self.name: dict[relax.Var, str] = {}     # var -> node name
        self.ref: dict[relax.Var, Ref] = {}
        self.taken: set[str] = set()

    def unique(self, var: relax.Var) -> str:
        name = unique_name(var.name or "v", self.taken, start=1)
        self.taken.add(name)
        self.name[var] = name
        return name

    def ref_of(self, expr) -> Ref:
        """What ``expr`` (an argument, a field, a view's source) refers to."""
        if isinstance(expr, relax.Var):
            return self.ref.get(expr, frozenset())
        if isinstance(expr, relax.Tuple):
            return tuple(self.ref_of(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            whole = self.ref_of(expr.tuple_value)
            return whole[expr.index] if isinstance(whole, tuple) else whole
        return frozenset()

    def add_node(self, var: relax.Var, op: str, inputs=(), view_bytes: int | None = None,
                 value=None) -> None:
        """Append the node of ``var`` (already named); ``view_bytes`` overrides its type."""
        name, ty = self.name[var], var.ty
        shape = dtype = None
        if self.size_of is not None:
            nbytes = self.size_of(var)
        elif view_bytes is not None:
            nbytes = view_bytes
        else:
            nbytes = type_bytes(ty, f"variable '{var.name}'")
            if isinstance(ty, relax.TensorType):
                shape, dtype = _static_tensor(ty, var.name)
        callee = _callee_name(value) if isinstance(value, relax.Call) else None
        self.nodes.append(Node(name=name, op=op, inputs=tuple(inputs), bytes=nbytes,
                               shape=shape, dtype=dtype,
                               attrs={"callee": callee} if callee else {}))

    def read(self, bindings: Sequence[relax.Binding]) -> None:
        defined = {b.var for b in bindings}
        symbols: list[str] = []     # match_casts that define symbolic variables, so far
        for b in bindings:
            used = list(relax.analysis.free_vars(b.value))
            for v in used:
                if v not in self.name and v not in defined:
                    self.ref[v] = frozenset({self.unique(v)})
                    self.add_node(v, INPUT_OP)
            inputs = dict.fromkeys(self.name[v] for v in used)
            for v in used:
                inputs.update(dict.fromkeys(sorted(_flatten(self.ref[v]))))
            inputs.update(dict.fromkeys(symbols))
            own = frozenset({self.unique(b.var)})
            if isinstance(b, relax.MatchCast) and relax.analysis.definable_tir_vars_in_type(b.ty):
                symbols.append(self.name[b.var])
            ref, view_bytes = self.view(b, own)
            self.ref[b.var] = own if ref is None else ref
            op = "match_cast" if isinstance(b, relax.MatchCast) else _op_name(b.value)
            self.add_node(b.var, op, inputs, view_bytes, b.value)

    def view(self, binding: relax.Binding, own: frozenset) -> tuple[Ref | None, int | None]:
        """(what the binding's variable refers to, its bytes) if it is a view, else
        (None, None). ``own`` refers to the binding's own node."""
        value = binding.value
        if isinstance(binding, relax.MatchCast) and not isinstance(value, relax.Var):
            return None, None
        if is_view(value):
            return self.ref_of(value), 0
        if binding.var in self.views:
            return self.ref_of(value.args[0]), 0
        if is_op(value, _CALL_TIR_INPLACE):
            args = value.args[1]
            args = list(args.fields) if isinstance(args, relax.Tuple) else [args]
            indices = [int(i) for i in value.attrs.inplace_indices]
            out_tys = (list(value.ty.fields) if isinstance(value.ty, tvm.ir.TupleType)
                       else [value.ty])
            fields = [self.ref_of(args[i]) if i >= 0 else own for i in indices]
            fresh = sum(type_bytes(t, f"variable '{binding.var.name}'")
                        for t, i in zip(out_tys, indices) if i < 0)
            return (fields[0] if len(fields) == 1 else tuple(fields)), fresh
        return None, None


def graph_of_bindings(bindings: Sequence[relax.Binding], used_after: Iterable[relax.Var],
                      *, name: str = "block",
                      size_of: Callable[[relax.Var], int] | None = None,
                      views: Collection[relax.Var] = ()) -> BlockGraph:
    """Read ``bindings`` (straight-line, in program order) as a graph.

    ``used_after``: the variables needed once the bindings ran (they and what they refer to
    become graph outputs). ``size_of``, if given, replaces the byte rule for every node (inputs
    included): e.g. 0 for everything an arena does not hold. ``views``: variables whose
    binding (a call) is read as a view of the call's first argument.
    """
    bindings = list(bindings)
    if not bindings:
        raise ConversionError(f"{name}: no bindings to read")
    reader = _Reader(size_of, views)
    reader.read(bindings)
    outputs: dict[str, None] = {}
    for var in used_after:
        if var in reader.name:
            outputs[reader.name[var]] = None
            outputs.update(dict.fromkeys(sorted(_flatten(reader.ref[var]))))
    if not outputs:
        consumed = {src for node in reader.nodes for src in node.inputs}
        outputs = dict.fromkeys(reader.name[b.var] for b in bindings
                                if reader.name[b.var] not in consumed)
    graph = Graph(reader.nodes, list(outputs), name=name)
    return BlockGraph(graph=graph, vars={n: v for v, n in reader.name.items()},
                      bindings={reader.name[b.var]: b for b in bindings},
                      refs={n: _flatten(reader.ref[v]) for v, n in reader.name.items()})


def relax_functions(mod: tvm.IRModule):
    """(global var, function) for every Relax function of ``mod`` the passes transform: all but
    fused groups not yet turned into TIR (``Primitive``) and functions offloaded (``Codegen``)."""
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        if func.attrs is not None and ("Primitive" in func.attrs or "Codegen" in func.attrs):
            continue
        yield gvar, func


def _seq(scope) -> relax.SeqExpr:
    return scope.body if isinstance(scope, relax.Function) else scope


def vars_used_after(scope: relax.Function | relax.SeqExpr, index: int) -> list[relax.Var]:
    """Variables of block ``index`` of ``scope`` (a function's body or any ``SeqExpr``, e.g. an
    ``If`` branch) that are needed after it: used by a later block or by the result, or
    visible outside a ``DataflowBlock``."""
    seq = _seq(scope)
    block = seq.blocks[index]
    own = {b.var for b in block.bindings}
    used: dict[relax.Var, None] = {}
    for later in seq.blocks[index + 1:]:
        for b in later.bindings:
            used.update(dict.fromkeys(v for v in relax.analysis.free_vars(b.value) if v in own))
    used.update(dict.fromkeys(v for v in relax.analysis.free_vars(seq.body) if v in own))
    if isinstance(block, relax.DataflowBlock):
        used.update(dict.fromkeys(b.var for b in block.bindings
                                  if not isinstance(b.var, relax.DataflowVar)))
    return list(used)


def block_graph(scope: relax.Function | relax.SeqExpr, index: int, *, name: str | None = None,
                size_of: Callable[[relax.Var], int] | None = None) -> BlockGraph:
    """Block ``index`` of ``scope`` (a function's body or any ``SeqExpr``) read as a graph
    (:func:`graph_of_bindings`)."""
    return graph_of_bindings(_seq(scope).blocks[index].bindings, vars_used_after(scope, index),
                             name=name or f"block{index}", size_of=size_of)


def with_blocks(func: relax.Function, blocks: Sequence[relax.BindingBlock]) -> relax.Function:
    """``func`` with ``blocks`` as the blocks of its body (same result), normalized so that
    ``relax.analysis.well_formed`` accepts it."""
    new = relax.Function(func.params, relax.SeqExpr(list(blocks), func.body.body),
                         func.ret_ty, func.is_pure, func.attrs, func.span)
    return relax.BlockBuilder().normalize(new)


def with_report(mod: tvm.IRModule, updates: Mapping, attr: str, report: dict) -> tvm.IRModule:
    """``mod`` with the functions in ``updates`` (global var -> function) replaced and the JSON
    ``report`` of the pass that decided them in module attribute ``attr``."""
    if updates:
        mod = mod.clone()
        for gvar, func in updates.items():
            mod[gvar] = func
    return mod.with_attr(attr, json.dumps(report))
