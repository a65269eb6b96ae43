"""The scaling part of benchmarks/schedule_bench.py on its smallest cells (fast)."""

import networkx as nx
import pytest

from benchmarks import schedule_bench
from tvm_serenity.schedule import schedule
from tvm_serenity.zoo.randwire import randwire_stage_graph, ws_dag


@pytest.mark.parametrize("nodes, k", [(16, 4), (20, 6)])
def test_randwire_generator_sizes(nodes, k):
    preds = ws_dag(3, nodes, k)
    assert sorted(preds) == list(range(nodes))
    edges = sum(len(p) for p in preds.values())
    assert edges == nx.watts_strogatz_graph(nodes, k, 0.75, seed=3).number_of_edges()
    assert all(u < v for v, ps in preds.items() for u in ps)          # oriented: a DAG
    graph = randwire_stage_graph("g", 8, 4, 3, nodes, k)
    ops = [graph.nodes[n].op for n in graph.op_names]
    assert ops.count("depthwise_conv2d") == ops.count("conv2d") == nodes
    assert randwire_stage_graph("g", 8, 4, 3).nodes.keys() == \
        randwire_stage_graph("g", 8, 4, 3, 32, 4).nodes.keys()       # the paper's defaults


def test_scaling_row_has_every_exact_method_agree():
    graph = randwire_stage_graph("rw16", 32, 40, 0, 16)
    limits = {m: 20.0 for m in schedule_bench.EXACT}
    row = schedule_bench.scaling_row("WS(16, 4)", graph, limits)
    headers = ["cell", "ops"] + [f"{m} {c}" for m in schedule_bench.EXACT
                                 for c in ("s", "states")]
    cells = dict(zip(headers + ["peak"], row))
    assert row[-1] == f"yes ({len(schedule_bench.EXACT)})"
    textbook = schedule(graph, "textbook")
    assert textbook.optimal
    assert cells["peak"] == f"{textbook.peak_bytes / 1024:,.1f}"
    assert cells["textbook states"] == textbook.details["expanded_states"]
    assert not any(str(cells[f"{m} s"]).startswith(">") for m in schedule_bench.EXACT)


def test_scaling_row_refuses_a_disagreement(monkeypatch):
    graph = randwire_stage_graph("rw16", 32, 40, 0, 16)
    real = schedule_bench.schedule

    def lying(g, method, **kw):
        result = real(g, method, **kw)
        if method == "astar":
            result.peak_bytes += 1
        return result

    monkeypatch.setattr(schedule_bench, "schedule", lying)
    with pytest.raises(schedule_bench.Disagreement, match="disagree"):
        schedule_bench.scaling_row("WS(16, 4)", graph, {m: 20.0 for m in schedule_bench.EXACT})
