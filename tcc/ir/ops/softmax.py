"""The softmax family (softmax, log_softmax, hardmax), the classification loss
nll_loss, and the normalizations lp_normalize and mean_variance_normalize.

Each normalizes or reduces over a set of axes given as an attribute, with the axis helpers
of reduce.py.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.dtype import is_float, is_int
from tcc.ir.errors import ShapeError
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import operand
from tcc.ir.ops.reduce import reduce_axes
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


register(
    OpDef(
        "nll_loss",
        _nll_infer,
        _nll_ref,
        attrs={"reduction": "mean", "ignore_index": None},
        pattern=Pattern.OPAQUE,
        num_args=(2, 3),
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


register(
    OpDef(
        "lp_normalize",
        _lp_infer,
        _lp_ref,
        attrs={"axis": -1, "p": 2},
        pattern=Pattern.OPAQUE,
        doc="x divided by its L1 (p=1) or L2 (p=2) norm along `axis` (0 where the norm is 0).",
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


register(
    OpDef(
        "mean_variance_normalize",
        _mvn_infer,
        _mvn_ref,
        attrs={"axes": [0, 2, 3]},
        pattern=Pattern.OPAQUE,
        doc="(x - mean) / (std + 1e-9) with mean and (population) std taken over `axes`.",
    )
)
