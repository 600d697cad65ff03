"""Reductions and ops built around them: reduce_*, arg max/min, the scans (cumsum,
cumprod) and top-k.

Reduction axes are attributes: `axes=None` reduces every axis. The ONNX conformance models
also feed axes (and scan axes, top-k counts) as run-time tensors; those ops accept the value
as an optional extra operand instead, and dimensions that depend on it are fresh size
variables bound when the program runs. Only the attribute form has a static loop
structure; the operand form exists so such models still import and run.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import operand, scalar_int, static_length
from tcc.ir.ops.registry import OpDef, Pattern, normalize_axis, register, tensor, tuple_type

# ---------------------------------------------------------------------------------------------
# axis helpers shared by the inference functions and the references


def reduce_axes(axes, ndim: int, op: str) -> tuple[int, ...]:
    """Sorted, deduplicated non-negative axes; None means every axis."""
    if axes is None:
        return tuple(range(ndim))
    return tuple(sorted({normalize_axis(int(a), ndim, op) for a in axes}))


def reduced_shape(shape, axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---------------------------------------------------------------------------------------------
# reductions


def _reduce_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axes_t = operand(args, 1)
        if axes_t is None:
            axes = reduce_axes(attrs["axes"], x.ndim, name)
            return TensorType(reduced_shape(x.shape, axes, attrs["keepdims"]), x.dtype)
        if attrs["axes"] is not None:
            raise ShapeError(f"op {name}: give axes as an attribute or an operand, not both")
        k = static_length(tensor(axes_t, name, "axes"), name, "axes")
        if k == 0:  # an empty axes list reduces everything
            return TensorType(
                reduced_shape(x.shape, tuple(range(x.ndim)), attrs["keepdims"]), x.dtype
            )
        rank = x.ndim if attrs["keepdims"] else x.ndim - k
        return TensorType(tuple(fresh_var("r") for _ in range(rank)), x.dtype)

    return infer


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _log_sum_exp(x, axes, keepdims):
    # Subtract the (finite) maximum first so large inputs do not overflow exp.
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    m = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axes)


def _mean(x, axes, keepdims):
    count = int(np.prod([x.shape[a] for a in axes]))
    return (
        np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64 if x.dtype.kind in "iub" else None)
        / count
    )


_REDUCERS = {
    "reduce_sum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "reduce_prod": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "reduce_max": lambda x, a, k: np.maximum.reduce(
        x, axis=a, keepdims=k, initial=_lowest(x.dtype)
    ),
    "reduce_min": lambda x, a, k: np.minimum.reduce(
        x, axis=a, keepdims=k, initial=_highest(x.dtype)
    ),
    "reduce_mean": _mean,
    "reduce_l1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "reduce_l2": lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)),
    "reduce_sum_square": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
    "reduce_log_sum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "reduce_log_sum_exp": _log_sum_exp,
}

_REDUCE_DOCS = {
    "reduce_sum": "Sum over `axes` (0 over an empty set).",
    "reduce_prod": "Product over `axes` (1 over an empty set).",
    "reduce_max": "Maximum over `axes` (the dtype's lowest value, -inf for floats, over an empty set).",
    "reduce_min": "Minimum over `axes` (the dtype's highest value, +inf for floats, over an empty set).",
    "reduce_mean": "Arithmetic mean over `axes` (NaN over an empty set).",
    "reduce_l1": "Sum of absolute values over `axes`.",
    "reduce_l2": "Euclidean norm over `axes`.",
    "reduce_sum_square": "Sum of squares over `axes`.",
    "reduce_log_sum": "log(sum) over `axes` (-inf over an empty set).",
    "reduce_log_sum_exp": "log(sum(exp)) over `axes`, computed stably (-inf over an empty set).",
}


def _reduce_ref(name: str):
    fn = _REDUCERS[name]

    def ref(x, axes_tensor=None, *, axes, keepdims):
        if axes_tensor is not None:
            axes = (
                None if np.asarray(axes_tensor).size == 0 else np.asarray(axes_tensor).reshape(-1)
            )
        ax = reduce_axes(axes, x.ndim, name)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.asarray(fn(x, ax, keepdims))
        return out.astype(x.dtype, copy=False)

    return ref


def reduction(name: str) -> OpDef:
    """Register the reduction `name` (axes attribute, or a run-time axes operand)."""
    return register(
        OpDef(
            name,
            _reduce_infer(name),
            _reduce_ref(name),
            attrs={"axes": None, "keepdims": True},
            pattern=Pattern.COMM_REDUCE,
            num_args=(1, 2),
            doc=_REDUCE_DOCS[name],
        )
    )


REDUCTIONS = frozenset(reduction(name).name for name in _REDUCERS)


# ---------------------------------------------------------------------------------------------
# arg max / arg min


def _arg_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis = normalize_axis(attrs["axis"], x.ndim, name)
        return TensorType(reduced_shape(x.shape, (axis,), attrs["keepdims"]), "int64")

    return infer


def _arg_ref(fn):
    def ref(x, *, axis, keepdims, select_last_index):
        if select_last_index:  # the last extremum is the first one of the reversed axis
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            idx = fn(x, axis=axis, keepdims=keepdims)
        return np.asarray(idx, dtype=np.int64)

    return ref


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    register(
        OpDef(
            _name,
            _arg_infer(_name),
            _arg_ref(_fn),
            attrs={"axis": 0, "keepdims": True, "select_last_index": False},
            pattern=Pattern.COMM_REDUCE,
            doc=f"Index (int64) of the {_name[3:]}imum along `axis`; ties pick the first "
            "occurrence, or the last with `select_last_index`.",
        )
    )


# ---------------------------------------------------------------------------------------------
# scans


def _scan_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis_t = operand(args, 1)
        if axis_t is None:
            normalize_axis(attrs["axis"], x.ndim, name)
        elif static_length(tensor(axis_t, name, "axis"), name, "axis") != 1:
            raise ShapeError(f"op {name}: the axis operand must hold one value, got {axis_t}")
        return x

    return infer


def _scan_ref(name: str, fn, identity: int):
    def ref(x, axis_tensor=None, *, axis, exclusive, reverse):
        if axis_tensor is not None:
            axis = scalar_int(axis_tensor)
        axis = normalize_axis(axis, x.ndim, name)
        y = np.flip(x, axis) if reverse else x
        out = fn(y, axis=axis, dtype=x.dtype)
        if exclusive:  # shift by one along the axis, starting from the identity
            head = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([head, np.take(out, range(out.shape[axis] - 1), axis=axis)], axis)
        return np.flip(out, axis) if reverse else out

    return ref


for _name, _fn, _identity, _what in (
    ("cumsum", np.cumsum, 0, "sum"),
    ("cumprod", np.cumprod, 1, "product"),
):
    register(
        OpDef(
            _name,
            _scan_infer(_name),
            _scan_ref(_name, _fn, _identity),
            attrs={"axis": 0, "exclusive": False, "reverse": False},
            pattern=Pattern.OPAQUE,
            num_args=(1, 2),
            doc=f"Running {_what} along `axis` (or a run-time scalar axis operand); "
            "`exclusive` leaves out the current element, `reverse` runs from the end.",
        )
    )


# ---------------------------------------------------------------------------------------------
# top-k


def _topk_infer(args, attrs):
    x = tensor(args[0], "topk")
    axis = normalize_axis(attrs["axis"], x.ndim, "topk")
    k_t = operand(args, 1)
    if k_t is not None:
        if attrs["k"] is not None:
            raise ShapeError("op topk: give k as an attribute or an operand, not both")
        static_length(tensor(k_t, "topk", "k"), "topk", "k")
        k: Dim = fresh_var("k")
    elif attrs["k"] is None:
        raise ShapeError("op topk: k is required, as an attribute or an operand")
    else:
        k = attrs["k"]
        if isinstance(k, int) and isinstance(x.shape[axis], int) and not 0 <= k <= x.shape[axis]:
            raise ShapeError(f"op topk: k={k} is out of range for axis of size {x.shape[axis]}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return tuple_type(TensorType(shape, x.dtype), TensorType(shape, "int64"))


def _topk_ref(x, k_tensor=None, *, k, axis, largest, sorted):
    if k_tensor is not None:
        k = scalar_int(k_tensor)
    axis = normalize_axis(axis, x.ndim, "topk")
    if largest:
        # A stable ascending sort of the reversed axis, read backwards, orders values
        # descending with ties at the lower index first.
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


register(
    OpDef(
        "topk",
        _topk_infer,
        _topk_ref,
        attrs={"k": None, "axis": -1, "largest": True, "sorted": True},
        pattern=Pattern.OPAQUE,
        num_args=(1, 2),
        doc="(values, int64 indices) of the k largest (or smallest) elements along `axis`, "
        "in order (also when `sorted` is false, which leaves the order open); ties go to "
        "the lower index. k is an attribute or a run-time operand.",
    )
)
