"""The peers' arena planners, re-implemented faithfully, plus in-place placement.

``linear`` (TFLite Micro's ``LinearMemoryPlanner``): no reuse; tensors back to back in the
order they are added (TFLM adds tensors in flatbuffer tensor-index order; here: the graph's
stored node order). The arena is the sum of all padded sizes.

``greedy`` (TFLite Micro's ``GreedyMemoryPlanner``, ``greedy_memory_planner.cc``): TFLM pads
every size to the alignment before ``AddBuffer``. ``CalculateOffsetsIfNeeded`` writes the
buffers into its sort array from the tail (the last added first) and bubble-sorts it by size,
descending and stably: the largest first, **equal sizes in reverse add order**. The first buffer
goes at offset 0; each next one walks the already placed buffers in offset order, skipping those
whose lifetime ``[first_used, last_used]`` (inclusive) does not intersect its own, and takes
the **first** gap between the running end of the previous intersecting buffers and the next
one's offset that is large enough, else the end of the last one (first fit). With the
flatbuffer order, no PAD folding, TFLM's 16-byte alignment and no in-place steps it reproduces
the head arena TFLite Micro's interpreter plans for the shared MCU and Keras models byte for byte
(``tests/test_alloc.py``).

``bestfit`` (TFLite's ``ArenaPlanner`` + ``SimpleMemoryArena``, ``arena_planner.cc`` /
``simple_memory_arena.cc``): ``CreateTensorAllocationVector`` orders the tensors: first those
allocated at node 0 and never deallocated (here: present from step 0 and graph outputs), by
tensor index; then all others by size (raw bytes) descending, equal sizes by allocation node
ascending (``std::sort`` leaves further ties unspecified: here by tensor index).
``SimpleMemoryArena::Allocate`` walks the placed allocations in offset order, skipping those
whose ``[first_node, last_node]`` misses its own, and takes the **smallest** gap that fits
(``aligned_current + size <= alloc.offset``, a strictly smaller fit replaces the best; the fit
it records is measured from the *unaligned* running end, a quirk kept here), else the aligned
running end. Zero-byte tensors get offset 0.

Time: placed buffers are indexed by time, so each fit looks only at the buffers whose
lifetime meets the new one, in the peers' order (near linear on long graphs, the peers'
O(n * live tensors) on dense ones). The optimal planner's warm start always completes
``greedy`` (a valid plan to fall back on) and gives ``bestfit`` its deadline: past it, that
plan is abandoned (``None``).

Lifetimes are the memory model's (``memory.liveness``): graph inputs die at their last consumer,
where TFLite itself keeps them alive for the whole run.

In-place extension (only when the liveness declares in-place steps; with ``inplace=False``
liveness the planners above are exactly the peers'). When a tensor is placed and an in-place
partner (the other tensor of one of its in-place steps) is already placed, the candidate spots
are the ones the in-place rule dictates relative to a partner (output at the input's offset
minus ``gap``, input at the output's offset plus ``gap``) and the right-shift spots (output and
input at the same offset ``p``, the input memmoved to ``p + gap`` before the step:
:class:`~tvm_serenity.alloc.plan.Move`). A spot may serve both of a tensor's in-place steps. It
is usable when it is non-negative and free of everything but the partners it serves (and, for
a shift, the moved copy is free at that step). Usable spots without shifts are preferred, then
those serving more in-place steps, then the lowest top; a spot with shifts is taken only when
its top is below the planner's own choice; otherwise the planner's own (first-fit / best-fit)
placement, input and output disjoint.
"""

from __future__ import annotations

import bisect
import operator
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..graph import Graph
from ..memory import Liveness
from ..schedule.stop import past
from .plan import ArenaPlan, Move, make_plan, padded, sharings

__all__ = ["plan_linear", "plan_greedy", "plan_bestfit"]


def plan_linear(graph: Graph, liveness: Liveness, alignment: int = 1) -> ArenaPlan:
    t0 = time.perf_counter()
    offsets, top = {}, 0
    for name, lt in liveness.lifetimes.items():
        offsets[name] = top
        top += padded(lt.bytes, alignment)
    return make_plan("linear", liveness, alignment, offsets, (), (), time.perf_counter() - t0)


def plan_greedy(graph: Graph, liveness: Liveness, alignment: int = 1) -> ArenaPlan:
    t0 = time.perf_counter()
    layout = _Layout(liveness, alignment)
    index = {n: i for i, n in enumerate(liveness.lifetimes)}
    order = sorted((n for n in liveness.lifetimes if layout.pad[n] > 0),
                   key=lambda n: (-layout.pad[n], -index[n]))
    layout.place_all(order, layout.first_fit, None)
    return layout.plan("greedy", time.perf_counter() - t0)


def plan_bestfit(graph: Graph | None, liveness: Liveness, alignment: int = 1,
                 deadline: float | None = None) -> ArenaPlan | None:
    """(None if ``deadline``, a ``perf_counter`` value, passes before the plan is done.)"""
    t0 = time.perf_counter()
    layout = _Layout(liveness, alignment)
    lts = liveness.lifetimes
    index = {n: i for i, n in enumerate(lts)}
    outputs = set(graph.outputs) if graph is not None else set()

    def whole_run(n: str) -> bool:
        return lts[n].start == 0 and n in outputs

    order = sorted((n for n in lts if lts[n].bytes > 0),
                   key=lambda n: (0, index[n]) if whole_run(n)
                   else (1, -lts[n].bytes, lts[n].start, index[n]))
    if not layout.place_all(order, layout.best_fit, deadline):
        return None
    return layout.plan("bestfit", time.perf_counter() - t0)


# --------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class _Entry:
    offset: int
    size: int      # padded bytes
    raw: int       # bytes (TFLite's best fit measures running ends with these)
    start: int
    end: int
    tensor: str
    seq: int       # placement order: ties of equal offsets keep it, as the peers' lists do


_PEER_ORDER = operator.attrgetter("offset", "seq")
_BLOCK = 64        # steps per bucket of the time index; longer lifetimes are "long"


class _Layout:
    """Placed buffers and the in-place decisions taken so far.

    The peers walk every placed buffer in offset order (equal offsets: in placement order) and
    skip those whose lifetime misses the new one: O(n^2) on long graphs. Here a buffer living
    at most :data:`_BLOCK` steps is filed under the block of its first step, a longer one in
    one list; :meth:`overlapping` looks at the long ones and the short ones starting in the
    window that can reach the query, and returns exactly the time-overlapping ones in the
    peers' order, so every fit is the peer's.
    """

    def __init__(self, liveness: Liveness, alignment: int):
        self.liveness = liveness
        self.alignment = alignment
        self.lts = liveness.lifetimes
        self.pad = {n: padded(lt.bytes, alignment) for n, lt in self.lts.items()}
        self.blocks: dict[int, list[_Entry]] = {}      # block of the first step -> buffers
        self.long: list[_Entry] = []                   # sorted by _PEER_ORDER
        self._long_keys: list[tuple[int, int]] = []
        # Their lifetimes as arrays, in the same order: the time filter runs vectorised.
        self._long_start = np.zeros(16, dtype=np.int64)
        self._long_end = np.zeros(16, dtype=np.int64)
        self._count = 0
        self.offsets = {n: 0 for n in self.lts}        # zero-byte tensors stay at 0
        self.placed: set[str] = set()
        self.partners = {}                              # tensor -> its Sharings
        for s in sharings(liveness, alignment):
            self.partners.setdefault(s.pair.input, []).append(s)
            self.partners.setdefault(s.pair.output, []).append(s)
        self.shared: list = []
        self.moves: list[Move] = []

    def overlapping(self, start: int, end: int) -> list[_Entry]:
        """Placed buffers whose lifetime meets ``[start, end]``, by (offset, placement)."""
        n = len(self.long)
        hits = np.flatnonzero((self._long_start[:n] <= end) & (self._long_end[:n] >= start))
        short = [e for b in range(max(0, start - _BLOCK) // _BLOCK, end // _BLOCK + 1)
                 for e in self.blocks.get(b, ()) if e.start <= end and start <= e.end]
        if len(short) <= 16:                 # few: inserted into the sorted long ones
            found = [self.long[i] for i in hits.tolist()]
            for e in short:
                found.insert(bisect.bisect(found, _PEER_ORDER(e), key=_PEER_ORDER), e)
            return found
        # Keys are unique (seq), so sorting (key, entry) pairs never compares entries; the
        # long ones are one sorted run already.
        pairs = [(self._long_keys[i], self.long[i]) for i in hits.tolist()]
        pairs += [((e.offset, e.seq), e) for e in short]
        pairs.sort()
        return [e for _, e in pairs]

    # ------------------------------------------------------------------ the peers' fits
    def first_fit(self, name: str) -> int:
        """TFLM GreedyMemoryPlanner: the first gap among time-overlapping buffers."""
        lt, size = self.lts[name], self.pad[name]
        candidate = 0
        for e in self.overlapping(lt.start, lt.end):
            if e.offset - candidate >= size:
                break
            if e.offset + e.size > candidate:
                candidate = e.offset + e.size
        return candidate

    def best_fit(self, name: str) -> int:
        """TFLite SimpleMemoryArena::Allocate: the smallest gap among time-overlapping
        allocations."""
        lt, size, a = self.lts[name], self.lts[name].bytes, self.alignment
        best, best_fit = None, None
        current = 0
        for e in self.overlapping(lt.start, lt.end):
            aligned = -(-current // a) * a        # padded(current, a), inlined: hot loop
            if aligned + size <= e.offset and (best_fit is None or
                                               e.offset - aligned < best_fit):
                best, best_fit = aligned, e.offset - current
            if e.offset + e.raw > current:
                current = e.offset + e.raw
        return padded(current, a) if best is None else best

    # ------------------------------------------------------------------------ placement
    def is_free(self, offset: int, size: int, start: int, end: int, ignore) -> bool:
        for e in self.overlapping(start, end):
            if e.offset >= offset + size:
                break
            if e.offset + e.size > offset and e.tensor not in ignore:
                return False
        return True

    def place_all(self, names: list[str], fit: Callable[[str], int],
                  deadline: float | None) -> bool:
        """Place ``names`` in turn; False (given up) once ``deadline`` (a ``perf_counter``
        value) has passed."""
        for k, name in enumerate(names):
            if k % 64 == 0 and past(deadline):
                return False
            self.place(name, fit)
        return True

    def place(self, name: str, fit: Callable[[str], int]) -> None:
        """Place ``name`` in place / right-shifted against its placed partners if possible,
        else where ``fit`` (the peer's rule) puts it."""
        own = fit(name)
        lt, size = self.lts[name], self.pad[name]
        ready = [s for s in self.partners.get(name, ())
                 if (s.pair.input if name == s.pair.output else s.pair.output) in self.placed]
        spots = [self.offsets[s.pair.input] - s.gap if name == s.pair.output
                 else self.offsets[s.pair.output] + s.gap for s in ready]
        spots += [self.offsets[s.pair.input if name == s.pair.output else s.pair.output]
                  for s in ready if s.gap > 0]
        best = None                       # (shifts, -steps served, top, offset, uses)
        for spot in dict.fromkeys(spots):
            if spot < 0:
                continue
            uses = []                                 # (sharing, shifted) the spot satisfies
            for s in ready:
                u_at = spot if name == s.pair.input else self.offsets[s.pair.input]
                v_at = spot if name == s.pair.output else self.offsets[s.pair.output]
                if u_at == v_at + s.gap:
                    uses.append((s, False))
                elif s.gap > 0 and u_at == v_at:
                    uses.append((s, True))
            partners = {s.pair.input if name == s.pair.output else s.pair.output
                        for s, _ in uses}
            shifts = [s for s, shifted in uses if shifted]
            if not self.is_free(spot, size, lt.start, lt.end, partners) or not all(
                    self.is_free(spot + s.gap, s.input_bytes, s.pair.step, s.pair.step,
                                 {s.pair.input, s.pair.output}) for s in shifts):
                continue
            top = max([spot + size] + [spot + s.region for s in shifts])
            if shifts and top >= own + size:
                continue                              # a memmove that saves nothing
            if best is None or (len(shifts), -len(uses), top) < best[:3]:
                best = (len(shifts), -len(uses), top, spot, uses)
        if best is None:
            self._add(name, own)
            return
        *_, spot, uses = best
        self._add(name, spot)
        for s, shifted in uses:
            self.shared.append(s.pair)
            if shifted:
                k, u = s.pair.step, s.pair.input
                self.moves.append(Move(k, u, s.pair.output, spot, spot + s.gap))
                self._insert(spot + s.gap, s.input_bytes, self.lts[u].bytes, k, k, u)

    def _add(self, name: str, offset: int) -> None:
        lt = self.lts[name]
        self.offsets[name] = offset
        self.placed.add(name)
        self._insert(offset, self.pad[name], lt.bytes, lt.start, lt.end, name)

    def _insert(self, offset: int, size: int, raw: int, start: int, end: int,
                tensor: str) -> None:
        entry = _Entry(offset, size, raw, start, end, tensor, self._count)
        self._count += 1
        if end - start >= _BLOCK:
            at = bisect.bisect(self._long_keys, _PEER_ORDER(entry))
            self.long.insert(at, entry)
            self._long_keys.insert(at, _PEER_ORDER(entry))
            n = len(self.long)
            if n > len(self._long_start):                 # grow by doubling
                self._long_start = np.resize(self._long_start, 2 * n)
                self._long_end = np.resize(self._long_end, 2 * n)
            for column, value in ((self._long_start, start), (self._long_end, end)):
                column[at + 1:n] = column[at:n - 1]
                column[at] = value
        else:
            self.blocks.setdefault(start // _BLOCK, []).append(entry)

    def plan(self, planner: str, seconds: float) -> ArenaPlan:
        return make_plan(planner, self.liveness, self.alignment, self.offsets, self.shared,
                         self.moves, seconds)
