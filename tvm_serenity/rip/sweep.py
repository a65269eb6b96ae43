"""Random-layer sweep: the RiP closed form against both references, family by family.

    python -m tvm_serenity.rip.sweep --layers 10000 --seed 0 [--herringbone 300]

Draws layers from geometry families modelled on the RiP paper's Table 5 (tier 1: geometry that
shipping models are built from; tier 2: small-grid and degenerate regimes; tier 3: the corners
generality requires).  Layers are kept small (grids up to 24 x 24, up to 24 channels) so the
brute force and the simulator stay cheap.  For every layer it checks

* closed form ``max(0, max D)`` == brute-force ``max(0, max D)``,
* closed form ``S*`` == brute-force ``S*`` == binary-search minimum of the corruption simulator,
* the simulator passes at ``S*`` and, whenever ``S* > max(N_in, N_out)``, corrupts at ``S* - 1``,
* ``elem_bytes`` scales every size exactly,
* on depthwise layers, the channel-wise in-place kind: the channel simulator passes at
  ``S_channel = max(N_in, N_out)`` (below which nothing fits), at every ``S`` up to
  ``S_channel + 2C`` that ``channel_safe`` admits, and corrupts at ``S_channel + 1`` whenever
  ``C > 1`` and there are two output pixels; :func:`~.workspace.choose_inplace` takes it
  exactly when ``S_channel < S*``,

then prints a per-family table, the Table 2 reproduction (Gural & Murmann's closed form next
to the herringbone simulator), optionally RiP against the generalized herringbone bound on
the first ``--herringbone`` layers, and a final count line.  Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict

from .herringbone import (TABLE2_ROWS, critical_leg, gural_murmann_gap, herringbone_gap,
                          herringbone_min_workspace, table2_geometry)
from .reference import (ChannelSimulator, CorruptionSimulator, brute_force_max_debt,
                        brute_force_min_workspace)
from .workspace import (ConvGeometry, RipArgumentError, channel_safe, channel_workspace_bytes,
                        choose_inplace, rip_workspace_for_geometry)

MAX_GRID = 24
MAX_CHANNELS = 24


def _channels(rng: random.Random) -> int:
    return rng.randint(1, MAX_CHANNELS)


def _grid(rng: random.Random, low: int = 1) -> tuple[int, int]:
    return rng.randint(low, MAX_GRID), rng.randint(low, MAX_GRID)


def _plain(rng):
    k = rng.randint(1, 7)
    h, w = _grid(rng, k)
    return dict(in_hwc=(h, w, _channels(rng)), out_channels=_channels(rng), kernel=(k, k))


def _same_padding(rng):
    k = rng.randint(1, 7)
    p = k // 2
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng),
                kernel=(k, k), padding=(p, p, p, p))


def _strided(rng):
    k = rng.choice((1, 2, 3, 3, 5))
    s = rng.choice((2, 2, 3))
    p = rng.choice((0, k // 2))
    return dict(in_hwc=(*_grid(rng, 2), _channels(rng)), out_channels=_channels(rng),
                kernel=(k, k), stride=(s, s), padding=(p, p, p, p))


def _expansion(rng):
    c = rng.randint(1, 4)
    k = rng.choice((1, 1, 3))
    p = k // 2
    return dict(in_hwc=(*_grid(rng), c), out_channels=c * rng.randint(2, 6), kernel=(k, k),
                padding=(p, p, p, p))


def _projection(rng):
    c_in = rng.randint(2, MAX_CHANNELS)
    k = rng.choice((1, 1, 3))
    p = k // 2
    return dict(in_hwc=(*_grid(rng), c_in), out_channels=rng.randint(1, c_in), kernel=(k, k),
                padding=(p, p, p, p))


def _pointwise(rng):
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng), kernel=(1, 1))


def _depthwise(rng):
    c = _channels(rng)
    k = rng.choice((3, 3, 5, 7))
    s = rng.choice((1, 1, 2))
    p = k // 2
    return dict(in_hwc=(*_grid(rng), c), out_channels=c, kernel=(k, k), stride=(s, s),
                padding=(p, p, p, p), groups=c)


def _collapsed_minor_axis(rng):
    n = rng.randint(1, 3)
    k = rng.randint(1, 5)
    kw = rng.randint(1, n)
    p = rng.choice((0, k // 2))
    return dict(in_hwc=(rng.randint(k, MAX_GRID), n, _channels(rng)),
                out_channels=_channels(rng), kernel=(k, kw), padding=(p, p, 0, 0))


def _collapsed_major_axis(rng):
    n = rng.randint(1, 3)
    k = rng.randint(1, 5)
    p = rng.choice((0, 1))
    return dict(in_hwc=(n, rng.randint(k, MAX_GRID), _channels(rng)),
                out_channels=_channels(rng), kernel=(rng.randint(1, n + 2 * p), k),
                padding=(p, p, p, p))


def _tiny_output(rng):
    h, w = rng.randint(1, 4), rng.randint(1, 4)
    return dict(in_hwc=(h, w, _channels(rng)), out_channels=_channels(rng),
                kernel=(rng.randint(max(1, h - 1), h), rng.randint(max(1, w - 1), w)))


def _line_kernel(rng):
    k = rng.randint(2, 7)
    kernel = rng.choice(((1, k), (k, 1)))
    p = k // 2
    padding = (0, 0, p, p) if kernel[0] == 1 else (p, p, 0, 0)
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng),
                kernel=kernel, padding=padding)


def _single_channel(rng):
    c_in, c_out = rng.choice(((1, _channels(rng)), (_channels(rng), 1), (1, 1)))
    k = rng.randint(1, 5)
    p = rng.choice((0, k // 2))
    return dict(in_hwc=(*_grid(rng), c_in), out_channels=c_out, kernel=(k, k),
                padding=(p, p, p, p))


def _dilated(rng):
    k = rng.choice((2, 3, 3, 5))
    d = rng.randint(2, 4)
    p = rng.choice((0, d * (k // 2)))
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng),
                kernel=(k, k), dilation=(d, rng.choice((1, d))), padding=(p, p, p, p))


def _tf_same_padding(rng):
    """TensorFlow "SAME": total padding split with the extra row/column at the bottom/right."""
    h, w = _grid(rng)
    kh, kw = rng.randint(1, 6), rng.randint(1, 6)
    s = rng.choice((1, 2, 2, 3))
    pads = []
    for n, k in ((h, kh), (w, kw)):
        total = max((-(-n // s) - 1) * s + k - n, 0)
        pads += [total // 2, total - total // 2]
    return dict(in_hwc=(h, w, _channels(rng)), out_channels=_channels(rng), kernel=(kh, kw),
                stride=(s, s), padding=tuple(pads))


def _padding_exceeds_kernel(rng):
    k = rng.randint(1, 3)
    padding = tuple(rng.randint(k, k + 4) for _ in range(4))
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng),
                kernel=(k, k), stride=(rng.randint(1, 3),) * 2,
                dilation=(rng.randint(1, 2),) * 2, padding=padding)


def _rectangular_kernel(rng):
    kh, kw = rng.sample(range(1, 8), 2)
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng),
                kernel=(kh, kw), stride=(rng.randint(1, 2), rng.randint(1, 2)),
                padding=(kh // 2, (kh - 1) // 2, kw // 2, (kw - 1) // 2))


def _grouped(rng):
    groups = rng.choice((2, 3, 4))
    k = rng.choice((1, 3, 3, 5))
    p = k // 2
    return dict(in_hwc=(*_grid(rng), groups * rng.randint(1, 4)),
                out_channels=groups * rng.randint(1, 4), kernel=(k, k),
                stride=(rng.choice((1, 1, 2)),) * 2, padding=(p, p, p, p), groups=groups)


def _stride_exceeds_kernel(rng):
    k = rng.randint(1, 3)
    s = rng.randint(k + 1, k + 4)
    return dict(in_hwc=(*_grid(rng), _channels(rng)), out_channels=_channels(rng),
                kernel=(k, k), stride=(s, rng.randint(1, s)))


def _output_exceeds_input(rng):
    c_in = rng.randint(1, 3)
    k = rng.randint(1, 5)
    p = rng.randint(k // 2, k)
    return dict(in_hwc=(*_grid(rng), c_in), out_channels=c_in * rng.randint(3, 5),
                kernel=(k, k), padding=(p, p, p, p))


def _pooling_or_elementwise(rng):
    c = _channels(rng)
    if rng.random() < 0.5:  # elementwise: 1x1, channel count kept
        return dict(in_hwc=(*_grid(rng), c), out_channels=c, kernel=(1, 1), groups=c)
    k = rng.choice((2, 3))
    s = rng.choice((1, k))
    return dict(in_hwc=(*_grid(rng, k), c), out_channels=c, kernel=(k, k), stride=(s, s),
                groups=c)


def _anything(rng):
    c_in = _channels(rng)
    groups = rng.choice([g for g in (1, 2, 3, 4) if c_in % g == 0])
    return dict(in_hwc=(*_grid(rng), c_in), out_channels=groups * rng.randint(1, 4),
                kernel=(rng.randint(1, 6), rng.randint(1, 6)),
                stride=(rng.randint(1, 3), rng.randint(1, 3)),
                dilation=(rng.randint(1, 3), rng.randint(1, 3)),
                padding=tuple(rng.randint(0, 4) for _ in range(4)), groups=groups)


# (family, tier, relative share, generator)
FAMILIES = (
    ("plain k in [1,7]", 1, 10, _plain),
    ("same padding p=floor(k/2)", 1, 8, _same_padding),
    ("strided downsampling", 1, 6, _strided),
    ("inverted-bottleneck expansion", 1, 5, _expansion),
    ("projection C_out<=C_in", 1, 5, _projection),
    ("pointwise 1x1", 1, 5, _pointwise),
    ("depthwise", 1, 6, _depthwise),
    ("collapsed minor axis n<=3", 2, 7, _collapsed_minor_axis),
    ("collapsed major axis n<=3", 2, 4, _collapsed_major_axis),
    ("tiny output grid", 2, 4, _tiny_output),
    ("1xN / Nx1 kernel", 2, 4, _line_kernel),
    ("single channel in or out", 2, 4, _single_channel),
    ("dilation", 3, 4, _dilated),
    ("asymmetric TF-same padding", 3, 4, _tf_same_padding),
    ("padding larger than kernel", 3, 4, _padding_exceeds_kernel),
    ("rectangular kernel", 3, 4, _rectangular_kernel),
    ("grouped", 3, 4, _grouped),
    ("stride larger than kernel", 3, 3, _stride_exceeds_kernel),
    ("output larger than input", 3, 3, _output_exceeds_input),
    ("pooling / elementwise", 3, 3, _pooling_or_elementwise),
    ("anything goes", 3, 3, _anything),
)


def random_layers(count: int, seed: int) -> list[tuple[str, ConvGeometry]]:
    """``count`` valid layers ``(family, geometry)``; the same seed gives the same layers."""
    rng = random.Random(seed)
    names = [f[0] for f in FAMILIES]
    weights = [f[2] for f in FAMILIES]
    generator_of = {f[0]: f[3] for f in FAMILIES}
    layers = []
    while len(layers) < count:
        family = rng.choices(names, weights)[0]
        try:
            layers.append((family, ConvGeometry(**generator_of[family](rng))))
        except RipArgumentError:  # the draw does not fit its input: draw again
            continue
    return layers


def check_layer(geometry: ConvGeometry, elem_bytes: int) -> tuple[list[str], bool]:
    """Every consistency check on one layer: (failures, whether ``S*`` is tight, i.e.
    ``S* > max(N_in, N_out)``)."""
    failures = []
    closed = rip_workspace_for_geometry(geometry)
    brute_debt = brute_force_max_debt(geometry)
    brute_debt = max(0, brute_debt) if brute_debt is not None else 0
    if closed.max_debt_bytes != brute_debt:
        failures.append(f"max debt: closed form {closed.max_debt_bytes} != brute force "
                        f"{brute_debt}")
    brute_workspace = brute_force_min_workspace(geometry)
    simulator = CorruptionSimulator(geometry)
    searched = simulator.min_safe_workspace()
    s_star = closed.workspace_bytes
    if not s_star == brute_workspace == searched:
        failures.append(f"S*: closed form {s_star}, brute force {brute_workspace}, "
                        f"simulator search {searched}")
    at_s_star = simulator.run(s_star)
    if not at_s_star.ok:
        failures.append(f"corrupts at S*={s_star}: {at_s_star.corruption}")
    tight = s_star > max(geometry.input_elements, geometry.output_elements)
    if tight and simulator.run(s_star - 1).ok:
        failures.append(f"S*-1={s_star - 1} does not corrupt")
    scaled = rip_workspace_for_geometry(geometry, elem_bytes)
    if (scaled.workspace_bytes, scaled.max_debt_bytes, scaled.input_bytes,
            scaled.output_bytes) != tuple(elem_bytes * v for v in (
                s_star, closed.max_debt_bytes, closed.input_bytes, closed.output_bytes)):
        failures.append(f"elem_bytes={elem_bytes} does not scale every size")
    if geometry.groups == geometry.in_channels == geometry.out_channels:
        failures += check_channel_kind(geometry, elem_bytes)
    return failures, tight


def check_channel_kind(geometry: ConvGeometry, elem_bytes: int) -> list[str]:
    """The channel-wise in-place kind of a depthwise layer against its simulator."""
    failures = []
    simulator = ChannelSimulator(geometry)
    s_channel = channel_workspace_bytes(geometry)
    channels = geometry.in_channels
    for s in range(s_channel, s_channel + 2 * channels + 1):
        if channel_safe(geometry, s) and not simulator.run(s).ok:
            failures.append(f"channel kind corrupts at admitted S={s}: {simulator.run(s)}")
    if channels > 1 and geometry.output_pixels > 1 and simulator.run(s_channel + 1).ok:
        failures.append(f"channel kind: S_channel+1={s_channel + 1} does not corrupt")
    choice = choose_inplace("depthwise_conv2d", geometry)
    rip = rip_workspace_for_geometry(geometry).workspace_bytes
    if (choice.kind == "channel") != (s_channel < rip) or choice.workspace_bytes != min(
            s_channel, rip):
        failures.append(f"choose_inplace {choice} with S_channel={s_channel}, S*={rip}")
    if channel_workspace_bytes(geometry, elem_bytes) != elem_bytes * s_channel:
        failures.append(f"elem_bytes={elem_bytes} does not scale S_channel")
    return failures


def _table2_report() -> list[str]:
    """Print Table 2 (closed form vs simulator) and return its mismatches."""
    print("\nTable 2 (RiP paper): Gural & Murmann Eq. 1 vs herringbone simulator "
          "(direct kernel, transposes)")
    print(f"{'C_in':>5} {'C_out':>5} {'k':>3} {'H=W':>4} {'x*':>6} {'G&M':>5} {'Truth':>6} "
          f"{'Err':>5} {'paper':>11} {'RiP gap':>8}")
    failures = []
    for c_in, c_out, k, n, paper_gm, paper_truth in TABLE2_ROWS:
        geometry = table2_geometry(c_in, c_out, k, n)
        gm = gural_murmann_gap(c_in, c_out, k, n)
        truth = herringbone_gap(geometry)
        rip_gap = rip_workspace_for_geometry(geometry).gap_bytes
        print(f"{c_in:>5} {c_out:>5} {k:>3} {n:>4} {float(critical_leg(c_in, c_out, k)):>6.1f} "
              f"{gm:>5} {truth:>6} {gm - truth:>+5} {f'{paper_gm}/{paper_truth}':>11} "
              f"{rip_gap:>8}")
        if (gm, truth) != (paper_gm, paper_truth):
            failures.append(f"Table 2 row {(c_in, c_out, k, n)}: got G&M {gm}, Truth {truth}; "
                            f"paper {paper_gm}, {paper_truth}")
    return failures


def _herringbone_report(layers: list[tuple[str, ConvGeometry]]) -> None:
    """RiP's ``S*`` against the generalized herringbone bound (both kernels)."""
    print(f"\nRiP vs generalized herringbone bound on {len(layers)} layers "
          f"(ratio = RiP S* / herringbone S)")
    print(f"{'herringbone kernel':<22} {'exact':>6} {'<=5%':>6} {'RiP smaller':>12} "
          f"{'max ratio':>10} {'min ratio':>10}")
    for label, gather_first in (("direct (G&M)", False), ("gather-first", True)):
        ratios = [rip_workspace_for_geometry(g).workspace_bytes
                  / herringbone_min_workspace(g, gather_first) for _, g in layers]
        print(f"{label:<22} {sum(r == 1 for r in ratios):>6} "
              f"{sum(r <= 1.05 for r in ratios):>6} {sum(r < 1 for r in ratios):>12} "
              f"{max(ratios):>10.3f} {min(ratios):>10.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=10000, help="random layers to check")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--herringbone", type=int, default=0, metavar="N",
                        help="also compare RiP with the herringbone bound on the first N layers")
    args = parser.parse_args(argv)

    layers = random_layers(args.layers, args.seed)
    elem_rng = random.Random(args.seed + 1)
    started = time.perf_counter()
    stats = defaultdict(lambda: defaultdict(int))
    saving = defaultdict(float)
    failures = []
    for index, (family, geometry) in enumerate(layers):
        layer_failures, tight = check_layer(geometry, elem_rng.choice((1, 2, 4)))
        workspace = rip_workspace_for_geometry(geometry)
        family_stats = stats[family]
        family_stats["layers"] += 1
        family_stats["tight"] += tight
        family_stats["S*=N_out"] += workspace.workspace_bytes == workspace.output_bytes
        family_stats["gap 0"] += workspace.gap_bytes == 0
        family_stats["channel"] += choose_inplace("depthwise_conv2d", geometry).kind == "channel"
        family_stats["mismatches"] += bool(layer_failures)
        saving[family] += 1 - workspace.workspace_bytes / workspace.dual_buffer_bytes
        failures += [f"layer {index} [{family}] {geometry}: {f}" for f in layer_failures]
    elapsed = time.perf_counter() - started

    columns = ("layers", "tight", "S*=N_out", "gap 0", "channel", "mismatches")
    print(f"{'family':<32} {'tier':>4} " + " ".join(f"{c:>10}" for c in columns)
          + f" {'save vs dual':>13}")
    for family, tier, _, _ in FAMILIES:
        if family in stats:
            row = stats[family]
            print(f"{family:<32} {tier:>4} " + " ".join(f"{row[c]:>10}" for c in columns)
                  + f" {100 * saving[family] / row['layers']:>12.1f}%")
    totals = {c: sum(row[c] for row in stats.values()) for c in columns}
    print(f"{'total':<32} {'':>4} " + " ".join(f"{totals[c]:>10}" for c in columns)
          + f" {100 * sum(saving.values()) / len(layers):>12.1f}%")

    failures += _table2_report()
    if args.herringbone:
        _herringbone_report(layers[:args.herringbone])

    for failure in failures[:20]:
        print("MISMATCH", failure)
    print(f"\nsweep seed={args.seed}: {len(layers)} layers in {len(stats)} families, "
          f"{totals['mismatches']} layer mismatches, {len(failures)} failed checks "
          f"(closed form == brute force == simulator search; S* safe; S*-1 corrupts on "
          f"{totals['tight']} tight layers; channel kind 0 corruptions, taken on "
          f"{totals['channel']} depthwise layers); {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
