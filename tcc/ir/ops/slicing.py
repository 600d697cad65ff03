"""Slicing and padding ops: strided_slice, pad, reverse_sequence, compress,
center_crop_pad (injective, except compress).

As in transform.py, bounds, pads and target sizes are attributes (dimensions may be
symbolic), and `dyn_` variants take them as run-time tensor operands instead, giving the
affected dimensions fresh size variables. compress keeps a data-dependent number of slices,
so its result dimension is always a fresh size variable and it is OPAQUE.

Loop programs: strided_slice, pad (every mode), reverse_sequence and center_crop_pad load
the input at a remapped index, one stage each, exact for every dtype; a padded load is
guarded by its bounds test. The `dyn_` variants and compress have none (their shapes are
only known once operand values are read); they stay op calls.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import expr as E
from tcc.ir import te
from tcc.ir.dtype import INDEX_DTYPE
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, as_dim, fresh_var, max_expr, min_expr
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    axis_flags,
    ceil_div,
    clamp_index,
    count_selected,
    count_type,
    fresh_vars,
    ints,
    known_nonneg,
    no_loop,
    nonneg,
    normalize_axes,
    operand,
    register_op,
    scalar_value,
    selected_positions,
    unravel,
    vector_length,
)
from tcc.ir.ops.elementwise import LOOP_DTYPES
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    StaticForm,
    normalize_axis,
    prod,
    register,
    tensor,
)

# Slice bounds at least this large (in magnitude) mean "past the end" of any real axis, so
# they clamp to a symbolic axis' extent without a min/max expression.
SLICE_BOUND = 2**31 - 1

PAD_MODES = ("constant", "reflect", "edge", "wrap")


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
        return nonneg(ceil_div(as_dim(hi - lo), step))
    if _past_end(start):
        hi = as_dim(dim - 1)
    else:
        hi = min_expr(start, dim - 1) if _nonneg_bound(start) else as_dim(start + dim)
    if _before_start(end):
        lo = -1
    else:
        lo = end if _nonneg_bound(end) else max_expr(end + dim, -1)
    return nonneg(ceil_div(as_dim(hi - lo), -step))


def slice_start(dim: Dim, start: Dim, step: int) -> Dim:
    """The first index `range(dim)[start::step]` visits (ONNX Slice clamping), as
    `slice_length` clamps it; only meaningful when the slice is not empty."""
    if isinstance(dim, int) and isinstance(start, int):
        return slice(start, None, step).indices(dim)[0]
    if step > 0:
        if _nonneg_bound(start):
            return start
        return 0 if _before_start(start) else max_expr(start + dim, 0)
    if _past_end(start):
        return as_dim(dim - 1)
    return min_expr(start, dim - 1) if _nonneg_bound(start) else as_dim(start + dim)


def _strided_slice_compute(x, begin, end, axes, strides, lengths=None):
    if lengths is not None:
        return _window_compute(x, begin, axes, strides, lengths)
    attrs = {"begin": begin, "end": end, "axes": axes, "strides": strides}
    out = _strided_slice_infer([TensorType(x.shape, x.dtype)], attrs).shape
    first = {}
    for b, a, st in zip(begin, normalize_axes(axes, x.ndim, "strided_slice"), strides):
        first[a] = (slice_start(x.shape[a], as_dim(b), int(st)), int(st))

    def value(*i):
        return x[tuple(first[a][0] + j * first[a][1] if a in first else j for a, j in enumerate(i))]

    return te.compute(out, value, "strided_slice")


def _window_compute(x, first, axes, strides, lengths):
    """The `lengths` form: `lengths[k]` elements from `first[k]` by `strides[k]` (sizes read
    at run time, already clamped into the axis). The index is clamped into the axis again,
    which changes nothing for such sizes and keeps every access in bounds provably."""
    out = list(x.shape)
    pick = {}
    for f, a, st, n in zip(first, normalize_axes(axes, x.ndim, "strided_slice"), strides, lengths):
        out[a] = n
        pick[a] = (f, st)

    def value(*i):
        idx = []
        for a, j in enumerate(i):
            if a not in pick:
                idx.append(j)
                continue
            f, st = pick[a]
            idx.append(te.min(te.max(f + j * st, 0), x.shape[a] - 1))
        return x[tuple(idx)]

    return te.compute(tuple(out), value, "strided_slice")


def _slice_ref(x, begin, end, axes, strides, lengths=None):
    if lengths is not None:
        out = x
        for f, a, st, n in zip(begin, axes, strides, lengths):
            out = np.take(out, [f + j * st for j in range(n)], axis=a)
        return np.ascontiguousarray(out)
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
    lengths = attrs.get("lengths")  # the attrs of a call, or a compute's own few
    if lengths is not None:
        if len(lengths) != len(axes):
            raise ShapeError("op strided_slice: lengths must have one entry per axis")
        for a, n in zip(normalize_axes(axes, x.ndim, "strided_slice"), lengths):
            out[a] = as_dim(n)
        return TensorType(tuple(out), x.dtype)
    for b, e, a, s in zip(begin, end, normalize_axes(axes, x.ndim, "strided_slice"), strides):
        out[a] = slice_length(x.shape[a], as_dim(b), as_dim(e), int(s))
    return TensorType(tuple(out), x.dtype)


def _dyn_strided_slice_infer(args, attrs):
    x = tensor(args[0], "dyn_strided_slice")
    n = vector_length(args[1], "dyn_strided_slice", "starts")
    if vector_length(args[2], "dyn_strided_slice", "ends") != n:
        raise ShapeError("op dyn_strided_slice: starts and ends must have the same length")
    changed = range(x.ndim) if operand(args, 3) is not None else range(min(n, x.ndim))
    out = list(x.shape)
    for a in changed:
        out[a] = fresh_var("sl")
    return TensorType(tuple(out), x.dtype)


def _dyn_slice_ref(x, starts, ends, axes=None, steps=None):
    b, e = ints(starts), ints(ends)
    axes_l = list(range(len(b))) if axes is None else ints(axes)
    return _slice_ref(x, b, e, axes_l, [1] * len(b) if steps is None else ints(steps))


register(
    OpDef(
        "strided_slice",
        _strided_slice_infer,
        _slice_ref,
        {"begin": REQUIRED, "end": REQUIRED, "axes": REQUIRED, "strides": REQUIRED,
         "lengths": None},
        Pattern.INJECTIVE,
        compute=_strided_slice_compute,
        doc="x[begin:end:stride] on each listed axis, bounds clamped as in numpy/ONNX. With "
        "`lengths` (the form lower-dynamic-shapes gives a Slice whose operands are read at run "
        "time) `begin` is the first index and `lengths` the count, `end` unused.",
    )
)
def _clamp(v, lo, hi):
    return E.max_expr(E.min_expr(v, hi), lo)


def _slice_window(d, start, end, step):
    """(first index, count) of range(d)[start:end:step] for run-time values (ONNX Slice),
    as size expressions; a negative value counts from the end, without overflow."""
    up = E.compare("gt", step, 0)

    def place(v):  # the bounds clamp to [0, d] going up and to [-1, d - 1] going down
        neg = E.select(up, _clamp(E.binop("add", E.max_expr(v, -d), d), 0, d),
                       _clamp(E.binop("add", E.max_expr(v, E.binop("sub", -1, d)), d), -1,
                              E.binop("sub", d, 1)))
        pos = E.select(up, E.min_expr(v, d), E.min_expr(v, E.binop("sub", d, 1)))
        return E.select(E.compare("lt", v, 0), neg, pos)

    first, last = place(start), place(end)
    count_up = E.binop("floordiv", E.binop("add", E.binop("sub", last, first),
                                           E.binop("sub", step, 1)), E.max_expr(step, 1))
    down = E.binop("sub", 0, step)
    count_down = E.binop("floordiv", E.binop("add", E.binop("sub", first, last),
                                             E.binop("sub", down, 1)), E.max_expr(down, 1))
    return first, E.max_expr(E.select(up, count_up, count_down), 0)


def _dyn_strided_slice_static(types, sizes, out, attrs):
    """ONNX Slice once starts, ends, axes and steps are read: per axis of the input, the
    first index and count of the entry that names it (the whole axis where none does)."""
    x = types[0]
    starts, ends = sizes[1], sizes[2]
    n = len(starts)
    if 3 in sizes:
        flags_per_entry = sizes[3]
        _, checks = axis_flags(flags_per_entry, x.ndim, "axis")
        normal = [E.select(E.compare("lt", v, 0), E.binop("add", v, x.ndim), v)
                  for v in flags_per_entry]
    else:
        if n > x.ndim:
            raise ShapeError(f"op dyn_strided_slice: {n} starts for rank {x.ndim}")
        checks, normal = [], list(range(n))
    steps = list(sizes[4]) if 4 in sizes else [1] * n
    checks += [(E.compare("ne", st, 0), f"step {k} is 0") for k, st in enumerate(steps)]
    firsts, strides, dims = [], [], []
    for a, d in enumerate(x.shape):
        first, count, stride = E.const(0), as_dim(d), E.const(1)
        for k in range(n):
            here = E.compare("eq", normal[k], a)
            f, c = _slice_window(d, starts[k], ends[k], steps[k])
            first, count = E.select(here, f, first), E.select(here, c, count)
            stride = E.select(here, steps[k], stride)
        firsts.append(as_dim(first))
        strides.append(as_dim(stride))
        dims.append(as_dim(count))
    first_vars = [E.fresh_var("first") for _ in firsts]
    stride_vars = [E.fresh_var("step") for _ in strides]
    # the axes no entry may name keep their dimension: no size to bind there
    attrs_ = {"begin": first_vars, "end": [0] * x.ndim, "axes": list(range(x.ndim)),
              "strides": stride_vars, "lengths": list(out)}
    binds = tuple(zip(first_vars, firsts)) + tuple(zip(stride_vars, strides))
    return StaticForm("strided_slice", (0,), attrs_, tuple(dims), tuple(checks), binds=binds)


register_op(
    "dyn_strided_slice",
    _dyn_strided_slice_infer,
    _dyn_slice_ref,
    num_args=(3, 5),
    doc="ONNX Slice with run-time (starts, ends, axes?, steps?) operands.",
    shape_operands=(1, 2, 3, 4),
    to_static=_dyn_strided_slice_static,
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
        fill = 0 if value is None else scalar_value(value)
        return np.pad(x, width, mode="constant", constant_values=fill).astype(x.dtype)
    return np.pad(x, width, mode=mode)


def _check_mode(mode: str, op: str) -> None:
    if mode not in PAD_MODES:
        raise ShapeError(f"op {op}: unknown mode {mode!r}; expected one of {', '.join(PAD_MODES)}")


def _pad_infer(args, attrs):
    x = tensor(args[0], "pad")
    _check_mode(attrs["mode"], "pad")
    value = operand(args, 1)
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
    vector_length(args[1], "dyn_pad", "pads")
    return TensorType(fresh_vars(x.ndim, "pd"), x.dtype)


def _dyn_pad_ref(x, pads, value=None, axes=None, mode="constant"):
    p = ints(pads)
    if axes is not None:
        full = [0] * (2 * x.ndim)
        ax = [a + x.ndim if a < 0 else a for a in ints(axes)]
        for i, a in enumerate(ax):
            full[a], full[x.ndim + a] = p[i], p[len(ax) + i]
        p = full
    return pad_numpy(x, p, mode, value)


def _crop(pad: Dim) -> Dim:
    """How much a (possibly negative) pad crops: max(-pad, 0). A symbolic pad is a value
    read at run time, which may be negative (unlike a dimension)."""
    if isinstance(pad, int):
        return max(-pad, 0)
    return max_expr(-pad, 0)


def _grow(pad: Dim) -> Dim:
    """How much a (possibly negative) pad adds: max(pad, 0)."""
    return max(pad, 0) if isinstance(pad, int) else max_expr(pad, 0)


def _pad_source(j, dim: Dim, begin: Dim, end: Dim, mode: str):
    """The input index output index `j` reads along one axis in a non-constant mode: the
    axis is cropped by the negative pads first, then extended by `mode` (as numpy.pad)."""
    lo = _crop(begin)
    n = as_dim(dim - lo - _crop(end))  # the cropped extent
    c = j - _grow(begin)  # the position in the cropped axis
    if mode == "edge":
        c = te.min(te.max(c, 0), n - 1)
    elif mode == "wrap":
        c = c % (n if isinstance(n, int) else max_expr(n, 1))
    elif isinstance(n, int) and n == 1:
        c = 0
    else:  # reflect: the mirrored axis repeats with period 2 (n - 1), edges not repeated
        period = 2 * (n - 1) if isinstance(n, int) else max_expr(2 * (n - 1), 1)
        m = c % period
        c = te.min(m, period - m)
    if all(isinstance(d, int) for d in (dim, begin, end)):
        return c + lo
    # pads read at run time: in the axis whenever the pads fit it (the VM checks that the
    # result is not negative); clamped so the bounds proof sees it there
    return clamp_index(c + lo, dim)


def _pad_compute(x, value=None, *, pads, mode):
    out = _pad_infer([TensorType(x.shape, x.dtype)], {"pads": pads, "mode": mode}).shape
    pads = [as_dim(p) for p in pads]
    begins, ends = pads[: x.ndim], pads[x.ndim :]
    if mode != "constant":
        axes = list(zip(x.shape, begins, ends))
        return te.compute(
            out, lambda *i: x[tuple(_pad_source(j, *a, mode) for j, a in zip(i, axes))], "pad"
        )
    if value is None:
        fill = te.const(0, x.dtype)
    else:
        fill = te.cast(value[(0,) * value.ndim], x.dtype)

    def padded(*i):
        checks = []
        for j, d, b, e in zip(i, x.shape, begins, ends):
            if not (isinstance(b, int) and b <= 0):  # a begin crop never reads below 0
                checks.append(j >= b)
            if not (isinstance(e, int) and e <= 0):  # nor an end crop past the end
                checks.append(j < as_dim(b + d))
        load = x[tuple(j - b for j, b in zip(i, begins))]
        if not checks:
            return load
        inside = checks[0]
        for c in checks[1:]:
            inside = te.logical_and(inside, c)
        return te.if_then_else(inside, load, fill)

    return te.compute(out, padded, "pad")


register(
    OpDef(
        "pad",
        _pad_infer,
        lambda x, value=None, pads=(), mode="constant": pad_numpy(x, pads, mode, value),
        {"pads": REQUIRED, "mode": "constant"},
        Pattern.INJECTIVE,
        num_args=(1, 2),
        compute=_pad_compute,
        doc="ONNX Pad; the optional operand is the scalar fill value of constant mode.",
    )
)
def _dyn_pad_static(types, sizes, out, attrs):
    """ONNX Pad once the pads are read: begins then ends, one each per axis."""
    x, pads, checks = types[0], sizes[1], []
    if 3 in sizes:  # pads for the listed axes only: each axis takes those of the entry naming it
        axes = sizes[3]
        if len(pads) != 2 * len(axes):
            raise ShapeError(f"op dyn_pad: {len(pads)} pads for {len(axes)} axes")
        _, checks = axis_flags(axes, x.ndim, "axis")
        normal = [E.select(E.compare("lt", v, 0), E.binop("add", v, x.ndim), v) for v in axes]
        full = []
        for half in (pads[: len(axes)], pads[len(axes):]):
            for a in range(x.ndim):
                p = E.const(0)
                for v, q in zip(normal, half):
                    p = E.binop("add", p, E.select(E.compare("eq", v, a), q, 0))
                full.append(as_dim(p))
        pads = full
    if len(pads) != 2 * x.ndim:
        raise ShapeError(f"op dyn_pad: {len(pads)} pads for rank {x.ndim}; expected {2 * x.ndim}")
    begins = list(pads[: x.ndim])
    dims = tuple(as_dim(d + b + e) for d, b, e in zip(x.shape, begins, pads[x.ndim:]))
    # the ends as what is left of each result dimension, so the static op's result type is
    # the call's own
    ends = [as_dim(o - d - b) for o, d, b in zip(out, x.shape, begins)]
    if attrs["mode"] != "constant":  # edge, reflect and wrap repeat what the crop leaves
        for a, (d, b, e) in enumerate(zip(x.shape, begins, pads[x.ndim:])):
            left = E.binop("add", E.binop("add", d, E.binop("min", b, 0)), E.binop("min", e, 0))
            checks.append((E.Logic("or", E.compare("eq", dims[a], 0), E.compare("ge", left, 1)),
                           f"axis {a} is empty after its negative pads, and {attrs['mode']} "
                           "padding has nothing to repeat"))
    return StaticForm("pad", (0, 2), {"pads": begins + ends, "mode": attrs["mode"]}, dims,
                      tuple(checks))


register_op(
    "dyn_pad",
    _dyn_pad_infer,
    _dyn_pad_ref,
    {"mode": "constant"},
    num_args=(2, 4),
    doc="ONNX Pad with run-time (pads, value?, axes?) operands.",
    shape_operands=(1, 3),
    to_static=_dyn_pad_static,
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
    for b, n in enumerate(ints(lens)):
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = b, slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        dst = list(src)
        dst[time_axis] = slice(0, n)
        out[tuple(dst)] = x[tuple(src)]
    return out


def _reverse_sequence_compute(x, lens, batch_axis, time_axis):
    batch = normalize_axis(batch_axis, x.ndim, "reverse_sequence")
    time = normalize_axis(time_axis, x.ndim, "reverse_sequence")
    steps = x.shape[time]

    def value(*i):
        # a length past the time axis reverses all of it
        n = te.min(te.max(te.cast(lens[i[batch]], INDEX_DTYPE), 0), te.const(steps, INDEX_DTYPE))
        t = i[time]
        src = te.if_then_else(t < n, n - 1 - t, t)
        return x[i[:time] + (src,) + i[time + 1 :]]

    return te.compute(x.shape, value, "reverse_sequence")


register(
    OpDef(
        "reverse_sequence",
        _reverse_sequence_infer,
        _reverse_sequence_ref,
        {"batch_axis": 1, "time_axis": 0},
        Pattern.INJECTIVE,
        num_args=(2, 2),
        compute=_reverse_sequence_compute,
        doc="Reverse the first lens[b] steps along time_axis of each batch entry b.",
    )
)


def _compress_infer(args, attrs):
    x = tensor(args[0], "compress")
    cond = tensor(args[1], "compress", "condition")
    if cond.ndim != 1:
        raise ShapeError(f"op compress: condition must be 1-D, got {cond}")
    count = fresh_var("cp") if attrs["count"] is None else attrs["count"]
    if attrs["axis"] is None:
        return TensorType((count,), x.dtype)
    axis = normalize_axis(attrs["axis"], x.ndim, "compress")
    return TensorType(x.shape[:axis] + (count,) + x.shape[axis + 1 :], x.dtype)


def _compress_flags(x, cond, axis):
    """(how many condition entries apply, whether entry i holds)."""
    extent = prod(x.shape) if axis is None else x.shape[normalize_axis(axis, x.ndim, "compress")]
    if cond.dtype not in LOOP_DTYPES:
        raise no_loop("compress", f"a {cond.dtype} condition")
    n = as_dim(E.min_expr(cond.shape[0], extent))  # numpy drops the entries past the axis
    return n, lambda i: te.not_equal(cond[i], te.const(0, cond.dtype))


def _compress_compute(x, cond, *, axis, count):
    if count is None:
        raise no_loop("compress", "a count not read at run time")
    n, flags = _compress_flags(x, cond, axis)
    positions = selected_positions(n, count, flags, "compress_positions")

    def picked(j):
        return clamp_index(positions[j], n)

    if axis is None:
        return te.compute((count,), lambda j: x[unravel(picked(j), x.shape)], "compress")
    a = normalize_axis(axis, x.ndim, "compress")
    shape = x.shape[:a] + (count,) + x.shape[a + 1 :]
    return te.compute(shape, lambda *i: x[i[:a] + (picked(i[a]),) + i[a + 1 :]], "compress")


def _compress_static(types, sizes, out, attrs):
    if attrs["count"] is not None:
        raise NoLoopProgram("compress: counted already")
    (count,) = sizes[2]
    x = types[0]
    if attrs["axis"] is None:
        dims = (count,)
    else:
        a = normalize_axis(attrs["axis"], x.ndim, "compress")
        dims = x.shape[:a] + (count,) + x.shape[a + 1 :]
    return StaticForm("compress", (0, 1), {**attrs, "count": count}, dims)


def _compress_count_ref(x, cond, axis):
    extent = x.size if axis is None else x.shape[axis]
    return np.array([np.count_nonzero(np.asarray(cond)[:extent])], np.int64)


register_op(
    "compress_count",
    count_type("compress_count"),
    _compress_count_ref,
    {"axis": None},
    num_args=(2, 2),
    pattern=Pattern.OPAQUE,
    doc="How many slices compress keeps, as a 1-vector.",
    compute=lambda x, cond, *, axis: count_selected(*_compress_flags(x, cond, axis), "compress_count"),
)
register_op(
    "compress",
    _compress_infer,
    lambda x, cond, axis, count=None: np.compress(np.asarray(cond, dtype=bool), x, axis=axis),
    {"axis": None, "count": None},
    num_args=(2, 2),
    pattern=Pattern.OPAQUE,
    doc="The slices along `axis` (of the flattened input when None) where condition holds. "
    "Compiled, compress_count counts them, the count is read as a size (`count`), and a "
    "kernel finds each kept slice (quadratic in the condition's length).",
    compute=_compress_compute,
    size_op="compress_count",
    to_static=_compress_static,
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
    axes = normalize_axes(attrs["axes"], x.ndim, "center_crop_pad")
    if len(attrs["shape"]) != len(axes):
        raise ShapeError(f"op center_crop_pad: {len(attrs['shape'])} sizes for {len(axes)} axes")
    out = list(x.shape)
    for a, d in zip(axes, attrs["shape"]):
        out[a] = as_dim(d)
    return TensorType(tuple(out), x.dtype)


def _dyn_center_crop_pad_infer(args, attrs):
    x = tensor(args[0], "dyn_center_crop_pad")
    axes = normalize_axes(attrs["axes"], x.ndim, "dyn_center_crop_pad")
    if vector_length(args[1], "dyn_center_crop_pad", "shape") != len(axes):
        raise ShapeError("op dyn_center_crop_pad: shape must have one entry per axis")
    out = list(x.shape)
    for a in axes:
        out[a] = fresh_var("cc")
    return TensorType(tuple(out), x.dtype)


def _center_offset(have: Dim, want: Dim):
    """Input position minus output position on one axis: half the crop, or minus half the
    pad (a run-time choice when the sizes are symbolic)."""
    if isinstance(have, int) and isinstance(want, int):
        return (have - want) // 2 if have >= want else -((want - have) // 2)
    crop, pad = as_dim((have - want) // 2), as_dim((want - have) // 2)
    return te.if_then_else(te.const(have) >= te.const(want), crop, 0 - te.const(pad))


def _center_crop_pad_compute(x, shape, axes):
    attrs = {"shape": shape, "axes": axes}
    out = _center_crop_pad_infer([TensorType(x.shape, x.dtype)], attrs).shape
    offsets = {
        a: (_center_offset(x.shape[a], as_dim(d)), as_dim(d))
        for a, d in zip(normalize_axes(axes, x.ndim, "center_crop_pad"), shape)
    }

    def value(*i):
        src = [j + offsets[a][0] if a in offsets else j for a, j in enumerate(i)]
        checks = []
        for a, (_, want) in offsets.items():
            have = x.shape[a]
            if not (isinstance(have, int) and isinstance(want, int) and want <= have):
                checks += [src[a] >= 0, src[a] < te.const(have)]  # padded: guard the load
        if not checks:
            return x[tuple(src)]
        inside = checks[0]
        for c in checks[1:]:
            inside = te.logical_and(inside, c)
        return te.if_then_else(inside, x[tuple(src)], te.const(0, x.dtype))

    return te.compute(out, value, "center_crop_pad")


register(
    OpDef(
        "center_crop_pad",
        _center_crop_pad_infer,
        lambda x, shape, axes: center_crop_pad_numpy(x, shape, [a % x.ndim for a in axes]),
        {"shape": REQUIRED, "axes": REQUIRED},
        Pattern.INJECTIVE,
        compute=_center_crop_pad_compute,
        doc="Center-crop or zero-pad the listed axes to `shape`.",
    )
)
def _dyn_center_crop_pad_static(types, sizes, out, attrs):
    x = types[0]
    axes = normalize_axes(attrs["axes"], x.ndim, "dyn_center_crop_pad")
    dims = list(x.shape)
    for a, d in zip(axes, sizes[1]):
        dims[a] = d
    return StaticForm("center_crop_pad", (0,), {"shape": list(sizes[1]), "axes": attrs["axes"]},
                      tuple(dims))


register_op(
    "dyn_center_crop_pad",
    _dyn_center_crop_pad_infer,
    lambda x, shape, axes: center_crop_pad_numpy(x, ints(shape), [a % x.ndim for a in axes]),
    {"axes": REQUIRED},
    num_args=(2, 2),
    doc="center_crop_pad with the target sizes as a run-time tensor.",
    shape_operands=(1,),
    to_static=_dyn_center_crop_pad_static,
)
