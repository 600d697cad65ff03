"""Data-movement ops: identity, reshape, transpose, concat, split, squeeze, expand_dims,
broadcast_to, tile (injective).

Ops whose output shape is set by an integer vector take it as an attribute (dimensions may
be symbolic). Each has a `dyn_` variant (as TVM's `dyn.*` namespace) that takes the vector
as a tensor operand instead, for when it is only known at run time: its inferred type gives
the affected dimensions fresh size variables, which the interpreter binds from the result.

Loop programs: every static-vector op states its output as a load of the input at a
remapped index (one te stage, no arithmetic on the values, so every dtype is exact).
The `dyn_` variants have none: their output shape is only known once the vector operand is
read, so the caller could not allocate the output of a kernel; they stay op calls.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import expr as E
from tcc.ir import te
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, as_dim, fresh_var, prove_equal
from tcc.ir.graph import OptionalType, SequenceType, TensorType, TupleType
from tcc.ir.ops._util import (
    axis_flags,
    broadcast_index,
    ceil_div,
    count_flags,
    fresh_vars,
    ints,
    kept_dims,
    normalize_axes,
    pick_dim,
    vector_length,
)
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    StaticForm,
    broadcast_shapes,
    normalize_axis,
    prod,
    register,
    same_dtype,
    tensor,
)

register(
    OpDef(
        "identity",
        lambda args, attrs: args[0] if isinstance(args[0], (SequenceType, OptionalType))
        else tensor(args[0], "identity"),
        lambda x: x if x is None or isinstance(x, list) else np.array(x, copy=True),
        pattern=Pattern.ELEMWISE,
        compute=lambda x: te.compute(x.shape, lambda *i: x[i], "identity"),
        doc="A copy of the input (a tensor, or a sequence or optional in the interpreter).",
    )
)


def _op(
    name, infer, ref, attrs=None, num_args=(1, 1), pattern=Pattern.INJECTIVE, compute=None, doc="",
    **dynamic,
):
    """Register an op of this family (INJECTIVE unless said otherwise); `dynamic` gives a
    dyn_* op's shape_operands and to_static."""
    return register(OpDef(name, infer, ref, attrs or {}, pattern, num_args, compute, doc,
                          **dynamic))


# ---------------------------------------------------------------------------------------------
# reshape


def resolve_reshape(in_shape, shape, op: str = "reshape") -> tuple[Dim, ...]:
    """`shape` with its one allowed -1 entry replaced by the (symbolic) remaining size."""
    holes = [i for i, d in enumerate(shape) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"op {op}: at most one -1 entry allowed in shape {list(shape)}")
    if any(isinstance(d, int) and d < -1 for d in shape):
        raise ShapeError(f"op {op}: negative dimension in shape {list(shape)}")
    total = prod(in_shape)
    out = list(shape)
    if holes:
        known = prod([d for i, d in enumerate(shape) if i != holes[0]])
        if isinstance(known, int) and known == 0:
            raise ShapeError(f"op {op}: cannot infer the -1 entry of {list(shape)} next to a 0")
        if isinstance(total, int) and isinstance(known, int) and total % known:
            raise ShapeError(f"op {op}: cannot reshape {total} elements into {list(shape)}")
        out[holes[0]] = as_dim(total // known)
    size = prod(out)
    if isinstance(size, int) and isinstance(total, int) and size != total:
        raise ShapeError(f"op {op}: cannot reshape {total} elements into {list(shape)}")
    return tuple(out)


def onnx_reshape_shape(in_shape, shape, allowzero: bool) -> list:
    """ONNX Reshape's target: a 0 entry copies the input dimension unless `allowzero`."""
    if allowzero:
        return list(shape)
    return [in_shape[i] if isinstance(d, int) and d == 0 else d for i, d in enumerate(shape)]


def _reshape_infer(args, attrs):
    x = tensor(args[0], "reshape")
    return TensorType(resolve_reshape(x.shape, attrs["shape"]), x.dtype)


def _dyn_reshape_infer(args, attrs):
    x = tensor(args[0], "dyn_reshape")
    return TensorType(fresh_vars(vector_length(args[1], "dyn_reshape", "shape"), "rs"), x.dtype)


def _dyn_reshape_ref(x, shape, allowzero):
    return np.reshape(x, onnx_reshape_shape(x.shape, ints(shape), allowzero)).copy()


def _dyn_reshape_static(types, sizes, out, attrs):
    """ONNX Reshape once the target is read: a 0 copies the input's dimension at that place
    (unless allowzero), one -1 takes what is left, and the sizes must multiply out."""
    x, target = types[0], sizes[1]
    given = []
    checks = []
    for i, v in enumerate(target):
        checks.append((E.compare("ge", v, -1), f"size {i} of the target shape is below -1"))
        if attrs["allowzero"]:
            given.append(v)
        elif i < x.ndim:
            given.append(E.select(E.compare("eq", v, 0), x.shape[i], v))
        else:
            checks.append((E.compare("ne", v, 0), f"size {i} of the target shape is 0, which "
                                                  "copies an input dimension the input lacks"))
            given.append(v)
    holes = count_flags([E.select(E.compare("eq", v, -1), 1, 0) for v in target])
    if target:
        checks.append((E.compare("le", holes, 1), "the target shape has more than one -1"))
    total = prod(x.shape)
    dims = []
    for i, v in enumerate(target):
        others = prod([g for j, g in enumerate(given) if j != i])
        hole = E.compare("eq", v, -1)
        checks.append((E.Logic("or", E.compare("ne", v, -1), E.compare("ne", others, 0)),
                       f"size {i} of the target shape is -1 beside a 0"))
        dims.append(as_dim(E.select(hole, E.binop("floordiv", total, E.max_expr(others, 1)),
                                    given[i])))
    checks.append((E.compare("eq", prod(dims) if dims else 1, total),
                   "the target shape's sizes do not multiply out to the input's element count"))
    return StaticForm("reshape", (0,), {"shape": list(out)}, tuple(dims), tuple(checks))


def reshape_index(in_shape, out_shape, idx) -> tuple:
    """The input index of output index `idx` under a row-major reshape.

    Leading and trailing dimensions the two shapes share map straight through (so a
    reshape that only splits or merges the middle axes has no division on the others);
    the rest goes through the flat offset."""
    in_shape, out_shape, idx = list(in_shape), list(out_shape), list(idx)
    head = 0
    while head < min(len(in_shape), len(out_shape)) and prove_equal(
        in_shape[head], out_shape[head]
    ):
        head += 1
    tail = 0
    while tail < min(len(in_shape), len(out_shape)) - head and prove_equal(
        in_shape[-1 - tail], out_shape[-1 - tail]
    ):
        tail += 1
    mid_in = in_shape[head : len(in_shape) - tail]
    mid_out = out_shape[head : len(out_shape) - tail]
    flat = 0
    for d, i in zip(mid_out, idx[head : len(idx) - tail]):
        flat = flat * d + i
    mid: list = []
    for k in reversed(range(len(mid_in))):
        if k == 0:
            mid.append(flat)  # flat < total size: the outermost axis needs no modulo
        else:
            mid.append(flat % mid_in[k])
            flat = flat // mid_in[k]
    return tuple(idx[:head]) + tuple(reversed(mid)) + tuple(idx[len(idx) - tail :])


def _reshape_compute(x, shape):
    out = resolve_reshape(x.shape, shape)
    return te.compute(out, lambda *i: x[reshape_index(x.shape, out, i)], "reshape")


_op(
    "reshape",
    _reshape_infer,
    lambda x, shape: np.reshape(x, shape).copy(),
    {"shape": REQUIRED},
    compute=_reshape_compute,
    doc="The input's elements in row-major order under a new shape (one entry may be -1).",
)
_op(
    "dyn_reshape",
    _dyn_reshape_infer,
    _dyn_reshape_ref,
    {"allowzero": False},
    num_args=(2, 2),
    doc="ONNX Reshape with the target shape as a run-time tensor (0 copies, -1 infers).",
    shape_operands=(1,),
    to_static=_dyn_reshape_static,
)


# ---------------------------------------------------------------------------------------------
# transpose, concat, split


def _transpose_infer(args, attrs):
    x = tensor(args[0], "transpose")
    perm = attrs["axes"]
    if perm is None:
        return TensorType(x.shape[::-1], x.dtype)
    if len(perm) != x.ndim:
        raise ShapeError(f"op transpose: axes {list(perm)} is not a permutation of rank {x.ndim}")
    return TensorType(tuple(x.shape[a] for a in normalize_axes(perm, x.ndim, "transpose")), x.dtype)


def _transpose_compute(x, axes):
    perm = list(range(x.ndim))[::-1] if axes is None else normalize_axes(axes, x.ndim, "transpose")
    inverse = [perm.index(a) for a in range(x.ndim)]
    return te.compute(
        [x.shape[a] for a in perm], lambda *i: x[tuple(i[k] for k in inverse)], "transpose"
    )


_op(
    "transpose",
    _transpose_infer,
    lambda x, axes: np.ascontiguousarray(np.transpose(x, axes)),
    {"axes": None},
    compute=_transpose_compute,
    doc="Permute the axes (reverse them when `axes` is None).",
)


def _concat_infer(args, attrs):
    xs = [tensor(a, "concat") for a in args]
    dtype = same_dtype(xs, "concat")
    ndim = xs[0].ndim
    if any(x.ndim != ndim for x in xs):
        raise ShapeError(f"op concat: operands must have the same rank, got {[x.ndim for x in xs]}")
    axis = normalize_axis(attrs["axis"], ndim, "concat")
    out = list(xs[0].shape)
    for x in xs[1:]:
        for i, (a, b) in enumerate(zip(out, x.shape)):
            if i == axis:
                out[i] = as_dim(a + b)
            elif isinstance(a, int) and isinstance(b, int) and a != b:
                raise ShapeError(
                    f"op concat: dimension {i} differs ({a} vs {b}) off the concat axis"
                )
    return TensorType(tuple(out), dtype)


def _concat_compute(*xs, axis):
    axis = normalize_axis(axis, xs[0].ndim, "concat")
    out = list(_concat_infer([TensorType(x.shape, x.dtype) for x in xs], {"axis": axis}).shape)
    offsets: list[Dim] = [0]
    for x in xs[:-1]:
        offsets.append(as_dim(offsets[-1] + x.shape[axis]))

    def value(*i):
        def load(k):
            return xs[k][i[:axis] + (i[axis] - offsets[k],) + i[axis + 1 :]]

        # from the last operand back: each one starts where the ones before it end, and a
        # load is only evaluated when its range holds the index
        v = load(len(xs) - 1)
        for k in reversed(range(len(xs) - 1)):
            v = te.if_then_else(i[axis] < offsets[k + 1], load(k), v)
        return v

    return te.compute(out, value, "concat")


_op(
    "concat",
    _concat_infer,
    lambda *xs, axis: np.concatenate(xs, axis=axis),
    {"axis": 0},
    num_args=(1, None),
    compute=_concat_compute,
    doc="Join tensors along `axis`.",
)


def _split_ref(x, sizes, axis):
    bounds = np.cumsum(sizes)[:-1]
    return tuple(p.copy() for p in np.split(x, bounds, axis=axis))


def _split_infer(args, attrs):
    x = tensor(args[0], "split")
    axis = normalize_axis(attrs["axis"], x.ndim, "split")
    sizes = [as_dim(s) for s in attrs["sizes"]]
    total, dim = as_dim(sum(sizes, 0)), x.shape[axis]
    if isinstance(total, int) and isinstance(dim, int) and total != dim:
        raise ShapeError(f"op split: sizes {sizes} sum to {total}, but axis {axis} has {dim}")
    parts = [x.shape[:axis] + (s,) + x.shape[axis + 1 :] for s in sizes]
    return TupleType(tuple(TensorType(p, x.dtype) for p in parts))


def _dyn_split_infer(args, attrs):
    x = tensor(args[0], "dyn_split")
    axis = normalize_axis(attrs["axis"], x.ndim, "dyn_split")
    n = vector_length(args[1], "dyn_split", "split sizes")
    parts = [x.shape[:axis] + (fresh_var("sp"),) + x.shape[axis + 1 :] for _ in range(n)]
    return TupleType(tuple(TensorType(p, x.dtype) for p in parts))


def _split_compute(x, sizes, axis):
    axis = normalize_axis(axis, x.ndim, "split")
    outs, offset = [], 0
    # sizes read at run time add up to the axis (the VM checks it first), which the bounds
    # proof cannot see through a schedule's tiles: the index is clamped into the axis there
    clamp = not all(isinstance(s, int) for s in sizes)
    for k, size in enumerate(sizes):
        shape = x.shape[:axis] + (as_dim(size),) + x.shape[axis + 1 :]

        def value(*i, start=offset):
            at = i[axis] + start
            if clamp and isinstance(x.shape[axis], int) and x.shape[axis] == 0:
                return te.const(0, x.dtype)  # every part is empty: nothing is read
            if clamp:
                at = te.min(at, te.const(x.shape[axis], "int64") - 1)
            return x[i[:axis] + (at,) + i[axis + 1 :]]

        outs.append(te.compute(shape, value, f"split{k}"))
        offset = as_dim(offset + size)
    return outs


_op(
    "split",
    _split_infer,
    _split_ref,
    {"sizes": REQUIRED, "axis": 0},
    compute=_split_compute,
    doc="Cut `axis` into consecutive parts of the given sizes (a tuple of tensors).",
)
def _dyn_split_static(types, sizes, out, attrs):
    x, parts = types[0], list(sizes[1])
    axis = normalize_axis(attrs["axis"], x.ndim, "dyn_split")
    total = E.const(0)
    for p in parts:
        total = E.binop("add", total, p)
    fits = E.compare("eq", total, x.shape[axis])
    dims = tuple(d for p in parts for d in x.shape[:axis] + (p,) + x.shape[axis + 1 :])
    return StaticForm("split", (0,), {"sizes": parts, "axis": attrs["axis"]}, dims,
                      ((fits, f"the part sizes do not add up to axis {axis}'s length"),))


_op(
    "dyn_split",
    _dyn_split_infer,
    lambda x, sizes, axis: _split_ref(x, ints(sizes), axis),
    {"axis": 0},
    num_args=(2, 2),
    doc="split with the part sizes as a run-time tensor.",
    shape_operands=(1,),
    to_static=_dyn_split_static,
)


def equal_split_sizes(dim: Dim, parts: int) -> list[Dim]:
    """ONNX Split's sizes for `parts` outputs: ceil(dim / parts) each, the last one smaller."""
    if parts <= 0:
        raise ShapeError(f"op split: number of outputs must be positive, got {parts}")
    chunk = ceil_div(dim, parts)
    return [chunk] * (parts - 1) + [as_dim(dim - chunk * (parts - 1))]


# ---------------------------------------------------------------------------------------------
# squeeze / expand_dims


def _squeeze_infer(args, attrs):
    x = tensor(args[0], "squeeze")
    if attrs["axes"] is None:
        if not x.is_static:
            raise ShapeError(f"op squeeze: without axes the shape must be static, got {x}")
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    axes = normalize_axes(attrs["axes"], x.ndim, "squeeze")
    for a in axes:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise ShapeError(f"op squeeze: axis {a} has size {x.shape[a]}, not 1")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


def _squeeze_ref(x, axes):
    return np.squeeze(x, axis=None if axes is None else tuple(axes)).copy()


def _expand_dims_infer(args, attrs):
    x = tensor(args[0], "expand_dims")
    ndim = x.ndim + len(attrs["axes"])
    axes = set(normalize_axes(attrs["axes"], ndim, "expand_dims"))
    rest = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(rest) for i in range(ndim)), x.dtype)


def _dyn_rank_change_infer(name: str, sign: int):
    def infer(args, attrs):
        x = tensor(args[0], name)
        n = x.ndim + sign * vector_length(args[1], name, "axes")
        if n < 0:
            raise ShapeError(f"op {name}: more axes than the input's rank {x.ndim}")
        return TensorType(fresh_vars(n, "sq"), x.dtype)

    return infer


def _dyn_expand_dims_static(types, sizes, out, attrs):
    """Unsqueeze once the axes are read: a new axis of 1 where they say, the input's in order
    elsewhere; the data is the same row-major sequence, so a reshape (a view)."""
    x, axes = types[0], sizes[1]
    new, checks = axis_flags(axes, len(out), "axis")
    dims, before = [], E.const(0)
    for j, f in enumerate(new):
        dims.append(as_dim(E.select(E.compare("eq", f, 1), 1, pick_dim(x.shape, E.binop("sub", j, before)))))
        before = E.binop("add", before, f)
    return StaticForm("reshape", (0,), {"shape": list(out)}, tuple(dims), tuple(checks))


def _dyn_squeeze_static(types, sizes, out, attrs):
    """Squeeze once the axes are read: each named axis must be 1 and goes; a reshape."""
    x, axes = types[0], sizes[1]
    dropped, checks = axis_flags(axes, x.ndim, "axis")
    for a, (f, d) in enumerate(zip(dropped, x.shape)):
        if not (isinstance(d, int) and d == 1):
            checks.append((E.Logic("or", E.compare("eq", f, 0), E.compare("eq", d, 1)),
                           f"axis {a} is squeezed but its size is not 1"))
    dims = kept_dims(dropped, x.shape, len(out))
    return StaticForm("reshape", (0,), {"shape": list(out)}, dims, tuple(checks))


def _squeeze_compute(x, axes):
    out = _squeeze_infer([TensorType(x.shape, x.dtype)], {"axes": axes}).shape
    if axes is None:
        kept = [a for a, d in enumerate(x.shape) if d != 1]
    else:
        dropped = normalize_axes(axes, x.ndim, "squeeze")
        kept = [a for a in range(x.ndim) if a not in dropped]

    def value(*i):
        index = [0] * x.ndim
        for k, a in enumerate(kept):
            index[a] = i[k]
        return x[tuple(index)]

    return te.compute(out, value, "squeeze")


def _expand_dims_compute(x, axes):
    out = _expand_dims_infer([TensorType(x.shape, x.dtype)], {"axes": axes}).shape
    added = set(normalize_axes(axes, len(out), "expand_dims"))
    kept = [a for a in range(len(out)) if a not in added]
    return te.compute(out, lambda *i: x[tuple(i[a] for a in kept)], "expand_dims")


_op(
    "squeeze",
    _squeeze_infer,
    _squeeze_ref,
    {"axes": None},
    compute=_squeeze_compute,
    doc="Drop the listed size-1 axes (every size-1 axis when `axes` is None).",
)
_op(
    "dyn_squeeze",
    _dyn_rank_change_infer("dyn_squeeze", -1),
    lambda x, axes: _squeeze_ref(x, ints(axes)),
    num_args=(2, 2),
    doc="squeeze with the axes as a run-time tensor.",
    shape_operands=(1,),
    to_static=_dyn_squeeze_static,
)
_op(
    "expand_dims",
    _expand_dims_infer,
    lambda x, axes: np.expand_dims(x, tuple(axes)).copy(),
    {"axes": REQUIRED},
    compute=_expand_dims_compute,
    doc="Insert size-1 axes at the listed positions of the output.",
)
_op(
    "dyn_expand_dims",
    _dyn_rank_change_infer("dyn_expand_dims", 1),
    lambda x, axes: np.expand_dims(x, tuple(ints(axes))).copy(),
    num_args=(2, 2),
    doc="expand_dims with the axes as a run-time tensor.",
    shape_operands=(1,),
    to_static=_dyn_expand_dims_static,
)


# ---------------------------------------------------------------------------------------------
# broadcast_to, tile


def _broadcast_to_infer(args, attrs):
    x = tensor(args[0], "broadcast_to")
    shape = tuple(as_dim(d) for d in attrs["shape"])
    if len(shape) < x.ndim:
        raise ShapeError(
            f"op broadcast_to: target rank {len(shape)} is below the input rank {x.ndim}"
        )
    out = broadcast_shapes([x.shape, shape], "broadcast_to")
    for got, want in zip(out, shape):
        if isinstance(got, int) and isinstance(want, int) and got != want:
            raise ShapeError(f"op broadcast_to: {x} does not broadcast to {list(shape)}")
    return TensorType(shape, x.dtype)


def _dyn_broadcast_to_infer(args, attrs):
    x = tensor(args[0], "dyn_broadcast_to")
    ndim = max(x.ndim, vector_length(args[1], "dyn_broadcast_to", "shape"))
    padded = (1,) * (ndim - x.ndim) + x.shape
    # an input axis that is not 1 keeps its extent: the target may only say 1 or the same
    out = tuple(d if isinstance(d, int) and d != 1 else fresh_var("bc") for d in padded)
    return TensorType(out, x.dtype)


def _dyn_broadcast_to_static(types, sizes, out, attrs):
    """ONNX Expand once the shape operand is read: each axis is the input's or the shape's,
    whichever is not 1, and the two must agree where neither is."""
    x = types[0]
    padded = (1,) * (len(out) - x.ndim) + x.shape
    values = (1,) * (len(out) - len(sizes[1])) + tuple(sizes[1])
    dims, checks = [], []
    for axis, (d, s) in enumerate(zip(padded, values)):
        if isinstance(d, int) and d == 1:
            dims.append(s)
            continue
        fits = E.Logic("or", E.compare("eq", s, 1), E.compare("eq", s, d))
        if isinstance(d, int):
            dims.append(d)
        else:
            fits = E.Logic("or", E.compare("eq", d, 1), fits)
            dims.append(E.select(E.compare("eq", d, 1), s, d))
        if not (isinstance(s, int) and s == 1):
            checks.append((fits, f"the shape asks for a size at axis {axis} that the input's "
                                 "dimension does not broadcast to (sizes must be equal, or one 1)"))
    return StaticForm("broadcast_to", (0,), {"shape": list(out)}, tuple(dims), tuple(checks))


def _onnx_expand(x, shape):
    return np.ascontiguousarray(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))))


def _broadcast_to_compute(x, shape):
    out = tuple(as_dim(d) for d in shape)
    return te.compute(out, lambda *i: x[broadcast_index(x.shape, out, i)], "broadcast_to")


_op(
    "broadcast_to",
    _broadcast_to_infer,
    lambda x, shape: np.ascontiguousarray(np.broadcast_to(x, shape)),
    {"shape": REQUIRED},
    pattern=Pattern.BROADCAST,
    compute=_broadcast_to_compute,
    doc="Broadcast the input to `shape` (numpy rules).",
)
_op(
    "dyn_broadcast_to",
    _dyn_broadcast_to_infer,
    lambda x, shape: _onnx_expand(x, ints(shape)),
    num_args=(2, 2),
    pattern=Pattern.BROADCAST,
    doc="ONNX Expand with a run-time shape: broadcast the input and the shape both ways.",
    shape_operands=(1,),
    to_static=_dyn_broadcast_to_static,
)


def _tile_infer(args, attrs):
    x = tensor(args[0], "tile")
    reps = attrs["repeats"]
    if len(reps) != x.ndim:
        raise ShapeError(f"op tile: {len(reps)} repeats for rank {x.ndim}")
    return TensorType(tuple(as_dim(d * r) for d, r in zip(x.shape, reps)), x.dtype)


def _dyn_tile_infer(args, attrs):
    x = tensor(args[0], "dyn_tile")
    if vector_length(args[1], "dyn_tile", "repeats") != x.ndim:
        raise ShapeError(f"op dyn_tile: repeats must have one entry per axis (rank {x.ndim})")
    return TensorType(fresh_vars(x.ndim, "tl"), x.dtype)


def _tile_compute(x, repeats):
    out = _tile_infer([TensorType(x.shape, x.dtype)], {"repeats": repeats}).shape

    def value(*i):
        return x[tuple(j if r == 1 else j % d for j, d, r in zip(i, x.shape, repeats))]

    return te.compute(out, value, "tile")


_op(
    "tile",
    _tile_infer,
    lambda x, repeats: np.tile(x, repeats),
    {"repeats": REQUIRED},
    compute=_tile_compute,
    doc="Repeat the input `repeats[i]` times along axis i.",
)
def _dyn_tile_static(types, sizes, out, attrs):
    x, repeats = types[0], list(sizes[1])
    dims = tuple(as_dim(d * r) for d, r in zip(x.shape, repeats))
    checks = tuple((E.compare("ge", r, 0), f"repeat {i} is negative") for i, r in enumerate(repeats))
    return StaticForm("tile", (0,), {"repeats": repeats}, dims, checks)


_op(
    "dyn_tile",
    _dyn_tile_infer,
    lambda x, repeats: np.tile(x, ints(repeats)),
    num_args=(2, 2),
    doc="tile with the repeats as a run-time tensor.",
    shape_operands=(1,),
    to_static=_dyn_tile_static,
)
