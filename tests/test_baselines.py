"""Baseline orders: valid, deterministic, and the textbook traversal on a hand-made graph."""

import random

import pytest

from graphgen import random_graph
from tvm_serenity.graph import Graph, GraphError, Node
from tvm_serenity.memory import simulate, validate_order
from tvm_serenity.schedule import METHODS, baselines, schedule


def diamond():
    #      x
    #    /   \
    #   a     b
    #   |     |
    #   c     |
    #    \   /
    #      d
    nodes = [Node("x", "input", (), 10), Node("a", "conv", ("x",), 50),
             Node("b", "conv", ("x",), 20), Node("c", "conv", ("a",), 5),
             Node("d", "add", ("c", "b"), 5)]
    return Graph(nodes, ["d"])


def test_traversals_on_a_diamond():
    g = diamond()
    assert baselines.stored_order(g) == ["a", "b", "c", "d"]
    assert baselines.kahn_order(g) == ["a", "b", "c", "d"]          # breadth first
    assert baselines.dfs_order(g) == ["a", "c", "b", "d"]           # inputs of d, in order
    assert baselines.rpo_order(g) == ["b", "a", "c", "d"]           # reverse post-order
    # dfs: x+a, x+a+c, x+c+b, c+b+d = 60, 65, 35, 30
    assert simulate(g, baselines.dfs_order(g)).step_bytes == (60, 65, 35, 30)
    # kahn: x+a, x+a+b, a+b+c, c+b+d = 60, 80, 75, 30
    assert simulate(g, baselines.kahn_order(g)).step_bytes == (60, 80, 75, 30)


@pytest.mark.parametrize("method", ["stored", "kahn", "dfs", "rpo", "random"])
def test_every_baseline_is_a_valid_order(method):
    rng = random.Random(11)
    for _ in range(40):
        g = random_graph(rng, rng.randint(1, 60), rng.randint(1, 3))
        r = schedule(g, method)
        validate_order(g, r.order)
        assert r.peak_bytes == simulate(g, r.order).peak_bytes
        assert r.lower_bound_bytes <= r.peak_bytes
        assert r.method == method


def test_best_random_is_best_of_its_samples_and_reproducible():
    g = random_graph(random.Random(5), 25, 2)
    rng = random.Random(9)
    samples = [simulate(g, baselines.random_order(g, rng)).peak_bytes for _ in range(30)]
    best = baselines.best_random_order(g, samples=30, seed=9)
    assert simulate(g, best).peak_bytes == min(samples)
    assert best == baselines.best_random_order(g, samples=30, seed=9)


def test_deep_chain_does_not_hit_recursion_limit():
    nodes = [Node("x", "input", (), 1)] + [
        Node(f"v{i}", "relu", ("x" if i == 0 else f"v{i-1}",), 1) for i in range(5000)]
    g = Graph(nodes, ["v4999"])
    for method in ("dfs", "rpo", "kahn"):
        assert schedule(g, method).order == [f"v{i}" for i in range(5000)]


def test_unknown_method():
    with pytest.raises(GraphError, match="unknown scheduling method 'nope'"):
        schedule(diamond(), "nope")
    assert {"stored", "kahn", "dfs", "rpo", "random"} <= set(METHODS)
