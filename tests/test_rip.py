"""RiP workspace (docs/rip.md): closed form vs brute force vs corruption simulator, herringbone.

The simulator itself is cross-checked against ``literal_replay`` below, a cell-by-cell,
pixel-by-pixel re-statement of the same traversal with no numpy and no shared read lists.
"""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tvm_serenity.rip import (TABLE2_ROWS, ConvGeometry, CorruptionSimulator, RipArgumentError,
                              TraversalPhase, brute_force_max_debt, brute_force_min_workspace,
                              closed_form_max_debt, critical_leg, dual_buffer_bytes,
                              gural_murmann_gap, herringbone_gap, herringbone_legs,
                              herringbone_order, herringbone_phases, min_safe_workspace_by_search,
                              rip_workspace, rip_workspace_bytes, rip_workspace_for_geometry,
                              simulate_rip, table2_geometry)
from tvm_serenity.rip import (ChannelSimulator, channel_buffer_bytes, channel_safe,
                              channel_workspace_bytes, choose_inplace, inplace_kind,
                              inplace_workspace_bytes)
from tvm_serenity.rip.sweep import (FAMILIES, check_channel_kind, check_layer, main,
                                    random_layers)

VGG_CONV1_2 = dict(in_hwc=(224, 224, 64), out_channels=64, kernel=(3, 3), padding=(1, 1, 1, 1))


def literal_replay(geometry, workspace_cells, phases, gather_first):
    """First corruption as ``(step, input_index, address)``, or None: one cell at a time."""
    g = geometry
    n_in = g.input_elements
    cells = [None] * workspace_cells
    address_of = {}
    for j in range(n_in):
        cells[workspace_cells - n_in + j] = ("input", j)
        address_of[j] = workspace_cells - n_in + j
    step = 0
    for phase in phases:
        if phase.block_end_offsets is not None:
            moved = {}
            for j in range(n_in):
                if phase.block_end_offsets[j] > 0:
                    if cells[address_of[j]] != ("input", j):
                        return step, j, address_of[j]
                    moved[j] = workspace_cells - int(phase.block_end_offsets[j])
            for j, address in moved.items():
                if cells[address] is not None and cells[address][0] == "output":
                    return step, j, address
            for j, address in moved.items():
                cells[address] = ("input", j)
            address_of = moved
        for pixel in phase.pixels:
            r, c = divmod(int(pixel), g.out_width)
            writes = range(step * g.out_channels, (step + 1) * g.out_channels)
            if not gather_first:  # direct kernel: own writes may not clobber own reads
                for address in writes:
                    cells[address] = ("output", address)
            for i in range(g.kernel[0]):
                h = r * g.stride[0] - g.padding[0] + i * g.dilation[0]
                for jj in range(g.kernel[1]):
                    w = c * g.stride[1] - g.padding[2] + jj * g.dilation[1]
                    if not (0 <= h < g.in_height and 0 <= w < g.in_width):
                        continue
                    for channel in range(g.in_channels):
                        j = (h * g.in_width + w) * g.in_channels + channel
                        address = address_of.get(j, -1)
                        if address < 0 or cells[address] != ("input", j):
                            return step, j, address
            if gather_first:
                for address in writes:
                    cells[address] = ("output", address)
            step += 1
    return None


def vectorised_replay(simulator, workspace_cells):
    corruption = simulator.run(workspace_cells).corruption
    if corruption is None:
        return None
    return corruption.step, corruption.input_index, corruption.address


# --- worked numbers -------------------------------------------------------------------------

def test_vgg16_conv1_2_worked_numbers():
    sizes = rip_workspace(**VGG_CONV1_2)
    assert sizes.max_debt_bytes == 14_400
    assert sizes.workspace_bytes == rip_workspace_bytes(**VGG_CONV1_2) == 3_225_664
    assert sizes.gap_bytes == 14_400
    assert sizes.dual_buffer_bytes == dual_buffer_bytes(**VGG_CONV1_2) == 2 * 3_211_264
    assert brute_force_max_debt(ConvGeometry(**VGG_CONV1_2)) == 14_400


def test_pointwise_fits_in_its_output():
    assert rip_workspace_bytes((112, 112, 32), 64, (1, 1)) == 112 * 112 * 64 == 802_816


def test_elem_bytes_scales_every_size():
    one = rip_workspace(**VGG_CONV1_2)
    four = rip_workspace(**VGG_CONV1_2, elem_bytes=4)
    assert (four.input_bytes, four.output_bytes, four.max_debt_bytes, four.workspace_bytes) == (
        4 * one.input_bytes, 4 * one.output_bytes, 4 * one.max_debt_bytes,
        4 * one.workspace_bytes)


def test_closed_form_does_not_enumerate_the_output_grid():
    # 10^12 output pixels: any per-pixel loop would never finish.  For a same-padded 3x3 conv
    # with C_in == C_out == C the debt peaks at row 1, column 1: (W_out + 1) * C.
    n, c = 10**6, 64
    sizes = rip_workspace((n, n, c), c, (3, 3), padding=(1, 1, 1, 1))
    assert sizes.max_debt_bytes == (n + 1) * c
    assert sizes.workspace_bytes == n * n * c + (n + 1) * c
    assert rip_workspace_bytes((4096, 4096, 16), 16, (3, 3), padding=(1, 1, 1, 1)) == (
        4096 * 4096 * 16 + 4097 * 16)


def test_groups_do_not_change_the_workspace():
    plain = rip_workspace_bytes((20, 17, 12), 12, (3, 3), stride=(2, 1), padding=(1, 1, 1, 1))
    for groups in (2, 3, 4, 6, 12):
        assert rip_workspace_bytes((20, 17, 12), 12, (3, 3), stride=(2, 1),
                                   padding=(1, 1, 1, 1), groups=groups) == plain


def test_pooling_and_elementwise_need_no_gap():
    for geometry in (ConvGeometry((9, 9, 5), 5, (2, 2), stride=(2, 2), groups=5),
                     ConvGeometry((9, 9, 5), 5, (3, 3), stride=(3, 3), groups=5),
                     ConvGeometry((9, 9, 5), 5, (1, 1), groups=5)):
        assert rip_workspace_for_geometry(geometry).gap_bytes == 0
        assert min_safe_workspace_by_search(geometry) == geometry.input_elements


def test_layer_reading_only_padding():
    geometry = ConvGeometry((1, 1, 3), 4, (1, 1), stride=(3, 3), padding=(2, 2, 2, 2))
    assert (geometry.out_height, geometry.out_width) == (2, 2)
    assert brute_force_max_debt(geometry) is None
    assert closed_form_max_debt(geometry) == 0
    assert rip_workspace_for_geometry(geometry).workspace_bytes == 16
    assert min_safe_workspace_by_search(geometry) == 16


def test_output_larger_than_input_absorbs_the_gap():
    geometry = ConvGeometry((6, 6, 1), 8, (3, 3), padding=(1, 1, 1, 1))
    sizes = rip_workspace_for_geometry(geometry)
    assert sizes.max_debt_bytes > 0
    assert sizes.workspace_bytes == geometry.output_elements
    assert min_safe_workspace_by_search(geometry) == geometry.output_elements


# --- three references agree -----------------------------------------------------------------

@st.composite
def geometries(draw):
    in_channels = draw(st.integers(1, 6))
    groups = draw(st.sampled_from([g for g in (1, 2, 3) if in_channels % g == 0]))
    try:
        geometry = ConvGeometry(
            in_hwc=(draw(st.integers(1, 12)), draw(st.integers(1, 12)), in_channels),
            out_channels=groups * draw(st.integers(1, 4)),
            kernel=(draw(st.integers(1, 6)), draw(st.integers(1, 6))),
            stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
            dilation=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
            padding=tuple(draw(st.integers(0, 5)) for _ in range(4)), groups=groups)
    except RipArgumentError:
        assume(False)
    return geometry


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much])
@given(geometries())
def test_closed_form_equals_brute_force_and_simulator(geometry):
    brute = brute_force_max_debt(geometry)
    assert closed_form_max_debt(geometry) == max(0, brute if brute is not None else 0)
    s_star = rip_workspace_for_geometry(geometry).workspace_bytes
    assert s_star == brute_force_min_workspace(geometry) == min_safe_workspace_by_search(geometry)


@pytest.mark.parametrize("seed", [11, 12])
def test_sweep_families_agree(seed):
    layers = random_layers(200, seed)
    failures = [(family, geometry, check_layer(geometry, 2)[0]) for family, geometry in layers]
    assert [f for f in failures if f[2]] == []


def test_every_sweep_family_generates_layers():
    families = {family for family, _ in random_layers(3000, 0)}
    assert families == {f[0] for f in FAMILIES}


def test_s_star_is_safe_and_one_less_corrupts():
    geometry = ConvGeometry(**{**VGG_CONV1_2, "in_hwc": (12, 10, 4), "out_channels": 4})
    s_star = rip_workspace_for_geometry(geometry).workspace_bytes
    assert simulate_rip(geometry, s_star).ok
    failed = simulate_rip(geometry, s_star - 1)
    corruption = failed.corruption
    # Pixel (1, 1) is the first whose writes reach input element 0, still read by pixel (1, 1).
    assert corruption.pixel == (1, 1) and corruption.input_index == 0
    assert corruption.step == 1 * geometry.out_width + 1
    assert corruption.found.startswith("output element")


def test_simulator_rejects_a_workspace_too_small_for_the_tensors():
    geometry = ConvGeometry((4, 4, 2), 3, (1, 1))
    with pytest.raises(ValueError, match="workspace_cells"):
        simulate_rip(geometry, geometry.output_elements - 1)


def test_custom_relayouts_are_checked():
    geometry = ConvGeometry((1, 4, 1), 1, (1, 1))   # pixel p reads input p, writes cell p
    first = TraversalPhase(np.array([0, 1]))
    onto_output = TraversalPhase(np.array([2, 3]), np.array([0, 0, 4, 1]))   # 2 -> cell 0
    dropping = TraversalPhase(np.array([2, 3]), np.array([0, 0, 0, 1]))      # 2 dropped
    for phases, expected in (([first, onto_output], (2, 2, 0)), ([first, dropping], (2, 2, -1))):
        simulator = CorruptionSimulator(geometry, phases)
        assert vectorised_replay(simulator, 4) == literal_replay(geometry, 4, phases, True)
        assert vectorised_replay(simulator, 4) == expected
    with pytest.raises(ValueError, match="every output pixel exactly once"):
        CorruptionSimulator(geometry, [first])


def small_layers(count, seed):
    rng = random.Random(seed)
    layers = []
    while len(layers) < count:
        c_in = rng.randint(1, 3)
        try:
            layers.append(ConvGeometry(
                (rng.randint(1, 7), rng.randint(1, 7), c_in), rng.randint(1, 4),
                (rng.randint(1, 4), rng.randint(1, 4)),
                stride=(rng.randint(1, 2), rng.randint(1, 2)),
                dilation=(rng.randint(1, 2), rng.randint(1, 2)),
                padding=tuple(rng.randint(0, 3) for _ in range(4))))
        except RipArgumentError:
            continue
    return layers


@pytest.mark.parametrize("traversal", ["row-major", "herringbone"])
@pytest.mark.parametrize("gather_first", [True, False])
def test_vectorised_simulator_matches_literal_replay(traversal, gather_first):
    for geometry in small_layers(40, seed=5):
        if traversal == "row-major":
            phases = [TraversalPhase(np.arange(geometry.output_pixels))]
        else:
            phases = herringbone_phases(geometry)
        simulator = CorruptionSimulator(geometry, phases, gather_first)
        minimum = simulator.min_safe_workspace()
        low = max(geometry.input_elements, geometry.output_elements)
        for cells in {low, max(low, minimum - 1), minimum, minimum + 3}:
            assert vectorised_replay(simulator, cells) == literal_replay(
                geometry, cells, phases, gather_first), (geometry, cells)


# --- argument validation --------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    (dict(in_hwc=(8, 8)), "in_hwc"),
    (dict(in_hwc=(8, 0, 3)), "in_hwc"),
    (dict(in_hwc=(8, 8.5, 3)), "in_hwc"),
    (dict(out_channels=0), "out_channels"),
    (dict(out_channels=True), "out_channels"),
    (dict(kernel=(3, 0)), "kernel"),
    (dict(kernel=(3, 3, 3)), "kernel"),
    (dict(stride=(0, 1)), "stride"),
    (dict(dilation=(1, -1)), "dilation"),
    (dict(padding=(1, 1)), "padding"),
    (dict(padding=(1, 1, -1, 1)), "padding"),
    (dict(groups=0), "groups"),
    (dict(groups=5), "groups"),
    (dict(kernel=(9, 3)), "output height"),
    (dict(kernel=(3, 5), dilation=(1, 3)), "output width"),
    (dict(elem_bytes=0), "elem_bytes"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    arguments = dict(in_hwc=(8, 8, 4), out_channels=8, kernel=(3, 3))
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=field):
        rip_workspace_bytes(**arguments)


def test_gural_murmann_form_rejects_its_unsupported_domain():
    with pytest.raises(ValueError, match="out_channels > in_channels"):
        gural_murmann_gap(8, 8, 3, 10)
    with pytest.raises(ValueError, match="odd"):
        gural_murmann_gap(1, 5, 4, 10)


# --- herringbone ----------------------------------------------------------------------------

@pytest.mark.parametrize("height, width", [(1, 1), (1, 6), (6, 1), (4, 4), (3, 7), (7, 3)])
def test_herringbone_order_visits_every_pixel_once(height, width):
    order = herringbone_order(height, width)
    assert sorted(order.tolist()) == list(range(height * width))
    for kind, i, pixels in herringbone_legs(height, width):
        rows, cols = np.divmod(pixels, width)
        if kind == "row":
            assert (rows == i).all() and cols.tolist() == list(range(i, width))
        else:
            assert (cols == i).all() and rows.tolist() == list(range(i + 1, height))


def test_herringbone_legs_of_a_wide_grid():
    assert herringbone_order(3, 5).tolist() == [0, 1, 2, 3, 4, 5, 10, 6, 7, 8, 9, 11, 12, 13, 14]


@pytest.mark.parametrize("row", TABLE2_ROWS, ids=lambda row: "x".join(map(str, row[:4])))
def test_table2_reproduced(row):
    c_in, c_out, k, n, paper_gm, paper_truth = row
    assert gural_murmann_gap(c_in, c_out, k, n) == paper_gm
    assert herringbone_gap(table2_geometry(c_in, c_out, k, n)) == paper_truth
    if critical_leg(c_in, c_out, k) < n - k + 1:   # limitation 1: exact under-allocation
        assert paper_gm - paper_truth == -(((k - 1) * c_in) % (c_out - c_in))


def test_table2_needs_both_transposes_and_the_direct_kernel():
    gather_first, no_transposes = [], []
    for c_in, c_out, k, n, _, _ in TABLE2_ROWS:
        geometry = table2_geometry(c_in, c_out, k, n)
        gather_first.append(herringbone_gap(geometry, gather_first=True))
        plain_order = [TraversalPhase(herringbone_order(geometry.out_height, geometry.out_width))]
        no_transposes.append(CorruptionSimulator(geometry, plain_order, gather_first=False)
                             .min_safe_workspace() - geometry.input_elements)
    assert gather_first == [528, 141, 35, 3]
    assert no_transposes == [559, 299, 196, 7]


# --- the sweep tool -------------------------------------------------------------------------

def test_sweep_tool_passes(capsys):
    assert main(["--layers", "150", "--seed", "4", "--herringbone", "10"]) == 0
    output = capsys.readouterr().out
    assert "150 layers" in output and "0 failed checks" in output


# --- the channel-wise in-place kind (depthwise) ----------------------------------------------

def test_channel_kind_on_mcunet_320kb_b1_dw():
    """b1/dw of MCUNet-320kb (88x88x24, 7x7, stride 2, TF-same): RiP needs a gap of
    1,080 B, the channel-wise kind none (its 93x93 channel buffer is scratch)."""
    geometry = ConvGeometry((88, 88, 24), 24, 7, 2, padding=(2, 3, 2, 3), groups=24)
    choice = choose_inplace("depthwise_conv2d", geometry)
    assert (choice.kind, choice.workspace_bytes, choice.rip.workspace_bytes,
            choice.channel_buffer_bytes) == ("channel", 88 * 88 * 24, 186_936, 93 * 93)
    assert inplace_workspace_bytes("depthwise_conv2d", (88, 88, 24), 24, 7, 2,
                                   padding=(2, 3, 2, 3), groups=24) == 185_856
    simulator = ChannelSimulator(geometry)
    assert simulator.run(185_856).ok
    corruption = simulator.run(185_857).corruption
    # one byte of gap: input element 23 (pixel 0, channel 23) sits at cell 24, where
    # channel 0 already wrote output pixel 1
    assert corruption.step == 23 and corruption.input_index == 23
    assert corruption.found.startswith("output element")
    assert not CorruptionSimulator(geometry).run(185_856).ok    # RiP's order would corrupt


def test_channel_kind_only_for_depthwise_convolutions():
    depthwise = ConvGeometry((9, 9, 8), 8, 3, padding=(1, 1, 1, 1), groups=8)
    assert choose_inplace("depthwise_conv2d", depthwise).kind == "channel"
    for op in ("max_pool2d", "avg_pool2d", "conv2d"):      # no channel-wise kernel for them
        assert choose_inplace(op, depthwise).kind == "rip"
    grouped = ConvGeometry((9, 9, 8), 8, 3, padding=(1, 1, 1, 1), groups=4)
    assert choose_inplace("depthwise_conv2d", grouped).kind == "rip"
    with pytest.raises(RipArgumentError, match="depthwise"):
        channel_workspace_bytes(grouped)
    with pytest.raises(RipArgumentError, match="depthwise"):
        ChannelSimulator(grouped)
    no_gap = ConvGeometry((9, 9, 8), 8, 1, groups=8)        # 1x1: RiP is already gap-free
    assert choose_inplace("depthwise_conv2d", no_gap).kind == "rip"


def test_inplace_kind_of_a_workspace():
    geometry = ConvGeometry((9, 9, 8), 8, 3, padding=(1, 1, 1, 1), groups=8)
    s_star = rip_workspace_bytes((9, 9, 8), 8, 3, padding=(1, 1, 1, 1), groups=8)
    assert inplace_kind("depthwise_conv2d", geometry, s_star) == "rip"
    assert inplace_kind("depthwise_conv2d", geometry, 648) == "channel"
    assert inplace_kind("depthwise_conv2d", geometry, 656) == "channel"   # gap of one channel
    assert not channel_safe(geometry, 650)
    with pytest.raises(RipArgumentError, match="nor a channel-wise one"):
        inplace_kind("depthwise_conv2d", geometry, 650)
    with pytest.raises(RipArgumentError, match="below the corruption-free RiP minimum"):
        inplace_kind("max_pool2d", geometry, 648)
    assert channel_buffer_bytes(geometry, 2) == 2 * 11 * 11


def test_channel_simulator_matches_the_rule_on_random_depthwise_layers():
    """Every admitted workspace passes the simulator, one byte of misalignment corrupts, and
    the minimum the simulator finds is ``S_channel``."""
    layers = [g for family, g in random_layers(600, 21) if family == "depthwise"]
    assert len(layers) > 20
    for geometry in layers:
        assert check_channel_kind(geometry, 2) == [], geometry
        safe = ChannelSimulator(geometry).safe_workspaces(channel_workspace_bytes(geometry) + 3)
        assert safe[0] == channel_workspace_bytes(geometry)


# ----------------------------------------------- the channel-wise kind only where the peak needs it
@pytest.mark.parametrize("name", ["mcunet-320kb-1mb", "mcunet-5fps", "mbv2-w0.35-r144"])
def test_relaxed_channel_kinds_keep_the_peak_and_are_maximal(name):
    """relax_channel_kinds on a zoo network and its optimal order: the order's liveness peak
    is unchanged, every relaxed layer now has RiP's S* (so its kernel needs no channel
    buffer), and every layer left channel-wise would raise the peak with RiP's S*, checked
    one at a time by the memory simulator."""
    import dataclasses

    from tvm_serenity import zoo
    from tvm_serenity.graph import Graph
    from tvm_serenity.memory import simulate
    from tvm_serenity.rip import relax_channel_kinds, rip_workspace_bytes
    from tvm_serenity.schedule import schedule

    graph = zoo.build(name)
    order = schedule(graph, "serenity").order
    peak = simulate(graph, order).peak_bytes
    relaxed, names = relax_channel_kinds(graph, order)
    assert names and simulate(relaxed, order).peak_bytes == peak

    def rip_of(g, n):
        node, (_, h, w, c) = g[n], g[g[n].inputs[0]].shape
        a = node.attrs
        return rip_workspace_bytes((h, w, c), node.shape[3], tuple(a["kernel"]),
                                   tuple(a["stride"]), tuple(a["dilation"]),
                                   tuple(a["padding"]), a["groups"])

    channel = [n for n in order if graph[n].op == "depthwise_conv2d"
               and graph[n].inplace != rip_of(graph, n)]
    assert set(names) <= set(channel)
    for n in names:
        assert relaxed[n].inplace == rip_of(graph, n) > graph[n].inplace
    for n in set(channel) - set(names):
        assert relaxed[n].inplace == graph[n].inplace
        trial = Graph([dataclasses.replace(v, inplace=rip_of(graph, n)) if v.name == n else v
                       for v in relaxed.nodes.values()], relaxed.outputs)
        assert simulate(trial, order).peak_bytes > peak, n
