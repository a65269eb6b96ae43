"""The memory model against an independent, interval-based re-statement of docs/serenity.md."""

import random

import pytest
from hypothesis import given, settings

from graphgen import all_topological_orders, graphs, random_graph
from tvm_serenity.graph import Graph, GraphError, Node
from tvm_serenity.memory import (MemoryModel, liveness, lower_bound_bytes, node_bounds,
                                 simulate, validate_order)


def naive_step_bytes(graph: Graph, order, inplace=True):
    """Straight from the spec, no bitmasks: a tensor lives from its producer's step (inputs: the
    first step) to its last consumer's step (outputs: the last; nobody's: its own step)."""
    step_of = {n: k for k, n in enumerate(order)}
    last = len(order) - 1
    start = {n: (0 if graph.nodes[n].is_input else step_of[n]) for n in graph.nodes}
    end = {}
    for n in graph.nodes:
        users = [step_of[c] for c in order if n in graph.nodes[c].inputs]
        if n in graph.outputs:
            end[n] = last
        elif users:
            end[n] = max(users)
        else:
            end[n] = start[n]
    result = []
    for k, v in enumerate(order):
        total = sum(graph.nodes[t].bytes for t in graph.nodes if start[t] <= k <= end[t])
        node = graph.nodes[v]
        if inplace and node.inplace is not None:
            u = node.inputs[0]
            if end[u] == k and u not in graph.outputs:
                region = (max(graph.nodes[u].bytes, node.bytes) if node.inplace == "alias"
                          else node.inplace)
                total += min(0, region - graph.nodes[u].bytes - node.bytes)
        result.append(total)
    return result


@settings(max_examples=300, deadline=None)
@given(graphs(max_ops=8))
def test_simulate_matches_spec_on_every_order(graph):
    best = {True: None, False: None}
    bounds = {flag: node_bounds(graph, flag) for flag in (True, False)}
    model = {flag: MemoryModel(graph, flag) for flag in (True, False)}
    for order in all_topological_orders(graph):
        for flag in (True, False):
            sim = simulate(graph, order, flag, model[flag])
            expected = naive_step_bytes(graph, order, flag)
            assert list(sim.step_bytes) == expected
            assert sim.peak_bytes == max(expected)
            assert sim.step_bytes[sim.peak_step] == sim.peak_bytes
            # the cut bound of each node holds at that node's step in this order
            for k, v in enumerate(order):
                assert expected[k] >= bounds[flag][v], (v, order)
            best[flag] = sim.peak_bytes if best[flag] is None else min(best[flag], sim.peak_bytes)
    for flag in (True, False):
        assert lower_bound_bytes(graph, flag) <= best[flag]
    assert best[True] <= best[False]


@settings(max_examples=100, deadline=None)
@given(graphs(max_ops=10))
def test_liveness_intervals_sum_to_step_bytes(graph):
    order = graph.op_names
    live = liveness(graph, order)
    sim = simulate(graph, order)
    pairs = {p.step: p for p in live.inplace}
    assert all(graph.nodes[p.output].inplace is not None for p in live.inplace)
    for k in range(len(order)):
        total = sum(t.bytes for t in live.lifetimes.values() if t.start <= k <= t.end)
        if k in pairs:
            p = pairs[k]
            total += p.workspace_bytes - graph.nodes[p.input].bytes - graph.nodes[p.output].bytes
            assert live.lifetimes[p.input].end == k and live.lifetimes[p.output].start == k
        assert total == sim.step_bytes[k]
    assert live.peak_bytes == sim.peak_bytes
    assert [p.output for p in live.inplace] == list(sim.inplace_nodes)


def chain(*sizes, inplace=None):
    nodes = [Node("x", "input", (), sizes[0])]
    for i, s in enumerate(sizes[1:]):
        nodes.append(Node(f"v{i}", "conv2d", (nodes[-1].name,), s, inplace=inplace))
    return Graph(nodes, [nodes[-1].name])


def test_worked_example_plain_and_inplace():
    g = chain(100, 200, 50)
    assert simulate(g, ["v0", "v1"], inplace=False).step_bytes == (300, 250)
    g = chain(100, 200, 50, inplace=220)
    sim = simulate(g, ["v0", "v1"])
    assert sim.step_bytes == (220, 220)           # each step: one shared workspace of 220 B
    assert sim.inplace_nodes == ("v0", "v1")
    g = chain(100, 200, 50, inplace=250)          # 250 B saves nothing over 200 + 50
    assert simulate(g, ["v0", "v1"]).inplace_nodes == ("v0",)
    g = chain(100, 200, 50, inplace="alias")
    assert simulate(g, ["v0", "v1"]).step_bytes == (200, 200)


def test_inplace_needs_last_consumer_and_non_output():
    nodes = [Node("x", "input", (), 100), Node("a", "relu", ("x",), 100, inplace="alias"),
             Node("b", "relu", ("x",), 100, inplace="alias"), Node("c", "add", ("a", "b"), 100)]
    g = Graph(nodes, ["c"])
    assert simulate(g, ["a", "b", "c"]).inplace_nodes == ("b",)   # a is not x's last consumer
    assert simulate(g, ["a", "b", "c"]).step_bytes == (200, 200, 300)
    g_out = Graph(nodes, ["c", "x"])
    assert simulate(g_out, ["a", "b", "c"]).inplace_nodes == ()    # x is a graph output


def test_unconsumed_tensors_are_freed():
    nodes = [Node("x", "input", (), 10), Node("dead_in", "input", (), 1000),
             Node("a", "relu", ("x",), 20), Node("dead", "conv", ("a",), 500),
             Node("b", "relu", ("a",), 30)]
    g = Graph(nodes, ["b"])
    sim = simulate(g, ["a", "dead", "b"])
    assert sim.step_bytes == (1030, 520, 50)


def test_validate_order_errors():
    g = chain(1, 2, 3)
    with pytest.raises(GraphError, match="'v1' runs before its input 'v0'"):
        validate_order(g, ["v1", "v0"])
    with pytest.raises(GraphError, match="'v0' appears twice"):
        validate_order(g, ["v0", "v0", "v1"])
    with pytest.raises(GraphError, match="'v1' is missing"):
        validate_order(g, ["v0"])
    with pytest.raises(GraphError, match="'zz' is not in graph"):
        validate_order(g, ["v0", "zz"])
    with pytest.raises(GraphError, match="'x' is a graph input"):
        validate_order(g, ["x", "v0", "v1"])


def test_cut_bound_sees_tensors_crossing_a_node():
    # x -> a -> b -> c, plus x -> c: x must stay live while a and b run.
    nodes = [Node("x", "input", (), 1000), Node("a", "conv", ("x",), 10),
             Node("b", "conv", ("a",), 10), Node("c", "add", ("b", "x"), 10)]
    g = Graph(nodes, ["c"])
    assert node_bounds(g)["b"] == 1020
    assert lower_bound_bytes(g) == simulate(g, ["a", "b", "c"]).peak_bytes == 1020


def test_lower_bound_is_tight_or_below_on_larger_graphs():
    rng = random.Random(7)
    for _ in range(20):
        g = random_graph(rng, 30, 2)
        assert lower_bound_bytes(g) <= simulate(g, g.op_names).peak_bytes
