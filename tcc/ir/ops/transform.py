"""Data-movement ops: reshape, transpose, concat, split, slice, pad, tile, ... (injective).

Ops whose output shape is set by an integer vector take it as an attribute (dimensions may
be symbolic). Each has a `dyn_` variant (as TVM's `dyn.*` namespace) that takes the vector
as a tensor operand instead, for when it is only known at run time: its inferred type gives
the affected dimensions fresh size variables, which the interpreter binds from the result.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir.dtype import is_int, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import (
    BinOp,
    Dim,
    PrimExpr,
    Var,
    as_dim,
    fresh_var,
    max_expr,
    min_expr,
)
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    broadcast_shapes,
    normalize_axis,
    prod,
    register,
    same_dtype,
    tensor,
)

# Slice bounds at least this large (in magnitude) mean "past the end" of any real axis, so
# they clamp to a symbolic axis' extent without a min/max expression.
SLICE_BOUND = 2**31 - 1

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _ints(a) -> list[int]:
    """A run-time integer operand as a list of Python ints."""
    return [int(v) for v in np.asarray(a).reshape(-1)]


def _scalar(a):
    return np.asarray(a).reshape(-1)[0].item()


def _vector_length(t, op: str, what: str) -> int:
    """Static length of a 1-D integer operand that holds a shape-like vector."""
    t = tensor(t, op, what)
    if t.ndim != 1 or not isinstance(t.shape[0], int):
        raise ShapeError(f"op {op}: {what} must be a 1-D tensor of static length, got {t}")
    if not is_int(t.dtype):
        raise ShapeError(f"op {op}: {what} must have an integer dtype, got {t.dtype}")
    return t.shape[0]


def _operand(args, i: int):
    """Optional operand `i` (None when absent or not passed at all)."""
    return args[i] if i < len(args) else None


def _fresh(n: int, hint: str) -> tuple[Var, ...]:
    return tuple(fresh_var(hint) for _ in range(n))


def _axes(axes, ndim: int, op: str) -> list[int]:
    out = [normalize_axis(int(a), ndim, op) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"op {op}: repeated axis in {list(axes)}")
    return out


def known_nonneg(e: Dim) -> bool:
    """True when `e` is provably >= 0 (size variables are never negative)."""
    if isinstance(e, int):
        return e >= 0
    if isinstance(e, Var):
        return True
    if isinstance(e, BinOp) and e.op in ("add", "mul", "floordiv", "min"):
        return known_nonneg(e.a) and known_nonneg(e.b)
    if isinstance(e, BinOp) and e.op == "max":
        return known_nonneg(e.a) or known_nonneg(e.b)
    return False


def _nonneg(e: Dim) -> Dim:
    """max(e, 0), without the max when it provably changes nothing."""
    if isinstance(e, int):
        return max(e, 0)
    return e if known_nonneg(e) else max_expr(e, 0)


def _ceil_div(a: Dim, b: int) -> Dim:
    return a if b == 1 else as_dim((a + (b - 1)) // b)


def _register(name, infer, ref, attrs=None, num_args=(1, 1), pattern=Pattern.INJECTIVE, doc=""):
    return register(OpDef(name, infer, ref, attrs or {}, pattern, num_args, doc=doc))


register(
    OpDef(
        "identity",
        lambda args, attrs: tensor(args[0], "identity"),
        lambda x: np.array(x, copy=True),
        pattern=Pattern.ELEMWISE,
        doc="A copy of the input.",
    )
)

register(
    OpDef(
        "shape_to_tensor",
        lambda args, attrs: TensorType(
            () if attrs["scalar"] else (len(attrs["dims"]),), attrs["dtype"]
        ),
        lambda dims, scalar, dtype: np.array(dims, dtype=to_numpy(dtype)).reshape(
            () if scalar else (-1,)
        ),
        attrs={"dims": REQUIRED, "scalar": False, "dtype": "int64"},
        pattern=Pattern.INJECTIVE,
        num_args=(0, 0),
        doc="A 1-D (or scalar) integer tensor holding the (symbolic) dimensions `dims`.",
    )
)


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
    return TensorType(_fresh(_vector_length(args[1], "dyn_reshape", "shape"), "rs"), x.dtype)


def _dyn_reshape_ref(x, shape, allowzero):
    return np.reshape(x, onnx_reshape_shape(x.shape, _ints(shape), allowzero)).copy()


_register(
    "reshape",
    _reshape_infer,
    lambda x, shape: np.reshape(x, shape).copy(),
    {"shape": REQUIRED},
    doc="The input's elements in row-major order under a new shape (one entry may be -1).",
)
_register(
    "dyn_reshape",
    _dyn_reshape_infer,
    _dyn_reshape_ref,
    {"allowzero": False},
    num_args=(2, 2),
    doc="ONNX Reshape with the target shape as a run-time tensor (0 copies, -1 infers).",
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
    return TensorType(tuple(x.shape[a] for a in _axes(perm, x.ndim, "transpose")), x.dtype)


_register(
    "transpose",
    _transpose_infer,
    lambda x, axes: np.ascontiguousarray(np.transpose(x, axes)),
    {"axes": None},
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


_register(
    "concat",
    _concat_infer,
    lambda *xs, axis: np.concatenate(xs, axis=axis),
    {"axis": 0},
    num_args=(1, None),
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
    n = _vector_length(args[1], "dyn_split", "split sizes")
    parts = [x.shape[:axis] + (fresh_var("sp"),) + x.shape[axis + 1 :] for _ in range(n)]
    return TupleType(tuple(TensorType(p, x.dtype) for p in parts))


_register(
    "split",
    _split_infer,
    _split_ref,
    {"sizes": REQUIRED, "axis": 0},
    doc="Cut `axis` into consecutive parts of the given sizes (a tuple of tensors).",
)
_register(
    "dyn_split",
    _dyn_split_infer,
    lambda x, sizes, axis: _split_ref(x, _ints(sizes), axis),
    {"axis": 0},
    num_args=(2, 2),
    doc="split with the part sizes as a run-time tensor.",
)


def equal_split_sizes(dim: Dim, parts: int) -> list[Dim]:
    """ONNX Split's sizes for `parts` outputs: ceil(dim / parts) each, the last one smaller."""
    if parts <= 0:
        raise ShapeError(f"op split: number of outputs must be positive, got {parts}")
    chunk = _ceil_div(dim, parts)
    return [chunk] * (parts - 1) + [as_dim(dim - chunk * (parts - 1))]


# ---------------------------------------------------------------------------------------------
# strided slice


def _nonneg_bound(v: Dim) -> bool:
    return v >= 0 if isinstance(v, int) else known_nonneg(v)


def _past_end(v: Dim) -> bool:
    return isinstance(v, int) and v >= SLICE_BOUND


def _before_start(v: Dim) -> bool:
    return isinstance(v, int) and v <= -SLICE_BOUND


def slice_length(dim: Dim, start: Dim, end: Dim, step: int) -> Dim:
    """Length of `range(dim)[start:end:step]` (ONNX Slice clamping); symbolic when `dim` is.

    Symbolic bounds must be provably nonnegative. A clamp is kept as a min/max expression
    unless dropping it provably keeps the length (a start past the end gives an empty range
    either way under the outer max with 0).
    """
    if step == 0:
        raise ShapeError("op strided_slice: step cannot be 0")
    if isinstance(dim, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(*slice(start, end, step).indices(dim)))
    if not all(isinstance(v, int) or known_nonneg(v) for v in (start, end)):
        raise ShapeError(
            f"op strided_slice: symbolic bounds must be nonnegative, got {start}:{end}"
        )
    lo: Dim
    hi: Dim
    if step > 0:
        if _nonneg_bound(start):
            lo = start
        else:
            lo = 0 if _before_start(start) else max_expr(start + dim, 0)
        if _past_end(end):
            hi = dim
        elif _nonneg_bound(end):
            hi = min_expr(end, dim)
        else:
            hi = 0 if _before_start(end) else as_dim(end + dim)
        return _nonneg(_ceil_div(as_dim(hi - lo), step))
    if _past_end(start):
        hi = as_dim(dim - 1)
    else:
        hi = min_expr(start, dim - 1) if _nonneg_bound(start) else as_dim(start + dim)
    if _before_start(end):
        lo = -1
    else:
        lo = end if _nonneg_bound(end) else max_expr(end + dim, -1)
    return _nonneg(_ceil_div(as_dim(hi - lo), -step))


def _slice_ref(x, begin, end, axes, strides):
    index = [slice(None)] * x.ndim
    for b, e, a, s in zip(begin, end, axes, strides):
        index[a if a >= 0 else a + x.ndim] = slice(b, e, s)
    return x[tuple(index)].copy()


def _strided_slice_infer(args, attrs):
    x = tensor(args[0], "strided_slice")
    begin, end, axes, strides = (attrs[k] for k in ("begin", "end", "axes", "strides"))
    if not len(begin) == len(end) == len(axes) == len(strides):
        raise ShapeError("op strided_slice: begin, end, axes and strides must have one entry each")
    out = list(x.shape)
    for b, e, a, s in zip(begin, end, _axes(axes, x.ndim, "strided_slice"), strides):
        out[a] = slice_length(x.shape[a], as_dim(b), as_dim(e), int(s))
    return TensorType(tuple(out), x.dtype)


def _dyn_strided_slice_infer(args, attrs):
    x = tensor(args[0], "dyn_strided_slice")
    n = _vector_length(args[1], "dyn_strided_slice", "starts")
    if _vector_length(args[2], "dyn_strided_slice", "ends") != n:
        raise ShapeError("op dyn_strided_slice: starts and ends must have the same length")
    changed = range(x.ndim) if _operand(args, 3) is not None else range(min(n, x.ndim))
    out = list(x.shape)
    for a in changed:
        out[a] = fresh_var("sl")
    return TensorType(tuple(out), x.dtype)


def _dyn_slice_ref(x, starts, ends, axes=None, steps=None):
    b, e = _ints(starts), _ints(ends)
    axes_l = list(range(len(b))) if axes is None else _ints(axes)
    return _slice_ref(x, b, e, axes_l, [1] * len(b) if steps is None else _ints(steps))


_register(
    "strided_slice",
    _strided_slice_infer,
    _slice_ref,
    {"begin": REQUIRED, "end": REQUIRED, "axes": REQUIRED, "strides": REQUIRED},
    doc="x[begin:end:stride] on each listed axis, bounds clamped as in numpy/ONNX.",
)
_register(
    "dyn_strided_slice",
    _dyn_strided_slice_infer,
    _dyn_slice_ref,
    num_args=(3, 5),
    doc="ONNX Slice with run-time (starts, ends, axes?, steps?) operands.",
)


# ---------------------------------------------------------------------------------------------
# squeeze / expand_dims


def _squeeze_infer(args, attrs):
    x = tensor(args[0], "squeeze")
    if attrs["axes"] is None:
        if not x.is_static:
            raise ShapeError(f"op squeeze: without axes the shape must be static, got {x}")
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    axes = _axes(attrs["axes"], x.ndim, "squeeze")
    for a in axes:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise ShapeError(f"op squeeze: axis {a} has size {x.shape[a]}, not 1")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


def _squeeze_ref(x, axes):
    return np.squeeze(x, axis=None if axes is None else tuple(axes)).copy()


def _expand_dims_infer(args, attrs):
    x = tensor(args[0], "expand_dims")
    ndim = x.ndim + len(attrs["axes"])
    axes = set(_axes(attrs["axes"], ndim, "expand_dims"))
    rest = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(rest) for i in range(ndim)), x.dtype)


def _dyn_rank_change_infer(name: str, sign: int):
    def infer(args, attrs):
        x = tensor(args[0], name)
        n = x.ndim + sign * _vector_length(args[1], name, "axes")
        if n < 0:
            raise ShapeError(f"op {name}: more axes than the input's rank {x.ndim}")
        return TensorType(_fresh(n, "sq"), x.dtype)

    return infer


_register(
    "squeeze",
    _squeeze_infer,
    _squeeze_ref,
    {"axes": None},
    doc="Drop the listed size-1 axes (every size-1 axis when `axes` is None).",
)
_register(
    "dyn_squeeze",
    _dyn_rank_change_infer("dyn_squeeze", -1),
    lambda x, axes: _squeeze_ref(x, _ints(axes)),
    num_args=(2, 2),
    doc="squeeze with the axes as a run-time tensor.",
)
_register(
    "expand_dims",
    _expand_dims_infer,
    lambda x, axes: np.expand_dims(x, tuple(axes)).copy(),
    {"axes": REQUIRED},
    doc="Insert size-1 axes at the listed positions of the output.",
)
_register(
    "dyn_expand_dims",
    _dyn_rank_change_infer("dyn_expand_dims", 1),
    lambda x, axes: np.expand_dims(x, tuple(_ints(axes))).copy(),
    num_args=(2, 2),
    doc="expand_dims with the axes as a run-time tensor.",
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
    ndim = max(x.ndim, _vector_length(args[1], "dyn_broadcast_to", "shape"))
    padded = (1,) * (ndim - x.ndim) + x.shape
    # an input axis that is not 1 keeps its extent: the target may only say 1 or the same
    out = tuple(d if isinstance(d, int) and d != 1 else fresh_var("bc") for d in padded)
    return TensorType(out, x.dtype)


def _onnx_expand(x, shape):
    return np.ascontiguousarray(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))))


_register(
    "broadcast_to",
    _broadcast_to_infer,
    lambda x, shape: np.ascontiguousarray(np.broadcast_to(x, shape)),
    {"shape": REQUIRED},
    pattern=Pattern.BROADCAST,
    doc="Broadcast the input to `shape` (numpy rules).",
)
_register(
    "dyn_broadcast_to",
    _dyn_broadcast_to_infer,
    lambda x, shape: _onnx_expand(x, _ints(shape)),
    num_args=(2, 2),
    pattern=Pattern.BROADCAST,
    doc="ONNX Expand with a run-time shape: broadcast the input and the shape both ways.",
)


def _tile_infer(args, attrs):
    x = tensor(args[0], "tile")
    reps = attrs["repeats"]
    if len(reps) != x.ndim:
        raise ShapeError(f"op tile: {len(reps)} repeats for rank {x.ndim}")
    return TensorType(tuple(as_dim(d * r) for d, r in zip(x.shape, reps)), x.dtype)


def _dyn_tile_infer(args, attrs):
    x = tensor(args[0], "dyn_tile")
    if _vector_length(args[1], "dyn_tile", "repeats") != x.ndim:
        raise ShapeError(f"op dyn_tile: repeats must have one entry per axis (rank {x.ndim})")
    return TensorType(_fresh(x.ndim, "tl"), x.dtype)


_register(
    "tile",
    _tile_infer,
    lambda x, repeats: np.tile(x, repeats),
    {"repeats": REQUIRED},
    doc="Repeat the input `repeats[i]` times along axis i.",
)
_register(
    "dyn_tile",
    _dyn_tile_infer,
    lambda x, repeats: np.tile(x, _ints(repeats)),
    num_args=(2, 2),
    doc="tile with the repeats as a run-time tensor.",
)


# ---------------------------------------------------------------------------------------------
# pad


def pad_numpy(x, pads, mode: str, value=None):
    """ONNX Pad on a full-rank `pads` ([begin_0, ..., end_0, ...]); negative pads crop."""
    n = x.ndim
    begins, ends = pads[:n], pads[n:]
    crop = tuple(
        slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends))
    )
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if mode == "constant":
        fill = 0 if value is None else _scalar(value)
        return np.pad(x, width, mode="constant", constant_values=fill).astype(x.dtype)
    return np.pad(x, width, mode=mode)


def _check_mode(mode: str, op: str) -> None:
    if mode not in PAD_MODES:
        raise ShapeError(f"op {op}: unknown mode {mode!r}; expected one of {', '.join(PAD_MODES)}")


def _pad_infer(args, attrs):
    x = tensor(args[0], "pad")
    _check_mode(attrs["mode"], "pad")
    value = _operand(args, 1)
    # the fill is converted to the input's dtype: a bfloat16 constant arrives as float32
    if value is not None and tensor(value, "pad", "value").shape not in ((), (1,)):
        raise ShapeError(f"op pad: the fill value must be a scalar, got {value}")
    pads = [as_dim(p) for p in attrs["pads"]]
    if len(pads) != 2 * x.ndim:
        raise ShapeError(f"op pad: {len(pads)} pads for rank {x.ndim}; expected {2 * x.ndim}")
    out = tuple(as_dim(d + b + e) for d, b, e in zip(x.shape, pads[: x.ndim], pads[x.ndim :]))
    if any(isinstance(d, int) and d < 0 for d in out):
        raise ShapeError(f"op pad: pads {pads} crop {x} below zero size")
    return TensorType(out, x.dtype)


def _dyn_pad_infer(args, attrs):
    x = tensor(args[0], "dyn_pad")
    _check_mode(attrs["mode"], "dyn_pad")
    _vector_length(args[1], "dyn_pad", "pads")
    return TensorType(_fresh(x.ndim, "pd"), x.dtype)


def _dyn_pad_ref(x, pads, value=None, axes=None, mode="constant"):
    p = _ints(pads)
    if axes is not None:
        full = [0] * (2 * x.ndim)
        ax = [a + x.ndim if a < 0 else a for a in _ints(axes)]
        for i, a in enumerate(ax):
            full[a], full[x.ndim + a] = p[i], p[len(ax) + i]
        p = full
    return pad_numpy(x, p, mode, value)


_register(
    "pad",
    _pad_infer,
    lambda x, value=None, pads=(), mode="constant": pad_numpy(x, pads, mode, value),
    {"pads": REQUIRED, "mode": "constant"},
    num_args=(1, 2),
    doc="ONNX Pad; the optional operand is the scalar fill value of constant mode.",
)
_register(
    "dyn_pad",
    _dyn_pad_infer,
    _dyn_pad_ref,
    {"mode": "constant"},
    num_args=(2, 4),
    doc="ONNX Pad with run-time (pads, value?, axes?) operands.",
)


# ---------------------------------------------------------------------------------------------
# arange, full, eye, trilu


def _arange_length(start, stop, step) -> Dim:
    if any(isinstance(v, PrimExpr) for v in (start, stop, step)):
        if not isinstance(step, int) or step == 0:
            raise ShapeError(
                f"op arange: a symbolic range needs a nonzero integer step, got {step}"
            )
        span = as_dim(stop - start) if step > 0 else as_dim(start - stop)
        return _nonneg(_ceil_div(span, abs(step)))
    if step == 0:
        raise ShapeError("op arange: step cannot be 0")
    return max(math.ceil((stop - start) / step), 0)


def _arange_infer(args, attrs):
    return TensorType(
        (_arange_length(attrs["start"], attrs["stop"], attrs["step"]),), attrs["dtype"]
    )


def _arange_ref(start, stop, step, dtype):
    return np.arange(start, stop, step).astype(to_numpy(dtype))


def _dyn_arange_infer(args, attrs):
    ts = [tensor(a, "dyn_arange") for a in args]
    if any(t.ndim > 1 or t.shape not in ((), (1,)) for t in ts):
        raise ShapeError("op dyn_arange: start, limit and delta must be scalars")
    return TensorType((fresh_var("rg"),), same_dtype(ts, "dyn_arange"))


_register(
    "arange",
    _arange_infer,
    _arange_ref,
    {"start": 0, "stop": REQUIRED, "step": 1, "dtype": "int64"},
    num_args=(0, 0),
    doc="start, start + step, ... up to (excluding) stop.",
)
_register(
    "dyn_arange",
    _dyn_arange_infer,
    lambda start, limit, delta: _arange_ref(
        _scalar(start), _scalar(limit), _scalar(delta), str(np.asarray(start).dtype)
    ),
    num_args=(3, 3),
    doc="arange with run-time scalar start, limit and delta (the result has their dtype).",
)


def _full_ref(shape, value, dtype):
    return np.full(shape, value, dtype=to_numpy(dtype))


_register(
    "full",
    lambda args, attrs: TensorType(tuple(attrs["shape"]), attrs["dtype"]),
    _full_ref,
    {"shape": REQUIRED, "value": 0, "dtype": "float32"},
    num_args=(0, 0),
    doc="A tensor of `shape` filled with `value`.",
)
_register(
    "dyn_full",
    lambda args, attrs: TensorType(
        _fresh(_vector_length(args[0], "dyn_full", "shape"), "fl"), attrs["dtype"]
    ),
    lambda shape, value, dtype: _full_ref(_ints(shape), value, dtype),
    {"value": 0, "dtype": "float32"},
    doc="full with the shape as a run-time tensor.",
)
_register(
    "eye",
    lambda args, attrs: TensorType((attrs["rows"], attrs["cols"]), attrs["dtype"]),
    lambda rows, cols, k, dtype: np.eye(rows, cols, k, dtype=to_numpy(dtype)),
    {"rows": REQUIRED, "cols": REQUIRED, "k": 0, "dtype": "float32"},
    num_args=(0, 0),
    doc="Ones on the k-th diagonal of a rows x cols matrix, zeros elsewhere.",
)


def _trilu_infer(args, attrs):
    x = tensor(args[0], "trilu")
    if x.ndim < 2:
        raise ShapeError(f"op trilu: input must have rank >= 2, got {x}")
    if _operand(args, 1) is not None and tensor(args[1], "trilu", "k").ndim > 1:
        raise ShapeError("op trilu: k must be a scalar")
    return x


def _trilu_ref(x, k=None, upper=True):
    kk = 0 if k is None else int(_scalar(k))
    return np.triu(x, kk) if upper else np.tril(x, kk)


_register(
    "trilu",
    _trilu_infer,
    _trilu_ref,
    {"upper": True},
    num_args=(1, 2),
    doc="Keep the upper (or lower) triangle from diagonal k of the last two axes.",
)


# ---------------------------------------------------------------------------------------------
# reverse_sequence, compress, center_crop_pad


def _reverse_sequence_infer(args, attrs):
    x = tensor(args[0], "reverse_sequence")
    lens = tensor(args[1], "reverse_sequence", "sequence lengths")
    batch = normalize_axis(attrs["batch_axis"], x.ndim, "reverse_sequence")
    normalize_axis(attrs["time_axis"], x.ndim, "reverse_sequence")
    n = x.shape[batch]
    if lens.ndim != 1 or (isinstance(n, int) and lens.is_static and lens.shape[0] != n):
        raise ShapeError(
            f"op reverse_sequence: sequence lengths {lens} must match batch axis {x.shape[batch]}"
        )
    return x


def _reverse_sequence_ref(x, lens, batch_axis, time_axis):
    out = x.copy()
    for b, n in enumerate(_ints(lens)):
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = b, slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        dst = list(src)
        dst[time_axis] = slice(0, n)
        out[tuple(dst)] = x[tuple(src)]
    return out


_register(
    "reverse_sequence",
    _reverse_sequence_infer,
    _reverse_sequence_ref,
    {"batch_axis": 1, "time_axis": 0},
    num_args=(2, 2),
    doc="Reverse the first lens[b] steps along time_axis of each batch entry b.",
)


def _compress_infer(args, attrs):
    x = tensor(args[0], "compress")
    cond = tensor(args[1], "compress", "condition")
    if cond.ndim != 1:
        raise ShapeError(f"op compress: condition must be 1-D, got {cond}")
    if attrs["axis"] is None:
        return TensorType((fresh_var("cp"),), x.dtype)
    axis = normalize_axis(attrs["axis"], x.ndim, "compress")
    return TensorType(x.shape[:axis] + (fresh_var("cp"),) + x.shape[axis + 1 :], x.dtype)


_register(
    "compress",
    _compress_infer,
    lambda x, cond, axis: np.compress(np.asarray(cond, dtype=bool), x, axis=axis),
    {"axis": None},
    num_args=(2, 2),
    pattern=Pattern.OPAQUE,
    doc="The slices along `axis` (of the flattened input when None) where condition holds.",
)


def center_crop_pad_numpy(x, shape, axes):
    """Center-crop or zero-pad each listed axis to its target extent (extra on the end)."""
    out_shape = list(x.shape)
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    for a, want in zip(axes, shape):
        have = x.shape[a]
        out_shape[a] = want
        lo = abs(have - want) // 2
        if want < have:
            src[a] = slice(lo, lo + want)
        elif want > have:
            dst[a] = slice(lo, lo + have)
    out = np.zeros(out_shape, dtype=x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return out


def _center_crop_pad_infer(args, attrs):
    x = tensor(args[0], "center_crop_pad")
    axes = _axes(attrs["axes"], x.ndim, "center_crop_pad")
    if len(attrs["shape"]) != len(axes):
        raise ShapeError(f"op center_crop_pad: {len(attrs['shape'])} sizes for {len(axes)} axes")
    out = list(x.shape)
    for a, d in zip(axes, attrs["shape"]):
        out[a] = as_dim(d)
    return TensorType(tuple(out), x.dtype)


def _dyn_center_crop_pad_infer(args, attrs):
    x = tensor(args[0], "dyn_center_crop_pad")
    axes = _axes(attrs["axes"], x.ndim, "dyn_center_crop_pad")
    if _vector_length(args[1], "dyn_center_crop_pad", "shape") != len(axes):
        raise ShapeError("op dyn_center_crop_pad: shape must have one entry per axis")
    out = list(x.shape)
    for a in axes:
        out[a] = fresh_var("cc")
    return TensorType(tuple(out), x.dtype)


_register(
    "center_crop_pad",
    _center_crop_pad_infer,
    lambda x, shape, axes: center_crop_pad_numpy(x, shape, [a % x.ndim for a in axes]),
    {"shape": REQUIRED, "axes": REQUIRED},
    doc="Center-crop or zero-pad the listed axes to `shape`.",
)
_register(
    "dyn_center_crop_pad",
    _dyn_center_crop_pad_infer,
    lambda x, shape, axes: center_crop_pad_numpy(x, _ints(shape), [a % x.ndim for a in axes]),
    {"axes": REQUIRED},
    num_args=(2, 2),
    doc="center_crop_pad with the target sizes as a run-time tensor.",
)
