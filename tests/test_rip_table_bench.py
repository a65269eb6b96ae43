"""benchmarks/rip_table_bench.py: Table 3 of the RiP paper with our pipeline (quick rows)."""

from __future__ import annotations

import pytest

from benchmarks import rip_table_bench as bench
from tvm_serenity import zoo
from tvm_serenity.rip import ConvGeometry, brute_force_min_workspace

pytestmark = pytest.mark.skipif("mcunet-256kb-1mb" not in zoo.names(),
                                reason="shared MCUNet configs absent")


def _row(config: str) -> bench.Row:
    paper = next(r for r in bench.PAPER_ROWS if r[1] == config)
    return bench.measure(*paper, time_limit=10.0)


def _geometry(graph, node) -> ConvGeometry:
    _, h, w, c = graph.nodes[node.inputs[0]].shape
    return ConvGeometry((h, w, c), c, tuple(node.attrs["kernel"]), tuple(node.attrs["stride"]),
                        padding=tuple(node.attrs["padding"]), groups=c)


def test_in2_row_is_its_two_tensors_and_the_channel_kind_saves_the_rip_gap():
    """MCUNet-in2: ours is b2/expand's output plus the block input kept for the residual add
    (sizes read off the graph); forcing the depthwise layers back to RiP costs exactly
    b2/dw's RiP gap on top (brute-force workspace, not the closed form)."""
    row = _row("mcunet-256kb-1mb")
    graph = zoo.build("mcunet-256kb-1mb")
    nodes = graph.nodes
    assert row.arena == nodes["b2/expand"].bytes + nodes["b1/project"].bytes == 179_200
    assert row.arena == row.lower_bound == row.paper_rip
    geometry = _geometry(graph, nodes["b2/dw"])
    gap = brute_force_min_workspace(geometry) - geometry.input_elements
    assert row.rip_only_arena == row.arena + gap == 191_008
    assert "b2/expand" in row.peak_step and "b1/project 25,600" in row.peak_step
    # once the order is known only b2/dw, the step at the peak, needs the zero gap: every
    # other depthwise layer gets RiP's S* back, so the one channel buffer is b2/dw's padded
    # input plane
    g = geometry
    plane = (g.in_height + g.padding[0] + g.padding[1]) * (g.in_width + g.padding[2]
                                                           + g.padding[3])
    assert row.channel_layers == 1 and row.channel_buffer == plane and row.scratch >= plane


def test_report_counts_rows_at_and_below_the_paper():
    rows = [_row("mcunet-10fps")]
    below = bench.Row(**{**vars(rows[0]), "paper": "fake", "arena": rows[0].paper_rip - 1})
    text = bench.report(rows + [below], None, quick=True, time_limit=10.0)
    assert "at or below the paper on 2 of 2 rows, strictly below on 1" in text
    # in0 with fusion: b1's fused step holds the block input and b1/dw's output, both read off
    # the graph (the expanded b1/expand never exists)
    nodes = zoo.build("mcunet-10fps").nodes
    fused = nodes["b0/project"].bytes + nodes["b1/dw"].bytes
    assert rows[0].fused_arena == fused == 18_432 and rows[0].fused_layers == 1
    assert "b1/dw (expand_depthwise_conv2d" in rows[0].fused_peak_step
    assert ("| MCUNet-in0 | mcunet-10fps | 46,080 | 36,864 | 3,984 | 36,864 | equal | "
            f"{fused:,} | {(fused - 36_864) / 36_864:+.1%} |") in text
    assert "strictly below on 2; arena + scratch below" in text
    assert "| -0.0% |" in text            # the fake row, one byte below
    total_below = sum(r.arena + r.scratch < r.paper_rip + r.paper_buffer
                      for r in rows + [below])
    assert f"arena + Buffer on {total_below}." in text
    assert "Compiled check" not in text
