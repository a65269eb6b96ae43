"""Right In-Place (RiP) convolution: the minimum workspace of one layer in O(kernel) time.

Layout (docs/rip.md).  One flat workspace of ``S`` elements per layer, NHWC, row-major.  The
input ``X`` (``N_in`` elements) is right-aligned: flat input element ``j`` sits at ``S - N_in + j``.
The output ``Y`` (``N_out`` elements) is written left-aligned from address 0 in plain row-major
pixel order: output pixel ``q`` writes its ``C_out`` elements to ``[q*C_out, (q+1)*C_out)``,
after its whole receptive field has been gathered (TinyEngine's kernel structure).

Per-pixel model.  ``L(q)`` is the lowest flat input index output pixel ``q`` reads, ignoring
padding taps.  Every pixel produces all ``C_out`` channels, so it reads every input channel of
every in-bounds tap -- also for grouped and depthwise convolutions, whose groups only decide
which of those reads feed which output channel.  Hence ``L(q)`` is channel 0 of the pixel's
lowest in-bounds tap, and ``groups`` never changes the workspace.  A pixel whose window lies
entirely in padding reads nothing; its ``L`` is undefined and it imposes no constraint.

Safety.  Pixel ``p``'s writes end at ``(p+1)*C_out``; the pixels after it read input indices
``>= Lmin(p+1)`` with ``Lmin(q) = min_{q' >= q} L(q')``.  The layer is corruption-free iff
``D(q) = q*C_out - Lmin(q) <= S - N_in`` for every ``q >= 1`` with ``Lmin(q)`` defined, so::

    S* = max(N_out, N_in + max(0, max_{q>=1} D(q)))

Closed form.  Expanding the suffix minimum, ``D(q) = max_{q' >= q} (q*C_out - L(q'))``, and the
best ``q`` for a given ``q'`` is ``q = q'`` (``C_out > 0``), so ``max_{q>=1} D(q)`` equals the
maximum of the *per-pixel debt* ``q*C_out - L(q)`` over the pixels that read something (pixel 0
contributes ``-L(0) <= 0``, which the ``max(0, .)`` absorbs).  With ``q = r*W_out + c`` and
``L = (R(r)*W_in + C(c))*C_in``, where ``R(r)`` / ``C(c)`` are the first in-bounds input
row / column of output row ``r`` / column ``c``, the per-pixel debt splits into::

    [r*W_out*C_out - R(r)*W_in*C_in]  +  [c*C_out - C(c)*C_in]

and a pixel reads something iff its row and its column both do, so the maximum is the sum of
two independent one-axis maxima.  Along one axis, output position ``x`` has window base
``b = x*s - pad_before`` and taps ``b + i*d``; its first in-bounds tap index ``i0`` is constant
on an interval of ``x``, on which the first tap ``b + i0*d`` is affine in ``x``.  So each axis is
a maximum of ``k`` affine pieces, each evaluated at its two end points: ``O(k_h + k_w)`` work,
independent of the output size (a 10^6 x 10^6 layer costs the same as a 3 x 3 one).

``reference.py`` checks this against a brute-force ``max_q D(q)`` and a corruption simulator.

Channel-wise in-place (depthwise only, TinyEngine's in-place depthwise).  A depthwise output
channel ``c`` reads only input channel ``c``.  The kernel copies the whole input channel ``c``
(``H_in x W_in``, plus its padding) into a one-channel buffer outside the workspace, then writes
output channel ``c`` of every pixel, element ``(j, c)`` at ``j*C + c``, straight into the
workspace.  With the input right-aligned at ``G = S - N_in``, that cell holds input element
``(j - G/C, c)`` when ``G`` is a multiple of ``C``: channel ``c`` again, already in the buffer;
channels ``c' > c`` are never touched, channels ``c' < c`` are done.  So the layer is
corruption-free at every ``S >= max(N_in, N_out)`` with ``(S - N_in) % C == 0`` (and corrupts
at some other ``S``: the writes then land on another channel), i.e. at::

    S_channel = max(N_in, N_out)        (N_out - N_in is a multiple of C when positive)

with no gap at all, for the price of an int8 channel buffer of ``(H_in + pad) x (W_in + pad)``
bytes in the kernel scratch.  :func:`choose_inplace` is the one rule every graph builder uses:
the channel kind for a depthwise layer whenever it needs less workspace than RiP (only then is
its channel buffer paid for), RiP otherwise; :func:`inplace_kind` tells a kernel generator
which traversal a given workspace admits (RiP's whenever ``S >= S*``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from ..errors import SerenityError


class RipArgumentError(SerenityError, ValueError):
    """A layer description that is malformed; the message names the offending field."""


def _integer(value, name: str) -> int:
    if isinstance(value, bool):
        raise RipArgumentError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise RipArgumentError(f"{name} must be an integer, got {value!r}") from None


def _integers(value, name: str, count: int, minimum: int, allow_scalar: bool) -> tuple[int, ...]:
    if allow_scalar and not isinstance(value, (tuple, list)):
        value = (value,) * count
    if not isinstance(value, (tuple, list)) or len(value) != count:
        raise RipArgumentError(f"{name} must be a sequence of {count} integers, got {value!r}")
    numbers = tuple(_integer(v, name) for v in value)
    if any(v < minimum for v in numbers):
        raise RipArgumentError(f"{name} entries must be >= {minimum}, got {value!r}")
    return numbers


@dataclass(frozen=True)
class ConvGeometry:
    """A validated 2-D convolution (NHWC, batch 1) and its output size.

    ``padding`` is ``(top, bottom, left, right)``; output size per axis is the standard
    ``floor((n_in + pad_before + pad_after - d*(k-1) - 1) / s) + 1``.  ``kernel``, ``stride`` and
    ``dilation`` also accept a single integer for a square value.
    """

    in_hwc: tuple[int, int, int]
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    out_height: int = field(init=False)
    out_width: int = field(init=False)

    def __post_init__(self):
        in_hwc = _integers(self.in_hwc, "in_hwc", 3, 1, allow_scalar=False)
        out_channels = _integer(self.out_channels, "out_channels")
        if out_channels < 1:
            raise RipArgumentError(f"out_channels must be >= 1, got {out_channels}")
        kernel = _integers(self.kernel, "kernel", 2, 1, allow_scalar=True)
        stride = _integers(self.stride, "stride", 2, 1, allow_scalar=True)
        dilation = _integers(self.dilation, "dilation", 2, 1, allow_scalar=True)
        padding = _integers(self.padding, "padding", 4, 0, allow_scalar=False)
        groups = _integer(self.groups, "groups")
        if groups < 1:
            raise RipArgumentError(f"groups must be >= 1, got {groups}")
        if in_hwc[2] % groups or out_channels % groups:
            raise RipArgumentError(
                f"groups={groups} must divide both input channels ({in_hwc[2]}) "
                f"and out_channels ({out_channels})")
        out_size = []
        for axis, n_in, k, s, d, before, after in (
                ("height", in_hwc[0], kernel[0], stride[0], dilation[0], padding[0], padding[1]),
                ("width", in_hwc[1], kernel[1], stride[1], dilation[1], padding[2], padding[3])):
            n_out = (n_in + before + after - d * (k - 1) - 1) // s + 1
            if n_out < 1:
                raise RipArgumentError(
                    f"kernel (dilated extent {d * (k - 1) + 1}) does not fit the padded input "
                    f"{axis} {n_in + before + after}: output {axis} would be {n_out}")
            out_size.append(n_out)
        for name, value in (("in_hwc", in_hwc), ("out_channels", out_channels),
                            ("kernel", kernel), ("stride", stride), ("dilation", dilation),
                            ("padding", padding), ("groups", groups),
                            ("out_height", out_size[0]), ("out_width", out_size[1])):
            object.__setattr__(self, name, value)

    @property
    def in_height(self) -> int:
        return self.in_hwc[0]

    @property
    def in_width(self) -> int:
        return self.in_hwc[1]

    @property
    def in_channels(self) -> int:
        return self.in_hwc[2]

    @property
    def input_elements(self) -> int:
        return self.in_hwc[0] * self.in_hwc[1] * self.in_hwc[2]

    @property
    def output_pixels(self) -> int:
        return self.out_height * self.out_width

    @property
    def output_elements(self) -> int:
        return self.output_pixels * self.out_channels


@dataclass(frozen=True)
class RipWorkspace:
    """The RiP sizes of one layer, in bytes."""

    input_bytes: int       # N_in
    output_bytes: int      # N_out
    max_debt_bytes: int    # max(0, max_{q>=1} D(q))
    workspace_bytes: int   # S* = max(N_out, N_in + max_debt)

    @property
    def gap_bytes(self) -> int:
        """Distance from address 0 (output start) to the input's start: ``S* - N_in``."""
        return self.workspace_bytes - self.input_bytes

    @property
    def dual_buffer_bytes(self) -> int:
        """The non-aliased cost ``N_in + N_out`` that RiP replaces."""
        return self.input_bytes + self.output_bytes


def _ceil_div(numerator: int, denominator: int) -> int:
    return -((-numerator) // denominator)


def _axis_max_debt(n_in: int, n_out: int, k: int, s: int, d: int, pad_before: int,
                   position_weight: int, tap_weight: int) -> int | None:
    """``max_x (x*position_weight - tap_weight*first_tap(x))`` over the output positions
    ``x in [0, n_out)`` whose window has an in-bounds tap (``None`` if there are none).

    ``first_tap(x)`` is the lowest in-bounds input coordinate of window ``b + i*d``,
    ``b = x*s - pad_before``.  The window's first in-bounds tap index ``i0`` selects a range of
    ``b`` (``i0 = 0``: ``0 <= b < n_in``; ``i0 >= 1``: tap ``i0-1`` below 0, tap ``i0`` in bounds),
    hence an interval of ``x`` on which the objective is affine: its maximum is at an end point.
    """
    best = None
    for i0 in range(k):
        if i0 == 0:
            b_low, b_high = 0, n_in - 1
        else:
            b_low = -i0 * d
            b_high = min(-(i0 - 1) * d - 1, n_in - 1 - i0 * d)
        x_low = max(0, _ceil_div(b_low + pad_before, s))
        x_high = min(n_out - 1, (b_high + pad_before) // s)
        if x_low > x_high:
            continue
        for x in (x_low, x_high):
            debt = x * position_weight - tap_weight * (x * s - pad_before + i0 * d)
            best = debt if best is None else max(best, debt)
    return best


def closed_form_max_debt(geometry: ConvGeometry) -> int:
    """``max(0, max_{q>=1} D(q))`` in elements, from the per-axis breakpoints only."""
    g = geometry
    row_debt = _axis_max_debt(g.in_height, g.out_height, g.kernel[0], g.stride[0],
                              g.dilation[0], g.padding[0],
                              position_weight=g.out_width * g.out_channels,
                              tap_weight=g.in_width * g.in_channels)
    column_debt = _axis_max_debt(g.in_width, g.out_width, g.kernel[1], g.stride[1],
                                 g.dilation[1], g.padding[2],
                                 position_weight=g.out_channels, tap_weight=g.in_channels)
    if row_debt is None or column_debt is None:  # no pixel reads any input
        return 0
    return max(0, row_debt + column_debt)


def rip_workspace_for_geometry(geometry: ConvGeometry, elem_bytes: int = 1) -> RipWorkspace:
    """The RiP sizes of an already validated layer; every size is scaled by ``elem_bytes``."""
    elem_bytes = _elem_bytes(elem_bytes)
    max_debt = closed_form_max_debt(geometry)
    workspace = max(geometry.output_elements, geometry.input_elements + max_debt)
    return RipWorkspace(input_bytes=geometry.input_elements * elem_bytes,
                        output_bytes=geometry.output_elements * elem_bytes,
                        max_debt_bytes=max_debt * elem_bytes,
                        workspace_bytes=workspace * elem_bytes)


def rip_workspace(in_hwc, out_channels, kernel, stride=(1, 1), dilation=(1, 1),
                  padding=(0, 0, 0, 0), groups=1, elem_bytes=1) -> RipWorkspace:
    """All RiP sizes (input, output, max debt, workspace ``S*``) of one layer, in bytes."""
    geometry = ConvGeometry(in_hwc, out_channels, kernel, stride, dilation, padding, groups)
    return rip_workspace_for_geometry(geometry, elem_bytes)


def rip_workspace_bytes(in_hwc, out_channels, kernel, stride=(1, 1), dilation=(1, 1),
                        padding=(0, 0, 0, 0), groups=1, elem_bytes=1) -> int:
    """Minimum corruption-free RiP workspace ``S*`` in bytes (docs/rip.md).

    ``in_hwc=(H_in, W_in, C_in)``, ``kernel=(k_h, k_w)``, ``padding=(top, bottom, left, right)``.
    """
    return rip_workspace(in_hwc, out_channels, kernel, stride, dilation, padding, groups,
                         elem_bytes).workspace_bytes


def dual_buffer_bytes(in_hwc, out_channels, kernel, stride=(1, 1), dilation=(1, 1),
                      padding=(0, 0, 0, 0), groups=1, elem_bytes=1) -> int:
    """``N_in + N_out`` in bytes: the cost of the same layer with disjoint input and output."""
    return rip_workspace(in_hwc, out_channels, kernel, stride, dilation, padding, groups,
                         elem_bytes).dual_buffer_bytes


# ------------------------------------------------------------------ channel-wise in place
INPLACE_KINDS = ("rip", "channel")
CHANNEL_KIND_OPS = ("depthwise_conv2d",)    # ops with a channel-wise in-place kernel


def _elem_bytes(elem_bytes) -> int:
    elem_bytes = _integer(elem_bytes, "elem_bytes")
    if elem_bytes < 1:
        raise RipArgumentError(f"elem_bytes must be >= 1, got {elem_bytes}")
    return elem_bytes


def _is_depthwise(geometry: ConvGeometry) -> bool:
    return geometry.groups == geometry.in_channels == geometry.out_channels


def channel_workspace_bytes(geometry: ConvGeometry, elem_bytes: int = 1) -> int:
    """``S_channel = max(N_in, N_out)`` of a depthwise layer (module docstring)."""
    if not _is_depthwise(geometry):
        raise RipArgumentError(f"the channel-wise kind needs a depthwise layer, got groups="
                               f"{geometry.groups}, {geometry.in_channels} -> "
                               f"{geometry.out_channels} channels")
    return max(geometry.input_elements, geometry.output_elements) * _elem_bytes(elem_bytes)


def channel_safe(geometry: ConvGeometry, workspace_bytes: int, elem_bytes: int = 1) -> bool:
    """Whether the channel-wise traversal is corruption-free in ``workspace_bytes``."""
    elem_bytes = _elem_bytes(elem_bytes)
    gap = workspace_bytes - geometry.input_elements * elem_bytes
    return (_is_depthwise(geometry) and workspace_bytes >= channel_workspace_bytes(
        geometry, elem_bytes) and gap % (geometry.in_channels * elem_bytes) == 0)


def channel_buffer_bytes(geometry: ConvGeometry, elem_bytes: int = 1) -> int:
    """The one-channel buffer of the channel-wise kind: the padded input plane."""
    g = geometry
    return ((g.padding[0] + g.in_height + g.padding[1]) * (g.padding[2] + g.in_width
                                                           + g.padding[3])
            * _elem_bytes(elem_bytes))


@dataclass(frozen=True)
class InPlaceChoice:
    """The in-place kind of one windowed layer and what it costs, in bytes."""

    kind: str                  # "rip" or "channel"
    workspace_bytes: int       # S, what the graph IR records as inplace workspace_bytes
    rip: RipWorkspace          # RiP's sizes (S*, gap) for comparison
    channel_buffer_bytes: int  # scratch the kind adds outside the workspace (0 for RiP)


def choose_inplace(op: str, geometry: ConvGeometry, elem_bytes: int = 1) -> InPlaceChoice:
    """The rule (module docstring): the channel kind where ``op`` has one and it needs less
    workspace than RiP's ``S*``, else RiP."""
    rip = rip_workspace_for_geometry(geometry, elem_bytes)
    if op in CHANNEL_KIND_OPS and _is_depthwise(geometry):
        channel = channel_workspace_bytes(geometry, elem_bytes)
        if channel < rip.workspace_bytes:
            return InPlaceChoice("channel", channel, rip,
                                 channel_buffer_bytes(geometry, elem_bytes))
    return InPlaceChoice("rip", rip.workspace_bytes, rip, 0)


def inplace_workspace_bytes(op: str, in_hwc, out_channels, kernel, stride=(1, 1),
                            dilation=(1, 1), padding=(0, 0, 0, 0), groups=1,
                            elem_bytes=1) -> int:
    """The in-place workspace ``S`` a graph builder records for one windowed layer (graph IR
    ``inplace={"workspace_bytes": S}``): :func:`choose_inplace`'s."""
    geometry = ConvGeometry(in_hwc, out_channels, kernel, stride, dilation, padding, groups)
    return choose_inplace(op, geometry, elem_bytes).workspace_bytes


FC_ROW_GATHER_BYTES = 2    # per input element: the row a FULLY_CONNECTED gathers in place


def fully_connected_inplace_bytes(rows: int, depth: int, units: int,
                                  elem_bytes: int = 1) -> int | None:
    """The in-place workspace of a FULLY_CONNECTED over ``rows`` rows of ``depth`` values to
    ``units`` (graph IR ``inplace``), or None where running it in place does not pay.

    Every output of a row reads the whole row, so in place the kernel first gathers the row
    (``x - zero point`` as int16: ``FC_ROW_GATHER_BYTES * depth`` bytes of scratch outside the
    arena) and then writes its outputs (RiP's ``S*`` of a 1x1 layer over ``rows`` pixels). The
    dual-buffer kernel needs no gather. So in place is offered only where its arena saving,
    ``N_in + N_out - S*``, exceeds that scratch: never for one row (the saving is at most
    ``min(N_in, N_out) <= depth`` bytes), for large batches of rows often."""
    ws = rip_workspace((rows, 1, depth), units, (1, 1), elem_bytes=elem_bytes)
    saving = ws.dual_buffer_bytes - ws.workspace_bytes
    return ws.workspace_bytes if saving > FC_ROW_GATHER_BYTES * depth else None


def inplace_kind(op: str, geometry: ConvGeometry, workspace_bytes: int,
                 elem_bytes: int = 1) -> str:
    """The traversal a kernel of ``op`` runs in a workspace of ``workspace_bytes``: RiP's
    wherever it is safe (``S >= S*``: the smaller scratch), else the channel-wise one; raises
    RipArgumentError when neither is corruption-free there."""
    workspace_bytes = _integer(workspace_bytes, "workspace_bytes")
    rip = rip_workspace_for_geometry(geometry, elem_bytes)
    if workspace_bytes >= rip.workspace_bytes:
        return "rip"
    if op in CHANNEL_KIND_OPS and channel_safe(geometry, workspace_bytes, elem_bytes):
        return "channel"
    channel = (f" nor a channel-wise one (S >= {channel_workspace_bytes(geometry, elem_bytes)}"
               f" with S - N_in a multiple of {geometry.in_channels * elem_bytes})"
               if op in CHANNEL_KIND_OPS and _is_depthwise(geometry) else "")
    raise RipArgumentError(f"workspace_bytes {workspace_bytes} is below the corruption-free "
                           f"RiP minimum S* = {rip.workspace_bytes}{channel}")
