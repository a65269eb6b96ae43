"""The memory model: the single source of truth for every peak figure in tvm-serenity.

Model (docs/serenity.md, extended with in-place execution, docs/rip.md):

* a tensor is live from the step its producer runs until the step its last consumer runs;
  graph inputs are live from the start, graph outputs until the end; a tensor nobody consumes
  (and that is no output) is freed right after the step that produced it;
* executing node ``v`` needs its inputs and its output at once::

      mem_during(v) = live_before(v) + bytes(v)

  then every input whose last consumer was ``v`` is freed;
* an in-place capable node (``inplace`` in the graph IR) that is the last consumer of its first
  input ``u`` (and ``u`` is no graph output) shares one region of ``W`` bytes between ``u`` and
  its output: ``W = S`` (the RiP workspace) or ``max(bytes(u), bytes(v))`` for an exact alias::

      mem_during(v) = live_before(v) - bytes(u) + W

  A node whose ``W`` is not below ``bytes(u) + bytes(v)`` never runs in place (it would not
  save anything). So running in place whenever allowed is never worse, and
  whether a node runs in place is a function of the order: ordering and in-place are decided
  together by whoever chooses the order.

The **liveness peak** of an order is ``max_v mem_during(v)``: the best any offset allocator can
reach for that order. The arena an allocator reserves is a different figure (``alloc/``).

:class:`MemoryModel` compiles a graph to integer arrays (and, for the exact searches, bitmasks)
so that schedulers can evaluate one step at a time (``step``) with the exact same rule
:func:`simulate` uses; :class:`Execution` applies that rule along one order with counters, so
:func:`simulate` and :func:`liveness` are linear in the graph's size. The lower bounds here are
valid for every order (and for in-place execution when enabled); :func:`node_bounds` takes a
deadline and falls back to per-node local bounds past it or on very large graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from .graph import Graph, GraphError

__all__ = ["MemoryModel", "Step", "Simulation", "Lifetime", "InPlaceStep", "Liveness",
           "Execution", "simulate", "validate_order", "liveness", "lower_bound_bytes",
           "node_bounds", "ancestors_descendants", "bits", "mask_of_indices",
           "EXACT_BOUNDS_MAX_NODES"]


class Step(NamedTuple):
    """What executing one node does to memory (a tuple: made once per step of every run)."""

    mem_during: int          # bytes live while the node runs
    live_after: int          # bytes live once it finished and its dead inputs were freed
    freed: tuple[int, ...]   # tensors freed at the end of this step
    inplace_input: int       # index of the input the node overwrote in place, or -1


class MemoryModel:
    """A graph compiled for fast, exact memory evaluation.

    Node ``i`` is the i-th node of the graph in stored order (a topological order, see
    :class:`~tvm_serenity.graph.Graph`). Two ways to run it, one rule (:meth:`_finish`):

    * :meth:`step` takes the scheduled set ``done`` as an int bitmask: what the exact searches
      use (a state is a set). The masks are built on first use (they take O(n^2) bits on a
      long graph, so linear-time users never build them);
    * :class:`Execution` runs one order with consumer counters in O(inputs) per step: what
      :func:`simulate`, :func:`liveness` and the heuristics use on graphs of any size.

    ``inplace=False`` gives the paper's plain model (no node ever runs in place).
    """

    def __init__(self, graph: Graph, inplace: bool = True):
        self.graph = graph
        self.inplace = inplace
        self.names: list[str] = list(graph.nodes)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        n = len(self.names)
        self.n = n
        nodes = [graph.nodes[x] for x in self.names]
        self.size: list[int] = [node.bytes for node in nodes]
        self.preds: list[tuple[int, ...]] = [
            tuple(self.index[s] for s in dict.fromkeys(node.inputs)) for node in nodes]
        consumers: list[list[int]] = [[] for _ in range(n)]
        for i, ps in enumerate(self.preds):
            for p in ps:
                consumers[p].append(i)
        self.consumers: list[tuple[int, ...]] = [tuple(c) for c in consumers]
        self.is_output: list[bool] = [False] * n
        for o in graph.outputs:
            self.is_output[self.index[o]] = True
        self.is_input: list[bool] = [node.is_input for node in nodes]
        self.op_indices: list[int] = [i for i in range(n) if not self.is_input[i]]
        # Graph inputs nobody reads (and no output): freed by whichever node runs first.
        self.dangling: tuple[int, ...] = tuple(
            i for i in range(n) if self.is_input[i] and not consumers[i] and not self.is_output[i])
        # W for in-place capable nodes, or -1.
        self.inplace_bytes: list[int] = [-1] * n
        if inplace:
            for i, node in enumerate(nodes):
                spec = node.inplace
                if spec is None:
                    continue
                u = self.preds[i][0]
                shared = max(self.size[u], self.size[i]) if spec == "alias" else spec
                if shared < self.size[u] + self.size[i]:   # else in place would cost more
                    self.inplace_bytes[i] = shared
        self.initial_live_bytes = sum(self.size[i] for i in range(n) if self.is_input[i])

    @classmethod
    def of(cls, graph: Graph, inplace: bool = True) -> "MemoryModel":
        """The graph's model, built once per graph and flag (graphs are immutable)."""
        key = ("memory model", inplace)
        if key not in graph.derived:
            graph.derived[key] = cls(graph, inplace)
        return graph.derived[key]

    # ------------------------------------------------------------ bitmasks (exact searches)
    @cached_property
    def pred_mask(self) -> list[int]:
        return [mask_of_indices(ps) for ps in self.preds]

    @cached_property
    def consumer_mask(self) -> list[int]:
        return [mask_of_indices(cs) for cs in self.consumers]

    @cached_property
    def output_mask(self) -> int:
        return mask_of_indices(i for i in range(self.n) if self.is_output[i])

    @cached_property
    def input_mask(self) -> int:
        return mask_of_indices(i for i in range(self.n) if self.is_input[i])

    @property
    def all_mask(self) -> int:
        return (1 << self.n) - 1

    def step(self, done: int, live_before: int, v: int) -> Step:
        """Execute node ``v`` after the nodes in ``done`` (a bitmask that must contain its
        inputs). An input never consumed by anyone (and no output) is freed at the first step.
        """
        after = done | (1 << v)
        cmask = self.consumer_mask
        freed = [p for p in self.preds[v]
                 if (cmask[p] & after) == cmask[p] and not self.is_output[p]]
        return self._finish(v, live_before, freed, done == self.input_mask)

    def _finish(self, v: int, live_before: int, freed: list[int], first: bool) -> Step:
        """The memory rule (module docstring) for running ``v`` when ``freed`` are the inputs
        it is the last reader of; ``first``: it is the first step of the order."""
        if first:
            freed.extend(self.dangling)
        mem_during = live_before + self.size[v]
        inplace_input = -1
        ws = self.inplace_bytes[v]
        if ws >= 0 and freed and freed[0] == self.preds[v][0]:
            inplace_input = freed[0]
            mem_during = live_before - self.size[inplace_input] + ws
        if not self.consumers[v] and not self.is_output[v]:
            freed.append(v)
        live_after = live_before + self.size[v] - sum(self.size[p] for p in freed)
        return Step(mem_during, live_after, tuple(freed), inplace_input)

    def is_ready(self, done: int, v: int) -> bool:
        return not (done >> v) & 1 and (self.pred_mask[v] & done) == self.pred_mask[v]

    def ready(self, done: int) -> list[int]:
        """Unscheduled nodes whose inputs are all in ``done``, in stored order."""
        return [v for v in self.op_indices if self.is_ready(done, v)]

    def mask_of(self, names) -> int:
        return mask_of_indices(self.index[x] for x in names)

    def names_of(self, mask: int) -> list[str]:
        return [self.names[i] for i in bits(mask)]


class Execution:
    """One order being run, node by node, in O(inputs) per step (consumer counters).

    ``peek(v)`` is what running ready node ``v`` next would do, ``run(v)`` runs it; both give
    exactly :meth:`MemoryModel.step`'s :class:`Step` for the same scheduled set.
    """

    def __init__(self, model: MemoryModel):
        self.model = model
        self.waiting = [len(c) for c in model.consumers]   # consumers not run yet
        self.live = model.initial_live_bytes
        self.steps = 0

    def frees(self, p: int) -> bool:
        """Would the next reader of ``p`` free it (it is the last one, ``p`` no output)?"""
        return self.waiting[p] == 1 and not self.model.is_output[p]

    def peek(self, v: int) -> Step:
        m = self.model
        return m._finish(v, self.live, [p for p in m.preds[v] if self.frees(p)],
                         self.steps == 0)

    def run(self, v: int) -> Step:
        st = self.peek(v)
        for p in self.model.preds[v]:
            self.waiting[p] -= 1
        self.live = st.live_after
        self.steps += 1
        return st


def mask_of_indices(indices) -> int:
    """The bitmask with the given bit indices set (linear time, however high the bits)."""
    out = bytearray()
    for i in indices:
        byte = i >> 3
        if byte >= len(out):
            out.extend(bytes(byte + 1 - len(out)))
        out[byte] |= 1 << (i & 7)
    return int.from_bytes(out, "little")


def bits(mask: int):
    """The indices of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


# ------------------------------------------------------------------------------ simulation
@dataclass(frozen=True)
class Simulation:
    order: tuple[str, ...]
    step_bytes: tuple[int, ...]          # mem_during of each step
    live_after_bytes: tuple[int, ...]
    peak_bytes: int
    peak_step: int                       # first step reaching the peak
    live_at_peak: tuple[str, ...]        # tensors occupying memory during the peak step
    inplace_nodes: tuple[str, ...]       # nodes that ran in place (over their first input)

    @property
    def peak_node(self) -> str:
        return self.order[self.peak_step]


def validate_order(graph: Graph, order) -> None:
    """Raise GraphError unless ``order`` is a topological order of all non-input nodes."""
    seen: set[str] = set()
    for name in order:
        if not isinstance(name, str) or name not in graph.nodes:
            raise GraphError(f"order: node {name!r} is not in graph '{graph.name}'")
        node = graph.nodes[name]
        if node.is_input:
            raise GraphError(f"order: node '{name}' is a graph input and is not scheduled")
        if name in seen:
            raise GraphError(f"order: node '{name}' appears twice")
        for src in node.inputs:
            if src not in seen and not graph.nodes[src].is_input:
                raise GraphError(f"order: node '{name}' runs before its input '{src}'")
        seen.add(name)
    if len(seen) < len(graph.op_names):
        missing = [n for n in graph.op_names if n not in seen]
        raise GraphError(f"order: node '{missing[0]}' is missing ({len(missing)} missing)")


def _steps(model: MemoryModel, order) -> list[Step]:
    run = Execution(model).run
    return [run(model.index[name]) for name in order]


def simulate(graph: Graph, order, inplace: bool = True,
             model: MemoryModel | None = None) -> Simulation:
    """Run the memory model over ``order`` (validated first); linear in the graph's size."""
    validate_order(graph, order)
    model = model or MemoryModel.of(graph, inplace)
    steps = _steps(model, order)
    step_bytes = tuple(st.mem_during for st in steps)
    peak = max(step_bytes)
    peak_step = step_bytes.index(peak)
    live = {i for i in range(model.n) if model.is_input[i]}
    for name, st in zip(order[:peak_step], steps):
        live.add(model.index[name])
        live.difference_update(st.freed)
    live.add(model.index[order[peak_step]])
    inplace_nodes = tuple(name for name, st in zip(order, steps) if st.inplace_input >= 0)
    return Simulation(tuple(order), step_bytes, tuple(st.live_after for st in steps), peak,
                      peak_step, tuple(model.names[i] for i in sorted(live)), inplace_nodes)


# -------------------------------------------------------------------------------- liveness
@dataclass(frozen=True)
class Lifetime:
    """Tensor ``name`` occupies ``bytes`` during steps ``start..end`` (inclusive)."""

    name: str
    bytes: int
    start: int
    end: int

    def overlaps(self, other: "Lifetime") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class InPlaceStep:
    """At ``step``, ``output`` was written over ``input`` in one region of ``workspace_bytes``:
    output at offset ``o``, input at ``o + workspace_bytes - bytes(input)``."""

    step: int
    input: str
    output: str
    workspace_bytes: int


@dataclass(frozen=True)
class Liveness:
    """What an offset allocator needs: one lifetime per tensor, and the in-place steps."""

    order: tuple[str, ...]
    lifetimes: dict[str, Lifetime]
    inplace: tuple[InPlaceStep, ...]
    peak_bytes: int                      # the liveness peak (= simulate(...).peak_bytes)

    @property
    def num_steps(self) -> int:
        return len(self.order)


def liveness(graph: Graph, order, inplace: bool = True) -> Liveness:
    """Tensor lifetimes for ``order``: at step k the tensors with start <= k <= end are live,
    and their bytes sum to ``mem_during`` of step k (minus in-place sharing)."""
    validate_order(graph, order)
    model = MemoryModel.of(graph, inplace)
    steps = _steps(model, order)
    last = len(order) - 1
    start = {n: 0 for n in graph.input_names}
    end: dict[str, int] = {}
    pairs = []
    for k, (name, st) in enumerate(zip(order, steps)):
        start[name] = k
        for p in st.freed:
            end[model.names[p]] = k
        if st.inplace_input >= 0:
            pairs.append(InPlaceStep(k, model.names[st.inplace_input], name,
                                     model.inplace_bytes[model.index[name]]))
    lifetimes = {n: Lifetime(n, graph.nodes[n].bytes, start[n], end.get(n, last))
                 for n in graph.nodes}
    return Liveness(tuple(order), lifetimes, tuple(pairs),
                    max(st.mem_during for st in steps))


# ------------------------------------------------------------------------------ lower bounds
EXACT_BOUNDS_MAX_NODES = 20_000   # above: local bounds (ancestor sets take O(n^2) bits)


def node_bounds(graph: Graph, inplace: bool = True,
                deadline: float | None = None) -> dict[str, int]:
    """For every non-input node ``v``, bytes that must be live while ``v`` runs in ANY order.

    That is ``v``'s output and inputs, plus every tensor produced before ``v`` necessarily (by
    an ancestor, or a graph input) and needed after ``v`` necessarily (by a descendant, or as a
    graph output). If ``v`` may run in place (no descendant still needs its first input), the
    in-place saving is subtracted. The max over nodes is a cut-based lower bound on the peak.

    That needs every node's ancestor and descendant sets (O(n^2) bits): on a graph of more
    than :data:`EXACT_BOUNDS_MAX_NODES` nodes, or once ``deadline`` (a ``perf_counter``
    value) has passed, every node gets its *local* bound instead: its output and inputs, less
    the in-place saving whenever it may run in place at all (weaker, still valid).
    """
    model = MemoryModel.of(graph, inplace)
    relations = None
    if model.n <= EXACT_BOUNDS_MAX_NODES:
        relations = ancestors_descendants(model, deadline)
    crossing = None if relations is None else _crossing_bytes(model, *relations, deadline)
    bounds = {}
    for v in model.op_indices:
        ws = model.inplace_bytes[v]
        u = model.preds[v][0] if ws >= 0 else -1
        if crossing is None:
            total = model.size[v] + sum(model.size[p] for p in model.preds[v])
            may_inplace = u >= 0 and not model.is_output[u]
        else:
            desc = relations[1][v]
            # v, its inputs, and what crosses v (an input may be among the latter).
            total = crossing[v] + model.size[v] + sum(
                model.size[p] for p in model.preds[v]
                if not (model.is_output[p] or model.consumer_mask[p] & desc))
            may_inplace = u >= 0 and not model.is_output[u] and not (
                model.consumer_mask[u] & desc)
        if may_inplace:
            total -= model.size[u] + model.size[v] - ws
        bounds[model.names[v]] = total
    return bounds


def _crossing_bytes(model: MemoryModel, anc: list[int], desc: list[int],
                    deadline: float | None) -> list[int] | None:
    """Bytes live while v runs in every order, for every v: per tensor t, the nodes v that t
    must cross (t produced before v, needed after v); None once ``deadline`` has passed."""
    from .schedule.stop import past    # here: the schedule package imports this module
    ops_mask = model.all_mask & ~model.input_mask
    crossing = [0] * model.n
    for t in range(model.n):
        if past(deadline):
            return None
        needed_before = 0
        for c in model.consumers[t]:
            needed_before |= anc[c]
        produced_before = ops_mask if model.is_input[t] else desc[t]
        if model.is_output[t]:
            needed_before = ops_mask
        for v in bits(produced_before & needed_before & ops_mask):
            crossing[v] += model.size[t]
    return crossing


def lower_bound_bytes(graph: Graph, inplace: bool = True, deadline: float | None = None,
                      bounds: dict[str, int] | None = None) -> int:
    """A lower bound on the optimal liveness peak over all orders.

    The max of: the per-node cut bounds (:func:`node_bounds`, or ``bounds`` when already
    computed), all graph inputs together (live at the first step), all graph outputs together
    (live at the last step).
    """
    model = MemoryModel.of(graph, inplace)
    inputs = model.initial_live_bytes
    outputs = sum(model.size[i] for i in range(model.n) if model.is_output[i])
    bounds = node_bounds(graph, inplace, deadline) if bounds is None else bounds
    return max([inputs, outputs, *bounds.values()])


def ancestors_descendants(model: MemoryModel, deadline: float | None = None
                          ) -> tuple[list[int], list[int]] | None:
    """(ancestor masks, descendant masks) of every node of ``model`` (stored order is
    topological); None once ``deadline`` has passed."""
    from .schedule.stop import past    # here: the schedule package imports this module
    anc = [0] * model.n
    for v in range(model.n):
        if v % 256 == 0 and past(deadline):
            return None
        for p in model.preds[v]:
            anc[v] |= anc[p] | (1 << p)
    desc = [0] * model.n
    for v in reversed(range(model.n)):
        if v % 256 == 0 and past(deadline):
            return None
        for c in model.consumers[v]:
            desc[v] |= desc[c] | (1 << c)
    return anc, desc
