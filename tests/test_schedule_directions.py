"""The budgeted decision in each direction, and both together (tvm_serenity.schedule.dp).

Oracles: every topological order scored with ``simulate`` (small graphs), and the textbook
level DP (no bounds, no dominance) on one segment of a larger graph.
"""

import random

import pytest

from graphgen import all_topological_orders, random_graph
from test_schedule import chained_graph
from tvm_serenity.graph import Graph, Node
from tvm_serenity.memory import MemoryModel, mask_of_indices, node_bounds, simulate
from tvm_serenity.schedule.divide import segments
from tvm_serenity.schedule import dp
from tvm_serenity.schedule.dp import (BACKWARD, EXHAUSTED, FORWARD, SOLVED, SearchSpace,
                                      feasible, level_dp)

DIRECTIONS = [(FORWARD,), (BACKWARD,), (FORWARD, BACKWARD)]


def check_decisions(space, optimum, graph=None):
    """feasible(optimum) finds an order within it in every direction, feasible(optimum - 1)
    none, with the optimum as its lower bound."""
    for directions in DIRECTIONS:
        yes = feasible(space, optimum, directions=directions)
        assert yes.status == SOLVED, directions
        assert sorted(yes.order) == [v for v in range(space.model.n)
                                     if (space.segment >> v) & 1]
        assert yes.peak == space.peak_of(yes.order) <= optimum
        if graph is not None:
            assert simulate(graph, space.order_names(yes.order), space.model.inplace
                            ).peak_bytes == yes.peak
        no = feasible(space, optimum - 1, directions=directions)
        assert (no.status, no.lower_bound) == (EXHAUSTED, optimum), directions


@pytest.mark.parametrize("chunk", range(4))
def test_each_direction_decides_exactly_on_random_dags(chunk):
    """Random DAGs with in-place nodes (often sharing their first input with other readers, the
    case the backward dominance rule must leave alone), extra outputs and unread inputs."""
    for seed in range(chunk * 60, chunk * 60 + 60):
        rng = random.Random(77_000 + seed)
        graph = random_graph(rng, rng.randint(2, 8), rng.randint(1, 3),
                             inplace_prob=0.6 if seed % 2 else 0.3)
        for inplace in (True, False):
            optimum = min(simulate(graph, order, inplace).peak_bytes
                          for order in all_topological_orders(graph))
            check_decisions(SearchSpace(MemoryModel(graph, inplace)), optimum, graph)


def test_each_direction_decides_exactly_on_segments():
    """Segments start from a non-empty prefix with tensors live across them."""
    searched = 0
    for seed in range(40):
        rng = random.Random(seed)
        graph = chained_graph(rng, rng.randint(2, 3))
        for inplace in (True, False):
            model = MemoryModel(graph, inplace)
            bounds = node_bounds(graph, inplace)
            live = simulate(graph, graph.op_names, inplace, model).live_after_bytes
            offset = 0
            for part in segments(model):
                start_live = live[offset - 1] if offset else model.initial_live_bytes
                before = model.input_mask | ((1 << part[0]) - 1)
                offset += len(part)
                if len(part) < 2:
                    continue
                space = SearchSpace(model, mask_of_indices(part), (before, start_live), bounds)
                optimum = level_dp(space, prune=False).peak
                check_decisions(space, optimum)
                searched += 1
    assert searched >= 100


def shared_input_graph(first_input_bytes):
    """u is the first input of an in-place ADD ``x`` and is also read by ``v`` (larger than u
    or not): unrunning v at the end of a prefix holding x moves v behind x, which then loses
    its in-place step; the backward rule counts on u's bytes in v's increment to cover it."""
    nodes = [Node("in", "input", (), 10), Node("u", "conv", ("in",), first_input_bytes),
             Node("w", "conv", ("in",), 30),
             Node("x", "add", ("u", "w"), 40, inplace="alias"),
             Node("v", "conv", ("u",), 25), Node("y", "add", ("x", "v"), 40)]
    return Graph(nodes, ["y"], "shared")


@pytest.mark.parametrize("first_input_bytes", [5, 25, 40, 60])
def test_backward_dominance_keeps_in_place_steps(first_input_bytes):
    graph = shared_input_graph(first_input_bytes)
    for inplace in (True, False):
        optimum = min(simulate(graph, order, inplace).peak_bytes
                      for order in all_topological_orders(graph))
        check_decisions(SearchSpace(MemoryModel(graph, inplace)), optimum, graph)


def test_directions_meet(monkeypatch):
    """Taking turns every expansion, the two searches meet in the middle of a chain of
    diamonds: the order is the forward prefix then the backward suffix, and it is valid."""
    nodes, prev = [Node("x", "input", (), 8)], "x"
    for i in range(30):
        nodes += [Node(f"a{i}", "conv", (prev,), 8 + i % 5), Node(f"b{i}", "conv", (prev,), 9),
                  Node(f"j{i}", "add", (f"a{i}", f"b{i}"), 8)]
        prev = f"j{i}"
    graph = Graph(nodes, [prev], "diamonds")
    answers = []
    run = dp._Budgeted.run

    def recorded(self, other):
        answer = yield from run(self, other)
        answers.append(answer)
        return answer

    monkeypatch.setattr(dp, "_CLOCK_EVERY", 1)
    monkeypatch.setattr(dp._Budgeted, "run", recorded)
    for inplace in (True, False):
        space = SearchSpace(MemoryModel(graph, inplace))
        optimum = min(simulate(graph, order, inplace).peak_bytes
                      for order in [graph.op_names, dp.greedy_order(graph)])
        found = feasible(space, optimum)
        assert found.status == SOLVED and answers[-1] == dp.MEET
        order = space.order_names(found.order)
        assert simulate(graph, order, inplace).peak_bytes == found.peak <= optimum
