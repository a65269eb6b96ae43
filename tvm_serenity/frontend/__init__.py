"""The int8 TFLite front end, without TVM.

* :mod:`.tflite_model`: read a ``.tflite`` into a typed, validated :class:`TFLiteModel`;
* :mod:`.reference`: the numpy int8 reference interpreter, bit-exact with TFLite Micro (and
  LiteRT's reference kernels); its functions are the specification of every generated kernel;
* :mod:`.to_graph`: the model as tvm-serenity's graph IR (in-place flags, PAD folding);
* :mod:`.builder`: write small ``.tflite`` models (single operators) for kernel tests;
* :mod:`.interpreters`: ground truth from TFLite Micro / LiteRT, each in a subprocess.
"""

from .builder import ModelBuilder
from .reference import Interpreter, ReferenceError, run, run_all
from .tflite_model import (Operator, Quantization, Tensor, TFLiteError, TFLiteModel,
                           UnsupportedOperatorError, load_tflite, parse_tflite)
from .to_graph import foldable_pads, tflite_to_graph

__all__ = ["ModelBuilder", "Interpreter", "ReferenceError", "run", "run_all", "Operator",
           "Quantization", "Tensor", "TFLiteError", "TFLiteModel", "UnsupportedOperatorError",
           "load_tflite", "parse_tflite", "foldable_pads", "tflite_to_graph"]
