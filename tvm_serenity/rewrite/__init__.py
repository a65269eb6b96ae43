"""Identity graph rewriting on the graph IR (SERENITY, docs/serenity.md).

* :mod:`.patterns`: matching ``concat -> (unary ops) -> conv2d | depthwise_conv2d`` and the two
  rewrites, **channel-wise partitioning** (partial convolutions accumulated in one int32
  buffer, requantized once) and **kernel-wise partitioning** (depthwise slices written straight
  into the output: a free concat), both bit-identical in int8 and expressed with the graph IR's
  own in-place semantics, so the one memory model prices them;
* :mod:`.search`: :func:`rewrite_graph` keeps a rewrite only when the exact scheduler's peak
  drops.

Every node a rewrite creates records its origin in ``attrs["rewrite"]`` for the Relax pass
that replays the decisions.
"""

from .patterns import (ACCUMULATOR_BYTES, CHANNEL, KERNEL, UNARY, Branch, Candidate,
                       apply_rewrite, concat_branches, find_candidates)
from .search import RewriteResult, Trial, accumulation_order, rewrite_graph

__all__ = ["CHANNEL", "KERNEL", "UNARY", "ACCUMULATOR_BYTES", "Branch", "Candidate",
           "concat_branches", "find_candidates", "apply_rewrite", "accumulation_order",
           "Trial", "RewriteResult", "rewrite_graph"]
