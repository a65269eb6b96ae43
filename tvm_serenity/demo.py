"""The built-in demo: a small irregular int8 CNN that TFLite's order cannot fit on a Pico 1.

:func:`demo_model_bytes` writes (deterministically, seeded random weights) an int8 ``.tflite``
with two branches of different widths that join in an ADD, in the breadth-first order a
converter emits::

    x 48x48x8 ─ conv3x3 ─ c0 16ch ─┬─ conv1x1 56ch ─ dw3x3 ─ conv1x1 16ch ─┐
                                   └─ dw3x3 16ch ─ conv1x1 16ch ───────────┴─ ADD ─ avgpool
                                                   ─ conv1x1 32ch ─ MEAN ─ FULLY_CONNECTED 10

:func:`run_demo` compiles it twice for the ``pico`` board and runs what fits on rp2040js:

* **baseline**: TFLite's stored order, TFLM's greedy arena planner, dual-buffer kernels;
* **tvm-serenity**: the exact memory-aware order, Right In-Place kernels, the optimal arena;

and returns the table the command prints (peak, arena, SRAM total, cycles, fits 264 KB).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .builddir import absolute, new_build
from .errors import SerenityError

__all__ = ["demo_model_bytes", "DemoRow", "run_demo", "demo_failure", "format_demo"]

PICO_SRAM_BYTES = 264 * 1024


def demo_model_bytes(seed: int = 0) -> bytes:
    """The demo model as ``.tflite`` bytes (same bytes for the same seed)."""
    from .frontend.builder import ModelBuilder
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    act_scale = 0.05

    def act(shape, zero_point=-128, name=None):
        return b.add_tensor(shape, scale=act_scale, zero_point=zero_point, name=name)

    def conv(x, cin, cout, k, hw, name, depthwise=False):
        if depthwise:
            wshape, axis, cout = (1, k, k, cin), 3, cin
        else:
            wshape, axis = (cout, k, k, cin), 0
        fan_in = k * k * (1 if depthwise else cin)
        w_scale = rng.uniform(0.5, 1.5, cout) / (127 * np.sqrt(fan_in))
        w = b.add_tensor(wshape, scale=w_scale, axis=axis, name=f"{name}/weight",
                         data=rng.integers(-127, 128, wshape))
        bias = b.add_tensor((cout,), "int32", scale=act_scale * w_scale, name=f"{name}/bias",
                            data=rng.integers(-500, 500, cout))
        y = act((1, hw, hw, cout), name=name)
        options = {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                   "fused_activation_function": "RELU"}
        if depthwise:
            options["depth_multiplier"] = 1
        b.add_operator("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, w, bias], [y],
                       options)
        return y

    hw = 48
    x = b.add_tensor((1, hw, hw, 8), scale=0.02, zero_point=0, name="input")
    c0 = conv(x, 8, 16, 3, hw, "stem")
    a1 = conv(c0, 16, 56, 1, hw, "wide/expand")
    b1 = conv(c0, 16, 16, 3, hw, "narrow/dw", depthwise=True)
    a2 = conv(a1, 56, 56, 3, hw, "wide/dw", depthwise=True)
    b2 = conv(b1, 16, 16, 1, hw, "narrow/project")
    a3 = conv(a2, 56, 16, 1, hw, "wide/project")
    s = act((1, hw, hw, 16), name="join")
    b.add_operator("ADD", [a3, b2], [s], {"fused_activation_function": "NONE"})
    p = act((1, hw // 2, hw // 2, 16), name="pool")
    b.add_operator("AVERAGE_POOL_2D", [s], [p],
                   {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 2,
                    "filter_width": 2, "fused_activation_function": "NONE"})
    h = conv(p, 16, 32, 1, hw // 2, "head")
    axes = b.add_tensor((2,), "int32", data=np.array([1, 2]), name="mean/axes")
    m = act((1, 32), name="mean")
    b.add_operator("MEAN", [h, axes], [m], {"keep_dims": False})
    w_scale = 1.0 / (127 * np.sqrt(32))
    w = b.add_tensor((10, 32), scale=w_scale, name="classifier/weight",
                     data=rng.integers(-127, 128, (10, 32)))
    bias = b.add_tensor((10,), "int32", scale=act_scale * w_scale, name="classifier/bias",
                        data=rng.integers(-500, 500, 10))
    y = b.add_tensor((1, 10), scale=0.1, zero_point=0, name="logits")
    b.add_operator("FULLY_CONNECTED", [m, w, bias], [y], {"fused_activation_function": "NONE"})
    return b.build([x], [y], description="tvm-serenity demo model")


@dataclass(frozen=True)
class DemoRow:
    label: str
    liveness_peak_bytes: int | None   # None: the build failed before planning
    arena_bytes: int | None
    sram_bytes: int | None        # arena + scratch + stack + other RAM, as the fit check counts
    fits: bool | None             # None: the build failed for another reason (see ``failed``)
    cycles: int | None            # rp2040js emulated cycles of model_run (None: not run)
    output_ok: bool | None        # output == reference interpreter (None: not run)
    note: str = ""                # why it does not fit, or why it failed
    failed: bool = False          # the build or run failed (not a fit refusal)


def _build_and_run(model: Path, out: Path, label: str, emulate: bool, **options) -> DemoRow:
    from . import deploy, micro
    try:
        compiled = deploy.compile_tflite(model, "pico", out, **options)
    except micro.DoesNotFitError as e:      # the fit check refuses it, with the numbers
        plan = getattr(e, "plan", None)
        return DemoRow(label, plan and plan.liveness_peak_bytes, plan and plan.arena_bytes,
                       None, False, None, None, str(e))
    except SerenityError as e:
        return DemoRow(label, None, None, None, None, None, None, f"build failed: {e}",
                       failed=True)
    fit = compiled.fit
    row = dict(label=label, liveness_peak_bytes=compiled.plan.liveness_peak_bytes,
               arena_bytes=compiled.arena_bytes, sram_bytes=fit.total_bytes, fits=True)
    if not emulate:
        return DemoRow(**row, cycles=None, output_ok=None)
    try:
        result = deploy.run(out, emulate=True, check=False)
    except SerenityError as e:
        return DemoRow(**row, cycles=None, output_ok=None, note=f"run failed: {e}",
                       failed=True)
    ok = list(result.outputs) == deploy.reference_outputs(
        model, (out / deploy.INPUT_FILE).read_bytes())
    return DemoRow(**row, cycles=result.cycles, output_ok=ok)


MODEL_FILE = "demo.tflite"
BUILDS = ("baseline", "serenity")


def run_demo(out_dir: str | Path = "serenity_demo", emulate: bool = True,
             time_limit: float = 30.0) -> list[DemoRow]:
    """Compile the demo model for ``pico`` both ways, run what fits, return the rows.
    ``out_dir`` is a build directory of ours (:mod:`tvm_serenity.builddir`): the model, then
    one compiled build per row."""
    out = absolute(out_dir)
    with new_build(out_dir, "demo", derived=BUILDS) as tmp:
        (tmp / MODEL_FILE).write_bytes(demo_model_bytes())
    model = out / MODEL_FILE
    baseline, ours = BUILDS
    return [
        _build_and_run(model, out / baseline, "TFLite order + TFLM greedy arena, dual buffer",
                       emulate, schedule="stored", planner="greedy", rip=False,
                       time_limit=time_limit),
        _build_and_run(model, out / ours, "tvm-serenity: DP order + RiP + optimal arena",
                       emulate, schedule="serenity", planner="optimal", rip=True,
                       time_limit=time_limit),
    ]


def demo_failure(rows: list[DemoRow]) -> str | None:
    """Why the demo did not deliver what it promises (every build built or refused for its
    size, ours fitting and bit-exact when run), or None."""
    for r in rows:
        if r.failed:
            return f"{r.label}: {r.note}"
    ours = rows[-1]
    if not ours.fits:
        return f"{ours.label}: {ours.note}"
    if ours.output_ok is False:
        return f"{ours.label}: the output differs from the reference interpreter"
    return None


def format_demo(rows: list[DemoRow]) -> str:
    def kib(n):
        return "-" if n is None else f"{n / 1024:,.1f}"
    lines = [f"{'build':<48}{'peak KiB':>10}{'arena KiB':>11}{'SRAM KiB':>10}{'cycles':>14}"
             f"{'fits 264 KiB':>14}{'bit-exact':>11}"]
    for r in rows:
        cycles = "-" if r.cycles is None else f"{r.cycles:,}"
        exact = "-" if r.output_ok is None else ("yes" if r.output_ok else "NO")
        fits = "failed" if r.failed and r.fits is None else \
            ("yes" if r.fits else "no")
        lines.append(f"{r.label:<48}{kib(r.liveness_peak_bytes):>10}{kib(r.arena_bytes):>11}"
                     f"{kib(r.sram_bytes):>10}{cycles:>14}{fits:>14}{exact:>11}")
    for r in rows:
        if r.note:
            lines.append(f"{r.label}: {r.note}")
    base, ours = rows[0], rows[-1]
    if base.liveness_peak_bytes and ours.liveness_peak_bytes:
        lines.append(f"peak reduction: "
                     f"{base.liveness_peak_bytes / ours.liveness_peak_bytes:.2f}x, arena "
                     f"reduction: {base.arena_bytes / ours.arena_bytes:.2f}x")
    return "\n".join(lines)
