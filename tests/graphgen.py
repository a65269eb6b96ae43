"""Random DAGs for property tests, and an exhaustive enumerator of topological orders."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from tvm_serenity.graph import Graph, Node


def random_graph(rng: random.Random, num_ops: int, num_inputs: int = 1,
                 inplace_prob: float = 0.3, max_fan_in: int = 3) -> Graph:
    """A random DAG: ``num_inputs`` inputs, ``num_ops`` ops each reading 1..max_fan_in earlier
    nodes; random sizes; some ops in-place capable; every sink plus a few random nodes are
    outputs."""
    nodes = [Node(f"in{i}", "input", (), rng.randint(1, 64)) for i in range(num_inputs)]
    for k in range(num_ops):
        fan_in = rng.randint(1, min(max_fan_in, len(nodes)))
        inputs = tuple(rng.sample([n.name for n in nodes], fan_in))
        size = rng.randint(0, 64) if rng.random() < 0.05 else rng.randint(1, 64)
        inplace = None
        if rng.random() < inplace_prob:
            first = next(n for n in nodes if n.name == inputs[0])
            inplace = ("alias" if rng.random() < 0.5
                       else max(size, first.bytes) + rng.randint(0, 32))
        nodes.append(Node(f"op{k}", rng.choice(["conv2d", "add", "relu", "concat"]), inputs,
                          size, inplace=inplace))
    consumed = {s for n in nodes for s in n.inputs}
    outputs = [n.name for n in nodes[num_inputs:] if n.name not in consumed]
    for n in nodes[num_inputs:]:
        if n.name not in outputs and rng.random() < 0.1:
            outputs.append(n.name)
    return Graph(nodes, outputs, name=f"random{num_ops}")


@st.composite
def graphs(draw, max_ops: int = 8, max_inputs: int = 2):
    seed = draw(st.integers(0, 2**32 - 1))
    num_ops = draw(st.integers(1, max_ops))
    num_inputs = draw(st.integers(1, max_inputs))
    return random_graph(random.Random(seed), num_ops, num_inputs)


def all_topological_orders(graph: Graph):
    """Every topological order of the non-input nodes (exponential: small graphs only)."""
    ops = graph.op_names
    deps = {n: {s for s in graph.nodes[n].inputs if not graph.nodes[s].is_input} for n in ops}

    def extend(prefix, placed):
        if len(prefix) == len(ops):
            yield list(prefix)
            return
        for n in ops:
            if n not in placed and deps[n] <= placed:
                prefix.append(n)
                placed.add(n)
                yield from extend(prefix, placed)
                placed.discard(n)
                prefix.pop()

    yield from extend([], set())
