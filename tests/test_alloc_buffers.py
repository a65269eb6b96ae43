"""plan_buffers: buffer lists (half-open lifetimes) planned directly, against an exhaustive
search over offsets; the canonical (MiniMalloc) search's answers at and below the optimum; the
verifier on buffer lists; a MiniMalloc challenging instance."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from tvm_serenity.alloc import (Buffer, PlanError, buffer_liveness, plan_buffers,
                                read_minimalloc_csv, verify_plan)
from tvm_serenity.alloc.canonical import fits_capacity
from tvm_serenity.schedule.stop import Deadline

MINIMALLOC = Path(__file__).resolve().parents[2] / "shared" / "data" / "minimalloc"


def overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def brute_force_arena(buffers) -> int:
    """The smallest arena over every assignment of offsets (no canonical assumption)."""
    n = len(buffers)
    best = sum(s for _, _, s in buffers)
    offsets = [0] * n

    def place(i: int, top: int) -> None:
        nonlocal best
        if top >= best:
            return
        if i == n:
            best = top
            return
        size = buffers[i][2]
        for off in range(0, best - size):
            if all(not overlap(buffers[i], buffers[j]) or off + size <= offsets[j]
                   or offsets[j] + buffers[j][2] <= off for j in range(i)):
                offsets[i] = off
                place(i + 1, max(top, off + size))

    place(0, 0)
    return best


def random_buffers(rng: random.Random, n: int):
    out = []
    for _ in range(n):
        start = rng.randrange(0, 6)
        out.append((start, start + rng.randrange(1, 5), rng.randrange(1, 5)))
    return out


def check_valid(buffers, offsets, arena) -> None:
    for i, a in enumerate(buffers):
        assert 0 <= offsets[i] and offsets[i] + a[2] <= arena
        for j in range(i):
            b = buffers[j]
            if overlap(a, b):
                assert offsets[i] + a[2] <= offsets[j] or offsets[j] + b[2] <= offsets[i]


def test_optimal_equals_brute_force_on_random_buffer_lists():
    rng = random.Random(7)
    for trial in range(60):
        buffers = random_buffers(rng, rng.randrange(1, 7))
        best = brute_force_arena(buffers)
        plan = plan_buffers(buffers, time_limit=10.0)
        assert plan.arena_bytes == best, (trial, buffers)
        assert plan.optimal and plan.gap == 0.0
        check_valid(buffers, plan.offsets, plan.arena_bytes)
        for name in ("greedy", "bestfit", "linear"):
            heuristic = plan_buffers(buffers, planner=name)
            assert heuristic.arena_bytes >= best
            check_valid(buffers, heuristic.offsets, heuristic.arena_bytes)


def test_canonical_search_is_exact_at_and_below_the_optimum():
    """Found at the optimum (a valid placement), proven infeasible one byte below it."""
    rng = random.Random(11)
    for trial in range(60):
        buffers = random_buffers(rng, rng.randrange(2, 8))
        best = brute_force_arena(buffers)
        live = buffer_liveness([Buffer(*b, name=str(i)) for i, b in enumerate(buffers)])
        lts = [live.lifetimes[str(i)] for i in range(len(buffers))]
        args = ([lt.start for lt in lts], [lt.end for lt in lts], [lt.bytes for lt in lts])
        status, offsets, _ = fits_capacity(*args, best, Deadline(10.0),
                                           [e - s for s, e, _ in buffers])
        assert status == "found", (trial, buffers)
        check_valid(buffers, offsets, best)
        status, offsets, _ = fits_capacity(*args, best - 1, Deadline(10.0))
        assert (status, offsets) == ("infeasible", None), (trial, buffers)


def test_lifetimes_are_half_open():
    """MiniMalloc's README example: b1 [0, 3) and b2 [3, 9) may share addresses."""
    example = [(0, 3, 4), (3, 9, 4), (0, 9, 4), (9, 21, 4), (0, 21, 4)]
    plan = plan_buffers(example, capacity=12)
    assert plan.arena_bytes == 12 and plan.fits and plan.optimal
    assert plan_buffers([(0, 3, 4), (3, 9, 4)]).arena_bytes == 4
    assert plan_buffers([(0, 4, 4), (3, 9, 4)]).arena_bytes == 8
    assert plan_buffers([(0, 4, 4), (3, 9, 4)], capacity=7).fits is False


def test_alignment_and_zero_size_buffers():
    plan = plan_buffers([(0, 5, 3), (1, 4, 5), (2, 6, 0)], alignment=4)
    assert plan.offsets[2] == 0 and all(o % 4 == 0 for o in plan.offsets)
    assert plan.arena_bytes == 12 and plan.optimal


def test_verifier_catches_overlapping_buffers():
    buffers = [Buffer(0, 4, 8, "a"), Buffer(2, 6, 8, "b"), Buffer(6, 9, 8, "c")]
    plan = plan_buffers(buffers, planner="greedy").plan
    live = buffer_liveness(buffers)
    verify_plan(None, live, plan)
    bad = replace(plan, offsets={"a": 0, "b": 4, "c": 8})
    with pytest.raises(PlanError, match=r"buffers 'a' \[0, 8\) and 'b' \[4, 12\) overlap at "
                                        r"time 2"):
        verify_plan(None, live, bad)
    # c starts when b ends ([2, 6) and [6, 9)): sharing its addresses is fine.
    verify_plan(None, live, replace(plan, offsets={"a": 0, "b": 8, "c": 8}))


@pytest.mark.parametrize("buffers, message", [
    ([(3, 3, 1)], "buffer '0': lifetime \\[3, 3\\) is empty"),
    ([(0, 2, -1)], "buffer '0': size must be a non-negative integer"),
    ([(0, 2)], "buffer 0: expected \\(start, end, size\\)"),
    ([Buffer(0, 2, 1, "x"), Buffer(1, 3, 1, "x")], "buffer 'x': the name is given twice"),
])
def test_bad_buffers_are_refused(buffers, message):
    with pytest.raises(PlanError, match=message):
        plan_buffers(buffers)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(PlanError, match="capacity must be a non-negative integer"):
        plan_buffers([(0, 1, 1)], capacity=1.5)
    with pytest.raises(PlanError, match="unknown arena planner"):
        plan_buffers([(0, 1, 1)], planner="first")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper,size\nb1,0,x,4\n")
    with pytest.raises(PlanError, match="bad.csv line 2: expected integer columns"):
        read_minimalloc_csv(bad)


def test_zero_time_limit_returns_a_valid_heuristic_plan():
    rng = random.Random(3)
    buffers = random_buffers(rng, 40)
    plan = plan_buffers(buffers, time_limit=0.0)
    check_valid(buffers, plan.offsets, plan.arena_bytes)
    assert plan.lower_bound_bytes <= plan.arena_bytes
    assert plan.optimal == (plan.arena_bytes == plan.lower_bound_bytes)


@pytest.mark.skipif(not MINIMALLOC.is_dir(), reason="shared MiniMalloc instances absent")
def test_minimalloc_instance_fits_its_capacity():
    buffers = read_minimalloc_csv(MINIMALLOC / "J.1048576.csv")
    assert len(buffers) == 409
    triples = [(b.start, b.end, b.size) for b in buffers]
    plan = plan_buffers(buffers, capacity=1048576, time_limit=6.0)
    check_valid(triples, plan.offsets, plan.arena_bytes)
    assert plan.fits and plan.arena_bytes <= 1048576
    # The bound is the largest total of live bytes (checked here by a sweep over the times).
    peak = max(sum(s for lo, hi, s in triples if lo <= t < hi) for t, _, _ in triples)
    assert plan.lower_bound_bytes >= peak
    assert plan.gap == pytest.approx((plan.arena_bytes - plan.lower_bound_bytes)
                                     / plan.arena_bytes)
