"""Converters for ATen ops that move, view, index or create data: views and permutes,
slices, concatenation and splits, gathers, padding, and tensors made from sizes.

Target shapes come from torch's own record of the result (`node.val`), so a `view` whose
sizes torch computed from other sizes is a reshape to the same symbolic expressions.
"""

from __future__ import annotations

from tcc.frontend.torch.base import converter
from tcc.ir.dtype import INT_DTYPES
from tcc.ir.expr import PrimExpr, prove_equal
from tcc.ir.graph import Expr
from tcc.ir.ops.registry import broadcast_shapes, normalize_axis
from tcc.ir.ops.slicing import slice_length, slice_start

SLICE_END = 2**63 - 1  # what torch writes for an open end


def _axis(axis: int, ndim: int) -> int:
    return normalize_axis(axis, ndim, "torch")


@converter("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(ctx, node):
    return ctx.emit("reshape", node.arg(0, "self"), shape=list(ctx.out_shape(node)))


@converter("aten.permute.default")
def _permute(ctx, node):
    x = node.arg(0, "self")
    return ctx.emit("transpose", x, axes=[_axis(d, ctx.ndim_of(x)) for d in node.arg(1, "dims")])


@converter("aten.transpose.int")
def _transpose(ctx, node):
    x = node.arg(0, "self")
    n = ctx.ndim_of(x)
    axes = list(range(n))
    a, b = _axis(node.arg(1, "dim0"), n), _axis(node.arg(2, "dim1"), n)
    axes[a], axes[b] = axes[b], axes[a]
    return ctx.emit("transpose", x, axes=axes)


@converter("aten.t.default")
def _t(ctx, node):
    x = node.arg(0, "self")
    return x if ctx.ndim_of(x) < 2 else ctx.emit("transpose", x, axes=[1, 0])


@converter("aten.expand.default")
def _expand(ctx, node):
    x = node.arg(0, "self")
    return _broadcast(ctx, x, ctx.out_shape(node))


def _broadcast(ctx, x, shape):
    """`x` broadcast to `shape`, or `x` itself when it has that shape already."""
    if len(shape) == ctx.ndim_of(x) and all(prove_equal(a, b) for a, b in zip(shape, ctx.shape_of(x))):
        return x
    return ctx.emit("broadcast_to", x, shape=list(shape))


@converter("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(ctx, node):
    x = node.arg(0, "self")
    shape, n = ctx.shape_of(x), ctx.ndim_of(x)
    if n == 0:  # nothing to squeeze; torch takes dim 0 or -1 of a scalar
        return x
    dims = node.arg(1, "dim")
    dims = list(range(n)) if dims is None else [dims] if isinstance(dims, int) else list(dims)
    axes = [a for a in (_axis(d, n) for d in dims) if isinstance(shape[a], int) and shape[a] == 1]
    return ctx.emit("squeeze", x, axes=axes) if axes else x


@converter("aten.unsqueeze.default")
def _unsqueeze(ctx, node):
    x = node.arg(0, "self")
    return ctx.emit("expand_dims", x, axes=[_axis(node.arg(1, "dim"), ctx.ndim_of(x) + 1)])


@converter("aten.cat.default")
def _cat(ctx, node):
    dtype = ctx.out_dtype(node)
    out_ndim = len(ctx.out_shape(node))
    # torch skips 1-D empty tensors in a concatenation of higher rank
    parts = [ctx.tensor(t, dtype) for t in node.arg(0, "tensors")
             if not (ctx.ndim_of(t) == 1 and out_ndim > 1 and ctx.shape_of(t)[0] == 0)]
    if len(parts) == 1:
        return parts[0]
    return ctx.emit("concat", *parts, axis=_axis(node.arg(1, "dim", 0), out_ndim))


@converter("aten.slice.Tensor")
def _slice(ctx, node):
    x = node.arg(0, "self")
    axis = _axis(node.arg(1, "dim", 0), ctx.ndim_of(x))
    start, end, step = node.arg(2, "start"), node.arg(3, "end"), node.arg(4, "step", 1)
    start = 0 if start is None else start
    end = SLICE_END if end is None else end
    if start == 0 and end == SLICE_END and step == 1:
        return x
    dim, length = ctx.shape_of(x)[axis], ctx.out_shape(node)[axis]
    if prove_equal(slice_length(dim, start, end, step), length):
        return ctx.emit("strided_slice", x, begin=[start], end=[end], axes=[axis], strides=[step])
    # torch proved a simpler length from the sizes' ranges (an end past every size the
    # program accepts, say): slice that many from the first index
    return ctx.emit("strided_slice", x, begin=[slice_start(dim, start, step)], end=[end],
                    axes=[axis], strides=[step], lengths=[length])


@converter("aten.select.int")
def _select(ctx, node):
    x = node.arg(0, "self")
    axis = _axis(node.arg(1, "dim"), ctx.ndim_of(x))
    index = node.arg(2, "index")
    end = SLICE_END if isinstance(index, int) and index == -1 else index + 1
    one = ctx.emit("strided_slice", x, begin=[index], end=[end], axes=[axis], strides=[1])
    return ctx.emit("squeeze", one, axes=[axis])


@converter("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(ctx, node):
    x = node.arg(0, "self")
    axis = _axis(node.arg(2, "dim", 0), ctx.ndim_of(x))
    sizes = [ctx.shape(v)[axis] for v in node.val]
    if len(sizes) == 1:
        return [x]
    parts = ctx.emit("split", x, sizes=sizes, axis=axis)
    return [ctx.bb.get_item(parts, i, name=f"{node.name}_{i}") for i in range(len(sizes))]


@converter("aten.unbind.int")
def _unbind(ctx, node):
    x = node.arg(0, "self")
    axis = _axis(node.arg(1, "dim", 0), ctx.ndim_of(x))
    n = ctx.shape_of(x)[axis]
    if not isinstance(n, int):
        raise node.error("unbind along a dimension of symbolic size; export it with a static size")
    parts = ctx.emit("split", x, sizes=[1] * n, axis=axis) if n > 1 else None
    items = [ctx.bb.get_item(parts, i, name=f"{node.name}_{i}") for i in range(n)] if parts else [x]
    return [ctx.emit("squeeze", p, axes=[axis]) for p in items]


@converter("aten.index_select.default")
def _index_select(ctx, node):
    def convert():
        x = node.arg(0, "self")
        index = ctx.emit("reshape", node.arg(2, "index"), shape=[-1])
        return ctx.emit("gather", x, index, axis=_axis(node.arg(1, "dim"), ctx.ndim_of(x)))

    return _on_vectors(ctx, node, convert)


@converter("aten.embedding.default")
def _embedding(ctx, node):
    return ctx.emit("gather", node.arg(0, "weight"), node.arg(1, "indices"), axis=0)


@converter("aten.gather.default")
def _gather(ctx, node):
    def convert():
        x = node.arg(0, "self")
        return ctx.emit("gather_elements", x, ctx.cast(node.arg(2, "index"), "int64"),
                        axis=_axis(node.arg(1, "dim"), ctx.ndim_of(x)))

    # the result has the index's shape: of a 0-d tensor, 0-d or one element
    return _on_vectors(ctx, node, convert, list(ctx.shape_of(node.arg(2, "index"))))


@converter("aten.nonzero.default")
def _nonzero(ctx, node):
    """torch.nonzero: the (count, ndim) indices of the nonzero elements, counted when the
    program runs; the size torch names for the count (`u0`) is the count's variable."""
    x = node.arg(0, "self")
    if ctx.ndim_of(x) == 0:
        raise node.error("nonzero of a 0-d tensor is not supported; flatten it first")
    found = ctx.emit("nonzero", x)  # (ndim, count)
    count = ctx.shape_of(found)[1]
    symbol = getattr(getattr(node.val.shape[0], "node", None), "expr", None)
    if symbol is not None and symbol not in ctx.size_vars:
        ctx.size_vars[symbol] = count
    return ctx.emit("transpose", found, axes=[1, 0])


@converter("aten.index.Tensor")
def _index(ctx, node):
    """x[..., i, j, ...] with integer index tensors: one index is a gather on its axis;
    several adjacent ones from the first axis a gather_nd of their broadcast stack."""
    x, indices = node.arg(0, "self"), list(node.arg(1, "indices"))
    used = [k for k, i in enumerate(indices) if i is not None]
    for k in used:
        if ctx.dtype_of(indices[k]) == "bool":
            raise node.error("indexing with a boolean mask gives a data-dependent shape; "
                             "use torch.where instead")
    if len(used) == 1:
        return ctx.emit("gather", x, indices[used[0]], axis=used[0])
    if used != list(range(len(used))):
        raise node.error("several index tensors are supported only on the leading axes")
    return ctx.emit("gather_nd", x, _stacked_indices(ctx, [indices[k] for k in used])[0])


def _stacked_indices(ctx, indices):
    """Integer index tensors broadcast together and stacked on a last axis, as gather_nd and
    scatter_nd take them, with their broadcast shape."""
    shape = list(broadcast_shapes([ctx.shape_of(i) for i in indices], "index"))
    stacked = [ctx.emit("expand_dims", _broadcast(ctx, ctx.tensor(i, "int64"), shape),
                        axes=[len(shape)]) for i in indices]
    where = stacked[0] if len(stacked) == 1 else ctx.emit("concat", *stacked, axis=len(shape))
    return where, shape


@converter("aten.constant_pad_nd.default")
def _pad(ctx, node):
    x = node.arg(0, "self")
    pad, value = list(node.arg(1, "pad")), node.arg(2, "value", 0)
    n = ctx.ndim_of(x)
    begins, ends = [0] * n, [0] * n
    for k in range(len(pad) // 2):  # pairs from the last axis backwards
        begins[n - 1 - k], ends[n - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if not any(begins) and not any(ends):
        return x
    return ctx.emit("pad", x, ctx.tensor(value, ctx.dtype_of(x)), pads=begins + ends, mode="constant")


@converter("aten.repeat.default")
def _repeat(ctx, node):
    x, repeats = node.arg(0, "self"), list(node.arg(1, "repeats"))
    extra = len(repeats) - ctx.ndim_of(x)
    if extra > 0:
        x = ctx.emit("reshape", x, shape=[1] * extra + list(ctx.shape_of(x)))
    return ctx.emit("tile", x, repeats=repeats)


@converter("aten.flip.default")
def _flip(ctx, node):
    x = node.arg(0, "self")
    axes = [_axis(d, ctx.ndim_of(x)) for d in node.arg(1, "dims")]
    return ctx.emit("strided_slice", x, begin=[-1] * len(axes), end=[-SLICE_END] * len(axes),
                    axes=axes, strides=[-1] * len(axes))


@converter("aten.full.default", "aten.empty.memory_format", "aten.empty_strided.default",
           "aten.zeros.default", "aten.ones.default", "aten.full_like.default",
           "aten.zeros_like.default", "aten.ones_like.default", "aten.empty_like.default")
def _full(ctx, node):
    """A tensor of one value (empty ones too: their contents are undefined) in torch's shape."""
    kind = node.target.split(".")[1].removesuffix("_like")
    value = node.arg(1, "fill_value") if kind == "full" else 1 if kind == "ones" else 0
    dtype = ctx.out_dtype(node)
    if isinstance(value, PrimExpr):
        return ctx.emit("broadcast_to", ctx.tensor(value, dtype), shape=list(ctx.out_shape(node)))
    return ctx.emit("full", shape=list(ctx.out_shape(node)), value=value, dtype=dtype)


@converter("aten.scalar_tensor.default")
def _scalar_tensor(ctx, node):
    return ctx.tensor(node.arg(0, "s"), ctx.out_dtype(node))


@converter("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(ctx, node):
    """start, start + step, ...: as many as torch counted (its count may be simpler than
    the clamped one tcc's arange states, knowing the sizes' ranges)."""
    start = 0 if node.target == "aten.arange.default" else node.arg(0, "start")
    step = node.arg(2, "step", 1) if node.target == "aten.arange.start_step" else 1
    dtype = ctx.out_dtype(node)
    (length,) = ctx.out_shape(node)
    return ctx.emit("arange_from", ctx.tensor(start, dtype), ctx.tensor(step, dtype), length=length)


@converter("aten.copy.default")
def _copy(ctx, node):
    """copy(dst, src): src's values in dst's dtype and shape."""
    return _broadcast(ctx, ctx.tensor(node.arg(1, "src"), ctx.out_dtype(node)), ctx.out_shape(node))


@converter("operator.getitem")
def _getitem(ctx, node):
    items, i = node.args
    value = items[i]
    if value is None:
        raise node.error(f"result {i} of {node.fx.args[0].name!r} is not computed by tcc")
    return value


# scatter_reduce's reductions: tcc's name, and the value a position starts from when its own
# value is left out (include_self=False)
_SCATTER_REDUCTIONS = {"sum": ("add", 0.0), "prod": ("mul", 1.0), "amax": ("max", float("-inf")),
                       "amin": ("min", float("inf"))}


@converter("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default",
           "aten.scatter.reduce", "aten.scatter.value_reduce")
def _scatter(ctx, node):
    return _on_vectors(ctx, node, lambda: _scatter_elements(ctx, node))


def _on_vectors(ctx, node, convert, result_shape=()):
    """`convert()` with 0-d operands seen as 1-element vectors (tcc's scatters and gathers
    need an axis), its result reshaped to `result_shape` (0-d unless given)."""
    if ctx.ndim_of(node.arg(0, "self")) > 0:
        return convert()
    node.args = tuple(ctx.emit("reshape", a, shape=[1]) if isinstance(a, Expr) and ctx.ndim_of(a) == 0
                      else a for a in node.args)
    return ctx.emit("reshape", convert(), shape=list(result_shape))


def _scatter_elements(ctx, node):
    x, index = node.arg(0, "self"), node.arg(2, "index")
    axis = _axis(node.arg(1, "dim"), ctx.ndim_of(x))
    src = node.arg(3, "src")
    if not isinstance(src, Expr):  # scatter.value: one value everywhere the index points
        src = ctx.emit("broadcast_to", ctx.tensor(src, ctx.dtype_of(x)), shape=list(ctx.shape_of(index)))
    reduction = "add" if node.target == "aten.scatter_add.default" else "none"
    if node.target.startswith("aten.scatter.") and "reduce" in node.target:
        reduction = {"add": "add", "multiply": "mul"}[node.arg(4, "reduce")]
    return ctx.emit("scatter_elements", x, index, ctx.tensor(src, ctx.dtype_of(x)), axis=axis,
                    reduction=reduction)


@converter("aten.scatter_reduce.two")
def _scatter_reduce(ctx, node):
    return _on_vectors(ctx, node, lambda: _scatter_reduce_tensors(ctx, node))


def _scatter_reduce_tensors(ctx, node):
    x, index, src = node.arg(0, "self"), node.arg(2, "index"), node.arg(3, "src")
    axis = _axis(node.arg(1, "dim"), ctx.ndim_of(x))
    reduce, include_self = node.arg(4, "reduce"), node.arg(5, "include_self", True)
    dtype = ctx.dtype_of(x)
    if reduce == "mean":  # the sum over the scattered values (and self), by their count
        total = _scatter_reduce_as(ctx, x, index, src, axis, "sum", include_self)
        ones = ctx.emit("full", shape=list(ctx.shape_of(index)), value=1, dtype=dtype)
        base = ctx.emit("full", shape=list(ctx.shape_of(x)), value=1 if include_self else 0, dtype=dtype)
        count = ctx.emit("scatter_elements", base, index, ones, axis=axis, reduction="add")
        count = ctx.emit("maximum", count, ctx.tensor(1, dtype))
        mean = ctx.emit("div", total, count)
        if dtype in INT_DTYPES:
            mean = ctx.emit("div", ctx.emit("sub", total, ctx.emit("floor_mod", total, count)), count)
        return mean
    if reduce not in _SCATTER_REDUCTIONS:
        raise node.error(f"scatter_reduce with reduce={reduce!r} is not supported")
    return _scatter_reduce_as(ctx, x, index, src, axis, reduce, include_self)


def _scatter_reduce_as(ctx, x, index, src, axis, reduce, include_self):
    op, start = _SCATTER_REDUCTIONS[reduce]
    if not include_self:  # the scattered positions start from the reduction's identity
        fill = ctx.emit("broadcast_to", ctx.tensor(start, ctx.dtype_of(x)), shape=list(ctx.shape_of(index)))
        x = ctx.emit("scatter_elements", x, index, fill, axis=axis, reduction="none")
    return ctx.emit("scatter_elements", x, index, src, axis=axis, reduction=op)


@converter("aten.index_put.default")
def _index_put(ctx, node):
    """x[i0, i1, ...] = values (accumulate: +=) for integer index tensors on the leading axes."""
    x, indices, values = node.arg(0, "self"), list(node.arg(1, "indices")), node.arg(2, "values")
    accumulate = bool(node.arg(3, "accumulate", False))
    if any(i is None for i in indices) or any(ctx.dtype_of(i) == "bool" for i in indices):
        raise node.error("index_put is supported with integer index tensors on the leading axes")
    where, idx_shape = _stacked_indices(ctx, indices)
    rest = list(ctx.shape_of(x))[len(indices):]
    updates = ctx.emit("broadcast_to", ctx.tensor(values, ctx.dtype_of(x)), shape=[*idx_shape, *rest])
    return ctx.emit("scatter_nd", x, where, updates, reduction="add" if accumulate else "none")


@converter("aten.diagonal.default")
def _diagonal(ctx, node):
    """The diagonal as a strided slice of the two axes flattened into one, moved last."""
    x = node.arg(0, "self")
    n = ctx.ndim_of(x)
    offset = node.arg(1, "offset", 0)
    d1, d2 = _axis(node.arg(2, "dim1", 0), n), _axis(node.arg(3, "dim2", 1), n)
    shape = ctx.shape_of(x)
    rows, cols = shape[d1], shape[d2]
    if not (isinstance(rows, int) and isinstance(cols, int)):
        raise node.error("diagonal of symbolic sizes is not supported")
    others = [a for a in range(n) if a not in (d1, d2)]
    moved = ctx.emit("transpose", x, axes=[*others, d1, d2])
    flat = ctx.emit("reshape", moved, shape=[shape[a] for a in others] + [rows * cols])
    length = ctx.out_shape(node)[-1]
    if length == 0:
        return ctx.emit("full", shape=list(ctx.out_shape(node)), value=0, dtype=ctx.dtype_of(x))
    first = offset if offset >= 0 else -offset * cols
    return ctx.emit("strided_slice", flat, begin=[first], end=[SLICE_END], axes=[len(others)],
                    strides=[cols + 1], lengths=[length])


@converter("aten.sort.default", "aten.sort.stable")
def _sort(ctx, node):
    x = node.arg(0, "self")
    if node.target == "aten.sort.stable":
        dim, descending = node.kwargs.get("dim", -1), node.kwargs.get("descending", False)
    else:
        dim, descending = node.arg(1, "dim", -1), node.arg(2, "descending", False)
    k = ctx.shape_of(x)[_axis(dim, ctx.ndim_of(x))] if ctx.ndim_of(x) else 1
    return _top(ctx, node, x, k, dim, bool(descending))


@converter("aten.topk.default")
def _topk(ctx, node):
    x = node.arg(0, "self")
    return _top(ctx, node, x, node.arg(1, "k"), node.arg(2, "dim", -1),
                bool(node.arg(3, "largest", True)))


def _top(ctx, node, x, k, dim, largest: bool):
    """(values, indices) of the k largest (or smallest) along `dim`, in order. A scalar is
    its own top element (k = 0 gives no elements, which the importer handles first)."""
    if ctx.ndim_of(x) == 0:
        return [x, ctx.emit("full", shape=[], value=0, dtype="int64")]
    out = ctx.emit("topk", x, k=k, axis=_axis(dim, ctx.ndim_of(x)), largest=largest, sorted=True)
    return [ctx.bb.get_item(out, i, name=f"{node.name}_{i}") for i in range(2)]
