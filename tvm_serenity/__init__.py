"""tvm-serenity: make neural networks fit microcontroller SRAM.

Memory-aware operator ordering (SERENITY), Right In-Place convolution, optimal arena planning
and deployment to Raspberry Pi Pico boards, as an Apache TVM (Relax + TIR) plugin.

The algorithms (``graph``, ``memory``, ``schedule``, ``alloc``, ``rewrite``, ``rip``) never
import TVM; ``passes`` and ``codegen`` do.
"""

from .errors import SerenityError
from .graph import Graph, GraphError, Node
from .memory import MemoryModel, lower_bound_bytes, simulate, validate_order

__version__ = "0.1.0"

__all__ = ["SerenityError", "Graph", "GraphError", "Node", "MemoryModel", "simulate",
           "validate_order", "lower_bound_bytes", "__version__"]
