"""Indexing ops: gather/scatter families, resize, nonzero, unique, one_hot, ...

Gathers and resize are injective: each output element reads a set of input elements given
by its own index. Scatters are opaque: an output element depends on which updates happen
to target it. Ops whose output size depends on data (nonzero, unique, non_max_suppression,
and the variants of one_hot and resize that take a run-time size operand) give that
dimension a fresh size variable, which the interpreter binds from the result.

Index operands follow ONNX: int32 or int64, negative values count from the end.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tcc.ir.dtype import is_float, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    normalize_axis,
    prod,
    register,
    tensor,
    tuple_type,
)

INDEX_DTYPES = ("int32", "int64")


def _indices(t, op: str, what: str = "indices") -> TensorType:
    t = tensor(t, op, what)
    if t.dtype not in INDEX_DTYPES:
        raise ShapeError(f"op {op}: {what} must be int32 or int64, got {t.dtype}")
    return t


def _check_dim(a: Dim, b: Dim, op: str, what: str) -> None:
    """Reject two dimensions that must match but provably differ (symbolic ones are trusted)."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"op {op}: {what}: dimension {b} does not match {a}")


def _check_shape(expected, got, op: str, what: str) -> None:
    if len(expected) != len(got):
        raise ShapeError(f"op {op}: {what} must have rank {len(expected)}, got rank {len(got)}")
    for a, b in zip(expected, got):
        _check_dim(a, b, op, what)


def _nonscalar(t: TensorType, op: str, what: str = "data") -> TensorType:
    if t.ndim == 0:
        raise ShapeError(f"op {op}: {what} must have rank >= 1, got a scalar")
    return t


# ---------------------------------------------------------------------------------------------
# gathers


def _gather_infer(args, attrs):
    data = _nonscalar(tensor(args[0], "gather", "data"), "gather")
    idx = _indices(args[1], "gather")
    axis = normalize_axis(attrs["axis"], data.ndim, "gather")
    return TensorType(data.shape[:axis] + idx.shape + data.shape[axis + 1 :], data.dtype)


register(
    OpDef(
        "gather",
        _gather_infer,
        lambda data, indices, axis: np.take(data, indices, axis=axis),
        attrs={"axis": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        doc="Select slices of `data` along `axis` (numpy take); scalar indices drop the axis.",
    )
)


def _gather_elements_infer(args, attrs):
    data = _nonscalar(tensor(args[0], "gather_elements", "data"), "gather_elements")
    idx = _indices(args[1], "gather_elements")
    normalize_axis(attrs["axis"], data.ndim, "gather_elements")
    if idx.ndim != data.ndim:
        raise ShapeError(f"op gather_elements: indices must have rank {data.ndim}, got {idx.ndim}")
    return TensorType(idx.shape, data.dtype)


register(
    OpDef(
        "gather_elements",
        _gather_elements_infer,
        lambda data, indices, axis: np.take_along_axis(data, indices, axis=axis),
        attrs={"axis": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        doc="out[i][j][k] = data[indices[i][j][k]][j][k] for axis 0 (and so on for other axes).",
    )
)


def _index_depth(idx: TensorType, rank: int, op: str) -> int:
    """The length of each index tuple (the last dimension of `indices`), which must be static."""
    k = idx.shape[-1] if idx.ndim else None
    if not isinstance(k, int):
        raise ShapeError(f"op {op}: the last dimension of indices must be static, got {k}")
    if not 1 <= k <= rank:
        raise ShapeError(f"op {op}: index tuples of length {k} do not address a rank-{rank} tensor")
    return k


def _gather_nd_infer(args, attrs):
    data = _nonscalar(tensor(args[0], "gather_nd", "data"), "gather_nd")
    idx = _nonscalar(_indices(args[1], "gather_nd"), "gather_nd", "indices")
    b = attrs["batch_dims"]
    if not 0 <= b < min(data.ndim, idx.ndim):
        raise ShapeError(f"op gather_nd: batch_dims {b} must be below both ranks")
    for d, i in zip(data.shape[:b], idx.shape[:b]):
        _check_dim(d, i, "gather_nd", "batch dimensions of indices")
    k = _index_depth(idx, data.ndim - b, "gather_nd")
    return TensorType(idx.shape[:-1] + data.shape[b + k :], data.dtype)


def _gather_nd_ref(data, indices, batch_dims):
    b, k = batch_dims, indices.shape[-1]
    batch = math.prod(data.shape[:b])
    flat_data = data.reshape((batch,) + data.shape[b:])
    flat_idx = indices.reshape((batch, -1, k)) if indices.size else np.zeros((batch, 0, k), int)
    rows = np.arange(batch)[:, None]
    picked = flat_data[(rows,) + tuple(flat_idx[..., j] for j in range(k))]
    return picked.reshape(indices.shape[:-1] + data.shape[b + k :])


register(
    OpDef(
        "gather_nd",
        _gather_nd_infer,
        _gather_nd_ref,
        attrs={"batch_dims": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        doc="Gather slices of `data` addressed by the index tuples in the last axis of `indices`.",
    )
)


def _array_feature_extractor_infer(args, attrs):
    op = "array_feature_extractor"
    data = _nonscalar(tensor(args[0], op, "data"), op)
    idx = _indices(args[1], op)
    lead = data.shape[:-1] if data.ndim > 1 else (1,)
    return TensorType(lead + (prod(idx.shape),), data.dtype)


register(
    OpDef(
        "array_feature_extractor",
        _array_feature_extractor_infer,
        lambda data, indices: np.take(data, indices.reshape(-1), axis=-1).reshape(
            (data.shape[:-1] if data.ndim > 1 else (1,)) + (indices.size,)
        ),
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        doc="Select columns (last-axis entries) of `data` by the flattened `indices`; a "
        "1-D `data` gives one row.",
    )
)


# ---------------------------------------------------------------------------------------------
# scatters

_REDUCE_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
REDUCTIONS = ("none", *_REDUCE_UFUNCS)


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in REDUCTIONS:
        raise ShapeError(f"op {op}: unknown reduction {reduction!r}; expected one of {REDUCTIONS}")


def _scatter_into(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """Write (or combine) `updates` into `out[index]`; duplicates accumulate with a reduction."""
    if reduction == "none":
        out[index] = updates
    else:
        _REDUCE_UFUNCS[reduction].at(out, index, updates)
    return out


def _scatter_elements_infer(args, attrs):
    op = "scatter_elements"
    data = _nonscalar(tensor(args[0], op, "data"), op)
    idx, upd = _indices(args[1], op), tensor(args[2], op, "updates")
    normalize_axis(attrs["axis"], data.ndim, op)
    _check_reduction(attrs["reduction"], op)
    if idx.ndim != data.ndim:
        raise ShapeError(f"op {op}: indices must have rank {data.ndim}, got {idx.ndim}")
    _check_shape(idx.shape, upd.shape, op, "updates (shaped like indices)")
    if upd.dtype != data.dtype:
        raise ShapeError(f"op {op}: updates must be {data.dtype}, got {upd.dtype}")
    return data


def _scatter_elements_ref(data, indices, updates, axis, reduction):
    index = list(np.indices(indices.shape, sparse=True))
    index[axis] = indices
    return _scatter_into(data.copy(), tuple(index), updates, reduction)


register(
    OpDef(
        "scatter_elements",
        _scatter_elements_infer,
        _scatter_elements_ref,
        attrs={"axis": 0, "reduction": "none"},
        pattern=Pattern.OPAQUE,
        num_args=(3, 3),
        doc="A copy of `data` with out[indices[i][j]][j] = updates[i][j] for axis 0 (combined "
        "by `reduction` when not 'none').",
    )
)


def _scatter_nd_infer(args, attrs):
    op = "scatter_nd"
    data = _nonscalar(tensor(args[0], op, "data"), op)
    idx = _nonscalar(_indices(args[1], op), op, "indices")
    upd = tensor(args[2], op, "updates")
    _check_reduction(attrs["reduction"], op)
    k = _index_depth(idx, data.ndim, op)
    _check_shape(idx.shape[:-1] + data.shape[k:], upd.shape, op, "updates")
    if upd.dtype != data.dtype:
        raise ShapeError(f"op {op}: updates must be {data.dtype}, got {upd.dtype}")
    return data


def _scatter_nd_ref(data, indices, updates, reduction):
    index = tuple(indices[..., j] for j in range(indices.shape[-1]))
    return _scatter_into(data.copy(), index, updates, reduction)


register(
    OpDef(
        "scatter_nd",
        _scatter_nd_infer,
        _scatter_nd_ref,
        attrs={"reduction": "none"},
        pattern=Pattern.OPAQUE,
        num_args=(3, 3),
        doc="A copy of `data` with the slices addressed by the index tuples of `indices` "
        "replaced by (or combined with) `updates`.",
    )
)


def _tensor_scatter_infer(args, attrs):
    op = "tensor_scatter"
    cache = tensor(args[0], op, "past_cache")
    upd = tensor(args[1], op, "update")
    if cache.ndim < 2:
        raise ShapeError(f"op {op}: past_cache must have rank >= 2 (batch and sequence axes)")
    axis = normalize_axis(attrs["axis"], cache.ndim, op)
    if axis == 0:
        raise ShapeError(f"op {op}: the sequence axis cannot be the batch axis 0")
    if attrs["mode"] not in ("linear", "circular"):
        raise ShapeError(f"op {op}: unknown mode {attrs['mode']!r}; expected linear or circular")
    if upd.ndim != cache.ndim or upd.dtype != cache.dtype:
        raise ShapeError(f"op {op}: update must be {cache.dtype} of rank {cache.ndim}, got {upd}")
    for i, (c, u) in enumerate(zip(cache.shape, upd.shape)):
        if i != axis:
            _check_dim(c, u, op, f"update axis {i}")
    if args[2] is not None:
        _check_shape(
            cache.shape[:1], _indices(args[2], op, "write_indices").shape, op, "write_indices"
        )
    return cache


def _tensor_scatter_ref(past_cache, update, write_indices, mode, axis):
    axis %= past_cache.ndim
    batch, length, seq = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    start = np.zeros(batch, np.int64) if write_indices is None else write_indices.astype(np.int64)
    pos = start[:, None] + np.arange(seq)[None, :]
    if mode == "circular":
        pos %= length
    out = past_cache.copy()
    # views with the sequence axis next to the batch axis: out[b, pos[b, j]] = update[b, j]
    np.moveaxis(out, axis, 1)[np.arange(batch)[:, None], pos] = np.moveaxis(update, axis, 1)
    return out


register(
    OpDef(
        "tensor_scatter",
        _tensor_scatter_infer,
        _tensor_scatter_ref,
        attrs={"mode": "linear", "axis": -2},
        pattern=Pattern.OPAQUE,
        num_args=(2, 3),
        doc="KV-cache update: write `update` into `past_cache` along the sequence `axis` from "
        "each batch row's write index (zero when absent), wrapping around in 'circular' mode.",
    )
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


register(
    OpDef(
        "one_hot",
        _one_hot_infer,
        _one_hot_ref,
        attrs={"depth": None, "axis": -1},
        pattern=Pattern.INJECTIVE,
        num_args=(3, 3),
        doc="Operands (indices, depth, values=[off, on]): a new axis of length `depth` at "
        "`axis` holding on where it equals the index (negative indices wrap; others stay off). "
        "The depth attribute, when set, replaces the run-time depth operand (then None).",
    )
)


def _nonzero_infer(args, attrs):
    x = tensor(args[0], "nonzero")
    return TensorType((max(x.ndim, 1), fresh_var("nnz")), "int64")


register(
    OpDef(
        "nonzero",
        _nonzero_infer,
        lambda x: np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64).reshape(
            max(x.ndim, 1), -1
        ),
        pattern=Pattern.OPAQUE,
        doc="Indices of the nonzero elements, one row per axis (a scalar counts as a 1-vector).",
    )
)


def _unique_infer(args, attrs):
    x = tensor(args[0], "unique")
    n = fresh_var("uniq")
    if attrs["axis"] is None:
        y, inverse_len = (n,), prod(x.shape)
    else:
        axis = normalize_axis(attrs["axis"], _nonscalar(x, "unique", "input").ndim, "unique")
        y, inverse_len = x.shape[:axis] + (n,) + x.shape[axis + 1 :], x.shape[axis]
    return tuple_type(
        TensorType(y, x.dtype),
        TensorType((n,), "int64"),
        TensorType((inverse_len,), "int64"),
        TensorType((n,), "int64"),
    )


def _unique_ref(x, axis, sorted):
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


register(
    OpDef(
        "unique",
        _unique_infer,
        _unique_ref,
        attrs={"axis": None, "sorted": True},
        pattern=Pattern.OPAQUE,
        doc="(values, first-occurrence indices, inverse indices, counts) of the unique "
        "elements (or slices along `axis`), sorted or in order of first occurrence.",
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
    _check_dim(boxes.shape[0], scores.shape[0], op, "scores batch")
    _check_dim(boxes.shape[1], scores.shape[2], op, "scores boxes")
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

register(
    OpDef(
        "binarize",
        lambda args, attrs: tensor(args[0], "binarize"),
        lambda x, threshold: (x > threshold).astype(x.dtype),
        attrs={"threshold": 0.0},
        pattern=Pattern.ELEMWISE,
        doc="1 where x > threshold, else 0, in the dtype of x.",
    )
)


# ---------------------------------------------------------------------------------------------
# resize
#
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


def _resize_ref(x, sizes, scales, roi, **attrs):
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
    if len(sizes) != x.ndim or len(scales) != x.ndim:
        raise ShapeError(
            f"op resize: sizes and scales need {x.ndim} entries, got {len(sizes)}, {len(scales)}"
        )
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and (
        roi is None or len(roi) != 2 * x.ndim
    ):
        raise ShapeError(f"op resize: tf_crop_and_resize needs a roi of {2 * x.ndim} values")
    return TensorType(tuple(sizes), x.dtype)


register(
    OpDef(
        "resize",
        _resize_infer,
        _resize_ref,
        attrs={"sizes": REQUIRED, "scales": REQUIRED, "roi": None, **_SAMPLING_ATTRS},
        pattern=Pattern.INJECTIVE,
        doc="Resample every axis to `sizes`; `scales` (None = sizes/input) drives the coordinate "
        "transformation, `roi` ([starts..., ends...]) the tf_crop_and_resize crop.",
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
    out, full_scales = resize_plan(
        x.shape,
        [float(s) for s in scales] if given_scales else None,
        None if given_scales else [int(n) for n in sizes],
        axes,
        keep_aspect_ratio_policy,
    )
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    full = full_roi(roi, axes, x.ndim) if crop and roi is not None and roi.size else None
    return _resize_ref(x, out, full_scales, full, **attrs)


register(
    OpDef(
        "resize_dynamic",
        _resize_dynamic_infer,
        _resize_dynamic_ref,
        attrs={"axes": None, "keep_aspect_ratio_policy": "stretch", **_SAMPLING_ATTRS},
        pattern=Pattern.OPAQUE,
        num_args=(4, 4),
        doc="Resize with run-time operands (x, roi?, scales?, sizes?) as in ONNX Resize-18; "
        "the resized axes get data-dependent sizes.",
    )
)
