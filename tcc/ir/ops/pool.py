"""Pooling ops: max/avg/Lp pooling over 1-3 spatial axes, max pooling with indices,
max_unpool, and the global pools.

Layouts and spatial attributes (`kernel`, `strides`, `padding`, `dilation`) are as for the
convolutions (see conv.py). Windowed pools are reductions whose result feeds a per-element
epilogue, so they are OUT_FUSABLE, as in TVM (max_pool_with_indices and max_unpool are
OPAQUE); global pools are plain reductions (COMM_REDUCE). The numpy references reduce
strided window views.

Loop programs: one reduction over the window taps, each tap guarded by `if_then_else` on its
index (so padding and the ceil-mode extension never load out of bounds) and contributing the
reduction's neutral value there; sums accumulate half floats in float32. Average pools divide
by a per-position count stage (over the taps only, not N and C) unless every window is full.
max_pool_with_indices adds two stages: the first tap (row-major over the kernel) equal to the
maximum, as argmax picks it (NaN matches NaN), then its flat index in the input. max_unpool
(a scatter) has no loop program; neither do bool inputs and integer Lp pools.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import is_float
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import PrimExpr, as_dim, fresh_var
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops._util import (
    accumulate_dtype,
    check_lengths,
    check_positive,
    check_rank,
    compute_dtype,
    crop_spatial,
    optional_tensor,
    pad_spatial,
    sliding_windows,
    spatial_params,
    te_type,
    window_out_dim,
    window_taps,
)
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, prod, register, tensor

# ---------------------------------------------------------------------------------------------
# windowed pooling


def _pool_infer(name: str, nd: int | None, indices: bool = False):
    def infer(args, attrs):
        x = tensor(args[0], name)
        rank = x.ndim if nd is None else nd + 2
        check_rank(name, x, rank)
        k = attrs["kernel"]
        strides, padding, dilation = spatial_params(attrs, rank - 2)
        check_lengths(name, rank - 2, strides, padding, dilation, k)
        out = [
            window_out_dim(
                x.shape[2 + i],
                k[i],
                strides[i],
                padding[i],
                padding[rank - 2 + i],
                dilation[i],
                attrs["ceil_mode"],
            )
            for i in range(rank - 2)
        ]
        check_positive(name, out)
        y = TensorType((*x.shape[:2], *out), x.dtype)
        return TupleType((y, TensorType(y.shape, "int64"))) if indices else y

    return infer


def _pool_views(x, fill, kernel, strides, padding, dilation, ceil_mode):
    """Windows (N, C, *out, *k) of x padded with `fill`, extended at the end for ceil mode."""
    nd = x.ndim - 2
    out = [
        window_out_dim(
            x.shape[2 + i],
            kernel[i],
            strides[i],
            padding[i],
            padding[nd + i],
            dilation[i],
            ceil_mode,
        )
        for i in range(nd)
    ]
    need = [(out[i] - 1) * strides[i] + dilation[i] * (kernel[i] - 1) + 1 for i in range(nd)]
    end = [max(need[i] - x.shape[2 + i] - padding[i], 0) for i in range(nd)]
    xp = pad_spatial(x, list(padding[:nd]) + end, fill)
    return sliding_windows(xp, kernel, strides, dilation, out), out, end


def _window_sum(x, kernel, strides, padding, dilation, ceil_mode, count_include_pad):
    """(sum over each window, number of counted positions per window)."""
    nd = x.ndim - 2
    win, out, end = _pool_views(x, 0, kernel, strides, padding, dilation, ceil_mode)
    axes = tuple(range(-nd, 0))
    total = win.sum(axis=axes)
    # Explicit pads count when count_include_pad is set; the ceil-mode extension never does.
    ones = np.ones((1, 1, *x.shape[2:]), dtype=np.float64)
    if count_include_pad:
        ones = pad_spatial(ones, padding, 1.0)
        mask_pad = [0] * nd + [end[i] - padding[nd + i] for i in range(nd)]
    else:
        mask_pad = list(padding[:nd]) + end
    mask = pad_spatial(ones, mask_pad, 0.0)
    count = sliding_windows(mask, kernel, strides, dilation, out).sum(axis=axes)
    return total, count


def _spatial(x, strides, padding, dilation):
    return spatial_params(
        {"strides": strides, "padding": padding, "dilation": dilation}, x.ndim - 2
    )


def _max_fill(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_ref(x, *, kernel, strides, padding, dilation, ceil_mode):
    s, p, d = _spatial(x, strides, padding, dilation)
    win, _, _ = _pool_views(x, _max_fill(x.dtype), kernel, s, p, d, ceil_mode)
    return win.max(axis=tuple(range(-len(kernel), 0)))


def _max_pool_indices_ref(x, *, kernel, strides, padding, dilation, ceil_mode, storage_order):
    """Max pool plus the flat (row- or column-major) index of each maximum in x."""
    s, p, d = _spatial(x, strides, padding, dilation)
    nd = len(kernel)
    win, out, _ = _pool_views(x, _max_fill(x.dtype), kernel, s, p, d, ceil_mode)
    flat = win.reshape(win.shape[: 2 + nd] + (-1,))
    arg = flat.argmax(axis=-1)
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    taps = np.unravel_index(arg, kernel)
    size = x.shape[2:]
    index = np.zeros(arg.shape, dtype=np.int64)
    scale = 1
    order = range(nd) if storage_order else reversed(range(nd))
    for i in order:
        pos = np.arange(out[i]).reshape((-1,) + (1,) * (nd - 1 - i)) * s[i] - p[i] + taps[i] * d[i]
        index = index + pos * scale
        scale *= size[i]
    nc = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * nd)
    return y, index + nc * scale


def _avg_pool_ref(x, *, kernel, strides, padding, dilation, ceil_mode, count_include_pad):
    s, p, d = _spatial(x, strides, padding, dilation)
    ct = compute_dtype(x.dtype)
    total, count = _window_sum(
        x.astype(ct, copy=False), kernel, s, p, d, ceil_mode, count_include_pad
    )
    return (total / count).astype(x.dtype)


def _lp_pool_ref(x, *, kernel, strides, padding, dilation, ceil_mode, p):
    s, pads, d = _spatial(x, strides, padding, dilation)
    ct = compute_dtype(x.dtype)
    powered = np.abs(x.astype(ct, copy=False)) ** p
    total, _ = _window_sum(powered, kernel, s, pads, d, ceil_mode, True)
    return (total ** (1.0 / p)).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# loop programs of the windowed pools


def _no_bool(op: str, x) -> None:
    if x.dtype == "bool":
        raise NoLoopProgram(f"op {op}: bool inputs have no loop program")


def _tap_axes(kernel) -> list:
    names = ["rk"] if len(kernel) == 1 else ["rz", "ry", "rx"][3 - len(kernel) :]
    return [te.reduce_axis(k, n) for k, n in zip(kernel, names)]


def _window_reduce(x, shape, kind: str, value, attrs, name: str):
    """`kind` (sum/max) over each window of `value(x tap)`; taps outside the input add the
    reduction's neutral value."""
    nd = x.ndim - 2
    strides, padding, dilation = spatial_params(attrs, nd)
    taps = _tap_axes(attrs["kernel"])
    check_end = [attrs["ceil_mode"]] * nd

    def body(*idx):
        at, cond = window_taps(x.shape[2:], idx[2:], taps, strides, padding, dilation, check_end)
        v = value(x[(idx[0], idx[1], *at)])
        if cond is not None:
            v = te.if_then_else(cond, v, te.reduce_identity(kind, v.dtype))
        return (te.sum if kind == "sum" else te.max)(v, axis=taps)

    return te.compute(shape, body, name)


def _window_count(x, shape, attrs, count_include_pad: bool, dtype: str):
    """The divisor of each average-pool window: a number, or a stage over the output's
    spatial positions counting the taps inside the input (plus the explicit pads with
    `count_include_pad`; the ceil-mode extension never counts)."""
    nd = x.ndim - 2
    strides, padding, dilation = spatial_params(attrs, nd)
    kernel, ceil_mode = attrs["kernel"], attrs["ceil_mode"]
    static = all(isinstance(p, int) for p in padding)
    if static and not ceil_mode and (count_include_pad or all(p <= 0 for p in padding)):
        return te.const(int(np.prod(kernel)), dtype)
    if count_include_pad:  # the counted range is the padded input: shift it to start at 0
        size = [x.shape[2 + i] + padding[i] + padding[nd + i] for i in range(nd)]
        padding = [0] * nd + list(padding[nd:])
        check_end = [True] * nd
    else:
        size, check_end = list(x.shape[2:]), [True] * nd
    taps = _tap_axes(kernel)

    def body(*pos):
        _, cond = window_taps(size, pos, taps, strides, padding, dilation, check_end)
        one = te.const(1, dtype)
        return te.sum(
            one if cond is None else te.if_then_else(cond, one, te.const(0, dtype)), axis=taps
        )

    return te.compute(shape[2:], body, "pool_count")


def _max_pool_compute(name: str, nd: int):
    def compute(x, **attrs):
        _no_bool(name, x)
        shape = _pool_infer(name, nd)([te_type(x)], attrs).shape
        return _window_reduce(x, shape, "max", lambda v: v, attrs, name)

    return compute


def _avg_pool_compute(name: str, nd: int):
    def compute(x, *, count_include_pad, **attrs):
        _no_bool(name, x)
        shape = _pool_infer(name, nd)([te_type(x)], attrs).shape
        acc = accumulate_dtype(x.dtype)
        total = _window_reduce(x, shape, "sum", lambda v: te.cast(v, acc), attrs, name)
        # Integers divide in float64 and truncate, as the reference's true division does.
        div = acc if is_float(acc) else "float64"
        count = _window_count(x, shape, attrs, count_include_pad, div)

        def mean(*idx):
            c = count if isinstance(count, PrimExpr) else count[idx[2:]]
            return te.cast(te.cast(total[idx], div) / c, x.dtype)

        return te.compute(shape, mean, f"{name}_divide")

    return compute


def _lp_power(v, p):
    """|v|^p as the reference's `**` computes it (numpy squares for p = 2)."""
    if p == 1:
        return te.abs(v)
    if p == 2:
        return v * v
    return te.pow(te.abs(v), te.const(float(p), v.dtype))


def _lp_root(v, p):
    """v^(1/p) as the reference's `**` computes it (numpy takes sqrt for 1/p = 0.5)."""
    if p == 1:
        return v
    if p == 2:
        return te.sqrt(v)
    return te.pow(v, te.const(1.0 / p, v.dtype))


def _lp_pool_compute(name: str, nd: int):
    def compute(x, *, p, **attrs):
        _no_bool(name, x)
        if not is_float(x.dtype):
            raise NoLoopProgram(f"op {name}: {x.dtype} input has no loop program")
        shape = _pool_infer(name, nd)([te_type(x)], attrs).shape
        acc = accumulate_dtype(x.dtype)
        total = _window_reduce(
            x, shape, "sum", lambda v: _lp_power(te.cast(v, acc), p), attrs, name
        )
        return te.compute(shape, lambda *i: te.cast(_lp_root(total[i], p), x.dtype), f"{name}_root")

    return compute


def _max_pool_indices_compute(x, *, storage_order, **attrs):
    name = "max_pool_with_indices"
    _no_bool(name, x)
    shape = _pool_infer(name, None, indices=True)([te_type(x)], attrs).fields[0].shape
    nd = x.ndim - 2
    kernel = attrs["kernel"]
    strides, padding, dilation = spatial_params(attrs, nd)
    size = x.shape[2:]
    check_end = [attrs["ceil_mode"]] * nd

    def tap_value(idx, taps):
        at, cond = window_taps(size, idx[2:], taps, strides, padding, dilation, check_end)
        v = x[(idx[0], idx[1], *at)]
        return v if cond is None else te.if_then_else(cond, v, te.reduce_identity("max", v.dtype))

    values = _window_reduce(x, shape, "max", lambda v: v, attrs, name)
    tap_stride = [int(np.prod(kernel[i + 1 :])) for i in range(nd)]
    first_taps = _tap_axes(kernel)

    def first(*idx):
        v, y = tap_value(idx, first_taps), values[idx]
        hit = te.equal(v, y)
        if is_float(x.dtype):
            hit = te.logical_or(hit, te.logical_and(te.isnan(v), te.isnan(y)))
        flat = sum((t * k for t, k in zip(first_taps, tap_stride)), te.const(0))
        return te.min(te.if_then_else(hit, flat, te.const(int(np.prod(kernel)))), axis=first_taps)

    arg = te.compute(shape, first, f"{name}_argmax")

    def index(*idx):
        t = arg[idx]
        total, scale = te.const(0), te.const(1)
        for i in range(nd) if storage_order else reversed(range(nd)):
            tap = (t // tap_stride[i]) % kernel[i]
            pos = idx[2 + i] * strides[i] - padding[i] + tap * dilation[i]
            total, scale = total + pos * scale, scale * size[i]
        return total + (idx[0] * x.shape[1] + idx[1]) * scale

    return [values, te.compute(shape, index, f"{name}_index")]


_POOL_ATTRS = {
    "kernel": REQUIRED,
    "strides": None,
    "padding": None,
    "dilation": None,
    "ceil_mode": False,
}

for _nd in (1, 2, 3):
    register(
        OpDef(
            f"max_pool{_nd}d",
            _pool_infer(f"max_pool{_nd}d", _nd),
            _max_pool_ref,
            dict(_POOL_ATTRS),
            Pattern.OUT_FUSABLE,
            doc=f"{_nd}-D max pooling; padding never wins (it acts as -inf).",
            compute=_max_pool_compute(f"max_pool{_nd}d", _nd),
        )
    )
    register(
        OpDef(
            f"avg_pool{_nd}d",
            _pool_infer(f"avg_pool{_nd}d", _nd),
            _avg_pool_ref,
            {**_POOL_ATTRS, "count_include_pad": False},
            Pattern.OUT_FUSABLE,
            doc=f"{_nd}-D average pooling; explicit pads count in the divisor only with "
            "`count_include_pad`, the ceil-mode extension never does.",
            compute=_avg_pool_compute(f"avg_pool{_nd}d", _nd),
        )
    )
    register(
        OpDef(
            f"lp_pool{_nd}d",
            _pool_infer(f"lp_pool{_nd}d", _nd),
            _lp_pool_ref,
            {**_POOL_ATTRS, "p": 2},
            Pattern.OUT_FUSABLE,
            doc=f"{_nd}-D Lp pooling: (sum over the window of |x|^p)^(1/p); float inputs only "
            "have a loop program.",
            compute=_lp_pool_compute(f"lp_pool{_nd}d", _nd),
        )
    )

register(
    OpDef(
        "max_pool_with_indices",
        _pool_infer("max_pool_with_indices", None, indices=True),
        _max_pool_indices_ref,
        {**_POOL_ATTRS, "storage_order": 0},
        Pattern.OPAQUE,
        doc="Max pooling of any rank returning (values, int64 flat indices of the maxima in "
        "the input; storage_order 1 numbers spatial positions column-major).",
        compute=_max_pool_indices_compute,
    )
)


def _unpool_infer(args, attrs):
    x, idx = tensor(args[0], "max_unpool"), tensor(args[1], "max_unpool", "indices")
    if idx.ndim != x.ndim:
        raise ShapeError(f"op max_unpool: indices {idx} must have the shape of the input {x}")
    nd = x.ndim - 2
    if attrs["output_shape"] is not None:
        return TensorType(tuple(attrs["output_shape"]), x.dtype)
    if optional_tensor(args, 2, "max_unpool", "output shape") is not None:
        return TensorType((*x.shape[:2], *(fresh_var("unpool") for _ in range(nd))), x.dtype)
    s, p, _ = spatial_params(attrs, nd)
    k = attrs["kernel"]
    out = [as_dim((x.shape[2 + i] - 1) * s[i] + k[i] - p[i] - p[nd + i]) for i in range(nd)]
    return TensorType((*x.shape[:2], *out), x.dtype)


def _unpool_ref(x, indices, shape=None, *, kernel, strides, padding, output_shape):
    """Scatter x to its indices in the unpooled tensor of the default (pooling-geometry)
    shape, then zero-pad or crop the end of each axis to the requested shape. This is the
    ONNX reference semantics the conformance tests encode; onnxruntime instead reads the
    indices as addresses in the requested shape (the two agree when the shapes do)."""
    nd = x.ndim - 2
    s, p, _ = spatial_params({"strides": strides, "padding": padding}, nd)
    natural = (
        *x.shape[:2],
        *[(x.shape[2 + i] - 1) * s[i] + kernel[i] - p[i] - p[nd + i] for i in range(nd)],
    )
    y = np.zeros(int(np.prod(natural)), dtype=x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    want = (
        output_shape
        if output_shape is not None
        else (natural if shape is None else [int(v) for v in shape])
    )
    y = y.reshape(natural)
    return crop_spatial(y, [0] * (2 * nd), list(want)[2:])


register(
    OpDef(
        "max_unpool",
        _unpool_infer,
        _unpool_ref,
        {"kernel": REQUIRED, "strides": None, "padding": None, "output_shape": None},
        Pattern.OPAQUE,
        (2, 3),
        doc="Inverse of max pooling with indices. The output shape is the `output_shape` "
        "attribute, else the optional third operand (known only at run time), else derived "
        "from the pooling geometry. No loop program (a scatter).",
    )
)


# ---------------------------------------------------------------------------------------------
# global pooling


def _global_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        if x.ndim < 2:
            raise ShapeError(f"op {name}: input must have rank >= 2, got {x}")
        return TensorType((*x.shape[:2], *[1] * (x.ndim - 2)), x.dtype)

    return infer


def _global_axes(x):
    return tuple(range(2, x.ndim))


def _global_lp_ref(x, *, p):
    ct = compute_dtype(x.dtype)
    s = (np.abs(x.astype(ct)) ** p).sum(axis=_global_axes(x), keepdims=True)
    return (s ** (1.0 / p)).astype(x.dtype)


def _global_reduce(x, kind: str, value, name: str):
    """`kind` of `value(x)` over all spatial axes, kept as size-1 axes (a copy at rank 2)."""
    shape = (*x.shape[:2], *[1] * (x.ndim - 2))
    axes = [te.reduce_axis(d, f"r{i}") for i, d in enumerate(x.shape[2:])]
    if not axes:
        return te.compute(shape, lambda n, c: value(x[n, c]), name)
    reduce = te.sum if kind == "sum" else te.max
    return te.compute(shape, lambda *i: reduce(value(x[(i[0], i[1], *axes)]), axis=axes), name)


def _global_avg_compute(x):
    _no_bool("global_avg_pool", x)
    acc = accumulate_dtype(x.dtype)
    total = _global_reduce(x, "sum", lambda v: te.cast(v, acc), "global_avg_pool")
    div = acc if is_float(acc) else "float64"  # integers: float64 true division, truncated
    count = te.cast(te.const(as_dim(prod(x.shape[2:]))), div)
    return te.compute(
        total.shape,
        lambda *i: te.cast(te.cast(total[i], div) / count, x.dtype),
        "global_avg_pool_divide",
    )


def _global_max_compute(x):
    _no_bool("global_max_pool", x)
    return _global_reduce(x, "max", lambda v: v, "global_max_pool")


def _global_lp_compute(x, *, p):
    if not is_float(x.dtype):
        raise NoLoopProgram(f"op global_lp_pool: {x.dtype} input has no loop program")
    acc = accumulate_dtype(x.dtype)
    total = _global_reduce(x, "sum", lambda v: _lp_power(te.cast(v, acc), p), "global_lp_pool")
    return te.compute(
        total.shape, lambda *i: te.cast(_lp_root(total[i], p), x.dtype), "global_lp_pool_root"
    )


register(
    OpDef(
        "global_avg_pool",
        _global_infer("global_avg_pool"),
        lambda x: x.mean(axis=_global_axes(x), keepdims=True, dtype=compute_dtype(x.dtype)).astype(
            x.dtype
        ),
        pattern=Pattern.COMM_REDUCE,
        doc="Mean over all spatial axes, kept as size-1 axes.",
        compute=_global_avg_compute,
    )
)
register(
    OpDef(
        "global_max_pool",
        _global_infer("global_max_pool"),
        lambda x: x.max(axis=_global_axes(x), keepdims=True),
        pattern=Pattern.COMM_REDUCE,
        doc="Max over all spatial axes, kept as size-1 axes.",
        compute=_global_max_compute,
    )
)
register(
    OpDef(
        "global_lp_pool",
        _global_infer("global_lp_pool"),
        _global_lp_ref,
        {"p": 2},
        Pattern.COMM_REDUCE,
        doc="Lp norm over all spatial axes, kept as size-1 axes; float inputs only have a "
        "loop program.",
        compute=_global_lp_compute,
    )
)
