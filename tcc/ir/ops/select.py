"""Value-dependent ops: one_hot, nonzero, unique, non_max_suppression, binarize.

Ops whose output size depends on data (nonzero, unique, non_max_suppression, and one_hot
with a run-time depth operand) give that dimension a fresh size variable, which the
interpreter binds from the result.
"""

from __future__ import annotations

import functools

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import is_float
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    check_dim,
    clamp_index,
    count_selected,
    count_type,
    no_loop,
    nonscalar,
    orders_before,
    same_value,
    selected_positions,
    unravel,
)
from tcc.ir.ops.elementwise import LOOP_DTYPES
from tcc.ir.ops.registry import (
    OpDef,
    Pattern,
    StaticForm,
    normalize_axis,
    prod,
    register,
    tensor,
    tuple_type,
)

# ---------------------------------------------------------------------------------------------
# one_hot, nonzero, unique


def _dim_may_be(d: Dim, n: int) -> bool:
    return not isinstance(d, int) or d == n


def _one_hot_infer(args, attrs):
    op = "one_hot"
    idx = tensor(args[0], op, "indices")
    values = tensor(args[2], op, "values")
    if values.ndim != 1 or not _dim_may_be(values.shape[0], 2):
        raise ShapeError(f"op {op}: values must be [off_value, on_value], got shape {values.shape}")
    depth = attrs["depth"]
    if depth is None:
        if args[1] is None:
            raise ShapeError(f"op {op}: needs a depth attribute or a depth operand")
        depth = fresh_var("depth")
    axis = normalize_axis(attrs["axis"], idx.ndim + 1, op)
    return TensorType(idx.shape[:axis] + (depth,) + idx.shape[axis:], values.dtype)


def _one_hot_ref(indices, depth_operand, values, depth, axis):
    if depth is None:
        depth = int(np.asarray(depth_operand).reshape(-1)[0])
    axis = axis % (indices.ndim + 1)
    wrapped = np.where(indices < 0, indices + depth, indices)
    classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(wrapped, axis) == classes
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def _one_hot_compute(indices, depth_operand, values, *, depth, axis):
    if depth_operand is not None:
        raise no_loop("one_hot", "a run-time depth operand")
    if indices.dtype not in LOOP_DTYPES or indices.dtype == "bool":
        raise no_loop("one_hot", f"{indices.dtype} indices")
    axis = axis % (indices.ndim + 1)
    wide = "float64" if is_float(indices.dtype) else "int64"  # numpy's wrap, without overflow
    shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]

    def hot(*i):
        v = te.cast(indices[i[:axis] + i[axis + 1 :]], wide)
        wrapped = te.if_then_else(v < te.const(0, wide), v + te.cast(te.const(depth), wide), v)
        return te.if_then_else(te.equal(wrapped, te.cast(i[axis], wide)), values[1], values[0])

    return te.compute(shape, hot, "one_hot")


def _one_hot_static(types, sizes, out, attrs):
    (depth,) = sizes[1]
    shape = types[0].shape
    axis = attrs["axis"] % (len(shape) + 1)
    dims = shape[:axis] + (depth,) + shape[axis:]
    return StaticForm("one_hot", (0, None, 2), {**attrs, "depth": depth}, dims)


register(
    OpDef(
        "one_hot",
        _one_hot_infer,
        _one_hot_ref,
        attrs={"depth": None, "axis": -1},
        pattern=Pattern.INJECTIVE,
        num_args=(3, 3),
        compute=_one_hot_compute,
        doc="Operands (indices, depth, values=[off, on]): a new axis of length `depth` at "
        "`axis` holding on where it equals the index (negative indices wrap; others stay off). "
        "The depth attribute, when set, replaces the run-time depth operand (then None); an "
        "int64 depth operand is read when the program runs.",
        shape_operands=(1,),
        to_static=_one_hot_static,
    )
)


def _nonzero_infer(args, attrs):
    x = tensor(args[0], "nonzero")
    count = fresh_var("nnz") if attrs["count"] is None else attrs["count"]
    return TensorType((max(x.ndim, 1), count), "int64")


def _nonzero_flags(x):
    if x.dtype not in LOOP_DTYPES:
        raise no_loop("nonzero", f"dtype {x.dtype}")
    shape = x.shape
    return prod(shape), lambda p: te.not_equal(x[unravel(p, shape)], te.const(0, x.dtype))


def _nonzero_compute(x, *, count):
    if count is None:
        raise no_loop("nonzero", "a count not read at run time")
    n, flags = _nonzero_flags(x)
    positions = selected_positions(n, count, flags, "nonzero_positions")
    dims = x.shape or (1,)

    def coordinate(d, j):
        at = unravel(positions[j], dims)
        out = at[-1]
        for k in range(len(dims) - 1):
            out = te.if_then_else(te.equal(d, k), at[k], out)
        return out

    return te.compute((len(dims), count), coordinate, "nonzero")


def _nonzero_static(types, sizes, out, attrs):
    if attrs["count"] is not None:
        raise NoLoopProgram("nonzero: counted already")
    (count,) = sizes[1]
    return StaticForm("nonzero", (0,), {"count": count}, (max(types[0].ndim, 1), count))


register(
    OpDef(
        "nonzero_count",
        count_type("nonzero_count"),
        lambda x: np.array([np.count_nonzero(x)], np.int64),
        pattern=Pattern.OPAQUE,
        compute=lambda x: count_selected(*_nonzero_flags(x), "nonzero_count"),
        doc="How many elements are nonzero, as a 1-vector (what nonzero's result holds).",
    )
)
register(
    OpDef(
        "nonzero",
        _nonzero_infer,
        lambda x, count=None: np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64).reshape(
            max(x.ndim, 1), -1
        ),
        attrs={"count": None},
        pattern=Pattern.OPAQUE,
        compute=_nonzero_compute,
        doc="Indices of the nonzero elements, one row per axis (a scalar counts as a 1-vector). "
        "Compiled, nonzero_count counts them, the count is read as a size (`count`), and a "
        "kernel finds each one's place (quadratic in the input's size).",
        size_op="nonzero_count",
        to_static=_nonzero_static,
    )
)


def _unique_dims(x: TensorType, axis, n: Dim) -> tuple[tuple[Dim, ...], Dim]:
    """The values' shape and the inverse indices' length of `n` unique items of x."""
    if axis is None:
        return (n,), prod(x.shape)
    axis = normalize_axis(axis, nonscalar(x, "unique", "input").ndim, "unique")
    return x.shape[:axis] + (n,) + x.shape[axis + 1 :], x.shape[axis]


def _unique_infer(args, attrs):
    x = tensor(args[0], "unique")
    n = fresh_var("uniq") if attrs["count"] is None else attrs["count"]
    y, inverse_len = _unique_dims(x, attrs["axis"], n)
    return tuple_type(
        TensorType(y, x.dtype),
        TensorType((n,), "int64"),
        TensorType((inverse_len,), "int64"),
        TensorType((n,), "int64"),
    )


def _unique_ref(x, axis, sorted, count=None):
    flat = x.reshape(-1) if axis is None else x
    y, first, inverse, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted:  # order by first occurrence instead of by value
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_index = [np.asarray(a, dtype=np.int64) for a in (first, inverse, counts)]
    return (y, *as_index)


class _Slices:
    """The items Unique compares: the elements of x (axis None) or its slices along `axis`,
    `n` of them with `m` elements each; `element(p, k)` is element k of item p."""

    def __init__(self, x, axis):
        if x.dtype not in LOOP_DTYPES or x.dtype == "bool":
            raise no_loop("unique", f"dtype {x.dtype}")
        self.x = x
        if axis is None:
            self.axis, self.n, self.m, self.rest = None, prod(x.shape), 1, ()
        else:
            self.axis = normalize_axis(axis, x.ndim, "unique")
            self.rest = x.shape[: self.axis] + x.shape[self.axis + 1 :]
            self.n, self.m = x.shape[self.axis], prod(self.rest)

    def element(self, p, k):
        if self.axis is None:
            return self.x[unravel(p, self.x.shape)]
        at = unravel(k, self.rest) if self.rest else ()
        return self.x[at[: self.axis] + (p,) + at[self.axis :]]

    def item_at(self, out_index, p):
        """Element `out_index` of a result that holds item p where x holds the item at its
        place along the axis."""
        if self.axis is None:
            return self.x[unravel(p, self.x.shape)]
        return self.x[out_index[: self.axis] + (p,) + out_index[self.axis + 1 :]]


def _where_nonempty(dims, value, otherwise):
    """`value()` where every one of `dims` is at least 1, else `otherwise`: an access clamped
    into those dims is in bounds only then."""
    if any(isinstance(d, int) and d == 0 for d in dims):
        return otherwise
    symbolic = [te.greater_equal(d, 1) for d in dims if not isinstance(d, int)]
    if not symbolic:
        return value()
    return te.if_then_else(functools.reduce(te.logical_and, symbolic), value(), otherwise)


def _unique_stages(x, axis, sorted):
    """(items, first-occurrence flags, the first place where two items differ, rank): an
    item's rank is its place in the result (among first occurrences, by value or by first
    occurrence). Quadratic in the number of items, in plain stages."""
    s = _Slices(x, axis)
    n, m, dtype = s.n, s.m, x.dtype

    def first_difference(p, q):
        k = te.reduce_axis(m, "k")
        differs = te.logical_not(same_value(dtype, s.element(p, k), s.element(q, k)))
        return te.min(te.if_then_else(differs, te.cast(k, "int64"), te.const(m, "int64")), axis=[k])

    diff = te.compute((n, n), first_difference, "unique_first_difference")
    if not (isinstance(m, int) and m > 0):  # items of no element are all equal
        found = diff
        diff = te.compute((n, n), lambda p, q: te.if_then_else(
            te.equal(m, 0), te.const(0, "int64"), found[p, q]), "unique_difference")

    def same_item(p, q):
        return te.equal(diff[p, q], te.const(m, "int64"))

    def earlier_copies(p):
        q = te.reduce_axis(n, "q")
        return te.sum(te.const(1, "int64"), axis=[q], where=te.logical_and(q < p, same_item(q, p)))

    copies = te.compute((n,), earlier_copies, "unique_earlier_copies")

    def first(p):
        return te.equal(copies[p], te.const(0, "int64"))

    def rank(p):
        q = te.reduce_axis(n, "q")
        if sorted:
            d = clamp_index(diff[q, p], m)
            # items differ only where they have elements: said so for the bounds proof
            below = _where_nonempty(s.rest, lambda: orders_before(dtype, s.element(q, d), s.element(p, d)),
                                    te.const(False, "bool"))
            before = te.logical_and(te.logical_not(same_item(q, p)), below)
        else:
            before = q < p
        return te.sum(te.const(1, "int64"), axis=[q], where=te.logical_and(first(q), before))

    ranks = te.compute((n,), rank, "unique_rank")
    return s, first, same_item, ranks


def _unique_count_compute(x, *, axis):
    s, first, _, _ = _unique_stages(x, axis, False)
    return count_selected(s.n, first, "unique_count")


def _unique_compute(x, *, axis, sorted, count):
    if count is None:
        raise no_loop("unique", "a count not read at run time")
    s, first, same_item, ranks = _unique_stages(x, axis, sorted)
    n = s.n

    def place(j):
        p = te.reduce_axis(n, "p")
        hit = te.logical_and(first(p), te.equal(ranks[p], j))
        return te.sum(te.cast(p, "int64"), axis=[p], where=hit)

    indices = te.compute((count,), place, "unique_indices")

    def value(i, j):
        # a result item exists only where x has elements: said so for the bounds proof
        return _where_nonempty(x.shape, lambda: s.item_at(i, clamp_index(indices[j], n)),
                               te.const(0, x.dtype))

    if s.axis is None:
        values = te.compute((count,), lambda j: value(None, j), "unique_values")
    else:
        shape = s.rest[: s.axis] + (count,) + s.rest[s.axis :]
        values = te.compute(shape, lambda *i: value(i, i[s.axis]), "unique_values")

    def inverse(i):
        q = te.reduce_axis(n, "q")
        return te.sum(ranks[q], axis=[q], where=te.logical_and(first(q), same_item(q, i)))

    def copies(j):
        i = te.reduce_axis(n, "i")
        return te.sum(te.const(1, "int64"), axis=[i], where=same_item(clamp_index(indices[j], n), i))

    return [values, indices, te.compute((n,), inverse, "unique_inverse"),
            te.compute((count,), copies, "unique_counts")]


def _unique_static(types, sizes, out, attrs):
    if attrs["count"] is not None:
        raise NoLoopProgram("unique: counted already")
    (count,) = sizes[1]
    y, inverse_len = _unique_dims(types[0], attrs["axis"], count)
    return StaticForm("unique", (0,), {**attrs, "count": count},
                      (*y, count, inverse_len, count))


register(
    OpDef(
        "unique_count",
        count_type("unique_count"),
        lambda x, axis=None: np.array([_unique_ref(x, axis, True)[1].size], np.int64),
        attrs={"axis": None},
        pattern=Pattern.OPAQUE,
        compute=_unique_count_compute,
        doc="How many unique elements (or slices along `axis`) x has, as a 1-vector.",
    )
)
register(
    OpDef(
        "unique",
        _unique_infer,
        _unique_ref,
        attrs={"axis": None, "sorted": True, "count": None},
        pattern=Pattern.OPAQUE,
        compute=_unique_compute,
        doc="(values, first-occurrence indices, inverse indices, counts) of the unique "
        "elements (or slices along `axis`), sorted (NaN last) or in order of first "
        "occurrence. Compiled, unique_count counts them, the count is read as a size "
        "(`count`), and kernels compare every pair of items (quadratic in their number).",
        size_op="unique_count",
        to_static=_unique_static,
    )
)


# ---------------------------------------------------------------------------------------------
# non_max_suppression


def _nms_infer(args, attrs):
    op = "non_max_suppression"
    boxes, scores = tensor(args[0], op, "boxes"), tensor(args[1], op, "scores")
    if boxes.ndim != 3 or not _dim_may_be(boxes.shape[2], 4):
        raise ShapeError(f"op {op}: boxes must be (batch, boxes, 4), got {boxes.shape}")
    if scores.ndim != 3:
        raise ShapeError(f"op {op}: scores must be (batch, classes, boxes), got {scores.shape}")
    check_dim(boxes.shape[0], scores.shape[0], op, "scores batch")
    check_dim(boxes.shape[1], scores.shape[2], op, "scores boxes")
    return TensorType((fresh_var("selected"), 3), "int64")


def _box_extents(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(x_min, x_max, y_min, y_max) per box, from corners [y1, x1, y2, x2] in any order or
    from [x_center, y_center, width, height]."""
    if center_point_box:
        x, y, half_w, half_h = boxes[:, 0], boxes[:, 1], boxes[:, 2] / 2, boxes[:, 3] / 2
        return x - half_w, x + half_w, y - half_h, y + half_h
    y1, x1, y2, x2 = boxes.T
    return np.minimum(x1, x2), np.maximum(x1, x2), np.minimum(y1, y2), np.maximum(y1, y2)


def _overlaps(ext, i: int, kept: list[int], threshold) -> bool:
    """Whether box i's IoU with any kept box exceeds `threshold` (in the boxes' dtype)."""
    x0, x1, y0, y1 = (e[i] for e in ext)
    kx0, kx1, ky0, ky1 = (e[kept] for e in ext)
    w = np.minimum(x1, kx1) - np.maximum(x0, kx0)
    h = np.minimum(y1, ky1) - np.maximum(y0, ky0)
    inter = w * h
    area, kept_area = (x1 - x0) * (y1 - y0), (kx1 - kx0) * (ky1 - ky0)
    union = area + kept_area - inter
    valid = (w > 0) & (h > 0) & (inter > 0) & (area > 0) & (kept_area > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return bool(np.any(valid & (inter / union > threshold)))


def _scalar(a, default):
    return default if a is None or a.size == 0 else a.reshape(-1)[0]


def _nms_ref(boxes, scores, max_output, iou_threshold, score_threshold, center_point_box):
    limit = max(int(_scalar(max_output, 0)), 0)
    iou = _scalar(iou_threshold, boxes.dtype.type(0))
    selected = []
    for b in range(boxes.shape[0]):
        ext = _box_extents(boxes[b], center_point_box)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.argsort(-s, kind="stable")  # best first, ties by box index
            if score_threshold is not None and score_threshold.size:
                order = order[s[order] > _scalar(score_threshold, 0)]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not kept or not _overlaps(ext, i, kept, iou):
                    kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


register(
    OpDef(
        "non_max_suppression",
        _nms_infer,
        _nms_ref,
        attrs={"center_point_box": 0},
        pattern=Pattern.OPAQUE,
        num_args=(2, 5),
        doc="Operands (boxes, scores, max_output_boxes_per_class?, iou_threshold?, "
        "score_threshold?): greedy per-class selection of boxes by score, dropping boxes whose "
        "IoU with a kept box exceeds the threshold; rows are [batch, class, box].",
    )
)


# ---------------------------------------------------------------------------------------------
# binarize


def _binarize_compute(x, *, threshold):
    # numpy compares a float array with the (weak) Python float in the array's dtype, an
    # integer array in float64
    at = x.dtype if is_float(x.dtype) else "float64"
    return te.compute(x.shape, lambda *i: te.if_then_else(
        te.greater(te.cast(x[i], at), te.const(float(threshold), at)),
        te.const(1, x.dtype), te.const(0, x.dtype)), "binarize")


register(
    OpDef(
        "binarize",
        lambda args, attrs: tensor(args[0], "binarize"),
        lambda x, threshold: (x > threshold).astype(x.dtype),
        attrs={"threshold": 0.0},
        pattern=Pattern.ELEMWISE,
        compute=_binarize_compute,
        doc="1 where x > threshold, else 0, in the dtype of x.",
    )
)
