"""Identity graph rewriting on the graph IR (SERENITY, docs/serenity.md).

* :mod:`.patterns`: matching ``concat -> (unary ops) -> conv2d | depthwise_conv2d`` and the two
  rewrites, **channel-wise partitioning** (partial convolutions accumulated in one int32
  buffer, requantized once) and **kernel-wise partitioning** (depthwise slices written straight
  into the output: a free concat), both bit-identical in int8 and expressed with the graph IR's
  own in-place semantics, so the one memory model prices them; and **expand-depthwise
  fusion** (a 1x1 expand conv computed channel by channel into a one-channel plane that its
  depthwise consumer reads: the expanded tensor never exists);
* :mod:`.search`: :func:`rewrite_graph` keeps a rewrite only when the exact scheduler's peak
  drops.

Every node a rewrite creates records its origin in ``attrs["rewrite"]`` for the Relax pass
that replays the decisions.
"""

from .patterns import (ACCUMULATOR_BYTES, CHANNEL, FUSE, FUSED_OP, KERNEL, PATTERN_NAMES,
                       PATTERNS, UNARY,
                       Branch, Candidate, Fusion, apply_rewrite, concat_branches,
                       find_candidates)
from .search import RewriteResult, Trial, accumulation_order, rewrite_graph

__all__ = ["CHANNEL", "KERNEL", "UNARY", "FUSE", "FUSED_OP", "PATTERNS", "PATTERN_NAMES",
           "ACCUMULATOR_BYTES",
           "Branch", "Candidate", "Fusion",
           "concat_branches", "find_candidates", "apply_rewrite", "accumulation_order",
           "Trial", "RewriteResult", "rewrite_graph"]
