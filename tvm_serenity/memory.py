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

:class:`MemoryModel` compiles a graph to integer arrays and bitmasks so that schedulers can
evaluate one step at a time (``step``) with the exact same rule :func:`simulate` uses. The lower
bounds here are valid for every order (and for in-place execution when enabled).
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import Graph, GraphError

__all__ = ["MemoryModel", "Step", "Simulation", "Lifetime", "InPlaceStep", "Liveness",
           "simulate", "validate_order", "liveness", "lower_bound_bytes", "node_bounds",
           "ancestors_descendants", "bits"]


@dataclass(frozen=True)
class Step:
    """What executing one node does to memory."""

    mem_during: int      # bytes live while the node runs
    live_after: int      # bytes live once it finished and its dead inputs were freed
    freed: int           # bitmask of tensors freed at the end of this step
    inplace_input: int   # index of the input the node overwrote in place, or -1


class MemoryModel:
    """A graph compiled for fast, exact memory evaluation.

    Node ``i`` is the i-th node of the graph in stored order; sets of nodes are int bitmasks.
    ``inplace=False`` gives the paper's plain model (no node ever runs in place).
    """

    def __init__(self, graph: Graph, inplace: bool = True):
        self.graph = graph
        self.inplace = inplace
        self.names: list[str] = list(graph.nodes)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        n = len(self.names)
        self.n = n
        self.size: list[int] = [graph.nodes[x].bytes for x in self.names]
        self.preds: list[tuple[int, ...]] = [
            tuple(self.index[s] for s in dict.fromkeys(graph.nodes[x].inputs)) for x in self.names]
        self.pred_mask: list[int] = [sum(1 << p for p in ps) for ps in self.preds]
        self.consumer_mask: list[int] = [0] * n
        for i, ps in enumerate(self.preds):
            for p in ps:
                self.consumer_mask[p] |= 1 << i
        self.output_mask = sum(1 << self.index[o] for o in graph.outputs)
        self.input_mask = sum(1 << i for i, x in enumerate(self.names) if graph.nodes[x].is_input)
        self.op_indices: list[int] = [i for i in range(n) if not (self.input_mask >> i) & 1]
        self.all_mask = (1 << n) - 1
        # W for in-place capable nodes, or -1.
        self.inplace_bytes: list[int] = [-1] * n
        if inplace:
            for i, x in enumerate(self.names):
                spec = graph.nodes[x].inplace
                if spec is None:
                    continue
                u = self.preds[i][0]
                shared = max(self.size[u], self.size[i]) if spec == "alias" else spec
                if shared < self.size[u] + self.size[i]:   # else in place would cost more
                    self.inplace_bytes[i] = shared
        self.initial_live_bytes = sum(self.size[i] for i in range(n) if (self.input_mask >> i) & 1)

    def step(self, done: int, live_before: int, v: int) -> Step:
        """Execute node ``v`` after the nodes in ``done`` (which must contain its inputs).

        An input never consumed by anyone (and no output) is freed at the first step.
        """
        after = done | (1 << v)
        freed = 0
        for p in self.preds[v]:
            if not (self.consumer_mask[p] & ~after) and not (self.output_mask >> p) & 1:
                freed |= 1 << p
        if done == self.input_mask:
            dangling = self.input_mask & ~self.output_mask
            for p in bits(dangling):
                if not self.consumer_mask[p]:
                    freed |= 1 << p
        mem_during = live_before + self.size[v]
        inplace_input = -1
        ws = self.inplace_bytes[v]
        if ws >= 0:
            u = self.preds[v][0]
            if (freed >> u) & 1:
                inplace_input = u
                mem_during = live_before - self.size[u] + ws
        if not self.consumer_mask[v] and not (self.output_mask >> v) & 1:
            freed |= 1 << v
        live_after = live_before + self.size[v] - sum(self.size[p] for p in bits(freed))
        return Step(mem_during, live_after, freed, inplace_input)

    def is_ready(self, done: int, v: int) -> bool:
        return not (done >> v) & 1 and (self.pred_mask[v] & done) == self.pred_mask[v]

    def ready(self, done: int) -> list[int]:
        """Unscheduled nodes whose inputs are all in ``done``, in stored order."""
        return [v for v in self.op_indices if self.is_ready(done, v)]

    def mask_of(self, names) -> int:
        return sum(1 << self.index[x] for x in names)

    def names_of(self, mask: int) -> list[str]:
        return [self.names[i] for i in bits(mask)]


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
    missing = [n for n in graph.op_names if n not in seen]
    if missing:
        raise GraphError(f"order: node '{missing[0]}' is missing ({len(missing)} missing)")


def simulate(graph: Graph, order, inplace: bool = True,
             model: MemoryModel | None = None) -> Simulation:
    """Run the memory model over ``order`` (validated first)."""
    validate_order(graph, order)
    model = model or MemoryModel(graph, inplace)
    done, live = model.input_mask, model.initial_live_bytes
    live_set = model.input_mask
    step_bytes, live_after, inplace_nodes = [], [], []
    peak, peak_step, live_at_peak = -1, 0, ()
    for k, name in enumerate(order):
        v = model.index[name]
        st = model.step(done, live, v)
        occupying = live_set | (1 << v)
        if st.mem_during > peak:
            peak, peak_step, live_at_peak = st.mem_during, k, tuple(model.names_of(occupying))
        if st.inplace_input >= 0:
            inplace_nodes.append(name)
        step_bytes.append(st.mem_during)
        live_after.append(st.live_after)
        done |= 1 << v
        live = st.live_after
        live_set = occupying & ~st.freed
    return Simulation(tuple(order), tuple(step_bytes), tuple(live_after), peak, peak_step,
                      live_at_peak, tuple(inplace_nodes))


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
    model = MemoryModel(graph, inplace)
    sim = simulate(graph, order, inplace, model)
    last = len(order) - 1
    start = {n: 0 for n in graph.input_names}
    end: dict[str, int] = {}
    pairs = []
    done, live = model.input_mask, model.initial_live_bytes
    for k, name in enumerate(order):
        v = model.index[name]
        start[name] = k
        st = model.step(done, live, v)
        for p in bits(st.freed):
            end[model.names[p]] = k
        if st.inplace_input >= 0:
            pairs.append(InPlaceStep(k, model.names[st.inplace_input], name,
                                     model.inplace_bytes[v]))
        done |= 1 << v
        live = st.live_after
    lifetimes = {n: Lifetime(n, graph.nodes[n].bytes, start[n], end.get(n, last))
                 for n in graph.nodes}
    return Liveness(tuple(order), lifetimes, tuple(pairs), sim.peak_bytes)


# ------------------------------------------------------------------------------ lower bounds
def node_bounds(graph: Graph, inplace: bool = True) -> dict[str, int]:
    """For every non-input node ``v``, bytes that must be live while ``v`` runs in ANY order.

    That is ``v``'s output and inputs, plus every tensor produced before ``v`` necessarily (by
    an ancestor, or a graph input) and needed after ``v`` necessarily (by a descendant, or as a
    graph output). If ``v`` may run in place (no descendant still needs its first input), the
    in-place saving is subtracted. The max over nodes is a cut-based lower bound on the peak.
    """
    model = MemoryModel(graph, inplace)
    n = model.n
    _, anc, desc = ancestors_descendants(model)
    ops_mask = model.all_mask & ~model.input_mask
    # crossing[v]: tensors that are live while v runs in every order, found per tensor t as
    # the set of nodes v that t must cross (t produced before v, needed after v).
    crossing = [0] * n
    for t in range(n):
        needed_before = 0
        for c in bits(model.consumer_mask[t]):
            needed_before |= anc[c]
        produced_before = ops_mask if (model.input_mask >> t) & 1 else desc[t]
        if (model.output_mask >> t) & 1:
            needed_before = ops_mask
        for v in bits(produced_before & needed_before & ops_mask):
            crossing[v] |= 1 << t
    bounds = {}
    for v in model.op_indices:
        must_live = crossing[v] | model.pred_mask[v] | (1 << v)
        total = sum(model.size[t] for t in bits(must_live))
        ws = model.inplace_bytes[v]
        if ws >= 0:
            u = model.preds[v][0]
            if not (model.consumer_mask[u] & desc[v]) and not (model.output_mask >> u) & 1:
                total -= model.size[u] + model.size[v] - ws
        bounds[model.names[v]] = total
    return bounds


def lower_bound_bytes(graph: Graph, inplace: bool = True) -> int:
    """A lower bound on the optimal liveness peak over all orders.

    The max of: the per-node cut bounds (:func:`node_bounds`), all graph inputs together (live
    at the first step), all graph outputs together (live at the last step).
    """
    model = MemoryModel(graph, inplace)
    inputs = model.initial_live_bytes
    outputs = sum(model.size[i] for i in bits(model.output_mask))
    return max([inputs, outputs, *node_bounds(graph, inplace).values()])


def ancestors_descendants(model: MemoryModel) -> tuple[list[int], list[int], list[int]]:
    """(a topological order, ancestor masks, descendant masks) of every node of ``model``."""
    indegree = [len(ps) for ps in model.preds]
    ready = [i for i in range(model.n) if indegree[i] == 0]
    topo = []
    while ready:
        v = ready.pop()
        topo.append(v)
        for c in bits(model.consumer_mask[v]):
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    anc = [0] * model.n
    for v in topo:
        for p in model.preds[v]:
            anc[v] |= anc[p] | (1 << p)
    desc = [0] * model.n
    for v in reversed(topo):
        for c in bits(model.consumer_mask[v]):
            desc[v] |= desc[c] | (1 << c)
    return topo, anc, desc
