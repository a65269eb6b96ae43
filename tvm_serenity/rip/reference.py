"""Two independent references for the RiP closed form of ``workspace.py``.

1. ``brute_force_max_debt``: docs/rip.md taken literally.  For every output pixel scan every
   kernel tap, keep the lowest flat input index ``L(q)`` among the in-bounds ones, take the
   suffix minimum ``Lmin(q)`` and the maximum of ``D(q) = q*C_out - Lmin(q)`` over ``q >= 1``.
   ``O(P * k_h * k_w)`` Python work: for small layers only.

2. ``CorruptionSimulator``: a workspace of ``S`` cells, each tagged with what it holds (input
   element ``j``, output element ``i`` or nothing), replaying a traversal.  The input starts
   right-aligned (element ``j`` at ``S - N_in + j``).  The traversal is a list of phases; a phase
   may first *relayout* the still-live input (the herringbone's in-place transposes, see
   ``herringbone.py``: every moved element is read at its old cell, which must still hold it,
   and written to its new cell, which must not hold output), then visits its output pixels.
   The ``t``-th pixel visited reads every input element of its receptive field (all input
   channels of every in-bounds tap) and writes its ``C_out`` outputs to
   ``[t*C_out, (t+1)*C_out)``.  A read that finds anything but the input element it wants is
   a corruption; the first one (in traversal order) is reported.

   Per-pixel semantics:

   * ``gather_first=True`` (RiP / TinyEngine): the whole receptive field is gathered into a
     scratch buffer before any of the pixel's outputs are written, so the pixel's own writes
     cannot corrupt its own reads.
   * ``gather_first=False`` (Gural & Murmann's direct kernel, which computes outputs straight
     from the workspace): the pixel's receptive field must survive all of its own writes, so a
     read also fails when the cell is written by the same pixel.
   * ``block_pixels=n`` (with ``gather_first=True``): the visited pixels form consecutive
     blocks of ``n`` whose receptive fields are all read before any of the block's outputs is
     written (the channel-wise kernels of ``codegen.kernels`` gather a whole output row, so
     ``n = W_out``).  ``n = 1`` is the per-pixel order above.

   Vectorisation: within a phase the input layout is fixed and output writes form a growing
   prefix, so a read at step ``t`` of the cell ``a`` fails iff the cell did not hold the wanted
   element when the phase began, or ``a`` is written inside the phase by step ``a // C_out``
   that comes before ``t`` (or equals ``t``, for the direct kernel; with blocks, whose block
   comes before ``t``'s).  Each phase is thus a few numpy operations over its reads; the cell
   tags are updated between phases.  ``S*`` found by binary search on ``S`` (safety is
   monotone in ``S``: growing ``S`` moves every input cell right and no output cell) is
   ``min_safe_workspace_by_search``.

3. ``ChannelSimulator``: the same tagged workspace replaying the channel-wise in-place kind
   (``workspace.py``): for each channel ``c`` in turn, read every input element of channel
   ``c`` (the kernel copies the whole plane into its channel buffer), then write output
   element ``(j, c)`` to cell ``j*C + c`` for every output pixel ``j``.  A read that finds
   anything but its input element is the corruption reported.  ``C`` numpy steps of
   ``N/C`` cells each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .workspace import ConvGeometry, RipArgumentError

EMPTY_CELL = -1


def brute_force_max_debt(geometry: ConvGeometry) -> int | None:
    """``max_{q>=1} D(q)`` in elements straight from the definition; ``None`` if no pixel
    ``q >= 1`` has a defined ``Lmin(q)`` (every later pixel reads only padding)."""
    g = geometry
    (kernel_h, kernel_w), (stride_h, stride_w) = g.kernel, g.stride
    (dilation_h, dilation_w), (pad_top, _, pad_left, _) = g.dilation, g.padding
    lowest_read = []
    for r in range(g.out_height):
        for c in range(g.out_width):
            lowest = None
            for i in range(kernel_h):
                h = r * stride_h - pad_top + i * dilation_h
                for j in range(kernel_w):
                    w = c * stride_w - pad_left + j * dilation_w
                    if 0 <= h < g.in_height and 0 <= w < g.in_width:
                        index = (h * g.in_width + w) * g.in_channels
                        lowest = index if lowest is None else min(lowest, index)
            lowest_read.append(lowest)
    best = None
    suffix_min = None
    for q in range(g.output_pixels - 1, 0, -1):
        if lowest_read[q] is not None:
            suffix_min = lowest_read[q] if suffix_min is None else min(suffix_min,
                                                                       lowest_read[q])
        if suffix_min is not None:
            debt = q * g.out_channels - suffix_min
            best = debt if best is None else max(best, debt)
    return best


def brute_force_min_workspace(geometry: ConvGeometry) -> int:
    """``S* = max(N_out, N_in + max(0, max_q D(q)))`` in elements, from the brute-force debt."""
    max_debt = brute_force_max_debt(geometry)
    return max(geometry.output_elements,
               geometry.input_elements + max(0, max_debt if max_debt is not None else 0))


def receptive_field_reads(geometry: ConvGeometry) -> np.ndarray:
    """``(P, k_h*k_w*C_in)`` flat input indices each output pixel reads, ``-1`` for padding."""
    g = geometry
    rows = (np.arange(g.out_height)[:, None] * g.stride[0] - g.padding[0]
            + np.arange(g.kernel[0])[None, :] * g.dilation[0])
    cols = (np.arange(g.out_width)[:, None] * g.stride[1] - g.padding[2]
            + np.arange(g.kernel[1])[None, :] * g.dilation[1])
    row_ok = (rows >= 0) & (rows < g.in_height)
    col_ok = (cols >= 0) & (cols < g.in_width)
    pixel = rows[:, None, :, None] * g.in_width + cols[None, :, None, :]
    in_bounds = row_ok[:, None, :, None] & col_ok[None, :, None, :]
    element = pixel[..., None] * g.in_channels + np.arange(g.in_channels)
    element = np.where(in_bounds[..., None], element, -1)
    return element.reshape(g.output_pixels, -1).astype(np.int64)


@dataclass(frozen=True)
class TraversalPhase:
    """Output pixels visited in order, optionally preceded by a relayout of the live input.

    ``block_end_offsets[j]`` (length ``N_in``) puts input element ``j`` at cell
    ``S - block_end_offsets[j]`` for the rest of the traversal; ``0`` marks an element no later
    pixel reads (dropped).  ``None`` keeps the current layout.
    """

    pixels: np.ndarray
    block_end_offsets: np.ndarray | None = None


@dataclass(frozen=True)
class Corruption:
    """The first read that did not find the input element it wanted."""

    step: int                     # traversal step (0-based) at which it happened
    pixel: tuple[int, int] | None  # (row, col) of the output pixel; None for a relayout
    input_index: int              # the flat NHWC input element that was wanted
    address: int                  # the cell read (written, for a relayout); -1: element dropped
    found: str                    # what the cell held instead


@dataclass(frozen=True)
class SimulationResult:
    workspace_cells: int
    corruption: Corruption | None

    @property
    def ok(self) -> bool:
        return self.corruption is None


def describe_tag(tag: int, input_elements: int) -> str:
    """What a tagged workspace cell holds, in words (corruption reports)."""
    if tag == EMPTY_CELL:
        return "nothing"
    if tag >= input_elements:
        return f"output element {tag - input_elements}"
    return f"input element {tag}"


def right_aligned_input(geometry: ConvGeometry, workspace_cells: int) -> np.ndarray:
    """A tagged workspace of ``workspace_cells`` cells holding input element ``i`` at
    ``workspace_cells - N_in + i`` (RiP's right alignment) and nothing elsewhere."""
    n_in, n_out = geometry.input_elements, geometry.output_elements
    if workspace_cells < max(n_in, n_out):
        raise RipArgumentError(f"workspace_cells={workspace_cells} cannot hold the input "
                               f"({n_in}) and the output ({n_out})")
    cells = np.full(workspace_cells, EMPTY_CELL, dtype=np.int64)
    cells[workspace_cells - n_in:] = np.arange(n_in)
    return cells


class CorruptionSimulator:
    """Replays a traversal of one layer over a tagged workspace (see the module docstring).

    ``phases=None`` is RiP: one phase, every pixel in row-major order, no relayout.
    """

    def __init__(self, geometry: ConvGeometry, phases: list[TraversalPhase] | None = None,
                 gather_first: bool = True, block_pixels: int = 1):
        if block_pixels < 1 or (block_pixels > 1 and not gather_first):
            raise RipArgumentError("block_pixels must be >= 1, and > 1 only with gather_first")
        self.geometry = geometry
        self.gather_first = gather_first
        self.block_pixels = block_pixels
        if phases is None:
            phases = [TraversalPhase(np.arange(geometry.output_pixels, dtype=np.int64))]
        visited = np.concatenate([phase.pixels for phase in phases])
        if not np.array_equal(np.sort(visited), np.arange(geometry.output_pixels)):
            raise RipArgumentError("phases must visit every output pixel exactly once")
        self.phases = phases
        self._reads = receptive_field_reads(geometry)

    def _describe(self, tag: int) -> str:
        return describe_tag(tag, self.geometry.input_elements)

    def run(self, workspace_cells: int) -> SimulationResult:
        g = self.geometry
        n_in, c_out = g.input_elements, g.out_channels
        cells = right_aligned_input(g, workspace_cells)
        address_of_input = workspace_cells - n_in + np.arange(n_in, dtype=np.int64)
        step0 = 0
        for phase in self.phases:
            if phase.block_end_offsets is not None:
                corruption = self._relayout(cells, address_of_input, phase.block_end_offsets,
                                            step0)
                if corruption is not None:
                    return SimulationResult(workspace_cells, corruption)
            reads = self._reads[phase.pixels]
            wanted = reads >= 0
            address = np.where(wanted, address_of_input[np.maximum(reads, 0)], 0)
            dropped = address < 0   # wanted although a relayout dropped it: reads nothing
            address = np.maximum(address, 0)
            step = step0 + np.arange(len(phase.pixels))[:, None]
            writer_step = address // c_out
            block = self.block_pixels
            written_in_phase = ~dropped & (writer_step >= step0) & (
                (writer_step // block < step // block) if self.gather_first
                else (writer_step <= step))
            held = np.where(dropped, EMPTY_CELL, cells[address])
            bad = wanted & ((held != reads) | written_in_phase)
            if bad.any():
                row, col = np.unravel_index(np.argmax(bad), bad.shape)
                found_tag = (n_in + int(address[row, col]) if written_in_phase[row, col]
                             else int(held[row, col]))
                pixel = int(phase.pixels[row])
                return SimulationResult(workspace_cells, Corruption(
                    step=step0 + int(row), pixel=divmod(pixel, g.out_width),
                    input_index=int(reads[row, col]),
                    address=-1 if dropped[row, col] else int(address[row, col]),
                    found=self._describe(found_tag)))
            step1 = step0 + len(phase.pixels)
            cells[step0 * c_out:step1 * c_out] = n_in + np.arange(step0 * c_out, step1 * c_out)
            step0 = step1
        return SimulationResult(workspace_cells, None)

    def _relayout(self, cells, address_of_input, block_end_offsets, step) -> Corruption | None:
        """Move every live input element to its new cell (all read first, then all written,
        as an in-place transpose does); mutates ``cells`` and ``address_of_input``."""
        n_in = self.geometry.input_elements
        live = np.flatnonzero(block_end_offsets > 0)
        old = address_of_input[live]
        stale = np.flatnonzero(cells[old] != live)
        if len(stale):
            k = stale[0]
            return Corruption(step=step, pixel=None, input_index=int(live[k]),
                              address=int(old[k]), found=self._describe(int(cells[old[k]])))
        new = len(cells) - block_end_offsets[live]
        clobbered = np.flatnonzero(cells[new] >= n_in)
        if len(clobbered):
            k = clobbered[0]
            return Corruption(step=step, pixel=None, input_index=int(live[k]),
                              address=int(new[k]),
                              found=self._describe(int(cells[new[k]])) + " (would be overwritten)")
        cells[new] = live
        address_of_input[:] = -1
        address_of_input[live] = new
        return None

    def min_safe_workspace(self) -> int:
        """Smallest ``S >= max(N_in, N_out)`` with no corruption, by binary search.

        ``N_in + N_out`` is always safe: the input then lies entirely above every output cell.
        """
        g = self.geometry
        low = max(g.input_elements, g.output_elements)
        if self.run(low).ok:
            return low
        high = g.input_elements + g.output_elements   # safe; low is unsafe
        while high - low > 1:
            middle = (low + high) // 2
            if self.run(middle).ok:
                high = middle
            else:
                low = middle
        return high


def simulate_rip(geometry: ConvGeometry, workspace_cells: int) -> SimulationResult:
    """Replay RiP (row-major, gather first) in a workspace of ``workspace_cells`` elements."""
    return CorruptionSimulator(geometry).run(workspace_cells)


def min_safe_workspace_by_search(geometry: ConvGeometry) -> int:
    """RiP's minimum corruption-free workspace in elements, by binary search on the simulator."""
    return CorruptionSimulator(geometry).min_safe_workspace()


class ChannelSimulator:
    """Replays the channel-wise in-place traversal of a depthwise layer (module docstring)."""

    def __init__(self, geometry: ConvGeometry):
        if not geometry.groups == geometry.in_channels == geometry.out_channels:
            raise RipArgumentError("the channel-wise traversal needs a depthwise layer")
        self.geometry = geometry

    def run(self, workspace_cells: int) -> SimulationResult:
        g = self.geometry
        n_in, channels = g.input_elements, g.in_channels
        cells = right_aligned_input(g, workspace_cells)
        base = workspace_cells - n_in
        in_pixels = np.arange(g.in_height * g.in_width, dtype=np.int64) * channels
        out_pixels = np.arange(g.output_pixels, dtype=np.int64) * channels
        for c in range(channels):
            wanted = in_pixels + c
            held = cells[base + wanted]
            bad = np.flatnonzero(held != wanted)
            if len(bad):
                k = bad[0]
                tag = int(held[k])
                found = describe_tag(tag, n_in)
                return SimulationResult(workspace_cells, Corruption(
                    step=c, pixel=None, input_index=int(wanted[k]),
                    address=int(base + wanted[k]), found=found))
            cells[out_pixels + c] = n_in + out_pixels + c
        return SimulationResult(workspace_cells, None)

    def safe_workspaces(self, limit: int) -> list[int]:
        """Every corruption-free ``S`` in ``[max(N_in, N_out), limit]``, by simulation."""
        g = self.geometry
        return [s for s in range(max(g.input_elements, g.output_elements), limit + 1)
                if self.run(s).ok]
