"""One deadline for every phase, wrong time limits refused, and the near-linear heuristics
checked against their quadratic definitions (issue #20)."""

import json
import math
import random
import subprocess
import sys
import time
from collections import deque

import pytest

from graphgen import all_topological_orders, random_graph
from test_schedule import wide_graph
from tvm_serenity.alloc import PlanError, plan_arena, verify_plan
from tvm_serenity.alloc.heuristics import plan_bestfit, plan_greedy
from tvm_serenity.alloc.plan import ArenaPlan, padded
from tvm_serenity.errors import SerenityError
from tvm_serenity.graph import Graph, Node
from tvm_serenity.memory import (EXACT_BOUNDS_MAX_NODES, Execution, MemoryModel, liveness,
                                 lower_bound_bytes, node_bounds, simulate)
from tvm_serenity.rewrite import rewrite_graph
from tvm_serenity.schedule import (DEFAULT_TIME_LIMIT, METHODS, Deadline, ScheduleError,
                                   TimeLimitError, schedule)
from tvm_serenity.schedule.divide import cut_nodes
from tvm_serenity.schedule.dp import greedy_order

BAD_LIMITS = [-1, -1e-9, math.nan, math.inf, -math.inf, "2", True]


# ------------------------------------------------------------------------------ Deadline
def test_deadline_shares_never_end_after_their_parent():
    d = Deadline(10.0)
    assert 9.0 < d.remaining() <= 10.0 and not d.expired()
    half = d.share(0.5)
    assert 4.0 < half.remaining() <= 5.0 and half.end <= d.end
    assert d.share(3.0).end == d.end                       # a share cannot outlive it
    assert Deadline.of(d) is d and Deadline.of(half) is half
    assert DEFAULT_TIME_LIMIT - 1 < Deadline.of(None).remaining() <= DEFAULT_TIME_LIMIT
    zero = Deadline(0)
    time.sleep(0.001)
    assert zero.expired() and zero.remaining() == 0.0 and zero.share(0.5).expired()


@pytest.mark.parametrize("bad", BAD_LIMITS)
def test_bad_time_limits_are_refused_everywhere_with_one_line(bad):
    graph = wide_graph(4)
    calls = [lambda: Deadline(bad), lambda: schedule(graph, "serenity", time_limit=bad),
             lambda: plan_arena(graph, graph.op_names, time_limit=bad),
             lambda: rewrite_graph(graph, time_limit=bad)]
    for call in calls:
        with pytest.raises(TimeLimitError, match=r"time_limit must be a (finite )?number of "
                                                 r"seconds") as info:
            call()
        assert isinstance(info.value, SerenityError) and "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="nope"), r"unknown scheduling method 'nope'"),
    (dict(method=3), r"unknown scheduling method 3"),
    (dict(method="serenity", inplace="yes"), r"inplace must be True or False"),
    (dict(method="random", seed=1.5), r"seed must be an integer"),
    (dict(method="greedy", samples=3), r"method 'greedy': got an unexpected keyword"),
])
def test_schedule_refuses_wrong_arguments(kwargs, message):
    with pytest.raises(ScheduleError, match=message):
        schedule(wide_graph(3), **kwargs)
    with pytest.raises(SerenityError, match="graph must be a Graph, got dict"):
        schedule({"nodes": []})


@pytest.mark.parametrize("kwargs, message", [
    (dict(graph={}), r"graph must be a Graph, got dict"),
    (dict(order="a0"), r"order must be a list of node names, got str"),
    (dict(planner=None), r"unknown arena planner None"),
    (dict(alignment=1 << 17), r"alignment must be a positive integer at most 65536"),
    (dict(inplace=1), r"inplace must be True or False"),
])
def test_plan_arena_refuses_wrong_arguments(kwargs, message):
    graph = wide_graph(3)
    args = dict(graph=graph, order=graph.op_names) | kwargs
    with pytest.raises(PlanError, match=message):
        plan_arena(**args)


# ---------------------------------------------------------------------- expired deadlines
@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_expired_deadline_still_gives_a_valid_order(method):
    graph = wide_graph(30)
    result = schedule(graph, method, time_limit=0)
    assert result.peak_bytes == simulate(graph, result.order).peak_bytes
    assert result.lower_bound_bytes <= result.peak_bytes
    if not result.optimal:
        assert 0 < result.gap < 1


def test_serenity_past_its_deadline_reports_the_gap():
    graph = wide_graph(30)
    result = schedule(graph, "serenity", time_limit=Deadline(0))
    assert not result.optimal and result.details["timed_out"] and 0 < result.gap < 1


def test_plan_arena_past_its_deadline_falls_back_to_the_verified_warm_start():
    graph = random_graph(random.Random(5), 40, 2)
    order = schedule(graph, "greedy").order
    plan = plan_arena(graph, order, "optimal", time_limit=0)
    live = liveness(graph, order)
    verify_plan(graph, live, plan)
    greedy = plan_greedy(graph, live)
    assert plan.arena_bytes <= greedy.arena_bytes
    assert plan.status in ("bound", "time_limit")
    assert plan.optimal == (plan.arena_bytes == plan.lower_bound_bytes)
    assert plan_bestfit(graph, live, 1, deadline=time.perf_counter() - 1) is None


def test_rewrite_search_stops_trying_at_its_deadline():
    cell = Graph([Node("x", "input", (), 64), Node("a", "conv2d", ("x",), 64),
                  Node("b", "conv2d", ("x",), 64), Node("c", "concat", ("a", "b"), 128),
                  Node("r", "relu", ("c",), 128, inplace="alias"),
                  Node("y", "conv2d", ("r",), 32)], ["y"])
    result = rewrite_graph(cell, time_limit=0)
    assert result.trials == [] and result.graph is cell
    assert result.peak_after == simulate(cell, result.schedule.order).peak_bytes


# ------------------------------------------------------ near-linear code vs its definitions
def reference_greedy(graph, inplace):
    """The definition: scan every ready node at every step (quadratic)."""
    model = MemoryModel(graph, inplace)
    done, live, order = model.input_mask, model.initial_live_bytes, []
    for _ in model.op_indices:
        v, st = min(((v, model.step(done, live, v)) for v in model.ready(done)),
                    key=lambda m: (m[1].mem_during, m[1].live_after))
        order.append(model.names[v])
        done |= 1 << v
        live = st.live_after
    return order


def test_greedy_heap_picks_what_the_full_scan_picks():
    for seed in range(40):
        graph = random_graph(random.Random(seed), random.Random(seed).randint(2, 60), 3)
        for inplace in (True, False):
            assert greedy_order(graph, MemoryModel(graph, inplace)) == \
                reference_greedy(graph, inplace), seed
    assert greedy_order(wide_graph(5), deadline=time.perf_counter() - 1) is None


def test_execution_counters_match_the_bitmask_model():
    rng = random.Random(0)
    for seed in range(30):
        graph = random_graph(random.Random(seed), 12, 2)
        for inplace in (True, False):
            model = MemoryModel(graph, inplace)
            order = [model.index[n] for n in rng.choice(list(_some_orders(graph)))]
            exe, done, live = Execution(model), model.input_mask, model.initial_live_bytes
            for v in order:
                expected = model.step(done, live, v)
                assert exe.peek(v) == expected and exe.run(v) == expected
                done, live = done | (1 << v), expected.live_after


def _some_orders(graph, limit=20):
    for k, order in enumerate(all_topological_orders(graph)):
        if k == limit:
            return
        yield order


def reachable(graph, start):
    seen, queue = set(), deque([start])
    while queue:
        for c in graph.consumers[queue.popleft()]:
            if c not in seen:
                seen.add(c)
                queue.append(c)
    return seen


def test_linear_cuts_are_the_nodes_comparable_with_every_op():
    for seed in range(60):
        rng = random.Random(seed)
        graph = random_graph(rng, rng.randint(1, 25), rng.randint(1, 3), max_fan_in=2)
        ops = graph.op_names
        desc = {n: reachable(graph, n) for n in ops}
        expected = [v for v in ops
                    if all(u == v or u in desc[v] or v in desc[u] for u in ops)]
        model = MemoryModel(graph)
        assert [model.names[v] for v in cut_nodes(model)] == expected, seed


def brute_force_optimum(graph, inplace):
    return min(simulate(graph, o, inplace).peak_bytes for o in all_topological_orders(graph))


def test_local_bounds_past_the_deadline_are_weaker_but_valid():
    for seed in range(25):
        graph = random_graph(random.Random(seed), 7, 2)
        for inplace in (True, False):
            exact = node_bounds(graph, inplace)
            local = node_bounds(graph, inplace, deadline=time.perf_counter() - 1)
            assert exact.keys() == local.keys()
            assert all(local[n] <= exact[n] for n in exact), seed
            optimum = brute_force_optimum(graph, inplace)
            assert lower_bound_bytes(graph, inplace, bounds=local) <= \
                lower_bound_bytes(graph, inplace) <= optimum
    assert EXACT_BOUNDS_MAX_NODES >= 10_000


def reference_fit_plans(graph, live, alignment):
    """TFLM's greedy (first fit) and TFLite's best fit by their definition: a scan of every
    placed buffer in offset order (quadratic); plain liveness, no in-place steps."""
    lts = live.lifetimes
    index = {n: i for i, n in enumerate(lts)}

    def run(order, fit):
        placed = []                                     # (offset, seq, size, raw, start, end)
        offsets = {n: 0 for n in lts}
        for name in order:
            lt = lts[name]
            overlapping = [p for p in sorted(placed) if p[4] <= lt.end and lt.start <= p[5]]
            offsets[name] = fit(lt, overlapping)
            placed.append((offsets[name], len(placed), padded(lt.bytes, alignment), lt.bytes,
                           lt.start, lt.end))
        return offsets

    def first_fit(lt, overlapping):
        candidate, size = 0, padded(lt.bytes, alignment)
        for offset, _, psize, *_ in overlapping:
            if offset - candidate >= size:
                break
            candidate = max(candidate, offset + psize)
        return candidate

    def best_fit(lt, overlapping):
        best, best_gap, current = None, None, 0
        for offset, _, _, raw, *_ in overlapping:
            aligned = padded(current, alignment)
            if aligned + lt.bytes <= offset and (best_gap is None or offset - aligned < best_gap):
                best, best_gap = aligned, offset - current
            current = max(current, offset + raw)
        return padded(current, alignment) if best is None else best

    greedy = sorted((n for n in lts if lts[n].bytes > 0),
                    key=lambda n: (-padded(lts[n].bytes, alignment), -index[n]))
    outputs = set(graph.outputs)
    bestfit = sorted((n for n in lts if lts[n].bytes > 0),
                     key=lambda n: (0, index[n]) if lts[n].start == 0 and n in outputs
                     else (1, -lts[n].bytes, lts[n].start, index[n]))
    return run(greedy, first_fit), run(bestfit, best_fit)


def test_time_indexed_fits_are_the_peers_fits():
    for seed in range(12):
        rng = random.Random(seed)
        # Fan-in from any earlier node: lifetimes from one step to the whole run, so both the
        # short buckets and the long list of the index are exercised.
        graph = random_graph(rng, rng.randint(150, 260), 2, inplace_prob=0.0)
        live = liveness(graph, graph.op_names, inplace=False)
        spans = [lt.end - lt.start for lt in live.lifetimes.values()]
        assert min(spans) < 64 <= max(spans)
        for alignment in (1, 16):
            greedy, bestfit = reference_fit_plans(graph, live, alignment)
            assert plan_greedy(graph, live, alignment).offsets == greedy, seed
            assert plan_bestfit(graph, live, alignment).offsets == bestfit, seed


def test_verifier_finds_an_overlap_next_to_a_much_larger_tensor():
    nodes = [Node("x", "input", (), 1000), Node("a", "conv2d", ("x",), 10),
             Node("b", "conv2d", ("a",), 10), Node("y", "add", ("b", "x"), 10)]
    graph = Graph(nodes, ["y"])
    live = liveness(graph, ["a", "b", "y"])
    good = plan_greedy(graph, live)
    verify_plan(graph, live, good)
    bad = ArenaPlan(**{**good.__dict__, "offsets": {**good.offsets, "x": 0, "b": 990,
                                                    "a": 1000, "y": 1010},
                       "arena_bytes": 1020})
    with pytest.raises(PlanError, match=r"tensors 'x' \[0, 1000\) and 'b' \[990, 1000\) "
                                        r"overlap at step 1"):
        verify_plan(graph, live, bad)


# --------------------------------------------------------------------- the fuzz graphs
def chain_json(n):
    nodes = [{"name": "x", "op": "input", "inputs": [], "bytes": 100}]
    for i in range(n):
        nodes.append({"name": f"n{i}", "op": "relu", "inputs": [nodes[-1]["name"]],
                      "bytes": 100 + i % 7})
    return {"name": f"chain{n}", "nodes": nodes, "outputs": [nodes[-1]["name"]]}


@pytest.mark.slow
@pytest.mark.parametrize("make", [lambda: chain_json(10_000),
                                  lambda: random_graph(random.Random(0), 2000, 2).to_json()],
                         ids=["chain10k", "dag2k"])
def test_cli_time_limit_bounds_the_whole_command_on_large_graphs(make, tmp_path):
    obj = make()
    path = tmp_path / "g.json"
    path.write_text(json.dumps(obj))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tvm_serenity.cli", "schedule", str(path),
                           "--time-limit", "2", "--json"], capture_output=True, text=True,
                          timeout=300)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    graph = Graph.from_json(obj)
    assert out["peak_bytes"] == simulate(graph, out["order"]).peak_bytes
    assert out["arena_bytes"] >= out["peak_bytes"]
    assert elapsed < 2 + 120           # generous: start-up on a shared, loaded CI machine
