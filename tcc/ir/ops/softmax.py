"""The softmax family (softmax, log_softmax, hardmax), the classification loss
nll_loss, and the normalizations lp_normalize and mean_variance_normalize.

Each normalizes or reduces over a set of axes given as an attribute, with the axis helpers
of reduce.py. Their loop programs are a few stages each (the statistics over the axes, then an
elementwise epilogue) built with reduce.py's `reduce_stage`; sums of half floats accumulate
in float32 and are rounded back before the epilogue uses them, as numpy's sums are.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import is_float, is_int
from tcc.ir.errors import ShapeError
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import no_loop, operand
from tcc.ir.ops.reduce import (
    accumulator,
    count_of,
    first_extremum,
    map_stage,
    reduce_axes,
    reduce_stage,
)
from tcc.ir.ops.registry import OpDef, Pattern, normalize_axis, register, same_dtype, tensor

# ---------------------------------------------------------------------------------------------
# softmax family: normalize over a block of axes
#
# These ops take a list of axes because ONNX before opset 13 normalizes over the flattened
# block of every axis from `axis` on. They are OPAQUE, as in TVM: each is a max reduction,
# an exp-sum reduction and an elementwise epilogue, so it does not fuse like one reduction.


def _softmax_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        if not is_float(x.dtype):
            raise ShapeError(f"op {name}: input must be a float tensor, got {x.dtype}")
        reduce_axes(attrs["axes"], x.ndim, name)
        return x

    return infer


def _stable_exp(x, axes):
    m = np.max(x, axis=axes, keepdims=True)
    return x - m, np.exp(x - m)


def _softmax(x, axes):
    _, e = _stable_exp(x, axes)
    return e / np.sum(e, axis=axes, keepdims=True)


def _log_softmax(x, axes):
    shifted, e = _stable_exp(x, axes)
    return shifted - np.log(np.sum(e, axis=axes, keepdims=True))


def _hardmax(x, axes):
    """One-hot of the first maximum in row-major order over the block of `axes`."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    flat = moved.reshape(moved.shape[: len(rest)] + (-1,))
    hot = np.zeros_like(flat)
    np.put_along_axis(hot, np.argmax(flat, axis=-1)[..., None], 1, axis=-1)
    return np.transpose(hot.reshape(moved.shape), np.argsort(rest + list(axes)))


def _softmax_ref(fn):
    def ref(x, *, axes):
        if x.size == 0:
            return x.copy()
        return fn(x, reduce_axes(axes, x.ndim, "softmax")).astype(x.dtype, copy=False)

    return ref


def _float_only(op: str, dtype: str) -> None:
    if not is_float(dtype):
        raise no_loop(op, f"dtype {dtype}")


def stat_index(i, axes) -> tuple:
    """The index, into statistics over `axes` (reduced dims dropped), of the element at `i`."""
    return tuple(v for d, v in enumerate(i) if d not in axes)


def _softmax_compute(name: str):
    """Max stage, then for softmax an exp stage (each exp computed once, in a stage of its
    own that vectorizes), the sum stage and the elementwise result; log_softmax sums the
    exps directly and has no use for them after."""

    def compute(x, *, axes):
        _float_only(name, x.dtype)
        ax, dt = reduce_axes(axes, x.ndim, name), x.dtype
        acc = accumulator(dt)
        m = reduce_stage(x, ax, False, lambda i, o: x[i], "max", f"{name}_max")
        if name == "softmax":
            e = te.compute(x.shape, lambda *i: te.exp(x[i] - m[stat_index(i, ax)]), f"{name}_exp")
            s = reduce_stage(e, ax, False, lambda i, o: te.cast(e[i], acc), "sum", f"{name}_sum")
        else:
            s = reduce_stage(
                x, ax, False, lambda i, o: te.cast(te.exp(x[i] - m[o]), acc), "sum", f"{name}_sum"
            )

        def out(*i):
            o = stat_index(i, ax)
            total = te.cast(s[o], dt)
            if name == "softmax":
                return e[i] / total
            return (x[i] - m[o]) - te.log(total)

        return te.compute(x.shape, out, name)

    return compute


def _hardmax_compute(x, *, axes):
    """Max stage, first-maximum stage (lowest row-major position in the block of `axes`),
    then the one-hot result."""
    _float_only("hardmax", x.dtype)
    ax = reduce_axes(axes, x.ndim, "hardmax")
    one, zero = te.const(1, x.dtype), te.const(0, x.dtype)
    if not ax:  # every element is its own block
        return te.compute(x.shape, lambda *i: one, "hardmax")
    strides, step = {}, 1
    for a in reversed(ax):
        strides[a], step = step, step * x.shape[a]

    def position(i):
        return sum((i[a] * strides[a] for a in ax[1:]), i[ax[0]] * strides[ax[0]])

    m = reduce_stage(x, ax, False, lambda i, o: x[i], "max", "hardmax_max")
    first = first_extremum(x, ax, False, m, position, False, "hardmax_first")
    return te.compute(
        x.shape,
        lambda *i: te.if_then_else(te.equal(position(i), first[stat_index(i, ax)]), one, zero),
        "hardmax",
    )


_SOFTMAX_COMPUTES = {
    "softmax": _softmax_compute("softmax"),
    "log_softmax": _softmax_compute("log_softmax"),
    "hardmax": _hardmax_compute,
}

for _name, _fn, _what in (
    ("softmax", _softmax, "exp(x) / sum(exp(x))"),
    ("log_softmax", _log_softmax, "x - log(sum(exp(x)))"),
    ("hardmax", _hardmax, "one-hot of the first maximum"),
):
    register(
        OpDef(
            _name,
            _softmax_infer(_name),
            _softmax_ref(_fn),
            attrs={"axes": [-1]},
            pattern=Pattern.OPAQUE,
            compute=_SOFTMAX_COMPUTES[_name],
            doc=f"{_what} over the block of `axes`.",
        )
    )


# ---------------------------------------------------------------------------------------------
# losses

REDUCTION_MODES = ("none", "sum", "mean")


def _nll_infer(args, attrs):
    x, target = tensor(args[0], "nll_loss"), tensor(args[1], "nll_loss", "target")
    if attrs["reduction"] not in REDUCTION_MODES:
        raise ShapeError(
            f"op nll_loss: reduction must be one of {REDUCTION_MODES}, got {attrs['reduction']!r}"
        )
    if x.ndim < 2 or target.ndim != x.ndim - 1 or not is_int(target.dtype):
        raise ShapeError(
            f"op nll_loss: expected input (N, C, d...) and integer target (N, d...), got {x} and {target}"
        )
    weight = operand(args, 2)
    if weight is not None:
        same_dtype([x, tensor(weight, "nll_loss", "weight")], "nll_loss")
    if attrs["reduction"] != "none":
        return TensorType((), x.dtype)
    return TensorType((x.shape[0],) + x.shape[2:], x.dtype)


def _nll_ref(x, target, weight=None, *, reduction, ignore_index):
    """-x[n, target[n, d], d] * weight[target[n, d]], zero (and weight 0) where ignored."""
    ignored = target == ignore_index if ignore_index is not None else np.zeros(target.shape, bool)
    safe = np.where(ignored, 0, target).astype(np.int64)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    w = np.ones(target.shape, x.dtype) if weight is None else np.take(weight, safe)
    w = np.where(ignored, 0, w).astype(x.dtype)
    loss = -picked * w
    if reduction == "sum":
        return np.asarray(np.sum(loss), dtype=x.dtype)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.sum(loss) / np.sum(w), dtype=x.dtype)
    return loss.astype(x.dtype, copy=False)


def _nll_compute(x, target, weight=None, *, reduction, ignore_index):
    """Per-element loss stage (gathering x at the target class), then for sum/mean the
    total loss (and total weight) over every element. A target outside [-C, C) makes the
    reference fail; the loop program guards that load and gives NaN."""
    _float_only("nll_loss", x.dtype)
    dt, acc, c = x.dtype, accumulator(x.dtype), x.shape[1]
    nan = te.const(float("nan"), dt)

    def picked(i):
        t = target[i]
        ignored = None if ignore_index is None else te.equal(t, te.const(ignore_index, t.dtype))
        cls = te.cast(t, "int64")
        if ignored is not None:  # the reference reads class 0 there, with weight 0
            cls = te.if_then_else(ignored, te.const(0, "int64"), cls)
        cls = te.if_then_else(te.less(cls, 0), cls + c, cls)  # numpy indices wrap once
        ok = te.logical_and(te.greater_equal(cls, 0), te.less(cls, c))
        value = te.if_then_else(ok, x[(i[0], cls, *i[1:])], nan)
        w = te.const(1, dt) if weight is None else te.if_then_else(ok, weight[cls], nan)
        if ignored is not None:
            w = te.if_then_else(ignored, te.const(0, dt), w)
        return value, w

    shape = (x.shape[0], *x.shape[2:])
    loss_name = "nll_loss" if reduction == "none" else "nll_loss_elem"
    loss = te.compute(shape, lambda *i: (te.const(0, dt) - picked(i)[0]) * picked(i)[1], loss_name)
    if reduction == "none":
        return loss
    every = tuple(range(len(shape)))
    total = reduce_stage(loss, every, False, lambda i, o: te.cast(loss[i], acc), "sum", "nll_sum")
    if reduction == "sum":
        return map_stage(total, lambda v: te.cast(v, dt), "nll_loss")
    weights = te.compute(shape, lambda *i: picked(i)[1], "nll_weight")
    wsum = reduce_stage(
        weights, every, False, lambda i, o: te.cast(weights[i], acc), "sum", "nll_weight_sum"
    )
    return te.compute((), lambda: te.cast(total[()], dt) / te.cast(wsum[()], dt), "nll_loss")


register(
    OpDef(
        "nll_loss",
        _nll_infer,
        _nll_ref,
        attrs={"reduction": "mean", "ignore_index": None},
        pattern=Pattern.OPAQUE,
        num_args=(2, 3),
        compute=_nll_compute,
        doc="Negative log-likelihood loss of log-probabilities (N, C, d...) against class "
        "indices (N, d...), optionally weighted per class; `mean` divides by the total "
        "weight of the targets that are not `ignore_index`.",
    )
)


# ---------------------------------------------------------------------------------------------
# normalizations


def _lp_ref(x, *, axis, p):
    norm = (
        np.sum(np.abs(x), axis=axis, keepdims=True)
        if p == 1
        else np.sqrt(np.sum(np.square(x), axis=axis, keepdims=True))
    )
    return np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm)).astype(x.dtype)


def _lp_infer(args, attrs):
    x = tensor(args[0], "lp_normalize")
    normalize_axis(attrs["axis"], x.ndim, "lp_normalize")
    if attrs["p"] not in (1, 2):
        raise ShapeError(f"op lp_normalize: p must be 1 or 2, got {attrs['p']}")
    return x


def _lp_compute(x, *, axis, p):
    """Sum stage (of |x| or x*x, squared in the dtype as numpy does), norm stage, quotient."""
    _float_only("lp_normalize", x.dtype)
    dt, acc = x.dtype, accumulator(x.dtype)
    ax = (normalize_axis(axis, x.ndim, "lp_normalize"),)
    part = (lambda v: te.abs(v)) if p == 1 else (lambda v: v * v)
    s = reduce_stage(x, ax, False, lambda i, o: te.cast(part(x[i]), acc), "sum", "lp_sum")
    norm = map_stage(
        s, (lambda v: te.cast(v, dt)) if p == 1 else (lambda v: te.sqrt(te.cast(v, dt))), "lp_norm"
    )
    zero, one = te.const(0, dt), te.const(1, dt)

    def out(*i):
        n = norm[stat_index(i, ax)]
        is_zero = te.equal(n, zero)
        return te.if_then_else(is_zero, zero, x[i] / te.if_then_else(is_zero, one, n))

    return te.compute(x.shape, out, "lp_normalize")


register(
    OpDef(
        "lp_normalize",
        _lp_infer,
        _lp_ref,
        attrs={"axis": -1, "p": 2},
        pattern=Pattern.OPAQUE,
        compute=_lp_compute,
        doc="x divided by its L1 (p=1) or L2 (p=2) norm along `axis` (0 where the norm is 0). "
        "Integer inputs have no loop program.",
    )
)


def _mvn_infer(args, attrs):
    x = tensor(args[0], "mean_variance_normalize")
    reduce_axes(attrs["axes"], x.ndim, "mean_variance_normalize")
    return x


def _mvn_ref(x, *, axes):
    ax = reduce_axes(axes, x.ndim, "mean_variance_normalize")
    mean = np.mean(x, axis=ax, keepdims=True)
    std = np.sqrt(np.mean(np.square(x - mean), axis=ax, keepdims=True))
    return ((x - mean) / (std + 1e-9)).astype(x.dtype)


def _mvn_compute(x, *, axes):
    """Sum, mean, squared-deviation sum and std stages, then the normalized result; integer
    inputs compute in float64 and are truncated back, as numpy's mean makes them."""
    ax = reduce_axes(axes, x.ndim, "mean_variance_normalize")
    dt = x.dtype
    if not is_float(dt) and not is_int(dt):
        raise no_loop("mean_variance_normalize", f"dtype {dt}")
    ct = dt if is_float(dt) else "float64"
    acc, count = accumulator(ct), count_of(x.shape, ax)
    s = reduce_stage(x, ax, False, lambda i, o: te.cast(x[i], acc), "sum", "mvn_sum")
    mean = map_stage(s, lambda v: te.cast(v / te.cast(count, acc), ct), "mvn_mean")

    def dev(i, o):
        return te.cast(x[i], ct) - mean[o]

    sq = reduce_stage(
        x, ax, False, lambda i, o: te.cast(dev(i, o) * dev(i, o), acc), "sum", "mvn_sq_sum"
    )
    std = map_stage(sq, lambda v: te.sqrt(te.cast(v / te.cast(count, acc), ct)), "mvn_std")
    eps = te.const(1e-9, ct)
    return te.compute(
        x.shape,
        lambda *i: te.cast(dev(i, stat_index(i, ax)) / (std[stat_index(i, ax)] + eps), dt),
        "mean_variance_normalize",
    )


register(
    OpDef(
        "mean_variance_normalize",
        _mvn_infer,
        _mvn_ref,
        attrs={"axes": [0, 2, 3]},
        pattern=Pattern.OPAQUE,
        compute=_mvn_compute,
        doc="(x - mean) / (std + 1e-9) with mean and (population) std taken over `axes`.",
    )
)
