"""Does a set of buffers fit a capacity? MiniMalloc's canonical search (Moffitt, ASPLOS 2023).

A buffer ``b`` is live on the steps ``start_b .. end_b`` (inclusive) and takes ``size_b`` units;
two buffers live at a common step need disjoint addresses. The search answers "is there a
placement with every ``offset_b + size_b <= capacity``?" and is complete: an exhausted search
proves there is none. It re-implements google/minimalloc's ``src/solver.cc`` (Apache-2.0):

* **canonical solutions only.** Every feasible placement can be lowered into one where each
  buffer sits at its *minimum offset*, the highest top of the placed buffers it overlaps in
  time; the search places buffers in non-decreasing offset order (equal offsets: increasing
  preorder index), each at its minimum offset, so every canonical solution is met exactly once;
* **dynamic ordering**: the candidates of a node are the unplaced buffers by (minimum offset,
  preorder index); the static preorder is one of MiniMalloc's ``WAT``, ``TAW``, ``TWA``
  (descending lifetime width, area = width x size, the largest total of the sections it
  crosses), tried round robin with node limits doubling from twice the number of buffers, as
  ``Solver::RoundRobin`` does; a run exhausted within its limit is a proof of infeasibility;
* **dominance**: a buffer whose minimum offset is at or above the lowest top any unplaced
  buffer could reach would leave a gap that buffer fits in: skipped (and, the candidates being
  sorted by offset, every later one too);
* **section inference**: each step (section) keeps the sizes of its unplaced buffers; they all
  sit at or above the node's offset and at or above the lowest minimum offset of the unplaced
  buffers of that step, so ``max(offset, floor) + unplaced total > capacity`` at any step prunes;
* **hatless pruning**: a buffer no unplaced buffer overlaps is placed once (no alternative
  placement changes anything above it).

Not re-implemented: MiniMalloc's dynamic temporal decomposition (sub-problems split at steps no
unplaced buffer crosses) and gaps inside buffers. Numpy keeps the per-node work vectorised
(sorting candidates, raising minimum offsets, the per-step floor); the deadline is polled every
:data:`_POLL` nodes.
"""

from __future__ import annotations

import numpy as np

from ..schedule.stop import Deadline

__all__ = ["fits_capacity", "PREORDERS"]

PREORDERS = ("WAT", "TAW", "TWA")
_POLL = 64
_FAR = np.iinfo(np.int64).max // 4


class _Abort(Exception):
    """This run's node limit is used up."""


class _Timeout(Exception):
    """The deadline passed."""


def fits_capacity(starts, ends, sizes, capacity: int, deadline: Deadline, widths=None):
    """Search a placement of the buffers (inclusive step ranges ``starts[i]..ends[i]``, positive
    ``sizes``) within ``capacity``. ``widths``: the lifetimes' lengths for the preorder (the
    buffers' own time, when steps compress it; default: steps). Returns ``(status, offsets,
    nodes)``: ``"found"`` with one offset per buffer, ``"infeasible"`` (proven) or
    ``"time_limit"`` with None."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    widths = ends - starts + 1 if widths is None else np.asarray(widths, np.int64)
    search = _Search(starts, ends, np.asarray(sizes, np.int64), widths, int(capacity), deadline)
    return search.run()


class _Search:
    def __init__(self, starts, ends, sizes, widths, capacity: int, deadline: Deadline):
        self.n = len(sizes)
        self.start, self.end, self.size, self.width = starts, ends, sizes, widths
        self.capacity, self.deadline = capacity, deadline
        steps = int(ends.max()) + 1 if self.n else 0
        t = np.arange(steps)
        self.cover = (starts[None, :] <= t[:, None]) & (t[:, None] <= ends[None, :])  # S x n
        overlap = (starts[:, None] <= ends[None, :]) & (starts[None, :] <= ends[:, None])
        np.fill_diagonal(overlap, False)
        self.overlaps = [np.flatnonzero(row) for row in overlap]
        self.section_total0 = self.cover.astype(np.int64) @ sizes
        self.span = [(int(s), int(e) + 1) for s, e in zip(starts, ends)]
        self.nodes = 0

    # --------------------------------------------------------------------------- driver
    def run(self):
        if self.n == 0:
            return "found", [], 0
        if int(self.size.max()) > self.capacity or int(self.section_total0.max()) > \
                self.capacity:
            return "infeasible", None, 0
        limit = self.n
        try:
            while True:
                limit *= 2
                for heuristic in PREORDERS:
                    self.budget = self.nodes + limit
                    try:
                        if self._solve(self._preorder(heuristic)):
                            return "found", self.solution.tolist(), self.nodes
                        return "infeasible", None, self.nodes
                    except _Abort:
                        continue
        except _Timeout:
            return "time_limit", None, self.nodes

    def _preorder(self, heuristic: str) -> np.ndarray:
        """Rank of every buffer in the static preorder (0 = first), ties by index."""
        keys = {"W": self.width, "A": self.width * self.size,
                "T": np.array([self.section_total0[s:e + 1].max()
                               for s, e in zip(self.start, self.end)])}
        order = np.lexsort([np.arange(self.n)] + [-keys[c] for c in reversed(heuristic)])
        rank = np.empty(self.n, np.int64)
        rank[order] = np.arange(self.n)
        return rank

    def _solve(self, rank: np.ndarray) -> bool:
        self.rank = rank
        self.min_offset = np.zeros(self.n, np.int64)
        self.solution = np.zeros(self.n, np.int64)
        self.unplaced = np.ones(self.n, bool)
        self.total = self.section_total0.copy()
        self.top = np.zeros(len(self.total), np.int64)    # last placed top per section
        # lowest[s]: the lowest minimum offset of the unplaced buffers live at step s (_FAR:
        # none), the row minimum of ``at`` (section x buffer: its minimum offset, if unplaced
        # and live there, else _FAR).
        self.at = np.asfortranarray(np.where(self.cover, 0, _FAR))  # columns contiguous
        self.lowest = self.at.min(axis=1)
        # cuts[s]: unplaced buffers live at both steps s and s + 1.
        self.cuts = (self.cover[:-1] & self.cover[1:]).sum(axis=1)
        steps = len(self.total)
        zeros = [s + 1 for s in np.flatnonzero(self.cuts == 0).tolist()]
        return self._split([0] + zeros + [steps])

    # ----------------------------------------------------------------------------- node
    def _split(self, bounds: list[int]) -> bool:
        """Solve the steps ``bounds[i] .. bounds[i + 1] - 1`` as independent parts (no
        unplaced buffer crosses a bound): each with its unplaced buffers, from offset 0."""
        for lo, hi in zip(bounds, bounds[1:]):
            members = self.unplaced & (self.start < hi) & (self.end >= lo)
            if members.any() and not self._node(members, lo, hi, 0, -1):
                return False
        return True

    def _node(self, members, lo: int, hi: int, floor: int, floor_rank: int) -> bool:
        """Place the unplaced ``members`` (living within steps ``lo .. hi - 1``) canonically
        at or above ``floor``; every placement is undone on return, a found one is kept in
        ``self.solution``."""
        self.nodes += 1
        if self.nodes >= self.budget:
            raise _Abort
        if self.nodes % _POLL == 0 and self.deadline.expired():
            raise _Timeout
        candidates = np.flatnonzero(self.unplaced & members)
        if len(candidates) == 0:
            return True
        offsets = self.min_offset[candidates]
        min_height = int((offsets + self.size[candidates]).min())
        # Every unplaced buffer of the fullest step sits at or above the offset chosen here.
        highest = min(min_height - 1, self.capacity - int(self.total[lo:hi].max()))
        by_offset = candidates[np.lexsort((self.rank[candidates], offsets))]
        for b in by_offset.tolist():
            at = int(self.min_offset[b])
            if at > highest:
                break               # dominated or overfull (and so is every later one)
            if at < floor or (at == floor and self.rank[b] < floor_rank):
                continue                                # not canonical
            raised, hatless = self._place(b, at)
            found = self._feasible(at, lo, hi) and self._below(b, members, lo, hi, at)
            self._unplace(b, raised)
            if found:
                self.solution[b] = at
                return True
            if hatless:
                break
        return False

    def _below(self, b: int, members, lo: int, hi: int, at: int) -> bool:
        """The rest of the part once ``b`` is placed: split where no unplaced buffer crosses
        any more (MiniMalloc's dynamic decomposition), else the next node."""
        s, e = self.span[b]
        self.cuts[s:e - 1] -= 1
        zeros = [k + 1 for k in (s + np.flatnonzero(self.cuts[s:e - 1] == 0)).tolist()
                 if lo <= k + 1 < hi]
        try:
            if zeros:
                return self._split([lo] + zeros + [hi])
            return self._node(members, lo, hi, at, int(self.rank[b]))
        finally:
            self.cuts[s:e - 1] += 1

    def _place(self, b: int, at: int):
        self.unplaced[b] = False
        s, e = int(self.start[b]), int(self.end[b]) + 1
        self.total[s:e] -= self.size[b]
        saved_top = self.top[s:e].copy()
        self.top[s:e] = at + self.size[b]
        others = self.overlaps[b]
        others = others[self.unplaced[others]]
        height = at + int(self.size[b])
        lifted = others[self.min_offset[others] < height]
        old = self.min_offset[lifted].copy()
        self.min_offset[lifted] = height
        self.at[s:e, b] = _FAR
        lo, hi = s, e
        for o in lifted.tolist():
            so, eo = self.span[o]
            self.at[so:eo, o] = height
            lo, hi = min(lo, so), max(hi, eo)
        saved_lowest = self.lowest[lo:hi].copy()
        self.lowest[lo:hi] = self.at[lo:hi].min(axis=1)
        return (lifted, old, saved_top, lo, saved_lowest), len(others) == 0

    def _unplace(self, b: int, raised) -> None:
        lifted, old, saved_top, lo, saved_lowest = raised
        self.min_offset[lifted] = old
        s, e = int(self.start[b]), int(self.end[b]) + 1
        for o, value in zip(lifted.tolist(), old.tolist()):
            so, eo = self.span[o]
            self.at[so:eo, o] = value
        self.at[s:e, b] = self.min_offset[b]
        self.lowest[lo:lo + len(saved_lowest)] = saved_lowest
        self.top[s:e] = saved_top
        self.total[s:e] += self.size[b]
        self.unplaced[b] = True

    def _feasible(self, at: int, lo: int, hi: int) -> bool:
        """Section inference: every step's unplaced buffers fit above its floor."""
        lowest = self.lowest[lo:hi]
        floor = np.where(lowest == _FAR, self.top[lo:hi], np.maximum(lowest, at))
        return bool((floor + self.total[lo:hi] <= self.capacity).all())
