"""Indexing ops: the gather and scatter families.

Gathers are injective: each output element reads a set of input elements given by its own
index. Scatters are opaque: an output element depends on which updates happen to target it.

Index operands follow ONNX: int32 or int64, negative values count from the end.

Loop programs: the gathers load `data` at an index read from `indices`, one stage each.
An index outside the axis is an error in ONNX (the numpy reference raises); the loop
programs clamp it into the axis instead, so a bad index reads a wrong element rather than
memory outside the buffer.

The scatters' loop programs turn the scatter around: each output element looks through
every update for the ones that target it (work of size output x updates). With reduction
'none' it takes the last one (a max over update positions), as numpy's assignment leaves
it; otherwise it combines its data element and then the targeting updates, in the
reference's order, as one reduction over the positions "data, update 0, update 1, ...".
An update whose index is outside the axis targets nothing.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import INDEX_DTYPE
from tcc.ir.errors import ShapeError
from tcc.ir.expr import as_dim
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import check_dim, clamp_index, no_loop, nonscalar, unravel
from tcc.ir.ops.registry import OpDef, Pattern, normalize_axis, prod, register, tensor

INDEX_DTYPES = ("int32", "int64")


def _indices(t, op: str, what: str = "indices") -> TensorType:
    t = tensor(t, op, what)
    if t.dtype not in INDEX_DTYPES:
        raise ShapeError(f"op {op}: {what} must be int32 or int64, got {t.dtype}")
    return t


def _check_shape(expected, got, op: str, what: str) -> None:
    if len(expected) != len(got):
        raise ShapeError(f"op {op}: {what} must have rank {len(expected)}, got rank {len(got)}")
    for a, b in zip(expected, got):
        check_dim(a, b, op, what)


# ---------------------------------------------------------------------------------------------
# gathers


def _axis_index(value, dim):
    """An index read from an index tensor as a position on an axis of extent `dim`: negative
    values count from the end, and out-of-range ones are clamped into the axis."""
    return clamp_index(_wrapped(value, dim), dim)


def _gather_compute(data, indices, axis):
    axis = normalize_axis(axis, data.ndim, "gather")
    out = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    m = indices.ndim

    def value(*i):
        picked = _axis_index(indices[i[axis : axis + m]], data.shape[axis])
        return data[i[:axis] + (picked,) + i[axis + m :]]

    return te.compute(out, value, "gather")


def _gather_infer(args, attrs):
    data = nonscalar(tensor(args[0], "gather", "data"), "gather")
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
        compute=_gather_compute,
        doc="Select slices of `data` along `axis` (numpy take); scalar indices drop the axis.",
    )
)


def _gather_elements_infer(args, attrs):
    data = nonscalar(tensor(args[0], "gather_elements", "data"), "gather_elements")
    idx = _indices(args[1], "gather_elements")
    normalize_axis(attrs["axis"], data.ndim, "gather_elements")
    if idx.ndim != data.ndim:
        raise ShapeError(f"op gather_elements: indices must have rank {data.ndim}, got {idx.ndim}")
    return TensorType(idx.shape, data.dtype)


def _gather_elements_compute(data, indices, axis):
    axis = normalize_axis(axis, data.ndim, "gather_elements")

    def value(*i):
        picked = _axis_index(indices[i], data.shape[axis])
        return data[i[:axis] + (picked,) + i[axis + 1 :]]

    return te.compute(indices.shape, value, "gather_elements")


register(
    OpDef(
        "gather_elements",
        _gather_elements_infer,
        lambda data, indices, axis: np.take_along_axis(data, indices, axis=axis),
        attrs={"axis": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        compute=_gather_elements_compute,
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
    data = nonscalar(tensor(args[0], "gather_nd", "data"), "gather_nd")
    idx = nonscalar(_indices(args[1], "gather_nd"), "gather_nd", "indices")
    b = attrs["batch_dims"]
    if not 0 <= b < min(data.ndim, idx.ndim):
        raise ShapeError(f"op gather_nd: batch_dims {b} must be below both ranks")
    for d, i in zip(data.shape[:b], idx.shape[:b]):
        check_dim(d, i, "gather_nd", "batch dimensions of indices")
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


def _gather_nd_compute(data, indices, batch_dims):
    b, k = batch_dims, indices.shape[-1]
    lead = indices.ndim - 1  # output axes taken from indices' shape (batch axes included)
    out = indices.shape[:-1] + data.shape[b + k :]

    def value(*i):
        tuple_at = i[:lead]
        picked = tuple(_axis_index(indices[tuple_at + (j,)], data.shape[b + j]) for j in range(k))
        return data[i[:b] + picked + i[lead:]]

    return te.compute(out, value, "gather_nd")


register(
    OpDef(
        "gather_nd",
        _gather_nd_infer,
        _gather_nd_ref,
        attrs={"batch_dims": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        compute=_gather_nd_compute,
        doc="Gather slices of `data` addressed by the index tuples in the last axis of `indices`.",
    )
)


def _array_feature_extractor_infer(args, attrs):
    op = "array_feature_extractor"
    data = nonscalar(tensor(args[0], op, "data"), op)
    idx = _indices(args[1], op)
    lead = data.shape[:-1] if data.ndim > 1 else (1,)
    return TensorType(lead + (prod(idx.shape),), data.dtype)


def _array_feature_extractor_compute(data, indices):
    out = _array_feature_extractor_infer(
        [TensorType(data.shape, data.dtype), TensorType(indices.shape, indices.dtype)], {}
    ).shape
    lead = data.shape[:-1]

    def value(*i):
        # the last output axis runs over the flattened indices
        flat, at = i[-1], []
        for d in reversed(indices.shape[1:]):
            at.append(flat % d)
            flat = flat // d
        at = [flat, *reversed(at)] if indices.ndim else []
        picked = _axis_index(indices[tuple(at)], data.shape[-1])
        return data[tuple(i[: len(lead)]) + (picked,)]

    return te.compute(out, value, "array_feature_extractor")


register(
    OpDef(
        "array_feature_extractor",
        _array_feature_extractor_infer,
        lambda data, indices: np.take(data, indices.reshape(-1), axis=-1).reshape(
            (data.shape[:-1] if data.ndim > 1 else (1,)) + (indices.size,)
        ),
        pattern=Pattern.INJECTIVE,
        num_args=(2, 2),
        compute=_array_feature_extractor_compute,
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


_TE_COMBINE = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}


def _wrapped(value, dim):
    """An index read from an index tensor as a position on an axis (negative from the end)."""
    i = te.cast(value, INDEX_DTYPE)
    return te.if_then_else(i < 0, i + dim, i)


def _scatter_stages(data, n, targets, update, reduction: str, op: str):
    """The scatter of `n` updates into `data`: update u (0 <= u < n, clamped where read)
    lands on output element o where `targets(o, u)` holds, with value `update(o, u)`. Each
    output element reduces over the positions "data, update 0, ...", never none, as a
    reduction over no position would leave its result unset."""
    if reduction != "none" and data.dtype == "bool":
        raise no_loop(op, f"reduction {reduction} of bools")
    def positions(reduce):  # over "data, update 0, update 1, ...": never empty
        def at(*o):
            r = te.reduce_axis(as_dim(n + 1), "r")
            u, first = r - 1, r < 1  # u is read only where r >= 1
            return reduce(r, o, u, first, te.if_then_else(first, te.const(True), targets(o, u)))

        return at

    if reduction == "none":
        last = positions(lambda r, o, u, first, hit: te.max(te.cast(r, INDEX_DTYPE), axis=[r], where=hit))
        taken = te.compute(data.shape, last, f"{op}_last")

        def result(*o):  # the size condition apart, so the bounds proof reads it
            picked = te.if_then_else(taken[o] >= 1, update(o, clamp_index(taken[o] - 1, n)), data[o])
            return te.if_then_else(te.const(n, INDEX_DTYPE) >= 1, picked, data[o])

        return te.compute(data.shape, result, op)

    def combine(r, o, u, first, hit):
        value = te.if_then_else(first, data[o], update(o, u))
        return _TE_COMBINE[reduction](value, axis=[r], where=hit)

    return te.compute(data.shape, positions(combine), op)


def _scatter_elements_compute(data, indices, updates, *, axis, reduction):
    op = "scatter_elements"
    axis = normalize_axis(axis, data.ndim, op)
    shape = updates.shape

    def at(o, u):  # the update position in o's line along the axis (clamped where smaller)
        return tuple(u if k == axis else clamp_index(o[k], shape[k]) for k in range(data.ndim))

    def targets(o, u):
        hit = te.equal(_wrapped(indices[at(o, u)], data.shape[axis]), o[axis])
        for k in range(data.ndim):
            if k != axis:
                hit = te.logical_and(hit, o[k] < te.const(shape[k], INDEX_DTYPE))
        return hit

    return _scatter_stages(data, shape[axis], targets, lambda o, u: updates[at(o, u)],
                           reduction, op)


def _scatter_elements_infer(args, attrs):
    op = "scatter_elements"
    data = nonscalar(tensor(args[0], op, "data"), op)
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
        compute=_scatter_elements_compute,
        doc="A copy of `data` with out[indices[i][j]][j] = updates[i][j] for axis 0 (combined "
        "by `reduction` when not 'none').",
    )
)


def _scatter_nd_infer(args, attrs):
    op = "scatter_nd"
    data = nonscalar(tensor(args[0], op, "data"), op)
    idx = nonscalar(_indices(args[1], op), op, "indices")
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


def _scatter_nd_compute(data, indices, updates, *, reduction):
    op = "scatter_nd"
    k = indices.shape[-1]
    tuples = indices.shape[:-1]  # the update slices, numbered in C order

    def position(u):
        return unravel(u, tuples)

    def targets(o, u):
        q, hit = position(u), None
        for j in range(k):
            eq = te.equal(_wrapped(indices[q + (j,)], data.shape[j]), o[j])
            hit = eq if hit is None else te.logical_and(hit, eq)
        return te.const(True) if hit is None else hit

    return _scatter_stages(data, prod(tuples), targets,
                           lambda o, u: updates[position(u) + tuple(o[k:])], reduction, op)


register(
    OpDef(
        "scatter_nd",
        _scatter_nd_infer,
        _scatter_nd_ref,
        attrs={"reduction": "none"},
        pattern=Pattern.OPAQUE,
        num_args=(3, 3),
        compute=_scatter_nd_compute,
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
            check_dim(c, u, op, f"update axis {i}")
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


def _tensor_scatter_compute(past_cache, update, write_indices=None, *, mode, axis):
    """Each cache position reads the update entry written there, if any: entry j goes to
    write_index + j (modulo the cache length in circular mode, where the last of several
    entries landing on one position wins, as numpy's assignment has it)."""
    axis = normalize_axis(axis, len(past_cache.shape), "tensor_scatter")
    length, seq = past_cache.shape[axis], update.shape[axis]
    i64 = "int64"

    def value(*i):
        start = te.const(0, i64) if write_indices is None else te.cast(write_indices[i[0]], i64)
        j = te.cast(i[axis], i64) - start
        if mode == "circular":
            j = j % te.cast(length, i64)  # the first entry landing here; later ones lap it
            last = j + (te.cast(seq, i64) - 1 - j) // te.cast(length, i64) * te.cast(length, i64)
            j = te.if_then_else(te.less(j, te.cast(seq, i64)), last, j)
        hit = te.logical_and(te.greater_equal(j, 0), te.less(j, te.cast(seq, i64)))
        at = i[:axis] + (clamp_index(j, seq),) + i[axis + 1 :]
        return te.if_then_else(hit, update[at], past_cache[i])

    return te.compute(past_cache.shape, value, "tensor_scatter")


register(
    OpDef(
        "tensor_scatter",
        _tensor_scatter_infer,
        _tensor_scatter_ref,
        attrs={"mode": "linear", "axis": -2},
        pattern=Pattern.OPAQUE,
        num_args=(2, 3),
        compute=_tensor_scatter_compute,
        doc="KV-cache update: write `update` into `past_cache` along the sequence `axis` from "
        "each batch row's write index (zero when absent), wrapping around in 'circular' mode.",
    )
)
