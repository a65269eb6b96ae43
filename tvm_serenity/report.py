"""Reports people can look at: memory over time, the arena map, per-layer RiP savings.

:func:`write_report` renders, into one directory, three PNGs (matplotlib, headless) and a
self-contained ``report.html`` (the same PNGs embedded as data URIs, plus the summary table):

* ``memory.png``: bytes live at every step (the memory model's ``mem_during``) for each order
  given, e.g. TFLite's stored order against ours, with the SRAM budget as a line;
* ``arena.png``: the arena map of a plan: one rectangle per tensor, steps on x (from its
  producer's step to its last consumer's), addresses on y; in-place pairs highlighted;
* ``rip.png``: per in-place capable layer, dual-buffer bytes (input + output) against its
  in-place workspace, marking the layers that ran in place in the chosen order.

Every figure is computed by :mod:`tvm_serenity.memory` and the plan's own offsets; the
returned :class:`Report` keeps the plotted series so tests can check what was drawn.
"""

from __future__ import annotations

import base64
import html
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .builddir import absolute
from .errors import SerenityError
from .graph import Graph
from .memory import liveness, simulate
from .text import counted

__all__ = ["Report", "LayerSaving", "layer_savings", "write_report", "write_compiled_report",
           "write_relax_report", "REPORT_DIR"]

REPORT_DIR = "report"


@dataclass(frozen=True)
class LayerSaving:
    name: str
    op: str
    dual_buffer_bytes: int      # input + output, disjoint
    inplace_bytes: int          # the shared region (RiP workspace or exact alias)
    ran_inplace: bool           # did it run in place in the order reported

    @property
    def saved_bytes(self) -> int:
        return self.dual_buffer_bytes - self.inplace_bytes


def layer_savings(graph: Graph, order) -> list[LayerSaving]:
    """Every in-place capable node of ``graph`` and what in-place execution saves on it."""
    ran = set(simulate(graph, order).inplace_nodes)
    out = []
    for name in order:
        node = graph.nodes[name]
        if node.inplace is None:
            continue
        n_in = graph.nodes[node.inputs[0]].bytes
        shared = max(n_in, node.bytes) if node.inplace == "alias" else node.inplace
        out.append(LayerSaving(name, node.op, n_in + node.bytes, min(shared, n_in + node.bytes),
                               name in ran))
    return out


@dataclass
class Report:
    directory: Path
    html: Path
    images: dict[str, Path]
    # what was plotted: label -> per-step live bytes; the arena's rectangles
    memory_series: dict[str, list[int]] = field(default_factory=dict)
    arena_rectangles: list[tuple[str, int, int, int, int]] = field(default_factory=list)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plot_memory(path: Path, graph: Graph, orders: dict[str, tuple],
                 budget_bytes: int | None) -> dict[str, list[int]]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    series = {}
    for label, (order, inplace, *own) in orders.items():
        series[label] = list(simulate(own[0] if own else graph, order, inplace).step_bytes)
    # orders of different graphs (a patch plan's has many more steps): x is the progress
    same = len({len(steps) for steps in series.values()}) == 1
    for label, steps in series.items():
        xs = range(len(steps)) if same else [100 * i / max(len(steps) - 1, 1)
                                             for i in range(len(steps))]
        ax.step(xs, [s / 1024 for s in steps], where="mid",
                label=f"{label} (peak {max(steps) / 1024:,.1f} KiB, {len(steps)} steps)")
    if budget_bytes:
        ax.axhline(budget_bytes / 1024, color="red", linestyle="--",
                   label=f"SRAM budget {budget_bytes / 1024:,.0f} KiB")
    ax.set_xlabel("step (operator executed)" if same else "progress through the order (%)")
    ax.set_ylabel("live activation memory (KiB)")
    ax.set_title(f"{graph.name}: memory over time")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return series


def _plot_arena(path: Path, graph: Graph, order: list[str], offsets: dict[str, int],
                arena_bytes: int, planner: str, inplace: bool):
    plt = _pyplot()
    from matplotlib.patches import Rectangle
    live = liveness(graph, order, inplace)
    # pairs the plan really laid out in place: input and output share addresses
    pair_tensors = set()
    for p in live.inplace:
        if p.input not in offsets or p.output not in offsets:     # not both in the arena
            continue
        a, b = offsets[p.input], offsets[p.output]
        if a < b + graph.nodes[p.output].bytes and b < a + graph.nodes[p.input].bytes:
            pair_tensors |= {p.input, p.output}
    fig, ax = plt.subplots(figsize=(9, 5))
    rects = []
    for name, lt in live.lifetimes.items():
        if name not in offsets:         # not in the arena (e.g. a Relax function's result)
            continue
        x0, width = lt.start, lt.end - lt.start + 1
        y0, height = offsets[name], lt.bytes
        rects.append((name, x0, width, y0, height))
        paired = name in pair_tensors
        ax.add_patch(Rectangle((x0 - 0.45, y0 / 1024), width - 0.1, height / 1024,
                               facecolor="tab:orange" if paired else "tab:blue", alpha=0.55,
                               edgecolor="black", linewidth=0.4, hatch="//" if paired else None))
    ax.set_xlim(-1, max(live.num_steps, 1))
    ax.set_ylim(0, max(arena_bytes, 1) / 1024 * 1.05)
    ax.axhline(arena_bytes / 1024, color="black", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("arena address (KiB)")
    ax.set_title(f"arena map: {arena_bytes:,} B ({planner}); hatched = in-place pairs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return rects


def _plot_patches(path: Path, patch: dict) -> None:
    """The patch plan: the input regions the first segment's patches read (halos overlap;
    cached strips read each row once), then each segment's output in its patches or
    strips."""
    plt = _pyplot()
    from matplotlib.patches import Rectangle
    segments = patch["segments"]
    panels = len(segments) + 1
    columns = min(panels, 4)
    rows = -(-panels // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.4 * rows),
                             squeeze=False)
    axes = list(axes.flat)
    colors = plt.get_cmap("tab20")
    first = segments[0]["patches"]
    reads = [p for p in first if p["input_rows"] is not None]
    extents = [(max(p["input_rows"][1] for p in reads), max(p["input_cols"][1] for p in reads),
                f"input regions of '{segments[0]['reads']}'")]
    for k, p in enumerate(first):
        if p["input_rows"] is not None:
            (r0, r1), (c0, c1) = p["input_rows"], p["input_cols"]
            axes[0].add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, facecolor=colors(k % 20),
                                        alpha=0.25, edgecolor=colors(k % 20), linewidth=1.2))
    for n, seg in enumerate(segments, 1):
        ax = axes[n]
        for k, p in enumerate(seg["patches"]):
            (r0, r1), (c0, c1) = p["rows"], p["cols"]
            ax.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, facecolor=colors(k % 20),
                                   alpha=0.6, edgecolor="black", linewidth=0.6))
            if len(seg["patches"]) <= 64:
                ax.text((c0 + c1) / 2, (r0 + r1) / 2, str(k), ha="center", va="center",
                        fontsize=6)
        extents.append((max(p["rows"][1] for p in seg["patches"]),
                        max(p["cols"][1] for p in seg["patches"]),
                        f"{n}: {seg['label']} ({seg['kind']}), "
                        f"{counted(len(seg['layers']), 'layer')} to {seg['layers'][-1]}"))
    for ax, (h, w, title) in zip(axes, extents):
        ax.set_xlim(0, w)
        ax.set_ylim(h, 0)
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=7)
    for ax in axes[panels:]:
        ax.axis("off")
    fig.suptitle(f"{counted(len(segments), 'segment')} over "
                 f"{counted(len(patch['layers']), 'layer')}, "
                 f"+{100 * patch['extra_macs_fraction']:.1f}% MACs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_savings(path: Path, savings: list[LayerSaving]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(savings))
    ax.bar(xs, [s.dual_buffer_bytes / 1024 for s in savings], color="lightgray",
           label="dual buffer (input + output)")
    ax.bar(xs, [s.inplace_bytes / 1024 for s in savings],
           color=["tab:green" if s.ran_inplace else "tab:olive" for s in savings],
           label="in-place workspace (green: ran in place)")
    ax.set_xlabel("in-place capable layer (execution order)")
    ax.set_ylabel("KiB")
    ax.set_title("per-layer memory: dual buffer vs Right In-Place")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out_dir: str | os.PathLike, graph: Graph,
                 orders: dict[str, tuple], offsets: dict[str, int],
                 arena_bytes: int, planner: str, summary: list[tuple[str, str]],
                 budget_bytes: int | None = None, arena_graph: Graph | None = None,
                 patch: dict | None = None) -> Report:
    """Render the report into ``out_dir``. ``orders`` maps a label to ``(order, inplace)`` or
    ``(order, inplace, its graph)`` when it is an order of another graph than ``graph`` (e.g.
    the model before identity rewriting); the baseline first, ours (of ``graph``) last;
    ``offsets``/``arena_bytes``/``planner`` are the arena plan of ours, of ``graph`` in our order
    or, when the arena was planned on another graph (e.g. ArenaPlan's, after TVM's lowering),
    of ``arena_graph`` in its node order. ``patch``: ``plan.json``'s applied patch plan, drawn
    segment by segment."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ours, inplace = list(orders.values())[-1][:2]
    images = {"memory": out / "memory.png", "arena": out / "arena.png"}
    series = _plot_memory(images["memory"], graph, orders, budget_bytes)
    rects = _plot_arena(images["arena"], arena_graph or graph,
                        arena_graph.op_names if arena_graph else ours, offsets, arena_bytes,
                        planner, inplace)
    savings = layer_savings(graph, ours) if inplace else []
    if savings:
        images["rip"] = out / "rip.png"
        _plot_savings(images["rip"], savings)
    if patch:
        images["patches"] = out / "patches.png"
        _plot_patches(images["patches"], patch)
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in summary)
    figures = "".join(
        f'<h2>{title}</h2><img alt="{title}" src="data:image/png;base64,'
        f'{base64.b64encode(images[key].read_bytes()).decode()}">'
        for key, title in (("memory", "Memory over time"), ("patches", "Patch grid"),
                           ("arena", "Arena map"), ("rip", "Per-layer in-place savings"))
        if key in images)
    layer_rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{html.escape(s.op)}</td>"
        f"<td>{s.dual_buffer_bytes:,}</td><td>{s.inplace_bytes:,}</td><td>{s.saved_bytes:,}</td>"
        f"<td>{'yes' if s.ran_inplace else 'no'}</td></tr>" for s in savings)
    layers = ("<h2>Layers</h2><table><tr><th>layer</th><th>op</th><th>dual buffer B</th>"
              "<th>in place B</th><th>saved B</th><th>ran in place</th></tr>"
              f"{layer_rows}</table>") if savings else ""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>tvm-serenity: "
            f"{html.escape(graph.name)}</title><style>body{{font-family:sans-serif;max-width:"
            f"1000px;margin:auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;"
            f"padding:2px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>"
            f"<h1>{html.escape(graph.name)}</h1><table>{rows}</table>{figures}{layers}"
            f"</body></html>")
    html_path = out / "report.html"
    html_path.write_text(page)
    return Report(out, html_path, images, series, rects)


def _fresh_report_dir(build: Path) -> Path:
    """``build/report`` emptied for a new report: it is regenerated from the build, so
    whatever is there (even a file or a link, never followed) is removed first."""
    path = build / REPORT_DIR
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    return path


def write_compiled_report(out_dir: str | os.PathLike) -> Report:
    """(Re)write ``OUT/report`` of a directory written by :func:`tvm_serenity.deploy.
    compile_tflite`, from its ``graph.json`` and ``plan.json``: TFLite's stored order against
    the compiled order, the compiled arena, the per-layer savings."""
    from .deploy import GRAPH_FILE, SOURCE_GRAPH_FILE, load_plan
    from .micro import get_board
    plan = load_plan(out_dir)               # checks the build is intact
    out = absolute(out_dir)
    graph = Graph.load(out / GRAPH_FILE)
    # with identity rewriting, TFLite's order is an order of the graph before it
    source = Graph.load(out / SOURCE_GRAPH_FILE) if (out / SOURCE_GRAPH_FILE).is_file() \
        else graph
    rip = plan["rip"]
    sram = get_board(plan["target"]).sram
    budget = sram.size if sram is not None else None
    stored_peak = simulate(source, source.op_names, inplace=False).peak_bytes
    summary = [("model", plan["model"]), ("target", plan["target"]),
               ("kernels", "Right In-Place" if rip else "dual buffer"),
               ("schedule", f"{plan['schedule']['method']} (proven optimal: "
                            f"{plan['schedule']['optimal']})"),
               ("TFLite order, dual buffer: liveness peak", f"{stored_peak:,} B"),
               ("liveness peak", f"{plan['liveness_peak_bytes']:,} B"),
               ("lower bound (all orders)", f"{plan['schedule']['lower_bound_bytes']:,} B"),
               ("arena", f"{plan['arena_bytes']:,} B ({plan['planner']}, "
                         f"{plan['plan_status']})"),
               ("kernel scratch", f"{plan['scratch_bytes']:,} B"),
               ("in-place saving", f"{plan['inplace_saved_bytes']:,} B")]
    fit = plan.get("fit")
    if fit:
        summary.append(("SRAM total", f"{fit['total_bytes']:,} B of {fit['sram_bytes']:,} B: "
                                      f"{'fits' if fit['fits'] else 'does not fit'}"))
    orders = {"TFLite order, dual buffer": (source.op_names, False, source)}
    patch = plan.get("patch") or {}
    if patch.get("applied"):
        orders["tvm-serenity without patches"] = (patch["unpatched_order"], rip, source)
        kinds = ", ".join(f"{seg['label']} ({seg['kind']})" for seg in patch["segments"])
        summary.append(("patches", f"{kinds} over {len(patch['layers'])} layers, peak "
                                   f"{patch['peak_unpatched_bytes']:,} B unpatched, "
                                   f"{patch['peak_bytes']:,} B input resident, "
                                   f"{patch['peak_streamed_bytes']:,} B input streamed"))
    orders["tvm-serenity"] = (plan["order"], rip or bool(patch.get("applied")))
    return write_report(_fresh_report_dir(out), graph, orders, plan["offsets"],
                        plan["arena_bytes"], plan["planner"], summary, budget_bytes=budget,
                        patch=patch if patch.get("applied") else None)


def write_relax_report(out_dir: str | os.PathLike) -> Report:
    """(Re)write ``OUT/report`` of a directory written by :func:`tvm_serenity.relax_deploy.
    compile_relax`, from its ``relax.json``: the main dataflow block in the frontend's order
    against MemoryAwareSchedule's, and ArenaPlan's arena map."""
    from .relax_deploy import load_relax_report
    r = load_relax_report(out_dir)          # checks the build is intact
    out = absolute(out_dir)
    passes = r["passes"]
    blocks = [b for b in passes["schedule"]["blocks"]
              if b["function"] == "main" and not b.get("skipped") and b.get("graph")]
    arenas = [f for f in passes["arena"]["functions"] if f["function"] == "main"]
    if not blocks or not arenas:
        raise SerenityError(f"'{out}': relax.json has no scheduled block or arena of main to "
                            "report")
    block, arena = max(blocks, key=lambda b: b["bindings"]), arenas[0]
    block_graph = Graph.from_json(block["graph"])
    graph = Graph(block_graph.nodes.values(), block_graph.outputs, r["name"])
    inplace = passes["schedule"]["inplace"]
    rewrite = passes.get("rewrite") or {"applied": 0}
    summary = [("model", r["model"]), ("target", "llvm (Relax VM)"),
               ("identity rewrites kept", str(rewrite["applied"])),
               ("schedule", f"{passes['schedule']['method']} (proven optimal: "
                            f"{block['optimal']})"),
               ("frontend order: peak", f"{block['peak_before']:,} B"),
               ("peak", f"{block['peak_after']:,} B"),
               ("lower bound (all orders)", f"{block['lower_bound']:,} B"),
               ("arena", f"{arena['arena_bytes']:,} B ({arena['planner']}, {arena['status']})"),
               ("TVM StaticPlanBlockMemory, same module", f"{arena['static_plan_bytes']:,} B")]
    return write_report(_fresh_report_dir(out), graph,
                        {"frontend order": (graph.op_names, inplace),
                         "tvm-serenity": (block["order"], inplace)},
                        arena["offsets"], arena["arena_bytes"], arena["planner"], summary,
                        arena_graph=Graph.from_json(arena["graph"]))
