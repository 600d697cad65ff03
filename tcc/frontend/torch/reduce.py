"""Converters for ATen's reductions: sum, mean, prod, max/min (with indices), argmax/argmin,
any/all and variance.

An empty or absent list of dimensions means every dimension, as in torch.
"""

from __future__ import annotations

from tcc.frontend.torch.base import converter
from tcc.ir.ops._util import normalize_axes


def _axes(ctx, x, dims) -> list[int]:
    n = ctx.ndim_of(x)
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(n))
    return sorted(normalize_axes([dims] if isinstance(dims, int) else list(dims), n, "torch"))


# overloads that reduce every dimension and take no `dim` operand
_ALL_DIMS = frozenset({"aten.sum.default", "aten.mean.default"})


def _reduce(op: str, *names: str):
    def convert(ctx, node):
        dtype = ctx.out_dtype(node)
        x = ctx.tensor(node.arg(0, "self"), dtype)
        every = node.target in _ALL_DIMS
        dims = None if every else node.arg(1, "dim")
        keepdim = False if every else node.arg(2, "keepdim", False)
        if ctx.ndim_of(x) == 0:
            return x
        return ctx.emit(op, x, axes=_axes(ctx, x, dims), keepdims=bool(keepdim))

    converter(*names)(convert)


_reduce("reduce_sum", "aten.sum.dim_IntList", "aten.sum.default")
_reduce("reduce_mean", "aten.mean.dim", "aten.mean.default")
_reduce("reduce_max", "aten.amax.default")
_reduce("reduce_min", "aten.amin.default")


@converter("aten.prod.dim_int", "aten.prod.default")
def _prod(ctx, node):
    dtype = ctx.out_dtype(node)
    x = ctx.tensor(node.arg(0, "self"), dtype)
    if ctx.ndim_of(x) == 0:  # a scalar is its own product
        return x
    if node.target == "aten.prod.default":
        return ctx.emit("reduce_prod", x, axes=_axes(ctx, x, None), keepdims=False)
    return ctx.emit("reduce_prod", x, axes=_axes(ctx, x, node.arg(1, "dim")),
                    keepdims=bool(node.arg(2, "keepdim", False)))


@converter("aten.max.dim", "aten.min.dim")
def _max_min_dim(ctx, node):
    """(values, indices) along one dimension."""
    x, dim, keepdim = node.arg(0, "self"), node.arg(1, "dim"), bool(node.arg(2, "keepdim", False))
    is_max = node.target == "aten.max.dim"
    if ctx.ndim_of(x) == 0:  # a scalar is its own maximum, at index 0
        return [x, ctx.emit("full", shape=[], value=0, dtype="int64")]
    axis = _axes(ctx, x, [dim])[0]
    values = ctx.emit("reduce_max" if is_max else "reduce_min", x, axes=[axis], keepdims=keepdim)
    indices = ctx.emit("argmax" if is_max else "argmin", x, axis=axis, keepdims=keepdim)
    return [values, indices]


@converter("aten.max.default", "aten.min.default")
def _max_min_all(ctx, node):
    x = node.arg(0, "self")
    op = "reduce_max" if node.target == "aten.max.default" else "reduce_min"
    return ctx.emit(op, x, axes=_axes(ctx, x, None), keepdims=False)


@converter("aten.argmax.default", "aten.argmin.default")
def _argmax(ctx, node):
    x, dim, keepdim = node.arg(0, "self"), node.arg(1, "dim"), bool(node.arg(2, "keepdim", False))
    op = "argmax" if node.target == "aten.argmax.default" else "argmin"
    if ctx.ndim_of(x) == 0:  # a scalar's only index
        return ctx.emit("full", shape=[], value=0, dtype="int64")
    if dim is None:  # over the flattened tensor
        x = ctx.emit("reshape", x, shape=[-1])
        y = ctx.emit(op, x, axis=0, keepdims=False)
        return ctx.emit("reshape", y, shape=[1] * len(ctx.out_shape(node))) if keepdim else y
    return ctx.emit(op, x, axis=_axes(ctx, x, [dim])[0], keepdims=keepdim)


@converter("aten.any.dim", "aten.any.dims", "aten.any.default",
           "aten.all.dim", "aten.all.dims", "aten.all.default")
def _any_all(ctx, node):
    """any as the max, all as the min, of the operand as 0/1 integers."""
    x = ctx.cast(ctx.cast(node.arg(0, "self"), "bool"), "int32")
    if ctx.ndim_of(x) == 0:
        return ctx.cast(x, "bool")
    default = node.target.endswith(".default")
    dims = None if default else node.arg(1, "dim")
    keepdim = False if default else bool(node.arg(2, "keepdim", False))
    op = "reduce_max" if node.target.startswith("aten.any") else "reduce_min"
    return ctx.cast(ctx.emit(op, x, axes=_axes(ctx, x, dims), keepdims=keepdim), "bool")


@converter("aten.var.correction", "aten.var.dim")
def _var(ctx, node):
    """sum((x - mean)^2) / (N - correction), the mean kept over the reduced axes."""
    dtype = ctx.out_dtype(node)
    x = ctx.tensor(node.arg(0, "self"), dtype)
    axes = _axes(ctx, x, node.arg(1, "dim"))
    if node.target == "aten.var.correction":
        correction = node.kwargs.get("correction", 1)
        correction = 1 if correction is None else correction
        keepdim = node.kwargs.get("keepdim", False)
    else:
        correction = 1 if node.arg(2, "unbiased", True) else 0
        keepdim = node.arg(3, "keepdim", False)
    shape = ctx.shape_of(x)
    count = 1
    for a in axes:
        count = count * shape[a]
    centered = ctx.emit("sub", x, ctx.emit("reduce_mean", x, axes=axes, keepdims=True))
    total = ctx.emit("reduce_sum", ctx.emit("mul", centered, centered), axes=axes, keepdims=bool(keepdim))
    # torch divides by max(N - correction, 0): no elements (or too few) give nan or inf
    divisor = ctx.cast(ctx.tensor(count - correction), dtype)
    divisor = ctx.emit("maximum", divisor, ctx.tensor(0, dtype))
    return ctx.emit("div", total, divisor)


@converter("aten.linalg_vector_norm.default")
def _vector_norm(ctx, node):
    """The p-norm over `dim` (every dimension when absent)."""
    dtype = ctx.out_dtype(node)
    x = ctx.tensor(node.arg(0, "self"), dtype)
    p = node.arg(1, "ord", 2)
    axes, keepdim = _axes(ctx, x, node.arg(2, "dim")), bool(node.arg(3, "keepdim", False))
    if p == 2:
        return ctx.emit("reduce_l2", x, axes=axes, keepdims=keepdim)
    if p == 1:
        return ctx.emit("reduce_l1", x, axes=axes, keepdims=keepdim)
    if p in (float("inf"), float("-inf")):
        op = "reduce_max" if p > 0 else "reduce_min"
        return ctx.emit(op, ctx.emit("abs", x), axes=axes, keepdims=keepdim)
    if p == 0:
        nonzero = ctx.cast(ctx.emit("logical_not", ctx.emit("equal", x, ctx.tensor(0, dtype))), dtype)
        return ctx.emit("reduce_sum", nonzero, axes=axes, keepdims=keepdim)
    powered = ctx.emit("pow", ctx.emit("abs", x), ctx.tensor(float(p), dtype))
    total = ctx.emit("reduce_sum", powered, axes=axes, keepdims=keepdim)
    return ctx.emit("pow", total, ctx.tensor(1.0 / p, dtype))
