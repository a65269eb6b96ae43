"""Benchmark models built with Keras and converted to full-int8 TFLite (needs TensorFlow).

    python -m benchmarks.keras_models [--models NAME ...] [--force] [--list]

The networks are ``keras.applications`` models built without trained weights, the irregular
cells are the zoo's DARTS V2 cells and RandWire stages (:mod:`tvm_serenity.zoo`) written as
Keras layers by :class:`KerasNetBuilder`, which implements the zoo's ``NetBuilder`` calls. Every
model is converted by ``TFLiteConverter.from_keras_model`` to full int8 (int8 input and output,
``TFLITE_BUILTINS_INT8``) with a random representative dataset, so TFLite, TFLite Micro and
tvm-serenity all work on one and the same graph. The recipe (docs/peers.md): ``weights=None``,
``input_tensor=keras.Input(shape, batch_size=1)``, seeded random weights, batch-norm statistics
from one random batch (a forward pass in training mode with momentum 0). Weights are random:
memory figures are meaningful, accuracy is not.

TensorFlow is not a dependency of tvm-serenity: install the ``bench`` extra
(``pip install -e ".[bench]"``, tensorflow-cpu 2.21, ~1.6 GB). The ``.tflite`` files are cached
outside the repository, in ``$TVM_SERENITY_MODELS`` (default ``~/.cache/tvm-serenity/models``),
each with a ``NAME.json`` recording how it was built and how long the conversion took.
Conversions are slow on small machines (VGG-16 needs ~7.6 GB of RAM): build a selection with
``--models``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from tvm_serenity.zoo import darts, randwire

__all__ = ["CACHE_ENV", "Spec", "MODELS", "cache_dir", "model_path", "build_info", "build",
           "KerasNetBuilder", "main"]

CACHE_ENV = "TVM_SERENITY_MODELS"
SEED = 0
CALIBRATION_SAMPLES = 4


def cache_dir() -> Path:
    """Where built models live: ``$TVM_SERENITY_MODELS``, else ``~/.cache/tvm-serenity/models``
    (``$XDG_CACHE_HOME`` honoured)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tvm-serenity" / "models"


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str            # "network" (keras.applications) or "cell" (zoo cell in Keras)
    description: str
    make: Callable       # (keras) -> keras.Model, called with the seed already set


def model_path(name: str) -> Path:
    return cache_dir() / f"{name}.tflite"


def build_info(name: str) -> dict | None:
    """The ``NAME.json`` written next to a built model, or None if it was never built."""
    path = cache_dir() / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() and model_path(name).is_file() \
        else None


# ---------------------------------------------------------------------- keras.applications
def _application(cls: str, size: int, **kwargs) -> Callable:
    def make(keras):
        inp = keras.Input((size, size, 3), batch_size=1)
        return getattr(keras.applications, cls)(input_tensor=inp, weights=None, **kwargs)
    return make


# ---------------------------------------------------------------------- zoo cells in Keras
class KerasNetBuilder:
    """The calls :func:`tvm_serenity.zoo.darts.cell` and :func:`tvm_serenity.zoo.randwire.stage`
    make on a ``NetBuilder``, building a Keras functional model instead of graph IR.

    Tensors are passed around by name, as in the zoo. Convolutions are bias-free with a batch
    norm after them (the converter folds it); 'SAME' padding; weight-free ops with the same
    operands are built once (the zoo's memo, what the converter's CSE does anyway); a sum with
    ``shared=False`` (RandWire's weighted sums) is a new ``Add`` layer, unweighted (the edge
    weights of a trained network would be folded), so the converter's CSE may still merge two
    identical partial sums: the TFLite graph, not the zoo's, is what everyone plans.
    """

    def __init__(self, keras, name: str):
        self.keras = keras
        self.name = name
        self.tensors: dict[str, object] = {}
        self.inputs: list = []
        self._memo: dict[tuple, str] = {}

    def _emit(self, hint: str, layer_fn: Callable[[str], object], inputs: tuple[str, ...],
              memo_key: tuple | None = None) -> str:
        if memo_key is not None and memo_key in self._memo:
            return self._memo[memo_key]
        base = hint.replace("/", "_")
        name, k = base, 1
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        args = [self.tensors[x] for x in inputs]
        self.tensors[name] = layer_fn(name)(args if len(args) > 1 else args[0])
        if memo_key is not None:
            self._memo[memo_key] = name
        return name

    def _normalized(self, y: str) -> str:
        layers = self.keras.layers
        return self._emit(f"{y}_bn", lambda n: layers.BatchNormalization(name=n), (y,))

    def input(self, name: str, hwc: tuple[int, int, int]) -> str:
        tensor = self.keras.Input(hwc, batch_size=1, name=name)
        self.inputs.append(tensor)
        self.tensors[name] = tensor
        return name

    def conv(self, x: str, out_channels: int, kernel: int = 1, stride: int = 1,
             dilation: int = 1, groups: int = 1, name: str = "conv") -> str:
        layers = self.keras.layers
        if groups != 1:
            return self.depthwise(x, kernel, stride, dilation, name)
        y = self._emit(name, lambda n: layers.Conv2D(
            out_channels, kernel, strides=stride, dilation_rate=dilation, padding="same",
            use_bias=False, name=n), (x,))
        return self._normalized(y)

    def depthwise(self, x: str, kernel: int, stride: int = 1, dilation: int = 1,
                  name: str = "dw") -> str:
        layers = self.keras.layers
        y = self._emit(name, lambda n: layers.DepthwiseConv2D(
            kernel, strides=stride, dilation_rate=dilation, padding="same", use_bias=False,
            name=n), (x,))
        return self._normalized(y)

    def pool(self, x: str, kind: str, kernel: int, stride: int, name: str | None = None) -> str:
        layers = self.keras.layers
        cls = layers.MaxPooling2D if kind == "max" else layers.AveragePooling2D
        return self._emit(name or f"{kind}_pool", lambda n: cls(kernel, stride, padding="same",
                                                                name=n),
                          (x,), ("pool", kind, kernel, stride, x))

    def crop(self, x: str, top: int, left: int, name: str = "slice") -> str:
        layers = self.keras.layers
        return self._emit(name, lambda n: layers.Cropping2D(((top, 0), (left, 0)), name=n),
                          (x,), ("crop", top, left, x))

    def relu(self, x: str, name: str | None = None, six: bool = False) -> str:
        layers = self.keras.layers
        return self._emit(name or f"{x}_relu", lambda n: layers.ReLU(6.0 if six else None,
                                                                     name=n),
                          (x,), ("relu", six, x))

    def add(self, a: str, b: str, name: str = "add", shared: bool = True) -> str:
        layers = self.keras.layers
        return self._emit(name, lambda n: layers.Add(name=n), (a, b),
                          ("add", a, b) if shared else None)

    def scale(self, x: str, name: str = "mul") -> str:
        layers = self.keras.layers
        # the zoo's MUL by 1/n (the mean of n sinks) does not pass n; memory ignores the value
        return self._emit(name, lambda n: layers.Rescaling(0.5, name=n), (x,))

    def concat(self, xs: list[str], name: str = "concat") -> str:
        layers = self.keras.layers
        return self._emit(name, lambda n: layers.Concatenate(axis=-1, name=n), tuple(xs),
                          ("concat", *xs))

    def build(self, outputs: list[str]):
        return self.keras.Model(self.inputs, [self.tensors[o] for o in outputs],
                                name=self.name)


def _darts_cell(hw: int, channels: int, reduction: bool) -> Callable:
    """:func:`tvm_serenity.zoo.darts.darts_cell_graph` in Keras."""
    def make(keras):
        b = KerasNetBuilder(keras, "darts")
        c_prev = channels // 2 if reduction else channels
        s0 = b.input("s0", (hw, hw, 4 * c_prev))
        s1 = b.input("s1", (hw, hw, 4 * c_prev))
        return b.build([darts.cell(b, s0, s1, channels, reduction, False, "cell")])
    return make


def _randwire_stage(hw: int, channels: int, seed: int) -> Callable:
    """:func:`tvm_serenity.zoo.randwire.randwire_stage_graph` in Keras."""
    def make(keras):
        b = KerasNetBuilder(keras, "randwire")
        x = b.input("x", (hw, hw, channels))
        return b.build([randwire.stage(b, x, channels, 1, seed, "stage")])
    return make


def _specs() -> list[Spec]:
    nets = [
        ("mobilenet_224", "MobileNet (V1, alpha 1.0), 224 px", _application("MobileNet", 224)),
        ("mobilenet_v2_224", "MobileNetV2 (alpha 1.0), 224 px",
         _application("MobileNetV2", 224)),
        ("mobilenet_v3_small_224", "MobileNetV3-Small (alpha 1.0), 224 px",
         _application("MobileNetV3Small", 224)),
        ("mobilenet_v3_large_224", "MobileNetV3-Large (alpha 1.0), 224 px",
         _application("MobileNetV3Large", 224)),
        ("vgg16_224", "VGG-16, 224 px", _application("VGG16", 224)),
        ("resnet50_224", "ResNet-50, 224 px", _application("ResNet50", 224)),
        ("nasnet_mobile_224", "NASNetMobile, 224 px", _application("NASNetMobile", 224)),
        ("efficientnet_b0_224", "EfficientNet-B0, 224 px", _application("EfficientNetB0", 224)),
        # MCU-sized variants (96-128 px); the shared folder has mobilenet_v1_025_128,
        # mobilenet_v2_035_96 and mobilenet_v3_small_075_96 built the same way.
        ("mobilenet_v1_050_128", "MobileNet alpha 0.5, 128 px",
         _application("MobileNet", 128, alpha=0.5)),
        ("mobilenet_v2_035_128", "MobileNetV2 alpha 0.35, 128 px",
         _application("MobileNetV2", 128, alpha=0.35)),
        ("mobilenet_v2_050_96", "MobileNetV2 alpha 0.5, 96 px",
         _application("MobileNetV2", 96, alpha=0.5)),
        ("mobilenet_v3_small_100_128", "MobileNetV3-Small alpha 1.0, 128 px",
         _application("MobileNetV3Small", 128)),
        ("mobilenet_v3_large_075_96", "MobileNetV3-Large alpha 0.75, 96 px",
         _application("MobileNetV3Large", 96, alpha=0.75)),
        ("efficientnet_b0_96", "EfficientNet-B0, 96 px", _application("EfficientNetB0", 96)),
        ("nasnet_mobile_96", "NASNetMobile, 96 px", _application("NASNetMobile", 96)),
    ]
    out = [Spec(n, "network", d, f) for n, d, f in nets]
    out += [
        Spec("darts_v2_reduction_imagenet", "cell",
             "DARTS V2 reduction cell, 28x28 -> 14x14, C=96", _darts_cell(28, 96, True)),
        Spec("darts_v2_reduction_cifar", "cell",
             "DARTS V2 reduction cell, 32x32 -> 16x16, C=72", _darts_cell(32, 72, True)),
    ]
    for dataset, channels in (("cifar10", 40), ("cifar100", 78)):
        for seed in (0, 1, 2):
            out.append(Spec(f"randwire_{dataset}_C{channels}_s{seed}", "cell",
                            f"RandWire WS(32,4,0.75) stage, seed {seed}, 32x32, C={channels}",
                            _randwire_stage(32, channels, seed)))
    return out


#: Every buildable model by name (the DARTS normal cells and three MCU MobileNets are in the
#: shared models folder already, built with the same recipe).
MODELS: dict[str, Spec] = {s.name: s for s in _specs()}


# ----------------------------------------------------------------------------- conversion
def _import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        raise SystemExit("benchmarks.keras_models needs TensorFlow: "
                         "pip install -e \".[bench]\"") from None
    return tf


def _set_batch_norm_statistics(keras, model, rng: np.random.Generator) -> None:
    """Moving mean/variance of every batch norm := the statistics of one random batch."""
    norms = [layer for layer in model.layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in norms:
        layer.momentum = 0.0
    model([rng.uniform(-1, 1, tuple(t.shape)).astype("float32") for t in model.inputs],
          training=True)


def build(name: str, force: bool = False) -> dict:
    """Build ``name`` into the cache (unless it is there and ``force`` is false); returns its
    ``NAME.json`` record (path, conversion seconds, versions, recipe)."""
    if name not in MODELS:
        raise SystemExit(f"unknown model '{name}' (see --list)")
    info = build_info(name)
    if info is not None and not force:
        return info
    tf = _import_tensorflow()
    keras = tf.keras
    spec = MODELS[name]
    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED)
    t0 = time.perf_counter()
    model = spec.make(keras)
    _set_batch_norm_statistics(keras, model, rng)
    samples = [[rng.uniform(-1, 1, tuple(t.shape)).astype("float32") for t in model.inputs]
               for _ in range(CALIBRATION_SAMPLES)]
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: iter(samples)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    flatbuffer = converter.convert()
    seconds = time.perf_counter() - t0
    path = model_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(flatbuffer)
    info = {"name": name, "description": spec.description, "kind": spec.kind,
            "path": str(path), "bytes": len(flatbuffer), "build_seconds": round(seconds, 1),
            "tensorflow": tf.__version__, "keras": keras.__version__, "seed": SEED,
            "calibration_samples": CALIBRATION_SAMPLES}
    (cache_dir() / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    del model, converter, flatbuffer
    keras.backend.clear_session()
    gc.collect()
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", metavar="NAME", help="default: every model")
    ap.add_argument("--force", action="store_true", help="rebuild models already cached")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args(argv)
    if args.list:
        for spec in MODELS.values():
            state = "built" if build_info(spec.name) else "-"
            print(f"{spec.name:32s} {spec.kind:8s} {state:6s} {spec.description}")
        return 0
    for name in args.models or list(MODELS):
        info = build(name, args.force)
        print(f"{name}: {info['path']} ({info['bytes']:,} B), conversion "
              f"{info['build_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
