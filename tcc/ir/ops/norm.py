"""Normalization ops: batch norm (inference and training), instance, layer, group
and RMS norm, and local response normalization.

Layouts are channels-first (channel axis 1). Inference batch norm is a per-channel affine
map (BROADCAST); the other normalizations are reductions whose result feeds a per-element
epilogue, so they are OUT_FUSABLE, as in TVM. Half floats are computed in float32.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir.dtype import to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops._util import check_vector, compute_dtype, optional_tensor
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, normalize_axis, register, tensor


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


register(
    OpDef(
        "batch_norm",
        _batch_norm_infer,
        _batch_norm_ref,
        {"epsilon": 1e-5},
        Pattern.BROADCAST,
        (5, 5),
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


register(
    OpDef(
        "instance_norm",
        _instance_norm_infer,
        _instance_norm_ref,
        {"epsilon": 1e-5},
        Pattern.OUT_FUSABLE,
        (3, 3),
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


_LN_ATTRS = {"axis": -1, "epsilon": 1e-5, "stash_type": "float32"}
register(
    OpDef(
        "layer_norm",
        _layer_norm_infer("layer_norm", False),
        _layer_norm_ref,
        dict(_LN_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 3),
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


register(
    OpDef(
        "group_norm",
        _group_norm_infer,
        _group_norm_ref,
        {"num_groups": REQUIRED, "epsilon": 1e-5, "group_affine": False, "stash_type": "float32"},
        Pattern.OUT_FUSABLE,
        (3, 3),
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


register(
    OpDef(
        "rms_norm",
        _layer_norm_infer("rms_norm", False),
        _rms_norm_ref,
        dict(_LN_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 2),
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


register(
    OpDef(
        "lrn",
        _lrn_infer,
        _lrn_ref,
        {"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
        Pattern.OUT_FUSABLE,
        doc="Local response normalization across `size` neighbouring channels.",
    )
)
