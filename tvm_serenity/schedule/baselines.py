"""Baseline orders that peers use; all are scored by the one memory model.

* ``stored``: the frontend's order (TensorFlow Lite executes the flatbuffer's operator order);
* ``kahn``: Kahn's algorithm, FIFO queue, ties broken by stored order (breadth-first);
* ``dfs``: the order a recursive evaluator produces: post-order over inputs, starting from the
  graph outputs (then any node nobody reaches), inputs visited in their listed order;
* ``rpo``: reverse post-order of a depth-first walk along consumers from the graph inputs
  (HMCOS's first try);
* ``random``: the best of ``samples`` random topological orders (seeded, reproducible;
  fewer when the deadline passes first).
"""

from __future__ import annotations

import random
from collections import deque

from ..graph import Graph
from ..memory import MemoryModel, simulate
from .stop import past

__all__ = ["stored_order", "kahn_order", "dfs_order", "rpo_order", "random_order",
           "best_random_order"]


def stored_order(graph: Graph) -> list[str]:
    return graph.op_names


def kahn_order(graph: Graph) -> list[str]:
    position = {n: i for i, n in enumerate(graph.nodes)}
    indegree = {n: len(set(node.inputs)) for n, node in graph.nodes.items()}
    queue = deque(n for n in graph.nodes if indegree[n] == 0)
    order = []
    while queue:
        name = queue.popleft()
        if not graph.nodes[name].is_input:
            order.append(name)
        for c in sorted(graph.consumers[name], key=position.__getitem__):
            indegree[c] -= 1
            if indegree[c] == 0:
                queue.append(c)
    return order


def dfs_order(graph: Graph) -> list[str]:
    order: list[str] = []
    visited: set[str] = set()
    roots = list(graph.outputs) + list(reversed(graph.op_names))
    for root in roots:
        if root in visited:
            continue
        # Iterative post-order over inputs (graphs can be deeper than Python's recursion limit).
        stack = [(root, iter(graph.nodes[root].inputs))]
        visited.add(root)
        while stack:
            name, it = stack[-1]
            nxt = next((s for s in it if s not in visited), None)
            if nxt is None:
                stack.pop()
                if not graph.nodes[name].is_input:
                    order.append(name)
            else:
                visited.add(nxt)
                stack.append((nxt, iter(graph.nodes[nxt].inputs)))
    return order


def rpo_order(graph: Graph) -> list[str]:
    post: list[str] = []
    visited: set[str] = set()
    sources = [n for n, node in graph.nodes.items() if not node.inputs]
    for root in sources:
        if root in visited:
            continue
        stack = [(root, iter(graph.consumers[root]))]
        visited.add(root)
        while stack:
            name, it = stack[-1]
            nxt = next((c for c in it if c not in visited), None)
            if nxt is None:
                stack.pop()
                post.append(name)
            else:
                visited.add(nxt)
                stack.append((nxt, iter(graph.consumers[nxt])))
    return [n for n in reversed(post) if not graph.nodes[n].is_input]


def random_order(graph: Graph, rng: random.Random, model: MemoryModel | None = None
                 ) -> list[str]:
    """One uniformly chosen ready node at a time (a random linear extension, not uniform)."""
    model = model or MemoryModel.of(graph, inplace=False)
    missing = [sum(not model.is_input[p] for p in ps) for ps in model.preds]
    ready = [v for v in model.op_indices if missing[v] == 0]
    order = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(model.names[v])
        for c in model.consumers[v]:
            missing[c] -= 1
            if missing[c] == 0:
                ready.append(c)
    return order


def best_random_order(graph: Graph, samples: int = 100, seed: int = 0,
                      inplace: bool = True, deadline: float | None = None) -> list[str]:
    """The lowest-peak of ``samples`` random orders (fewer, at least one, if ``deadline``, a
    ``perf_counter`` value, passes first)."""
    rng = random.Random(seed)
    model = MemoryModel.of(graph, inplace)
    best, best_peak = None, None
    for _ in range(max(1, samples)):
        order = random_order(graph, rng, model)
        peak = simulate(graph, order, inplace, model).peak_bytes
        if best_peak is None or peak < best_peak:
            best, best_peak = order, peak
        if past(deadline):
            break
    return best
