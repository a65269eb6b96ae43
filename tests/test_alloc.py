"""Arena planners against the verifier, two independent exact methods (exhaustive search, MILP),
the real TFLite Micro planner, and peer algorithms traced by hand."""

import dataclasses
import itertools
import json
import random
from pathlib import Path

import highspy
import pytest

from graphgen import random_graph
from tvm_serenity.alloc import (PLANNERS, ArenaPlan, Move, PlanError, arena_lower_bound,
                                plan_arena, plan_bestfit, plan_greedy, plan_optimal,
                                verify_plan)
from tvm_serenity.errors import SerenityError
from tvm_serenity.frontend import tflite_to_graph
from tvm_serenity.graph import Graph, GraphError, Node
from tvm_serenity.memory import InPlaceStep, liveness
from tvm_serenity.schedule.baselines import random_order


def padded(n, a):
    return -(-n // a) * a


# ------------------------------------------------------------------------ independent oracle
def exhaustive_arena(live, a):
    """The smallest arena over every placement, by exhaustive search over aligned offsets.

    Independent of the planners: an in-place pair may overlap only with the input at the
    output's offset plus gap (in place) or with both at the same offset (the input right-shifted
    by gap before the step; its copy must then be free at that step)."""
    lts = live.lifetimes
    pad = {n: padded(lt.bytes, a) for n, lt in lts.items()}
    names = sorted((n for n in lts if pad[n]), key=lambda n: (lts[n].start, n))
    pairs = {}
    for p in live.inplace:
        gap = padded(p.workspace_bytes - lts[p.input].bytes, a)
        pairs[frozenset((p.input, p.output))] = (p.step, p.input, p.output, gap)

    def co_live(s, t):
        return lts[s].start <= lts[t].end and lts[t].start <= lts[s].end

    def compatible(s, t, x):
        if not co_live(s, t) or x[s] + pad[s] <= x[t] or x[t] + pad[t] <= x[s]:
            return True
        if frozenset((s, t)) not in pairs:
            return False
        _, u, v, gap = pairs[frozenset((s, t))]
        return x[u] == x[v] + gap or x[v] == x[u]

    def copies_fit(x, arena):
        for k, u, v, gap in pairs.values():
            if x[u] == x[v] + gap or x[v] != x[u]:
                continue                          # in place, or disjoint: no move
            lo, hi = x[u] + gap, x[u] + gap + pad[u]
            if hi > arena or any(t not in (u, v) and lts[t].start <= k <= lts[t].end
                                 and x[t] < hi and lo < x[t] + pad[t] for t in names):
                return False
        return True

    def search(i, x, arena):
        if i == len(names):
            return copies_fit(x, arena)
        t = names[i]
        for off in range(0, arena - pad[t] + 1, a):
            x[t] = off
            if all(compatible(s, t, x) for s in names[:i]) and search(i + 1, x, arena):
                return True
        del x[t]
        return False

    arena = max(pad.values(), default=0)
    while not search(0, {}, arena):
        arena += a
    return arena


def first_fit_over_permutations(live):
    """Plain interval packing (no in-place): first fit over every order of the tensors. Exact:
    in an optimal plan sorted by offset, first fit puts each tensor no higher than the plan
    does (everything before it that overlaps in time ends below the plan's offset)."""
    lts = live.lifetimes
    names = [n for n in lts if lts[n].bytes]
    best = None
    for perm in itertools.permutations(names):
        placed = []
        for t in perm:
            lt, off = lts[t], 0
            for lo, hi, s in sorted(placed):
                if lts[s].start <= lt.end and lt.start <= lts[s].end and lo < off + lt.bytes \
                        and off < hi:
                    off = hi
            placed.append((off, off + lt.bytes, t))
        arena = max((hi for _, hi, _ in placed), default=0)
        best = arena if best is None else min(best, arena)
    return best or 0


def milp_arena(live, a):
    """The smallest arena by a MILP (HiGHS), independent of the CP-SAT model: offsets ``a *
    integer``, one order binary per pair of co-live tensors (big-M); an in-place pair picks
    one of in place / right shift / input below / input above, and a right-shifted input's
    copy avoids every other tensor live at that step."""
    lts = live.lifetimes
    pad = {n: padded(lt.bytes, a) for n, lt in lts.items()}
    names = [n for n in lts if pad[n]]
    total = sum(pad.values())             # tensors back to back: an upper bound on A
    gaps = {p: padded(p.workspace_bytes - lts[p.input].bytes, a) for p in live.inplace}
    big = total + max(gaps.values(), default=0)
    # valid cut: at each step the live tensors need their bytes, a pair at least its union
    load = max(sum(pad[n] for n in names if lts[n].start <= k <= lts[n].end)
               - sum(pad[p.input] + pad[p.output] - max(g + pad[p.input], pad[p.output])
                     for p, g in gaps.items() if p.step == k)
               for k in range(live.num_steps))
    h = highspy.Highs()
    h.silent()
    arena = h.addVariable(lb=load, ub=total)
    x = {t: a * h.addIntegral(lb=0, ub=(total - pad[t]) // a) for t in names}
    for t in names:
        h.addConstr(x[t] + pad[t] <= arena)

    def disjoint(lo1, size1, lo2, size2, slack):
        z = h.addBinary()
        h.addConstr(lo1 + size1 <= lo2 + big * (1 - z) + slack)
        h.addConstr(lo2 + size2 <= lo1 + big * z + slack)

    pairs = {frozenset((p.input, p.output)): p for p in live.inplace}
    for s, t in itertools.combinations(names, 2):
        if (lts[s].start <= lts[t].end and lts[t].start <= lts[s].end
                and frozenset((s, t)) not in pairs):
            disjoint(x[s], pad[s], x[t], pad[t], 0)
    for p, gap in gaps.items():
        u, v, k = p.input, p.output, p.step
        ip, mv, below, above = (h.addBinary() for _ in range(4))
        h.addConstr(ip + mv + below + above == 1)
        h.addConstr(x[u] - x[v] - gap <= big * (1 - ip))
        h.addConstr(x[v] + gap - x[u] <= big * (1 - ip))
        h.addConstr(x[u] - x[v] <= big * (1 - mv))
        h.addConstr(x[v] - x[u] <= big * (1 - mv))
        h.addConstr(x[u] + pad[u] <= x[v] + big * (1 - below))
        h.addConstr(x[v] + pad[v] <= x[u] + big * (1 - above))
        h.addConstr(x[u] + gap + pad[u] <= arena + big * (1 - mv))
        for t in names:
            if t not in (u, v) and lts[t].start <= k <= lts[t].end:
                disjoint(x[u] + gap, pad[u], x[t], pad[t], big * (1 - mv))
    h.minimize(arena)
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return round(h.getObjectiveValue())


def tiny_graph(rng, max_size=4):
    """A random DAG with 1-2 inputs, 2-4 ops, sizes 1..max_size and many in-place nodes whose
    workspace saves something (so the memory model declares them)."""
    nodes = [Node(f"in{i}", "input", (), rng.randint(1, max_size))
             for i in range(rng.randint(1, 2))]
    for k in range(rng.randint(2, 4)):
        inputs = tuple(rng.sample([n.name for n in nodes], rng.randint(1, min(2, len(nodes)))))
        size = rng.randint(1, max_size)
        nu = next(n.bytes for n in nodes if n.name == inputs[0])
        inplace = None
        if rng.random() < 0.6:
            inplace = "alias" if rng.random() < 0.3 else rng.randint(max(nu, size),
                                                                    nu + size - 1)
        nodes.append(Node(f"op{k}", "conv2d", inputs, size, inplace=inplace))
    consumed = {s for n in nodes for s in n.inputs}
    outputs = [n.name for n in nodes if n.name not in consumed and not n.is_input]
    return Graph(nodes, outputs or [nodes[-1].name], name="tiny")


def all_plans(graph, live, alignment, time_limit=10.0):
    plans = {name: fn(graph, live, alignment) for name, fn in PLANNERS.items()
             if name != "optimal"}
    plans["optimal"] = plan_optimal(graph, live, alignment, time_limit=time_limit)
    return plans


# ------------------------------------------------------------------------- property tests
def test_every_planner_is_valid_and_bounded_on_random_graphs():
    rng = random.Random(2024)
    for i in range(160):
        g = random_graph(rng, rng.randint(1, 40), rng.randint(1, 3))
        order = random_order(g, rng)
        alignment = rng.choice([1, 1, 8, 64])
        inplace = rng.random() < 0.8
        live = liveness(g, order, inplace)
        lower = arena_lower_bound(live, alignment)
        if alignment == 1:
            assert lower == live.peak_bytes
        plans = all_plans(g, live, alignment)
        for name, plan in plans.items():
            verify_plan(g, live, plan)
            assert plan.planner == name and plan.alignment == alignment
            assert plan.arena_bytes % alignment == 0
            assert plan.arena_bytes >= lower >= live.peak_bytes, (name, i)
            assert 0.0 <= plan.gap < 1.0
            assert plan.optimal == (plan.status in ("bound", "optimal"))
        assert plans["linear"].arena_bytes == sum(padded(lt.bytes, alignment)
                                                  for lt in live.lifetimes.values())
        best_heuristic = min(p.arena_bytes for n, p in plans.items() if n != "optimal")
        assert plans["optimal"].arena_bytes <= best_heuristic
        if not inplace:
            assert not any(p.inplace or p.moves for p in plans.values())


def test_optimal_equals_exhaustive_search_on_tiny_graphs():
    rng = random.Random(7)
    shared = 0
    for _ in range(150):
        g = tiny_graph(rng)
        order = random_order(g, rng)
        alignment = rng.choice([1, 1, 2])
        live = liveness(g, order, rng.random() < 0.85)
        plan = plan_optimal(g, live, alignment, time_limit=10.0)
        verify_plan(g, live, plan)
        assert plan.optimal
        assert plan.arena_bytes == exhaustive_arena(live, alignment), (g.dumps(), order)
        shared += len(plan.inplace)
    assert shared > 50          # the in-place rule is exercised, not avoided


def test_optimal_equals_milp_where_the_heuristics_fall_short():
    rng = random.Random(17)
    checked = 0
    while checked < 12:
        g = random_graph(rng, rng.randint(5, 14), rng.randint(1, 2))
        live = liveness(g, random_order(g, rng))
        alignment = rng.choice([1, 8])
        plan = plan_optimal(g, live, alignment, time_limit=10.0)
        if "solver" not in plan.details:
            continue                      # a heuristic met the lower bound: nothing to check
        verify_plan(g, live, plan)
        assert plan.optimal and plan.arena_bytes == milp_arena(live, alignment)
        checked += 1


def test_first_fit_over_permutations_is_exact_without_inplace():
    rng = random.Random(11)
    for _ in range(60):
        g = tiny_graph(rng)
        live = liveness(g, random_order(g, rng), inplace=False)
        assert first_fit_over_permutations(live) == exhaustive_arena(live, 1)


def test_a_right_shift_beats_every_plan_without_one():
    # in0 (4 B) -> op0 (2 B, workspace 4: gap 0) -> op1 (3 B, workspace 4: gap 2). Step 0 in
    # place puts op0 where in0 starts; op1 in place would then start 2 B below op0, pushing
    # in0 to [2, 6); op0 and op1 disjoint need 5 B at step 1. Shifting op0 right by 2 before
    # step 1 and writing op1 at 0 needs only 4 B (the liveness peak).
    g = Graph([Node("in0", "input", (), 4), Node("op0", "conv", ("in0",), 2, inplace=4),
               Node("op1", "conv", ("op0",), 3, inplace=4)], ["op1"])
    live = liveness(g, ["op0", "op1"])
    assert exhaustive_arena(live, 1) == live.peak_bytes == 4
    for planner in ("greedy", "bestfit", "optimal"):
        plan = plan_arena(g, ["op0", "op1"], planner)
        assert plan.arena_bytes == 4 and plan.offsets == {"in0": 0, "op0": 0, "op1": 0}
        assert plan.moves == (Move(1, "op0", "op1", 0, 2),)
        assert plan.inplace == live.inplace


SHARED_MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"

#: TFLite Micro's measured head (non-persistent) arena for the shared models (docs/peers.md).
TFLM_HEAD_ARENA = {
    "tinyengine/vww.tflite": 161_472,
    "mcunet/mcunet-320kb-1mb_imagenet.tflite": 416_832,
    "keras/mobilenet_v1_025_128.tflite": 131_072,
    "keras/mobilenet_v2_035_96.tflite": 138_240,
    "keras/mobilenet_v3_small_075_96.tflite": 73_728,
    "keras/darts_v2_normal_cifar_32x32_C36.tflite": 442_368,
    "keras/darts_v2_normal_imagenet_28x28_C48.tflite": 526_848,
    "keras/randwire_cifar100_C78_cellA.tflite": 798_720,
}


@pytest.mark.skipif(not SHARED_MODELS.is_dir(), reason="shared models folder absent")
def test_greedy_reproduces_tflite_micro_on_real_models():
    # flatbuffer order, no PAD folding, no in-place, TFLM's 16-byte buffer alignment
    for path, head_arena in TFLM_HEAD_ARENA.items():
        g = tflite_to_graph(SHARED_MODELS / path, fold_pad=False)
        plan = plan_arena(g, g.op_names, "greedy", alignment=16, inplace=False)
        assert plan.arena_bytes == head_arena, path


@pytest.mark.skipif(not SHARED_MODELS.is_dir(), reason="shared models folder absent")
def test_optimal_plans_are_reproducible():
    # vww's tied optima: CP-SAT's parallel portfolio returned one of three layouts run to run
    # (and so another model.c); one deterministic worker settles it first
    g = tflite_to_graph(SHARED_MODELS / "tinyengine/vww.tflite", fold_pad=True)
    plans = [plan_arena(g, g.op_names, "optimal", 1, True, 10.0) for _ in range(6)]
    assert plans[0].details["solver"] == "cp-sat" and plans[0].optimal
    assert plans[0].arena_bytes == plans[0].lower_bound_bytes
    for plan in plans[1:]:
        assert (plan.offsets, plan.inplace, plan.moves) == \
            (plans[0].offsets, plans[0].inplace, plans[0].moves)


@pytest.mark.parametrize("planner", sorted(PLANNERS))
def test_plans_read_back_from_json_are_the_plans(planner):
    """``ArenaPlan.from_json`` inverts ``to_json`` (the MCU arena pass stores plans in a module
    attribute), moves and in-place steps included; a wrong field is named."""
    for seed in range(4):
        g = random_graph(random.Random(seed), 14, inplace_prob=0.5)
        plan = plan_arena(g, g.op_names, planner, 4 if planner != "optimal" else 1, True, 5.0)
        rounded = dataclasses.replace(plan, gap=round(plan.gap, 6),    # as to_json writes
                                      seconds=round(plan.seconds, 6))
        assert ArenaPlan.from_json(json.loads(json.dumps(plan.to_json()))) == rounded
    data = plan.to_json()
    with pytest.raises(PlanError, match="my plan: field 'offsets' must be dict"):
        ArenaPlan.from_json({**data, "offsets": [1]}, "my plan")
    with pytest.raises(PlanError, match=r"field 'moves\[0\]\.dst' must be int"):
        ArenaPlan.from_json({**data, "moves": [{"step": 1, "tensor": "a", "output": "b",
                                                "src": 0}]})


def test_greedy_and_bestfit_traced_by_hand():
    # lifetimes (bytes, first, last): in0 (30,0,3) op0 (36,0,2) op1 (44,1,4) op2 (56,2,4)
    # op3 (54,3,4) op4 (63,4,4). Both planners take op4, op2, op3, op1, op0, in0 (size order)
    # and put op4@0, op2@63, op3@119, op1@173. Then op0 [0,2]: its lifetime meets op2 [63,119)
    # and op1 [173,217). TFLM first fit takes the first gap that fits, [0,63) -> 0; TFLite best
    # fit takes the smallest, [119,173) (54 B < 63 B) -> 119. Last in0 [0,3] meets op0, op2,
    # op3, op1: greedy finds gaps [36,63) (27 B, too small) then nothing -> 217, arena 247;
    # bestfit finds [0,63) free -> 0, arena 217 (= the liveness peak).
    nodes = [Node("in0", "input", (), 30), Node("op0", "relu", ("in0",), 36),
             Node("op1", "add", ("op0", "in0"), 44), Node("op2", "concat", ("op0",), 56),
             Node("op3", "concat", ("in0", "op1"), 54),
             Node("op4", "concat", ("op2", "op1"), 63)]
    g = Graph(nodes, ["op3", "op4", "op1"])
    order = g.op_names
    greedy = plan_arena(g, order, "greedy", inplace=False)
    assert greedy.offsets == {"op4": 0, "op2": 63, "op3": 119, "op1": 173, "op0": 0,
                              "in0": 217}
    assert greedy.arena_bytes == 247
    bestfit = plan_arena(g, order, "bestfit", inplace=False)
    assert bestfit.offsets == {"op4": 0, "op2": 63, "op3": 119, "op1": 173, "op0": 119,
                               "in0": 0}
    assert bestfit.arena_bytes == 217 == bestfit.liveness_peak_bytes
    assert plan_arena(g, order, "linear", inplace=False).offsets == {
        "in0": 0, "op0": 30, "op1": 66, "op2": 110, "op3": 166, "op4": 220}


def test_peer_tie_breaks_and_whole_run_tensors_by_hand():
    # Equal sizes: TFLM fills its sort array from the tail, so the later-added tensor (a)
    # goes first; TFLite sorts equal sizes by allocation node, then (here) by tensor index.
    g = Graph([Node("x", "input", (), 10), Node("a", "relu", ("x",), 10),
               Node("b", "add", ("x", "a"), 5)], ["b"])
    assert plan_arena(g, ["a", "b"], "greedy", inplace=False).offsets == {"a": 0, "x": 10,
                                                                           "b": 20}
    assert plan_arena(g, ["a", "b"], "bestfit", inplace=False).offsets == {"x": 0, "a": 10,
                                                                            "b": 20}
    # TFLite first allocates what lives from node 0 to the end (op0: an output produced at
    # step 0), whatever its size: op0@0, in0@34, op2@34, op1@83 -> 109 (the peak). TFLM goes by
    # size: in0@0, op2@0, op0@59, op1@93 (gap [49,59) is too small) -> 119.
    g = Graph([Node("in0", "input", (), 59), Node("op0", "relu", ("in0",), 34),
               Node("op1", "add", ("op0",), 26), Node("op2", "concat", ("op1", "op0"), 49)],
              ["op2", "op0"])
    bestfit = plan_arena(g, g.op_names, "bestfit", inplace=False)
    assert bestfit.offsets == {"op0": 0, "in0": 34, "op2": 34, "op1": 83}
    assert bestfit.arena_bytes == 109
    greedy = plan_arena(g, g.op_names, "greedy", inplace=False)
    assert greedy.offsets == {"in0": 0, "op2": 0, "op0": 59, "op1": 93}
    assert greedy.arena_bytes == 119


def test_tflm_greedy_medium_case():
    # TFLM's own TestGreedyMedium buffers (size, first, last): (10,0,1) (20,1,2) (30,2,3)
    # (40,3,4) (50,0,1) -> offsets 50, 70, 40, 0, 0 and 90 bytes.
    g = Graph([Node("t0", "input", (), 10), Node("t4", "conv", ("t0",), 50),
               Node("t1", "add", ("t4", "t0"), 20), Node("t2", "conv", ("t1",), 30),
               Node("t3", "conv", ("t2",), 40), Node("out", "conv", ("t3",), 0)], ["out"])
    plan = plan_arena(g, g.op_names, "greedy", inplace=False)
    assert plan.offsets == {"t0": 50, "t1": 70, "t2": 40, "t3": 0, "t4": 0, "out": 0}
    assert plan.arena_bytes == 90


def test_alignment_pads_sizes_and_the_inplace_gap():
    # x 100 B -> a 80 B with workspace 130: gap 30, rounded up to 32 with 16-byte alignment.
    g = Graph([Node("x", "input", (), 100), Node("a", "conv", ("x",), 80, inplace=130)],
              ["a"])
    for planner in PLANNERS:
        plan = plan_arena(g, ["a"], planner, alignment=16)
        assert all(off % 16 == 0 for off in plan.offsets.values())
    plan = plan_arena(g, ["a"], "optimal", alignment=16)
    assert plan.offsets == {"a": 0, "x": 32} and plan.arena_bytes == 144 and plan.optimal
    assert plan_arena(g, ["a"], "linear", alignment=16).arena_bytes == 112 + 80


def test_inplace_placements_and_shifts_by_hand():
    # x (100 B) -> a (80 B, workspace 120): in place a@0, x@20, 120 B. TFLM places the larger x
    # first at 0; a cannot go to 0 - 20, so it right-shifts x to 20 before a runs (one move).
    # TFLite places the output a first (an output from step 0) and x in place at 20.
    g = Graph([Node("x", "input", (), 100), Node("a", "conv", ("x",), 80, inplace=120)],
              ["a"])
    greedy = plan_arena(g, ["a"], "greedy")
    assert greedy.offsets == {"x": 0, "a": 0} and greedy.arena_bytes == 120
    assert greedy.moves == (Move(0, "x", "a", 0, 20),)
    bestfit = plan_arena(g, ["a"], "bestfit")
    assert bestfit.offsets == {"a": 0, "x": 20} and not bestfit.moves
    optimal = plan_arena(g, ["a"], "optimal")          # same arena, no memmove
    assert optimal.offsets == {"a": 0, "x": 20} and not optimal.moves
    assert optimal.arena_bytes == optimal.liveness_peak_bytes == 120 and optimal.optimal
    # a chain of exact aliases shares one buffer
    g = Graph([Node("x", "input", (), 64), Node("r1", "relu", ("x",), 64, inplace="alias"),
               Node("r2", "relu", ("r1",), 64, inplace="alias")], ["r2"])
    for planner in ("greedy", "bestfit", "optimal"):
        plan = plan_arena(g, ["r1", "r2"], planner)
        assert plan.arena_bytes == 64 and len(plan.inplace) == 2 and not plan.moves
    assert plan_arena(g, ["r1", "r2"], "optimal", inplace=False).arena_bytes == 128


def test_time_limit_keeps_the_heuristic_and_reports_a_gap():
    rng = random.Random(5)
    for _ in range(100):
        g = random_graph(rng, 40, 2)
        live = liveness(g, random_order(g, rng))
        heuristic = min(plan_greedy(g, live).arena_bytes, plan_bestfit(g, live).arena_bytes)
        if heuristic > live.peak_bytes:
            break
    plan = plan_optimal(g, live, time_limit=0.0)
    verify_plan(g, live, plan)
    assert plan.status == "time_limit" and not plan.optimal
    assert plan.arena_bytes == heuristic
    assert plan.gap == pytest.approx((heuristic - plan.lower_bound_bytes) / heuristic)


# ------------------------------------------------------------------------------ verifier
@pytest.fixture
def rip_chain():
    # x (100) -> a (80, workspace 120) -> b (50) ; x at 20, a at 0 in place, b above
    g = Graph([Node("x", "input", (), 100), Node("a", "conv", ("x",), 80, inplace=120),
               Node("b", "conv", ("a",), 50)], ["b"])
    live = liveness(g, ["a", "b"])
    plan = plan_arena(g, ["a", "b"], "optimal")
    return g, live, plan


def edited(plan, **changes):
    fields = dict(plan.__dict__)
    fields.update(changes)
    return ArenaPlan(**fields)


def test_verifier_accepts_and_rejects_hand_made_plans(rip_chain):
    g, live, plan = rip_chain
    pair = live.inplace[0]
    good = edited(plan, offsets={"x": 20, "a": 0, "b": 120}, arena_bytes=170,
                  inplace=(pair,), moves=())
    verify_plan(g, live, good)
    cases = [
        (dict(offsets={"x": 20, "a": 0, "b": 60}),
         r"tensors 'a' \[0, 80\) and 'b' \[60, 110\) overlap at step 1 \(node 'b'\)"),
        (dict(offsets={"x": 20, "a": 0, "b": 120}, arena_bytes=160),
         r"tensor 'b' \[120, 170\) lies outside the arena of 160 bytes"),
        (dict(offsets={"x": 20, "a": 0, "b": 120}, alignment=8),
         r"tensor 'x' at offset 20 is not aligned to 8 bytes"),
        (dict(offsets={"x": 30, "a": 0, "b": 130}, arena_bytes=180),
         r"in-place step 0 \('x' -> 'a', workspace 120 B\): output at 0 needs the input at "
         r"20, found 30"),
        (dict(offsets={"x": 20, "a": 0, "b": 120}, inplace=()),
         r"tensors 'a' \[0, 80\) and 'x' \[20, 120\) overlap at step 0"),
        (dict(offsets={"x": 20, "a": 0}), r"tensor 'b' has no offset"),
        (dict(offsets={"x": 20, "a": 0, "b": 120, "zz": 0}), r"offset given for 'zz'"),
        (dict(offsets={"x": -20, "a": 0, "b": 120}), r"tensor 'x' has negative offset"),
        (dict(inplace=(InPlaceStep(1, "a", "b", 80),)), r"not an in-place step of this order"),
        (dict(inplace=(pair, pair)), r"listed twice"),
        (dict(offsets={"x": 0, "a": 0, "b": 120}, moves=(Move(0, "x", "a", 0, 30),)),
         r"must move it from 0 to 20"),
        (dict(offsets={"x": 0, "a": 0, "b": 120}, moves=(Move(0, "x", "a", 10, 30),)),
         r"starts at 10, but the tensor is at 0"),
        (dict(offsets={"x": 0, "a": 0, "b": 120}, inplace=(),
              moves=(Move(0, "x", "a", 0, 20),)), r"belongs to no claimed in-place step"),
        (dict(offsets={"x": 50, "a": 50, "b": 0}, arena_bytes=150,
              moves=(Move(0, "x", "a", 50, 70),)),
         r"moved copy of 'x' \[70, 170\) lies outside the arena of 150 bytes"),
        (dict(alignment=0), r"alignment must be a positive integer"),
    ]
    for changes, message in cases:
        bad = edited(good, **changes)
        with pytest.raises(PlanError, match=message):
            verify_plan(g, live, bad)
    # a right shift: x stays at 0 before step 0, is memmoved to 20, a is written at 0
    verify_plan(g, live, edited(good, offsets={"x": 0, "a": 0, "b": 120},
                                moves=(Move(0, "x", "a", 0, 20),)))
    assert issubclass(PlanError, SerenityError)


def test_verifier_sees_both_places_of_a_moved_input():
    # y (10 B) lives across step 1 right above u's home; shifting u (8 B) by 2 would land its
    # copy on y.
    g = Graph([Node("x", "input", (), 8), Node("y", "conv", ("x",), 10),
               Node("u", "conv", ("x",), 8), Node("v", "conv", ("u",), 6, inplace=10),
               Node("z", "add", ("v", "y"), 1)], ["z"])
    live = liveness(g, ["y", "u", "v", "z"])
    pair = live.inplace[0]
    plan = plan_arena(g, ["y", "u", "v", "z"], "linear")
    moved = edited(plan, offsets={"x": 18, "y": 8, "u": 0, "v": 0, "z": 6}, arena_bytes=26,
                   inplace=(pair,), moves=(Move(pair.step, "u", "v", 0, 2),))
    with pytest.raises(PlanError, match=r"'u' \(moved copy\) \[2, 10\) and 'y' \[8, 18\) "
                                        r"overlap at step 2"):
        verify_plan(g, live, moved)
    verify_plan(g, live, edited(moved, offsets={"x": 20, "y": 10, "u": 0, "v": 0, "z": 6},
                                arena_bytes=28))


def test_plan_arena_errors():
    g = Graph([Node("x", "input", (), 4), Node("a", "relu", ("x",), 4)], ["a"])
    with pytest.raises(PlanError, match="unknown arena planner 'tlsf'"):
        plan_arena(g, ["a"], "tlsf")
    with pytest.raises(PlanError, match="alignment must be a positive integer"):
        plan_arena(g, ["a"], "greedy", alignment=0)
    with pytest.raises(GraphError, match="'zz' is not in graph"):
        plan_arena(g, ["zz"], "greedy")
    plan = plan_arena(g, ["a"], "optimal", alignment=64)
    assert plan.to_json()["arena_bytes"] == 128 and plan.to_json()["planner"] == "optimal"
