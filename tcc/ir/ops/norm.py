"""Normalization ops: batch norm (inference and training), instance, layer, group
and RMS norm, and local response normalization.

Layouts are channels-first (channel axis 1). Inference batch norm is a per-channel affine
map (BROADCAST); the other normalizations are reductions whose result feeds a per-element
epilogue, so they are OUT_FUSABLE, as in TVM. Half floats are computed in float32.

Loop programs follow the references stage by stage: per-group sum, mean, sum of squared
deviations, variance and inverse standard deviation (each a small stage over the statistics'
shape, so the expensive divisions and square roots run once per group), then one
elementwise stage for the result. Only float inputs have loop programs.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops._util import check_vector, compute_dtype, no_loop, optional_tensor
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    normalize_axis,
    prod,
    register,
    tensor,
)

# ---------------------------------------------------------------------------------------------
# loop-program helpers


def _compute_type(op: str, x: te.Tensor, stash_type: str | None = None) -> str:
    """The dtype a normalization computes in: the reference's `compute_dtype`, promoted
    with `stash_type` where the op has one."""
    if x.dtype not in ("float16", "float32", "float64"):
        raise no_loop(op, f"dtype {x.dtype}")
    ct = compute_dtype(to_numpy(x.dtype))
    if stash_type is not None:
        if stash_type not in ("float16", "float32", "float64"):
            raise no_loop(op, f"stash_type {stash_type}")
        ct = np.promote_types(to_numpy(stash_type), ct)
    return np.dtype(ct).name


def _group_sum(shape, extents, value, name: str) -> te.Tensor:
    """A stage of shape `shape` summing `value(s, reduce_vars)` over `extents`."""
    if not extents:
        return te.compute(shape, lambda *s: value(s, ()), name)

    def body(*s):
        rv = [te.reduce_axis(e, f"r{k}") for k, e in enumerate(extents)]
        return te.sum(value(s, rv), axis=rv)

    return te.compute(shape, body, name)


def _moments(x, ct: str, shape, extents, index_of, prefix: str):
    """(mean, variance) stages, shaped `shape`, of x's elements `index_of(s, reduce_vars)`
    for each statistics index s; the variance is the mean squared deviation, as numpy's."""
    count = te.cast(prod(extents), ct)
    total = _group_sum(
        shape, extents, lambda s, rv: te.cast(x[index_of(s, rv)], ct), f"{prefix}_sum"
    )
    mean = te.compute(shape, lambda *s: total[s] / count, f"{prefix}_mean")

    def sq(s, rv):
        d = te.cast(x[index_of(s, rv)], ct) - mean[s]
        return d * d

    sq_sum = _group_sum(shape, extents, sq, f"{prefix}_sq_sum")
    var = te.compute(shape, lambda *s: sq_sum[s] / count, f"{prefix}_var")
    return mean, var


def _inv_std(var: te.Tensor, epsilon: float, name: str) -> te.Tensor:
    ct = var.dtype
    one, eps = te.const(1.0, ct), te.const(epsilon, ct)
    return te.compute(var.shape, lambda *s: one / te.sqrt(var[s] + eps), name)


def _trailing(t: te.Tensor, i) -> tuple:
    """The index of `t`, broadcast against the trailing axes of an index `i` (numpy rules;
    a static dim of 1 broadcasts)."""
    base = len(i) - t.ndim
    return tuple(0 if isinstance(d, int) and d == 1 else i[base + j] for j, d in enumerate(t.shape))


def _as(ct: str, v):
    return te.cast(v, ct)


def _channel_shape(x: np.ndarray, axis: int = 1) -> tuple:
    return tuple(-1 if i == axis else 1 for i in range(x.ndim))


def _batch_norm_infer(args, attrs):
    x = tensor(args[0], "batch_norm")
    if x.ndim < 2:
        raise ShapeError(f"op batch_norm: input must have rank >= 2, got {x}")
    for what, t in zip(("scale", "bias", "mean", "var"), args[1:]):
        check_vector("batch_norm", tensor(t, "batch_norm", what), x.shape[1], what)
    return x


def _batch_norm_ref(x, scale, bias, mean, var, *, epsilon):
    ct = compute_dtype(x.dtype)
    cs = _channel_shape(x)
    inv = scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(epsilon))
    shift = bias.astype(ct) - mean.astype(ct) * inv
    return (x.astype(ct) * inv.reshape(cs) + shift.reshape(cs)).astype(x.dtype)


def _batch_norm_train_infer(args, attrs):
    x = _batch_norm_infer(args, attrs)
    stats = tensor(args[3], "batch_norm_train", "mean")
    return TupleType((x, stats, stats))


def _batch_norm_train_ref(x, scale, bias, mean, var, *, epsilon, momentum):
    """Normalize with the batch statistics; also return the updated running statistics."""
    ct = compute_dtype(x.dtype)
    axes = (0, *range(2, x.ndim))
    xc = x.astype(ct)
    batch_mean, batch_var = xc.mean(axis=axes), xc.var(axis=axes)
    y = _batch_norm_ref(x, scale, bias, batch_mean, batch_var, epsilon=epsilon)
    run_mean = mean.astype(ct) * momentum + batch_mean * (1 - momentum)
    run_var = var.astype(ct) * momentum + batch_var * (1 - momentum)
    return y, run_mean.astype(mean.dtype), run_var.astype(var.dtype)


def _affine_stages(ct, scale, bias, mean, var, epsilon, prefix):
    """Per-channel stages inv = scale / sqrt(var + eps) and shift = bias - mean * inv."""
    eps = te.const(epsilon, ct)
    inv = te.compute(
        scale.shape, lambda c: _as(ct, scale[c]) / te.sqrt(_as(ct, var[c]) + eps), f"{prefix}_inv"
    )
    shift = te.compute(
        scale.shape, lambda c: _as(ct, bias[c]) - _as(ct, mean[c]) * inv[c], f"{prefix}_shift"
    )
    return inv, shift


def _batch_norm_apply(x, ct, inv, shift, name):
    return te.compute(
        x.shape, lambda *i: _as(x.dtype, _as(ct, x[i]) * inv[i[1]] + shift[i[1]]), name
    )


def _batch_norm_compute(x, scale, bias, mean, var, *, epsilon):
    ct = _compute_type("batch_norm", x)
    inv, shift = _affine_stages(ct, scale, bias, mean, var, epsilon, "batch_norm")
    return _batch_norm_apply(x, ct, inv, shift, "batch_norm")


def _batch_norm_train_compute(x, scale, bias, mean, var, *, epsilon, momentum):
    """Batch statistics over (N, spatial) per channel, the affine map they give, and the
    running statistics moved toward them."""
    ct = _compute_type("batch_norm_train", x)
    extents = (x.shape[0], *x.shape[2:])
    bmean, bvar = _moments(
        x, ct, (x.shape[1],), extents, lambda s, rv: (rv[0], s[0], *rv[1:]), "batch"
    )
    inv, shift = _affine_stages(ct, scale, bias, bmean, bvar, epsilon, "batch_norm")
    y = _batch_norm_apply(x, ct, inv, shift, "batch_norm_train")
    keep, move = te.const(momentum, ct), te.const(1 - momentum, ct)

    def running(old, new, name):
        return te.compute(
            old.shape, lambda c: _as(old.dtype, _as(ct, old[c]) * keep + new[c] * move), name
        )

    return [y, running(mean, bmean, "running_mean"), running(var, bvar, "running_var")]


register(
    OpDef(
        "batch_norm",
        _batch_norm_infer,
        _batch_norm_ref,
        {"epsilon": 1e-5},
        Pattern.BROADCAST,
        (5, 5),
        compute=_batch_norm_compute,
        doc="Inference batch normalization (x, scale, bias, mean, var) over channel axis 1: "
        "a per-channel affine map.",
    )
)
register(
    OpDef(
        "batch_norm_train",
        _batch_norm_train_infer,
        _batch_norm_train_ref,
        {"epsilon": 1e-5, "momentum": 0.9},
        Pattern.OPAQUE,
        (5, 5),
        compute=_batch_norm_train_compute,
        doc="Training batch normalization: (y, running_mean, running_var) where the running "
        "statistics move toward the batch statistics by 1 - momentum.",
    )
)


def _normalize(x: np.ndarray, axes: tuple, epsilon: float, ct: np.dtype):
    """(x - mean) * inv_std over `axes`, computed in `ct`; returns (y, mean, inv_std)."""
    xc = x.astype(ct, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    diff = xc - mean
    inv_std = 1.0 / np.sqrt((diff * diff).mean(axis=axes, keepdims=True) + ct.type(epsilon))
    return diff * inv_std, mean, inv_std


def _instance_norm_infer(args, attrs):
    x = tensor(args[0], "instance_norm")
    if x.ndim < 3:
        raise ShapeError(f"op instance_norm: input must have rank >= 3, got {x}")
    check_vector("instance_norm", tensor(args[1], "instance_norm", "scale"), x.shape[1], "scale")
    check_vector("instance_norm", tensor(args[2], "instance_norm", "bias"), x.shape[1], "bias")
    return x


def _instance_norm_ref(x, scale, bias, *, epsilon):
    ct = compute_dtype(x.dtype)
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), epsilon, ct)
    cs = _channel_shape(x)
    return (y * scale.astype(ct).reshape(cs) + bias.astype(ct).reshape(cs)).astype(x.dtype)


def _instance_norm_compute(x, scale, bias, *, epsilon):
    ct = _compute_type("instance_norm", x)
    n, c = x.shape[:2]
    mean, var = _moments(x, ct, (n, c), x.shape[2:], lambda s, rv: (*s, *rv), "instance")
    inv = _inv_std(var, epsilon, "instance_inv_std")

    def out(*i):
        y = (_as(ct, x[i]) - mean[i[:2]]) * inv[i[:2]]
        return _as(x.dtype, y * _as(ct, scale[i[1]]) + _as(ct, bias[i[1]]))

    return te.compute(x.shape, out, "instance_norm")


register(
    OpDef(
        "instance_norm",
        _instance_norm_infer,
        _instance_norm_ref,
        {"epsilon": 1e-5},
        Pattern.OUT_FUSABLE,
        (3, 3),
        compute=_instance_norm_compute,
        doc="Normalize each (sample, channel) over its spatial axes, then a per-channel "
        "affine map.",
    )
)


def _layer_norm_infer(name: str, stats: bool):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis = normalize_axis(attrs["axis"], x.ndim, name)
        for i, what in ((1, "scale"), (2, "bias")):
            t = optional_tensor(args, i, name, what)
            if t is not None and t.ndim > x.ndim - axis:
                raise ShapeError(
                    f"op {name}: {what} {t} has more axes than the normalized ones of {x}"
                )
        if not stats:
            return x
        sdt = attrs["stash_type"]
        st = TensorType((*x.shape[:axis], *[1] * (x.ndim - axis)), sdt)
        return TupleType((x, st, st))

    return infer


def _layer_norm_parts(x, scale, bias, axis, epsilon, stash_type):
    axis = axis + x.ndim if axis < 0 else axis
    ct = np.promote_types(to_numpy(stash_type), compute_dtype(x.dtype))
    y, mean, inv_std = _normalize(x, tuple(range(axis, x.ndim)), epsilon, ct)
    y = y * scale.astype(ct)
    if bias is not None:
        y = y + bias.astype(ct)
    return y.astype(x.dtype), mean, inv_std


def _layer_norm_ref(x, scale, bias=None, *, axis, epsilon, stash_type):
    return _layer_norm_parts(x, scale, bias, axis, epsilon, stash_type)[0]


def _layer_norm_stats_ref(x, scale, bias=None, *, axis, epsilon, stash_type):
    y, mean, inv_std = _layer_norm_parts(x, scale, bias, axis, epsilon, stash_type)
    sd = to_numpy(stash_type)
    return y, mean.astype(sd), inv_std.astype(sd)


def _layer_norm_loop(name, x, scale, bias, axis, epsilon, stash_type):
    """(y, mean, inv_std) stages; the statistics are shaped x.shape[:axis]."""
    ct = _compute_type(name, x, stash_type)
    axis = normalize_axis(axis, x.ndim, name)
    shape = x.shape[:axis]
    mean, var = _moments(x, ct, shape, x.shape[axis:], lambda s, rv: (*s[:axis], *rv), "layer")
    inv = _inv_std(var, epsilon, "layer_inv_std")

    def out(*i):
        st = i[:axis]
        y = (_as(ct, x[i]) - mean[st]) * inv[st] * _as(ct, scale[_trailing(scale, i)])
        if bias is not None:
            y = y + _as(ct, bias[_trailing(bias, i)])
        return _as(x.dtype, y)

    return te.compute(x.shape, out, name), mean, inv


def _layer_norm_compute(x, scale, bias=None, *, axis, epsilon, stash_type):
    return _layer_norm_loop("layer_norm", x, scale, bias, axis, epsilon, stash_type)[0]


def _layer_norm_stats_compute(x, scale, bias=None, *, axis, epsilon, stash_type):
    y, mean, inv = _layer_norm_loop(
        "layer_norm_with_stats", x, scale, bias, axis, epsilon, stash_type
    )
    axis = normalize_axis(axis, x.ndim, "layer_norm_with_stats")
    shape = (*x.shape[:axis], *[1] * (x.ndim - axis))  # the normalized axes kept as 1s
    stats = [
        te.compute(shape, lambda *s, t=t: _as(stash_type, t[s[:axis]]), n)
        for t, n in ((mean, "mean"), (inv, "inv_std"))
    ]
    return [y, *stats]


_LN_ATTRS = {"axis": -1, "epsilon": 1e-5, "stash_type": "float32"}
register(
    OpDef(
        "layer_norm",
        _layer_norm_infer("layer_norm", False),
        _layer_norm_ref,
        dict(_LN_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 3),
        compute=_layer_norm_compute,
        doc="Normalize over axes [axis, rank) computing in `stash_type`, then scale (+ bias), "
        "both broadcast against the normalized axes.",
    )
)
register(
    OpDef(
        "layer_norm_with_stats",
        _layer_norm_infer("layer_norm_with_stats", True),
        _layer_norm_stats_ref,
        dict(_LN_ATTRS),
        Pattern.OPAQUE,
        (2, 3),
        compute=_layer_norm_stats_compute,
        doc="layer_norm that also returns the mean and inverse standard deviation "
        "(in `stash_type`).",
    )
)


def _group_norm_infer(args, attrs):
    x = tensor(args[0], "group_norm")
    g = attrs["num_groups"]
    if x.ndim < 3:
        raise ShapeError(f"op group_norm: input must have rank >= 3, got {x}")
    if isinstance(x.shape[1], int) and x.shape[1] % g:
        raise ShapeError(f"op group_norm: {x.shape[1]} channels do not split into {g} groups")
    length = g if attrs["group_affine"] else x.shape[1]
    check_vector("group_norm", tensor(args[1], "group_norm", "scale"), length, "scale")
    check_vector("group_norm", tensor(args[2], "group_norm", "bias"), length, "bias")
    return x


def _group_norm_ref(x, scale, bias, *, num_groups, epsilon, group_affine, stash_type):
    ct = np.promote_types(to_numpy(stash_type), compute_dtype(x.dtype))
    n, c = x.shape[:2]
    grouped = x.reshape(n, num_groups, -1)
    y, _, _ = _normalize(grouped, (2,), epsilon, ct)
    y = y.reshape(x.shape)
    if group_affine:
        scale, bias = np.repeat(scale, c // num_groups), np.repeat(bias, c // num_groups)
    cs = _channel_shape(x)
    return (y * scale.astype(ct).reshape(cs) + bias.astype(ct).reshape(cs)).astype(x.dtype)


def _group_norm_compute(x, scale, bias, *, num_groups, epsilon, group_affine, stash_type):
    """Statistics per (sample, group) over the group's channels and the spatial axes."""
    ct = _compute_type("group_norm", x, stash_type)
    n, c = x.shape[:2]
    per = c // num_groups  # channels per group (a Dim)
    mean, var = _moments(
        x,
        ct,
        (n, num_groups),
        (per, *x.shape[2:]),
        lambda s, rv: (s[0], s[1] * per + rv[0], *rv[1:]),
        "group",
    )
    inv = _inv_std(var, epsilon, "group_inv_std")

    def out(*i):
        st = (i[0], i[1] // per)
        ch = st[1] if group_affine else i[1]
        y = (_as(ct, x[i]) - mean[st]) * inv[st]
        return _as(x.dtype, y * _as(ct, scale[ch]) + _as(ct, bias[ch]))

    return te.compute(x.shape, out, "group_norm")


register(
    OpDef(
        "group_norm",
        _group_norm_infer,
        _group_norm_ref,
        {"num_groups": REQUIRED, "epsilon": 1e-5, "group_affine": False, "stash_type": "float32"},
        Pattern.OUT_FUSABLE,
        (3, 3),
        compute=_group_norm_compute,
        doc="Normalize each sample's channel groups over (channels in group, spatial axes), then "
        "a per-channel affine map (per-group when `group_affine`).",
    )
)


def _rms_norm_ref(x, scale, *, axis, epsilon, stash_type):
    axis = axis + x.ndim if axis < 0 else axis
    ct = np.promote_types(to_numpy(stash_type), compute_dtype(x.dtype))
    xc = x.astype(ct)
    ms = (xc * xc).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    return (xc / np.sqrt(ms + ct.type(epsilon)) * scale.astype(ct)).astype(x.dtype)


def _rms_norm_compute(x, scale, *, axis, epsilon, stash_type):
    """Sum of squares and root-mean-square stages over axes [axis, rank), then x / rms * scale."""
    ct = _compute_type("rms_norm", x, stash_type)
    axis = normalize_axis(axis, x.ndim, "rms_norm")
    shape = x.shape[:axis]
    count, eps = te.cast(prod(x.shape[axis:]), ct), te.const(epsilon, ct)

    def sq(s, rv):
        v = _as(ct, x[(*s[:axis], *rv)])
        return v * v

    total = _group_sum(shape, x.shape[axis:], sq, "rms_sq_sum")
    rms = te.compute(shape, lambda *s: te.sqrt(total[s] / count + eps), "rms")

    def out(*i):
        st = i[:axis]
        return _as(x.dtype, _as(ct, x[i]) / rms[st] * _as(ct, scale[_trailing(scale, i)]))

    return te.compute(x.shape, out, "rms_norm")


register(
    OpDef(
        "rms_norm",
        _layer_norm_infer("rms_norm", False),
        _rms_norm_ref,
        dict(_LN_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 2),
        compute=_rms_norm_compute,
        doc="x / sqrt(mean(x^2 over axes [axis, rank)) + epsilon) * scale.",
    )
)


def _lrn_infer(args, attrs):
    x = tensor(args[0], "lrn")
    if x.ndim < 3:
        raise ShapeError(f"op lrn: input must have rank >= 3, got {x}")
    return x


def _lrn_ref(x, *, size, alpha, beta, bias):
    """Cross-channel normalization; window sums come from a cumulative sum over channels."""
    ct = compute_dtype(x.dtype)
    sq = x.astype(ct) ** 2
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    c = x.shape[1]
    csum = np.cumsum(np.pad(sq, [(0, 0), (1, 0)] + [(0, 0)] * (x.ndim - 2)), axis=1)
    hi = np.minimum(np.arange(c) + after + 1, c)
    lo = np.maximum(np.arange(c) - before, 0)
    window = np.take(csum, hi, axis=1) - np.take(csum, lo, axis=1)
    return (x / (bias + alpha / size * window) ** beta).astype(x.dtype)


def _lrn_compute(x, *, size, alpha, beta, bias):
    """Window stage (sum of squares over the `size` channels around each one, a guarded
    load at the channel edges), then x / (bias + alpha / size * window) ** beta."""
    ct = _compute_type("lrn", x)
    before, c = (size - 1) // 2, x.shape[1]

    def window(*i):
        r = te.reduce_axis(size, "r")
        ch = i[1] - before + r
        inside = te.logical_and(te.greater_equal(ch, 0), te.less(ch, c))
        v = _as(ct, x[(i[0], ch, *i[2:])])
        return te.sum(v * v, axis=[r], where=inside)

    win = te.compute(x.shape, window, "lrn_window")
    k, a, b = te.const(bias, ct), te.const(alpha / size, ct), te.const(beta, ct)
    return te.compute(
        x.shape, lambda *i: _as(x.dtype, _as(ct, x[i]) / te.pow(k + a * win[i], b)), "lrn"
    )


register(
    OpDef(
        "lrn",
        _lrn_infer,
        _lrn_ref,
        {"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
        Pattern.OUT_FUSABLE,
        compute=_lrn_compute,
        doc="Local response normalization across `size` neighbouring channels.",
    )
)
