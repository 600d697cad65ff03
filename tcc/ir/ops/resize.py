"""Resize: resampling by nearest, linear or cubic interpolation with ONNX's
coordinate transformations, rounding modes and antialiasing.

resize is injective: each output element reads a set of input elements given by its own
index. resize_dynamic takes roi, scales or sizes as run-time operands; its resized
dimensions are fresh size variables, which the interpreter binds from the result.

Loop program (resize): it follows the reference step by step, in float64 as the reference
computes. Per resized axis a stage holds each output sample's input coordinate. Nearest
mode then gathers in one stage; linear and cubic get per-axis tap index and weight stages
and resample one axis per stage, in axis order, so every intermediate rounds as the
reference's does (sums of more than two taps may differ in the last float64 bit where
numpy reorders them). A last stage rounds (integers, half to even), clamps to the dtype's
range and casts back. Antialiasing needs the scale when compiling (it sets the tap count);
with a scale only known at run time it has no loop program. resize_dynamic has none (its
shape depends on operand values).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tcc.ir import expr as E
from tcc.ir import te
from tcc.ir.dtype import INDEX_DTYPE, is_float, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, fresh_var, prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import clamp_index, operand
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, StaticForm, register, tensor

# Resizing is separable: each axis is resampled in turn. Along one axis, output sample y maps
# to input coordinate x(y) (the coordinate transformation), and the result is a weighted sum
# of the input samples around x(y): one sample for nearest, 2 for linear, 4 for cubic, and a
# wider, normalized footprint when antialiasing a downscale.

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize",
)  # fmt: skip
# "simple" is the rounding of Resize-10 and Upsample: floor when upscaling, ceil when downscaling.
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")

_SAMPLING_ATTRS = {
    "mode": "nearest",
    "coordinate_transformation_mode": "half_pixel",
    "cubic_coeff_a": -0.75,
    "exclude_outside": False,
    "extrapolation_value": 0.0,
    "nearest_mode": "round_prefer_floor",
    "antialias": False,
}


def _check_sampling(attrs, op: str) -> None:
    for key, allowed in (
        ("mode", MODES),
        ("coordinate_transformation_mode", COORDINATE_MODES),
        ("nearest_mode", NEAREST_MODES),
    ):
        if attrs[key] not in allowed:
            raise ShapeError(f"op {op}: unknown {key} {attrs[key]!r}; expected one of {allowed}")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise ShapeError(f"op {op}: antialias applies to linear and cubic modes, not nearest")


def scaled_dim(d: Dim, scale: float) -> Dim:
    """floor(d * scale), exactly, for a static or symbolic dimension."""
    if isinstance(d, int):
        return int(d * scale)
    if float(scale).is_integer():
        return d * int(scale)
    q = Fraction(scale)  # a float is a dyadic rational: floor(d * p / q) is exact
    return d * q.numerator // q.denominator


def resize_plan(shape, scales, sizes, axes, policy: str = "stretch"):
    """Output shape and per-axis scales of a resize given by `scales` or by `sizes` over `axes`
    (None = all axes). A scale of None means output/input, known when the program runs; it
    lets a symbolic dimension be resized to a given size."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    if scales is not None:
        full = [1.0] * rank
        for a, s in zip(axes, scales):
            full[a] = float(s)
        return [scaled_dim(d, s) for d, s in zip(shape, full)], full
    out = list(shape)
    for a, n in zip(axes, sizes):
        out[a] = n
    if policy == "stretch":
        return out, [None] * rank
    ratios = [out[a] / shape[a] for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    out = [int(scale * d + 0.5) if i in axes else d for i, d in enumerate(shape)]
    return out, [scale if i in axes else 1.0 for i in range(rank)]


def full_roi(roi, axes, rank: int) -> list[float]:
    """The crop box [starts..., ends...] over every axis (whole axis where `axes` omits one)."""
    roi = [float(r) for r in np.asarray(roi).reshape(-1)]
    if axes is None:
        return roi
    full = [0.0] * rank + [1.0] * rank
    for i, a in enumerate(axes):
        full[a % rank], full[a % rank + rank] = roi[i], roi[len(axes) + i]
    return full


def _source_coords(ctm: str, n_in: int, n_out: int, scale: float, roi) -> np.ndarray:
    """Input coordinate of each output sample along one axis (the spec's x_original).

    The formulas use the unrounded output length `scale * n_in`, as the ONNX reference does.
    """
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    if ctm == "asymmetric":
        return y / scale
    if ctm == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if ctm == "align_corners":
        return np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    lo, hi = roi  # tf_crop_and_resize
    if width == 1:
        x = np.full(n_out, (hi - lo) * (n_in - 1) / 2)
    else:
        x = y * (hi - lo) * (n_in - 1) / (width - 1)
    return x + lo * (n_in - 1)


def _nearest(x: np.ndarray, nearest_mode: str, scale: float) -> np.ndarray:
    floor = np.floor(x)
    frac = x - floor
    if nearest_mode == "simple":
        nearest_mode = "ceil" if scale < 1 else "floor"
    if nearest_mode == "round_prefer_floor":
        out = np.where(frac > 0.5, floor + 1, floor)
    elif nearest_mode == "round_prefer_ceil":
        out = np.where(frac >= 0.5, floor + 1, floor)
    elif nearest_mode == "floor":
        out = floor
    else:
        out = np.ceil(x)
    return out.astype(np.int64)[:, None]


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _interpolation_taps(x: np.ndarray, scale: float, attrs) -> tuple[np.ndarray, np.ndarray]:
    """Input sample indices (n_out, taps) and their weights for linear/cubic sampling at x.

    The taps sit at base + k for k in 1 - taps/2 .. taps/2, where base = ceil(x) - 1 (so the
    fraction x - base is in (0, 1]); an antialiased downscale stretches the kernel by 1/scale.
    """
    base = np.ceil(x) - 1
    frac = x - base
    stretch = min(scale, 1.0) if attrs["antialias"] else 1.0
    support = 1 if attrs["mode"] == "linear" else 2
    k0 = int(np.floor(-support / stretch)) + 1
    offsets = np.arange(k0, 2 - k0)
    dist = (offsets[None, :] - frac[:, None]) * stretch
    if attrs["mode"] == "linear":
        weights = np.clip(1 - np.abs(dist), 0, 1)
    else:
        weights = _cubic_kernel(dist, attrs["cubic_coeff_a"])
    if attrs["antialias"]:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return base.astype(np.int64)[:, None] + offsets[None, :], weights


def _resize_axis(data: np.ndarray, axis: int, n_out: int, scale: float, roi, attrs) -> np.ndarray:
    n_in = data.shape[axis]
    ctm = attrs["coordinate_transformation_mode"]
    x = _source_coords(ctm, n_in, n_out, scale, roi)
    if attrs["mode"] == "nearest":
        idx, weights = _nearest(x, attrs["nearest_mode"], scale), None
    else:
        idx, weights = _interpolation_taps(x, scale, attrs)
        if attrs["exclude_outside"]:
            weights = np.where((idx < 0) | (idx >= n_in), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
    taken = np.take(data, np.clip(idx, 0, n_in - 1), axis=axis)  # edge samples repeat
    tail = (1,) * (data.ndim - axis - 1)
    if weights is None:
        out = np.squeeze(taken, axis + 1)
    else:
        out = np.sum(taken * weights.reshape(weights.shape + tail), axis=axis + 1)
    if ctm == "tf_crop_and_resize":
        outside = ((x < 0) | (x > n_in - 1)).reshape((n_out,) + tail)
        out = np.where(outside, attrs["extrapolation_value"], out)
    return out


def _is_identity(n_in: int, n_out: int, scale: float, roi) -> bool:
    crop_all = roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))
    return n_in == n_out and math.isclose(scale, 1.0) and crop_all


def _saturate(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast resampled values back, rounding and clamping for integer dtypes."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.round(x), info.min, info.max).astype(dtype)
    finfo = np.finfo(dtype)
    return np.clip(x, finfo.min, finfo.max).astype(dtype)


def _with_scale_values(scales, scale_values, scale_axes) -> list:
    """`scales` with the entries of `scale_axes` taken from the run-time `scale_values`."""
    scales = list(scales)
    for k, a in enumerate(scale_axes or ()):
        scales[a] = scale_values[k]
    return scales


def _resize_ref(x, scale_values=None, *, sizes, scales, roi, scale_axes=None, **attrs):
    if scale_values is not None:
        values = [float(v) for v in np.asarray(scale_values).reshape(-1)]
        scales = _with_scale_values(scales, values, scale_axes)
    rank = x.ndim
    out = x.astype(np.float64)
    for axis in range(rank):
        n_in, n_out = x.shape[axis], int(sizes[axis])
        scale = n_out / n_in if scales[axis] is None else scales[axis]
        axis_roi = None if roi is None else (roi[axis], roi[axis + rank])
        if not _is_identity(n_in, n_out, scale, axis_roi):
            out = _resize_axis(out, axis, n_out, scale, axis_roi, attrs)
    return _saturate(out, x.dtype)


def _resize_input(t, op: str) -> TensorType:
    x = tensor(t, op, "input")
    if not (is_float(x.dtype) or np.issubdtype(to_numpy(x.dtype), np.integer)):
        raise ShapeError(f"op {op}: input must be numeric, got {x.dtype}")
    return x


def _resize_infer(args, attrs):
    x = _resize_input(args[0], "resize")
    _check_sampling(attrs, "resize")
    sizes, scales, roi = attrs["sizes"], attrs["scales"], attrs["roi"]
    values, scale_axes = operand(args, 1), attrs["scale_axes"]
    if (values is None) != (scale_axes is None):
        raise ShapeError("op resize: a scales operand and `scale_axes` go together")
    if values is not None:
        values = tensor(values, "resize", "scales")
        if not is_float(values.dtype) or values.ndim != 1 or values.shape[0] != len(scale_axes):
            raise ShapeError(
                f"op resize: the scales operand must be a 1-D float tensor of "
                f"{len(scale_axes)} values, got {values}"
            )
    if len(sizes) != x.ndim or len(scales) != x.ndim:
        raise ShapeError(
            f"op resize: sizes and scales need {x.ndim} entries, got {len(sizes)}, {len(scales)}"
        )
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and (
        roi is None or len(roi) != 2 * x.ndim
    ):
        raise ShapeError(f"op resize: tf_crop_and_resize needs a roi of {2 * x.ndim} values")
    return TensorType(tuple(sizes), x.dtype)


# ---------------------------------------------------------------------------------------------
# loop program: numbers below are Python floats when known at compile time (folded exactly as
# the reference folds them) and float64 te expressions otherwise

F64 = "float64"


def _f64(d):
    return float(d) if isinstance(d, int) else te.cast(d, F64)


def _equal(a, b):
    """a == b: a bool when both are known, else a te condition."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return te.equal(te.const(a, F64) if isinstance(a, float) else a, b)


def _pick(cond, a, b):
    if isinstance(cond, bool):
        return a if cond else b
    return te.if_then_else(cond, te.const(a, F64), te.const(b, F64))


def _coordinate(ctm: str, n_in, n_out, scale, roi, y):
    """_source_coords for one output sample `y` (a float64 expression)."""
    width = scale * n_in
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return _pick(_equal(width, 1.0), -0.5, (y + 0.5) / scale - 0.5)
    if ctm == "asymmetric":
        return y / scale
    if ctm == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if ctm == "align_corners":
        return _pick(_equal(width, 1.0), 0.0, y * (n_in - 1) / (width - 1))
    lo, hi = roi
    x = _pick(
        _equal(width, 1.0), (hi - lo) * (n_in - 1) / 2, y * (hi - lo) * (n_in - 1) / (width - 1)
    )
    return x + lo * (n_in - 1)


def _nearest_index(c, nearest_mode: str, scale, n_in):
    floor = te.floor(c)
    if nearest_mode == "simple":
        if not isinstance(scale, float):
            v = te.if_then_else(scale < 1.0, te.ceil(c), floor)
            return clamp_index(te.cast(v, INDEX_DTYPE), n_in)
        nearest_mode = "ceil" if scale < 1 else "floor"
    if nearest_mode == "round_prefer_floor":
        v = te.if_then_else(c - floor > 0.5, floor + 1.0, floor)
    elif nearest_mode == "round_prefer_ceil":
        v = te.if_then_else(c - floor >= 0.5, floor + 1.0, floor)
    else:
        v = floor if nearest_mode == "floor" else te.ceil(c)
    return clamp_index(te.cast(v, INDEX_DTYPE), n_in)


def _if_identity(identity, same, otherwise):
    """`same` where an axis is left as it is, else `otherwise`; `identity` is a condition or
    a tuple of conditions that all hold there."""
    if identity is False:
        return otherwise
    out = same
    for cond in reversed(identity if isinstance(identity, tuple) else (identity,)):
        out = te.if_then_else(cond, out, otherwise)
    return out


def _nearest_table(coord, nearest_mode: str, scale, n_in, identity, name: str):
    """The input index each output sample of one axis reads in nearest mode."""

    def pick(y):
        v = _nearest_index(coord[y], nearest_mode, scale, n_in)
        return _if_identity(identity, y, v)

    return te.compute(coord.shape, pick, name)


def _kernel_weight(dist, attrs):
    if attrs["mode"] == "linear":
        return te.min(te.max(1.0 - te.abs(dist), 0.0), 1.0)
    a = attrs["cubic_coeff_a"]
    d = te.abs(dist)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return te.if_then_else(d <= 1.0, near, te.if_then_else(d < 2.0, far, te.const(0.0, F64)))


def _numpy_sum(terms):
    """sum(terms) associated as numpy's contiguous float reduction (pairwise_sum) does."""
    n = len(terms)
    if n < 8:
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total
    if n <= 128:
        r = list(terms[:8])
        i = 8
        while i < n - n % 8:
            r = [r[j] + terms[i + j] for j in range(8)]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for t in terms[i:]:
            total = total + t
        return total
    half = n // 2
    half -= half % 8
    return _numpy_sum(terms[:half]) + _numpy_sum(terms[half:])


def _normalized(w, taps: int, name: str, guard_zero: bool):
    """Weights divided by their sum over the taps (a zero sum divides by 1 when guarded)."""

    def value(y, t):
        total = _numpy_sum([w[y, k] for k in range(taps)])
        if guard_zero:
            total = te.if_then_else(te.equal(total, te.const(0.0, F64)), te.const(1.0, F64), total)
        return w[y, t] / total

    return te.compute(w.shape, value, name)


def _taps(coord, a: int, n_in, n_out, scale, attrs):
    """Per-output-sample tap indices and weights along axis `a` (_interpolation_taps, plus
    exclude_outside): two (n_out, taps) stages."""
    stretch = min(scale, 1.0) if attrs["antialias"] else 1.0
    support = 1 if attrs["mode"] == "linear" else 2
    k0 = int(np.floor(-support / stretch)) + 1
    taps = 2 - 2 * k0

    def base(y):
        return te.ceil(coord[y]) - 1.0

    def raw_index(y, t):
        return te.cast(base(y), INDEX_DTYPE) + (t + k0)

    index = te.compute((n_out, taps), lambda y, t: clamp_index(raw_index(y, t), n_in), f"taps{a}")

    def weight(y, t):
        dist = te.cast(t + k0, F64) - (coord[y] - base(y))
        return _kernel_weight(dist * stretch if stretch != 1.0 else dist, attrs)

    w = te.compute((n_out, taps), weight, f"weights{a}")
    if attrs["antialias"]:
        w = _normalized(w, taps, f"weights{a}_aa", guard_zero=False)
    if attrs["exclude_outside"]:
        inside = w

        def excluded(y, t):
            i = raw_index(y, t)
            out = te.logical_or(i < 0, i >= te.const(n_in, INDEX_DTYPE))
            return te.if_then_else(out, te.const(0.0, F64), inside[y, t])

        w = _normalized(
            te.compute((n_out, taps), excluded, f"weights{a}_in"), taps, f"weights{a}_ex", True
        )
    return index, w, taps


def _saturate_expr(v, dtype: str):
    """_saturate: round integers half to even, clamp into the dtype's range, cast back."""
    if not is_float(dtype):
        v = te.nearbyint(v)
    lo = te.const(float(te.min_value(dtype).value), F64)
    hi = te.const(float(te.max_value(dtype).value), F64)
    # comparisons rather than min/max, so a NaN passes through as np.clip lets it
    v = te.if_then_else(v > hi, hi, te.if_then_else(v < lo, lo, v))
    return te.cast(v, dtype)


def _close_to_one(scale):
    """math.isclose(scale, 1.0) for a run-time scale."""
    tol = te.const(1e-9, F64) * te.max(te.abs(scale), te.const(1.0, F64))
    return te.abs(scale - 1.0) <= tol


def _resize_compute(x, scale_values=None, *, sizes, scales, roi, scale_axes=None, **attrs):
    rank = x.ndim
    ctm = attrs["coordinate_transformation_mode"]
    out_shape = tuple(sizes)
    if scale_values is not None:
        read = [te.cast(scale_values[k], F64) for k in range(len(scale_axes))]
        scales = _with_scale_values(scales, read, scale_axes)
    plans = []  # (axis, n_in, n_out, scale, roi, maybe_identity condition)
    for a in range(rank):
        n_in, n_out = x.shape[a], sizes[a]
        static = isinstance(n_in, int) and isinstance(n_out, int)
        run_time_scale = isinstance(scales[a], E.PrimExpr)
        if run_time_scale:
            scale = scales[a]
        elif scales[a] is not None:
            scale = float(scales[a])
        elif static:
            scale = n_out / n_in
        else:
            scale = _f64(n_out) / _f64(n_in)
        axis_roi = None if roi is None else (float(roi[a]), float(roi[a + rank]))
        crop_all = axis_roi is None or (
            math.isclose(axis_roi[0], 0.0) and math.isclose(axis_roi[1], 1.0)
        )
        unit = not isinstance(scale, float) or math.isclose(scale, 1.0)
        if static:
            same = n_in == n_out
        elif prove_equal(n_in, n_out):
            same = True
        else:
            same = te.equal(te.const(n_in, INDEX_DTYPE), te.const(n_out, INDEX_DTYPE))
        identity = same if (unit and crop_all) else False
        if run_time_scale and identity is not False:  # a same-size axis may still be scaled
            identity = (_close_to_one(scale),) if identity is True else (identity, _close_to_one(scale))
        if identity is True:
            continue
        if attrs["antialias"] and not isinstance(scale, float):
            raise NoLoopProgram(
                "op resize: antialias with a scale known only at run time has no loop program"
            )
        plans.append((a, n_in, n_out, scale, axis_roi, identity))

    def coordinate_stage(a, n_in, n_out, scale, axis_roi):
        return te.compute(
            (n_out,),
            lambda y: _coordinate(ctm, _f64(n_in), _f64(n_out), scale, axis_roi, te.cast(y, F64)),
            f"coord{a}",
        )

    def outside(c, n_in):
        return te.logical_or(c < 0.0, c > _f64(n_in) - 1.0)

    extrapolation = te.const(float(attrs["extrapolation_value"]), F64)
    crop = ctm == "tf_crop_and_resize"
    if attrs["mode"] == "nearest":
        index, outs = {}, []
        nearest_mode = attrs["nearest_mode"]
        for a, n_in, n_out, scale, axis_roi, identity in plans:
            coord = coordinate_stage(a, n_in, n_out, scale, axis_roi)
            index[a] = _nearest_table(coord, nearest_mode, scale, n_in, identity, f"nearest{a}")
            if crop:
                outs.append((coord, n_in, a, identity))

        def gather(*i):
            # the tables hold clamped indices; clamping again where they are read lets the
            # bounds proof see it (tcc.ir.verify does not look into a table's values)
            at = tuple(clamp_index(index[a][j], x.shape[a]) if a in index else j
                       for a, j in enumerate(i))
            v = te.cast(x[at], F64)
            for coord, n_in, a, identity in outs:
                cond = outside(coord[i[a]], n_in)
                if identity is not False:
                    cond = _if_identity(identity, te.const(False), cond)
                v = te.if_then_else(cond, extrapolation, v)
            return _saturate_expr(v, x.dtype)

        return te.compute(out_shape, gather, "resize")

    current = None  # the float64 stage resampled so far (None: the input itself)
    shape = list(x.shape)
    for a, n_in, n_out, scale, axis_roi, identity in plans:
        coord = coordinate_stage(a, n_in, n_out, scale, axis_roi)
        index, weights, taps = _taps(coord, a, n_in, n_out, scale, attrs)
        shape[a] = n_out

        def resample(
            *i,
            a=a,
            src=current,
            coord=coord,
            index=index,
            weights=weights,
            taps=taps,
            n_in=n_in,
            identity=identity,
        ):
            def load(j):
                idx = i[:a] + (j,) + i[a + 1 :]
                return te.cast(x[idx], F64) if src is None else src[idx]

            taken = [load(clamp_index(index[i[a], t], n_in)) for t in range(taps)]  # as above
            v = _numpy_sum([taken[t] * weights[i[a], t] for t in range(taps)])
            if crop:
                v = te.if_then_else(outside(coord[i[a]], n_in), extrapolation, v)
            if identity is not False:  # clamped: in bounds without the size check
                v = _if_identity(identity, load(clamp_index(i[a], n_in)), v)
            return v

        current = te.compute(tuple(shape), resample, f"resample{a}")
    if current is None:
        return te.compute(
            out_shape, lambda *i: _saturate_expr(te.cast(x[i], F64), x.dtype), "resize"
        )
    final = current
    return te.compute(out_shape, lambda *i: _saturate_expr(final[i], x.dtype), "resize")


register(
    OpDef(
        "resize",
        _resize_infer,
        _resize_ref,
        attrs={"sizes": REQUIRED, "scales": REQUIRED, "roi": None, "scale_axes": None,
               **_SAMPLING_ATTRS},
        pattern=Pattern.INJECTIVE,
        num_args=(1, 2),
        compute=_resize_compute,
        doc="Resample every axis to `sizes`; `scales` (None = sizes/input) drives the coordinate "
        "transformation, `roi` ([starts..., ends...]) the tf_crop_and_resize crop. An optional "
        "float operand holds run-time scales, of the axes `scale_axes` lists. No loop program "
        "for antialias when a scale is only known at run time.",
    )
)


def _resize_dynamic_infer(args, attrs):
    x = _resize_input(args[0], "resize_dynamic")
    _check_sampling(attrs, "resize_dynamic")
    if attrs["keep_aspect_ratio_policy"] not in ASPECT_POLICIES:
        policy = attrs["keep_aspect_ratio_policy"]
        raise ShapeError(f"op resize_dynamic: unknown keep_aspect_ratio_policy {policy!r}")
    if args[2] is None and args[3] is None:
        raise ShapeError("op resize_dynamic: needs a scales or a sizes operand")
    axes = range(x.ndim) if attrs["axes"] is None else [a % x.ndim for a in attrs["axes"]]
    shape = tuple(fresh_var("rsz") if i in axes else d for i, d in enumerate(x.shape))
    return TensorType(shape, x.dtype)


def _resize_dynamic_ref(x, roi, scales, sizes, axes, keep_aspect_ratio_policy, **attrs):
    given_scales = scales is not None and scales.size > 0
    given_sizes = sizes is not None and sizes.size > 0
    out, full_scales = resize_plan(
        x.shape,
        [float(s) for s in scales] if given_scales else None,
        None if given_scales else [int(n) for n in sizes],
        axes,
        keep_aspect_ratio_policy,
    )
    if given_scales and given_sizes:  # the sizes resize_sizes computed from these scales
        out = resize_plan(x.shape, None, [int(n) for n in sizes], axes)[0]
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    full = full_roi(roi, axes, x.ndim) if crop and roi is not None and roi.size else None
    return _resize_ref(x, sizes=out, scales=full_scales, roi=full, **attrs)


def _resize_dynamic_static(types, sizes, out, attrs):
    """Resize to sizes read at run time: a static resize over them, with the scales operand
    (when given) read by the kernel. Keeping the aspect ratio (a float min or max of the
    ratios) and a crop box read at run time have no static form."""
    x = types[0]
    if attrs["keep_aspect_ratio_policy"] != "stretch":
        raise NoLoopProgram("resize_dynamic: keep_aspect_ratio_policy with run-time sizes")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and types[1] is not None:
        raise NoLoopProgram("resize_dynamic: a tf_crop_and_resize box read at run time")
    axes = list(range(x.ndim)) if attrs["axes"] is None else [a % x.ndim for a in attrs["axes"]]
    if len(sizes[3]) != len(axes):
        raise ShapeError(f"resize_dynamic: {len(sizes[3])} sizes for {len(axes)} axes")
    dims = list(x.shape)
    for a, n in zip(axes, sizes[3]):
        dims[a] = n
    sampling = {k: attrs[k] for k in _SAMPLING_ATTRS}
    static = {"sizes": dims, "scales": [None] * x.ndim, "roi": None, **sampling}
    if types[2] is None:
        return StaticForm("resize", (0,), static, tuple(dims))
    static["scale_axes"] = axes
    return StaticForm("resize", (0, 2), static, tuple(dims))


register(
    OpDef(
        "resize_dynamic",
        _resize_dynamic_infer,
        _resize_dynamic_ref,
        attrs={"axes": None, "keep_aspect_ratio_policy": "stretch", **_SAMPLING_ATTRS},
        pattern=Pattern.OPAQUE,
        num_args=(4, 4),
        doc="Resize with run-time operands (x, roi?, scales?, sizes?) as in ONNX Resize-18; "
        "the resized axes get data-dependent sizes. Given both scales and sizes (as "
        "resize_sizes computes them from the scales), the sizes are the result's and the "
        "scales drive the coordinate transformation.",
        shape_operands=(3,),
        to_static=_resize_dynamic_static,
    )
)


def _resize_sizes_infer(args, attrs):
    x = _resize_input(args[0], "resize_sizes")
    scales = tensor(args[1], "resize_sizes", "scales")
    n = x.ndim if attrs["axes"] is None else len(attrs["axes"])
    if not is_float(scales.dtype) or scales.ndim != 1 or scales.shape[0] != n:
        raise ShapeError(
            f"op resize_sizes: scales must be a 1-D float tensor of {n} values, got {scales}"
        )
    return TensorType((n,), INDEX_DTYPE)


def _resized_dims(shape, axes) -> list:
    rank = len(shape)
    return list(shape) if axes is None else [shape[a % rank] for a in axes]


def _resize_sizes_ref(x, scales, axes):
    with np.errstate(invalid="ignore"):
        out = [d * float(s) for d, s in zip(_resized_dims(x.shape, axes), scales)]
    # a size no int64 holds (NaN, inf) is -1, which the resize then refuses as negative
    return np.array([int(v) if np.isfinite(v) and abs(v) < 2**62 else -1 for v in out], np.int64)


def _resize_sizes_compute(x, scales, *, axes):
    dims = _resized_dims(x.shape, axes)

    def size(i):
        out = te.const(0, INDEX_DTYPE)
        for k, d in enumerate(dims):
            v = te.trunc(_f64(d) * te.cast(scales[k], F64))
            fits = te.logical_and(te.logical_not(te.isnan(v)), te.abs(v) < 2.0**62)
            v = te.if_then_else(fits, te.cast(v, INDEX_DTYPE), te.const(-1, INDEX_DTYPE))
            out = te.if_then_else(te.equal(i, k), v, out)
        return out

    return te.compute((len(dims),), size, "resize_sizes")


register(
    OpDef(
        "resize_sizes",
        _resize_sizes_infer,
        _resize_sizes_ref,
        attrs={"axes": None},
        pattern=Pattern.OPAQUE,
        num_args=(2, 2),
        compute=_resize_sizes_compute,
        doc="The sizes a Resize by run-time `scales` gives the `axes` (None: all) it resizes: "
        "floor(dimension * scale), as int64 (-1 where that is no int64).",
    )
)
