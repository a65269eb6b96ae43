"""Right In-Place (RiP) convolution workspace math (docs/rip.md).

* ``workspace``: the O(kernel) closed form of the minimum corruption-free workspace ``S*``
  (``rip_workspace_bytes`` is the stable entry point), the validated layer description, and
  the channel-wise in-place kind of depthwise layers with the one rule that picks a layer's
  kind (``choose_inplace``; ``inplace_workspace_bytes`` is what graph builders record), and
  whether a FULLY_CONNECTED runs in place at all (``fully_connected_inplace_bytes``: only
  where the arena saving beats its row gather).
* ``choice``: for a fixed order, the channel-wise kind kept only on the layers the order's
  peak needs it on (``relax_channel_kinds``; the others get RiP's workspace and no channel
  buffer).
* ``reference``: the two independent checks, a brute-force ``max_q D(q)`` and a tagged-cell
  corruption simulator with a binary search for the smallest safe workspace, and the
  channel-wise kind's tagged-cell simulator.
* ``herringbone``: Gural & Murmann's herringbone traversal, its generalized bound computed by
  the same simulator, and their closed form, for comparison.
* ``sweep``: ``python -m tvm_serenity.rip.sweep --layers 10000 --seed 0`` checks all of them
  against each other on random layers.
"""

from .choice import relax_channel_kinds, window_geometry
from .herringbone import (TABLE2_ROWS, critical_leg, gural_murmann_gap, herringbone_gap,
                          herringbone_legs, herringbone_min_workspace, herringbone_order,
                          herringbone_phases, herringbone_simulator, table2_geometry)
from .reference import (ChannelSimulator, Corruption, CorruptionSimulator, SimulationResult,
                        TraversalPhase, brute_force_max_debt, brute_force_min_workspace,
                        min_safe_workspace_by_search, receptive_field_reads, simulate_rip)
from .workspace import (CHANNEL_KIND_OPS, FC_ROW_GATHER_BYTES, INPLACE_KINDS, ConvGeometry,
                        InPlaceChoice, fully_connected_inplace_bytes,
                        RipArgumentError, RipWorkspace, channel_buffer_bytes, channel_safe,
                        channel_workspace_bytes, choose_inplace, closed_form_max_debt,
                        dual_buffer_bytes, inplace_kind, inplace_workspace_bytes,
                        rip_workspace, rip_workspace_bytes, rip_workspace_for_geometry)

__all__ = [
    "ConvGeometry", "RipArgumentError", "RipWorkspace", "closed_form_max_debt",
    "dual_buffer_bytes", "rip_workspace", "rip_workspace_bytes", "rip_workspace_for_geometry",
    "CHANNEL_KIND_OPS", "INPLACE_KINDS", "InPlaceChoice", "channel_buffer_bytes",
    "channel_safe", "channel_workspace_bytes", "choose_inplace", "inplace_kind",
    "inplace_workspace_bytes", "relax_channel_kinds", "window_geometry", "FC_ROW_GATHER_BYTES", "fully_connected_inplace_bytes",
    "ChannelSimulator", "Corruption", "CorruptionSimulator",
    "SimulationResult", "TraversalPhase",
    "brute_force_max_debt", "brute_force_min_workspace", "min_safe_workspace_by_search",
    "receptive_field_reads", "simulate_rip",
    "TABLE2_ROWS", "critical_leg", "gural_murmann_gap", "herringbone_gap", "herringbone_legs",
    "herringbone_min_workspace", "herringbone_order", "herringbone_phases",
    "herringbone_simulator", "table2_geometry",
]
