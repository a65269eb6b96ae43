"""Herringbone in-place convolution (Gural & Murmann, ICML 2019), the comparison row for RiP.

Traversal.  Leg ``i`` visits row ``i`` from column ``i`` to the end, then column ``i`` from row
``i+1`` to the end, for ``i = 0 .. min(H_out, W_out)-1``.  Pixel ``(r, c)`` belongs to leg
``min(r, c)`` (its row part if ``r <= c``), so this covers any output grid, square or not,
exactly once; on a non-square grid the column (or row) parts of the last legs are empty.

Layout.  As in RiP, the output fills the workspace from address 0 in traversal order (the
``t``-th visited pixel writes ``[t*C_out, (t+1)*C_out)``) and the input starts right-aligned.
Gural & Murmann keep the live input compact: after each leg they drop the consumed input row
(or column) and transpose what remains in place, so every leg reads the leading row of a
contiguous block.  We model this as a relayout before every leg but the first: the bounding
box of the input still read by the remaining pixels (output rows and columns ``>= i``, or rows
``>= i+1`` before a column leg), right-aligned at the workspace end, row-major for a row leg
and transposed for a column leg.  The relayout is checked like any read (each moved element
must still be intact, and must not land on output); the few scratch cells of their transpose
routine are not modelled.  With valid padding and unit stride this is exactly their block.

Per-pixel semantics.  Their kernel computes every output scalar straight from the workspace,
so a pixel's receptive field must survive that pixel's own writes: ``gather_first=False`` of
the simulator (``reference.py``).  ``gather_first=True`` gives the same traversal with RiP's
gather-first kernel.

Generalized herringbone bound: the smallest corruption-free ``S`` by binary search with the
same simulator, for any stride, dilation, padding, kernel shape or grid shape; its gap is
``S - N_in``.  On the four rows of the RiP paper's Table 2 the gap is 533, 149, 46 and 7, the
paper's "Truth" column exactly.  (Without the transposes the same search gives 559, 299, 196,
7; with the gather-first kernel 528, 141, 35, 3: both ingredients are needed.)

Published closed form ("Eq. 1" of the RiP paper).  Valid padding, unit stride and dilation,
square odd ``k``, square input ``n x n``, ``C_out > C_in``; ``m = n - k + 1`` output rows,
``a = (k-1)*C_in``, ``delta = C_out - C_in``, critical leg ``x* = a / delta``, ``j = floor(x*)``::

    gap_GM = (m - j) * (delta*(m + j) - 2*a) + k*C_in
           = delta*(m - j)*(m + j - 2*x*) + k*C_in

We could not obtain the text of Eq. 1; this is reconstructed from the G&M column of Table 2,
which it reproduces exactly (531, 148, 45, 79).  Its structure explains both limitations the
RiP paper reports: it is the sum of the per-leg net debts ``delta*L - a`` over leg lengths
``L in (x*, m]`` counted twice, minus ``delta`` per length instead of one copy of the single
first leg (``delta*m - a``), so it under-allocates by exactly ``a - delta*j = a mod delta``;
and when the critical leg leaves the grid (``x* > m``) the factor ``(m - j)`` turns negative
and squares into a large overestimate.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .reference import CorruptionSimulator, TraversalPhase
from .workspace import ConvGeometry, RipArgumentError

# RiP paper Table 2: (C_in, C_out, k, H = W of the input, G&M Eq. 1 value, simulator Truth).
TABLE2_ROWS = (
    (1, 5, 3, 14, 531, 533),
    (5, 8, 3, 12, 148, 149),
    (8, 11, 3, 10, 45, 46),
    (3, 4, 5, 8, 79, 7),
)


def herringbone_legs(out_height: int, out_width: int) -> list[tuple[str, int, np.ndarray]]:
    """The non-empty legs ``(kind, i, flat pixel indices in visiting order)``, kind "row" or
    "column"."""
    legs = []
    for i in range(min(out_height, out_width)):
        legs.append(("row", i, i * out_width + np.arange(i, out_width, dtype=np.int64)))
        if i + 1 < out_height:
            legs.append(("column", i,
                         np.arange(i + 1, out_height, dtype=np.int64) * out_width + i))
    return legs


def herringbone_order(out_height: int, out_width: int) -> np.ndarray:
    """Flat output pixel indices (``r*W_out + c``) in herringbone visiting order."""
    return np.concatenate([pixels for _, _, pixels in herringbone_legs(out_height, out_width)])


def _read_span(n_in: int, n_out: int, k: int, s: int, d: int, pad_before: int,
               first_position: int) -> tuple[int, int] | None:
    """Lowest and highest in-bounds input coordinate read by output positions
    ``>= first_position`` along one axis (``None`` if they read only padding)."""
    taps = (np.arange(first_position, n_out)[:, None] * s - pad_before
            + np.arange(k)[None, :] * d)
    taps = taps[(taps >= 0) & (taps < n_in)]
    return (int(taps.min()), int(taps.max())) if taps.size else None


def _block_end_offsets(geometry: ConvGeometry, first_out_row: int, first_out_col: int,
                       transposed: bool) -> np.ndarray:
    """Relayout of the input read by output pixels in rows ``>= first_out_row`` and columns
    ``>= first_out_col``: its bounding box, right-aligned, row-major or transposed."""
    g = geometry
    end_offsets = np.zeros(g.input_elements, dtype=np.int64)
    rows = _read_span(g.in_height, g.out_height, g.kernel[0], g.stride[0], g.dilation[0],
                      g.padding[0], first_out_row)
    cols = _read_span(g.in_width, g.out_width, g.kernel[1], g.stride[1], g.dilation[1],
                      g.padding[2], first_out_col)
    if rows is None or cols is None:
        return end_offsets
    h = np.arange(rows[0], rows[1] + 1)[:, None]
    w = np.arange(cols[0], cols[1] + 1)[None, :]
    block_h, block_w = h.shape[0], w.shape[1]
    if transposed:
        position = (w - cols[0]) * block_h + (h - rows[0])
    else:
        position = (h - rows[0]) * block_w + (w - cols[0])
    channel = np.arange(g.in_channels)
    element = (h * g.in_width + w)[..., None] * g.in_channels + channel
    block_position = position[..., None] * g.in_channels + channel
    end_offsets[element.ravel()] = block_h * block_w * g.in_channels - block_position.ravel()
    return end_offsets


def herringbone_phases(geometry: ConvGeometry) -> list[TraversalPhase]:
    """One simulator phase per leg; every leg after the first starts with the transpose."""
    phases = []
    for kind, i, pixels in herringbone_legs(geometry.out_height, geometry.out_width):
        if not phases:
            phases.append(TraversalPhase(pixels))
        elif kind == "row":
            phases.append(TraversalPhase(pixels, _block_end_offsets(geometry, i, i, False)))
        else:
            phases.append(TraversalPhase(pixels, _block_end_offsets(geometry, i + 1, i, True)))
    return phases


def herringbone_simulator(geometry: ConvGeometry, gather_first: bool = False
                          ) -> CorruptionSimulator:
    """The corruption simulator replaying the herringbone traversal with its transposes."""
    return CorruptionSimulator(geometry, herringbone_phases(geometry), gather_first)


def herringbone_min_workspace(geometry: ConvGeometry, gather_first: bool = False) -> int:
    """Generalized herringbone bound: the smallest corruption-free workspace, in elements."""
    return herringbone_simulator(geometry, gather_first).min_safe_workspace()


def herringbone_gap(geometry: ConvGeometry, gather_first: bool = False) -> int:
    """``herringbone_min_workspace - N_in``: Table 2's "Truth" (minimum gap, in scalars)."""
    return herringbone_min_workspace(geometry, gather_first) - geometry.input_elements


def _check_gm_domain(in_channels: int, out_channels: int, kernel_size: int, in_size: int):
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                        ("kernel_size", kernel_size), ("in_size", in_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RipArgumentError(f"{name} must be a positive integer, got {value!r}")
    if out_channels <= in_channels:
        raise RipArgumentError(
            f"the Gural & Murmann closed form needs out_channels > in_channels, "
            f"got {out_channels} <= {in_channels}")
    if kernel_size % 2 == 0:
        raise RipArgumentError(f"kernel_size must be odd for Gural & Murmann, got {kernel_size}")
    if kernel_size > in_size:
        raise RipArgumentError(f"kernel_size {kernel_size} exceeds in_size {in_size}")


def critical_leg(in_channels: int, out_channels: int, kernel_size: int) -> Fraction:
    """``x* = (k-1)*C_in / (C_out - C_in)``: legs longer than this add debt."""
    _check_gm_domain(in_channels, out_channels, kernel_size, kernel_size)
    return Fraction((kernel_size - 1) * in_channels, out_channels - in_channels)


def gural_murmann_gap(in_channels: int, out_channels: int, kernel_size: int,
                      in_size: int) -> int:
    """Gural & Murmann's closed-form gap (RiP paper Eq. 1, as reconstructed above), in scalars,
    for a valid, unit-stride ``k x k`` convolution of an ``in_size x in_size`` input."""
    _check_gm_domain(in_channels, out_channels, kernel_size, in_size)
    out_size = in_size - kernel_size + 1
    leg_cost = (kernel_size - 1) * in_channels
    delta = out_channels - in_channels
    whole_critical = leg_cost // delta
    return ((out_size - whole_critical) * (delta * (out_size + whole_critical) - 2 * leg_cost)
            + kernel_size * in_channels)


def table2_geometry(in_channels: int, out_channels: int, kernel_size: int,
                    in_size: int) -> ConvGeometry:
    """The valid, unit-stride square layer a Table 2 row describes."""
    return ConvGeometry((in_size, in_size, in_channels), out_channels,
                        (kernel_size, kernel_size))
