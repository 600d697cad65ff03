"""Neural-network ops: convolution, pooling, normalization and their relatives.

Layouts are channels-first (NC + spatial dims), as ONNX defines them. Spatial attributes
(`strides`, `padding`, `dilation`, `kernel`) are lists with one entry per spatial axis;
`padding` lists every axis's begin pad, then every axis's end pad (ONNX order). `None` means
stride/dilation 1 and padding 0 on every axis.

Fusion patterns follow TVM: convolutions are OUT_FUSABLE (an elementwise epilogue fuses into
them); windowed pools and normalizations are reductions whose result feeds a per-element
epilogue, so they are OUT_FUSABLE too; global pools are plain reductions (COMM_REDUCE);
inference batch norm is a per-channel affine map (BROADCAST); pure data movement (depth/space
rearrangement) is INJECTIVE; ops that sample at data-dependent positions are OPAQUE.

The numpy references are vectorized (strided window views + BLAS matmuls) because the
interpreter runs whole CNNs through them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tcc.ir.dtype import to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, as_dim, fresh_var, min_expr
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    normalize_axis,
    prod,
    register,
    tensor,
)

# ---------------------------------------------------------------------------------------------
# shared shape helpers


def spatial_params(attrs: dict, nd: int) -> tuple[list, list, list]:
    """(strides, padding, dilation) with `None` filled by their identity values."""
    strides = list(attrs.get("strides") or [1] * nd)
    padding = list(attrs.get("padding") or [0] * (2 * nd))
    dilation = list(attrs.get("dilation") or [1] * nd)
    return strides, padding, dilation


def _check_lengths(op: str, nd: int, strides, padding, dilation, kernel=None) -> None:
    if len(strides) != nd or len(dilation) != nd or len(padding) != 2 * nd:
        raise ShapeError(
            f"op {op}: expected {nd} strides/dilations and {2 * nd} pads for {nd} spatial "
            f"axes, got {len(strides)}/{len(dilation)}/{len(padding)}"
        )
    if kernel is not None and len(kernel) != nd:
        raise ShapeError(f"op {op}: kernel has {len(kernel)} axes, input has {nd} spatial axes")


def window_out_dim(size: Dim, k: Dim, s: int, pb: Dim, pe: Dim, d: int, ceil: bool = False) -> Dim:
    """Number of sliding windows along one axis; symbolic sizes give a symbolic count.

    In ceil mode a last partial window counts, unless it would start in the end padding.
    """
    span = size + pb + pe - d * (k - 1) - 1
    if not ceil:
        return as_dim(span // s + 1)
    out = as_dim((span + s - 1) // s + 1)
    starts_in_input = as_dim((size + pb - 1) // s + 1)
    if isinstance(out, int) and isinstance(starts_in_input, int):
        return min(out, starts_in_input)
    return min_expr(out, starts_in_input)


def _positive(op: str, dims) -> None:
    for d in dims:
        if isinstance(d, int) and d <= 0:
            raise ShapeError(f"op {op}: output spatial shape {list(dims)} has a non-positive dim")


def _channels_match(op: str, a: Dim, b: Dim, what: str) -> None:
    """Reject two static sizes that differ; symbolic ones are checked when the program runs."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"op {op}: {what}: {a} vs {b}")


def _check_rank(op: str, t: TensorType, rank: int, what: str = "input") -> None:
    if t.ndim != rank:
        raise ShapeError(f"op {op}: {what} must have rank {rank}, got shape {t}")


def _optional(args, i: int, op: str, what: str) -> TensorType | None:
    """Operand `i` when present (trailing optional operands may be left out)."""
    return tensor(args[i], op, what) if i < len(args) and args[i] is not None else None


def _check_vector(op: str, t: TensorType | None, length: Dim, what: str) -> None:
    if t is None:
        return
    if t.ndim != 1:
        raise ShapeError(f"op {op}: {what} must be 1-D, got {t}")
    _channels_match(op, t.shape[0], length, f"{what} length must equal the channel count")


# ---------------------------------------------------------------------------------------------
# numpy building blocks


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """Half floats are computed in float32 (numpy has no fast float16 matmul)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _pad(x: np.ndarray, padding, value=0) -> np.ndarray:
    """Pad the spatial axes; negative pads crop."""
    nd = x.ndim - 2
    begin, end = padding[:nd], padding[nd:]
    if any(p < 0 for p in padding):
        crop = tuple(
            slice(max(-b, 0), x.shape[2 + i] - max(-e, 0))
            for i, (b, e) in enumerate(zip(begin, end))
        )
        x = x[(slice(None), slice(None)) + crop]
        begin, end = [max(b, 0) for b in begin], [max(e, 0) for e in end]
    if not any(begin) and not any(end):
        return x
    widths = [(0, 0), (0, 0)] + list(zip(begin, end))
    return np.pad(x, widths, mode="constant", constant_values=value)


def _windows(x: np.ndarray, kernel, strides, dilation, out) -> np.ndarray:
    """Read-only view (N, C, *out, *kernel) of the sliding windows of padded `x`."""
    nd = len(kernel)
    st = x.strides
    shape = x.shape[:2] + tuple(out) + tuple(kernel)
    steps = (
        st[:2]
        + tuple(st[2 + i] * strides[i] for i in range(nd))
        + tuple(st[2 + i] * dilation[i] for i in range(nd))
    )
    return as_strided(x, shape, steps, writeable=False)


def _conv_core(x, w, groups, strides, padding, dilation):
    """Grouped convolution as im2col + (batched) matmul; returns (N, O, *out) in x's dtype."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    kernel = w.shape[2:]
    xp = _pad(x, padding)
    out = [
        (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)
    ]
    win = _windows(xp, kernel, strides, dilation, out)  # N, C, *out, *k
    npos, ksize = int(np.prod(out)), int(np.prod(kernel))
    # (N, *out, C, *k) -> (G, N*P, Cg*K): one copy, then one matmul per group.
    cols = np.moveaxis(win, 1, 1 + nd).reshape(n * npos, groups, cg * ksize).transpose(1, 0, 2)
    wg = w.reshape(groups, o // groups, cg * ksize).transpose(0, 2, 1)
    y = np.matmul(cols, wg)  # G, N*P, Og
    y = y.transpose(1, 0, 2).reshape((n, *out, o))
    return np.ascontiguousarray(np.moveaxis(y, -1, 1))


def _scatter_windows(cols, full, strides, dilation):
    """Inverse of `_windows`: sum (N, C, *k, *blocks) window values into (N, C, *full)."""
    nd = len(full)
    kernel, blocks = cols.shape[2 : 2 + nd], cols.shape[2 + nd :]
    y = np.zeros(cols.shape[:2] + tuple(full), dtype=cols.dtype)
    for kidx in itertools.product(*(range(k) for k in kernel)):
        dst = tuple(
            slice(
                kidx[i] * dilation[i],
                kidx[i] * dilation[i] + strides[i] * (blocks[i] - 1) + 1,
                strides[i],
            )
            for i in range(nd)
        )
        y[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + kidx]
    return y


def _crop(y: np.ndarray, padding, out) -> np.ndarray:
    """y[..., pb : pb + out] per spatial axis, zero-extended where that leaves y."""
    nd = y.ndim - 2
    full = y.shape[2:]
    return _pad(
        y, [-padding[i] for i in range(nd)] + [out[i] + padding[i] - full[i] for i in range(nd)]
    )


def _bias(y: np.ndarray, b) -> np.ndarray:
    if b is None:
        return y
    return y + b.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype)


# ---------------------------------------------------------------------------------------------
# convolution


def _conv_infer(name: str, nd: int):
    def infer(args, attrs):
        x, w = tensor(args[0], name), tensor(args[1], name, "weight")
        _check_rank(name, x, nd + 2)
        _check_rank(name, w, nd + 2, "weight")
        strides, padding, dilation = spatial_params(attrs, nd)
        _check_lengths(name, nd, strides, padding, dilation)
        groups = attrs["groups"]
        _channels_match(
            name,
            x.shape[1],
            w.shape[1] * groups,
            "input channels must equal weight channels x groups",
        )
        if isinstance(w.shape[0], int) and w.shape[0] % groups:
            raise ShapeError(
                f"op {name}: {w.shape[0]} output channels do not split into {groups} groups"
            )
        _check_vector(name, _optional(args, 2, name, "bias"), w.shape[0], "bias")
        out = [
            window_out_dim(
                x.shape[2 + i], w.shape[2 + i], strides[i], padding[i], padding[nd + i], dilation[i]
            )
            for i in range(nd)
        ]
        _positive(name, out)
        return TensorType((x.shape[0], w.shape[0], *out), x.dtype)

    return infer


def _conv_ref(x, w, b=None, *, strides, padding, dilation, groups):
    nd = x.ndim - 2
    strides, padding, dilation = spatial_params(
        {"strides": strides, "padding": padding, "dilation": dilation}, nd
    )
    ct = _compute_dtype(x.dtype)
    y = _conv_core(
        x.astype(ct, copy=False), w.astype(ct, copy=False), groups, strides, padding, dilation
    )
    return _bias(y, b).astype(x.dtype, copy=False)


def _conv_transpose_out(x: TensorType, w: TensorType, attrs, nd: int) -> list[Dim]:
    strides, padding, dilation = spatial_params(attrs, nd)
    extra = attrs["output_padding"] or [0] * nd
    return [
        as_dim(
            strides[i] * (x.shape[2 + i] - 1)
            + extra[i]
            + dilation[i] * (w.shape[2 + i] - 1)
            + 1
            - padding[i]
            - padding[nd + i]
        )
        for i in range(nd)
    ]


def _conv_transpose_infer(name: str, nd: int):
    def infer(args, attrs):
        x, w = tensor(args[0], name), tensor(args[1], name, "weight")
        _check_rank(name, x, nd + 2)
        _check_rank(name, w, nd + 2, "weight")
        strides, padding, dilation = spatial_params(attrs, nd)
        _check_lengths(name, nd, strides, padding, dilation)
        _channels_match(name, x.shape[1], w.shape[0], "input channels must equal weight dim 0")
        o = as_dim(w.shape[1] * attrs["groups"])
        _check_vector(name, _optional(args, 2, name, "bias"), o, "bias")
        out = _conv_transpose_out(x, w, attrs, nd)
        _positive(name, out)
        return TensorType((x.shape[0], o, *out), x.dtype)

    return infer


def _conv_transpose_ref(x, w, b=None, *, strides, padding, dilation, groups, output_padding):
    nd = x.ndim - 2
    strides, padding, dilation = spatial_params(
        {"strides": strides, "padding": padding, "dilation": dilation}, nd
    )
    extra = output_padding or [0] * nd
    ct = _compute_dtype(x.dtype)
    n, c = x.shape[:2]
    og, kernel, size = w.shape[1], w.shape[2:], x.shape[2:]
    cg, ksize, npos = c // groups, int(np.prod(kernel)), int(np.prod(size))
    # cols[g] = x_g^T @ w_g : (G, N*P, Og*K), then every kernel tap adds its strided slice.
    xg = (
        x.astype(ct, copy=False)
        .reshape(n, groups, cg, npos)
        .transpose(1, 0, 3, 2)
        .reshape(groups, n * npos, cg)
    )
    wg = w.astype(ct, copy=False).reshape(groups, cg, og * ksize)
    cols = np.matmul(xg, wg).reshape((groups, n, *size, og, *kernel))
    cols = np.moveaxis(cols, 0, 1)  # N, G, *in, Og, *k
    cols = np.moveaxis(cols, 2 + nd, 2).reshape((n, groups * og, *size, *kernel))
    cols = np.moveaxis(cols, tuple(range(2, 2 + nd)), tuple(range(2 + nd, 2 + 2 * nd)))
    full = [strides[i] * (size[i] - 1) + dilation[i] * (kernel[i] - 1) + 1 for i in range(nd)]
    y = _scatter_windows(cols, full, strides, dilation)
    out = [full[i] + extra[i] - padding[i] - padding[nd + i] for i in range(nd)]
    return _bias(_crop(y, padding, out), b).astype(x.dtype, copy=False)


def _conv_integer_infer(args, attrs):
    x, w = tensor(args[0], "conv_integer"), tensor(args[1], "conv_integer", "weight")
    nd = x.ndim - 2
    if nd < 1:
        raise ShapeError(f"op conv_integer: input must have rank >= 3, got {x}")
    t = _conv_infer("conv_integer", nd)([x, w, None], attrs)
    return TensorType(t.shape, "int32")


def _conv_integer_ref(
    x, w, x_zero_point=None, w_zero_point=None, *, strides, padding, dilation, groups
):
    """Integer conv: zero points are subtracted first, so padding contributes exact zeros."""
    nd = x.ndim - 2
    xi = x.astype(np.int32) - (0 if x_zero_point is None else x_zero_point.astype(np.int32))
    wz = (
        0
        if w_zero_point is None
        else w_zero_point.astype(np.int32).reshape((-1,) + (1,) * (nd + 1))
    )
    wi = w.astype(np.int32) - wz
    s, p, d = spatial_params({"strides": strides, "padding": padding, "dilation": dilation}, nd)
    return _conv_core(xi, wi, groups, s, p, d).astype(np.int32)


_CONV_ATTRS = {"strides": None, "padding": None, "dilation": None, "groups": 1}

for _nd in (1, 2, 3):
    register(
        OpDef(
            f"conv{_nd}d",
            _conv_infer(f"conv{_nd}d", _nd),
            _conv_ref,
            dict(_CONV_ATTRS),
            Pattern.OUT_FUSABLE,
            (2, 3),
            doc=f"{_nd}-D grouped convolution (cross-correlation) of NC* data with OI* "
            "weights, optional bias.",
        )
    )
    register(
        OpDef(
            f"conv{_nd}d_transpose",
            _conv_transpose_infer(f"conv{_nd}d_transpose", _nd),
            _conv_transpose_ref,
            {**_CONV_ATTRS, "output_padding": None},
            Pattern.OUT_FUSABLE,
            (2, 3),
            doc=f"{_nd}-D transposed convolution; weights are (C_in, C_out / groups, *kernel). "
            "`output_padding` extends the end of each spatial axis.",
        )
    )

register(
    OpDef(
        "conv_integer",
        _conv_integer_infer,
        _conv_integer_ref,
        dict(_CONV_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 4),
        doc="Integer convolution with optional zero points (scalar for data, per output "
        "channel for weights), accumulated in int32.",
    )
)


def _qlinear_conv_infer(args, attrs):
    x, w = tensor(args[0], "qlinear_conv"), tensor(args[3], "qlinear_conv", "weight")
    nd = x.ndim - 2
    if nd < 1:
        raise ShapeError(f"op qlinear_conv: input must have rank >= 3, got {x}")
    t = _conv_infer("qlinear_conv", nd)([x, w, _optional(args, 8, "qlinear_conv", "bias")], attrs)
    y_zp = _optional(args, 7, "qlinear_conv", "output zero point")
    return TensorType(t.shape, y_zp.dtype if y_zp is not None else x.dtype)


def _qlinear_conv_ref(
    x,
    x_scale,
    x_zp,
    w,
    w_scale,
    w_zp,
    y_scale,
    y_zp=None,
    b=None,
    *,
    strides,
    padding,
    dilation,
    groups,
):
    """Quantized conv: integer accumulation (+ int32 bias), rescaled by x_scale * w_scale /
    y_scale, rounded half to even, shifted by the output zero point and saturated."""
    acc = _conv_integer_ref(
        x, w, x_zp, w_zp, strides=strides, padding=padding, dilation=dilation, groups=groups
    )
    acc = _bias(acc, b).astype(np.float64)
    ws = np.asarray(w_scale, dtype=np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
    scaled = np.rint(acc * (float(x_scale) * ws / float(y_scale)))
    out = np.dtype(y_zp.dtype if y_zp is not None else x.dtype)
    zp = 0 if y_zp is None else int(y_zp.reshape(-1)[0])
    info = np.iinfo(out)
    return np.clip(scaled + zp, info.min, info.max).astype(out)


register(
    OpDef(
        "qlinear_conv",
        _qlinear_conv_infer,
        _qlinear_conv_ref,
        dict(_CONV_ATTRS),
        Pattern.OUT_FUSABLE,
        (8, 9),
        doc="Quantized convolution (x, x_scale, x_zero_point, w, w_scale, w_zero_point, "
        "y_scale, y_zero_point, bias?); w_scale/w_zero_point may be per output channel.",
    )
)


# ---------------------------------------------------------------------------------------------
# deformable convolution


def _deform_conv_infer(args, attrs):
    x, w = tensor(args[0], "deform_conv"), tensor(args[1], "deform_conv", "weight")
    off = tensor(args[2], "deform_conv", "offset")
    nd = x.ndim - 2
    t = _conv_infer("deform_conv", nd)([x, w, _optional(args, 3, "deform_conv", "bias")], attrs)
    _check_rank("deform_conv", off, nd + 2, "offset")
    return t


def _bilinear_gather(img, ys, xs):
    """Bilinear samples of img (N, C, H, W) at (N, *pos) coordinates; zero outside."""
    n, c, h, w = img.shape
    y0, x0 = np.floor(ys), np.floor(xs)
    out = 0
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        yy, xx = y0 + dy, x0 + dx
        wt = (1 - np.abs(ys - yy)) * (1 - np.abs(xs - xx))
        ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        yi, xi = np.clip(yy, 0, h - 1).astype(np.int64), np.clip(xx, 0, w - 1).astype(np.int64)
        bidx = np.arange(n).reshape((n,) + (1,) * (ys.ndim - 1))
        vals = img[bidx, :, yi, xi]  # (N, *pos, C)
        out = out + vals * (wt * ok)[..., None]
    return np.moveaxis(out, -1, 1)  # N, C, *pos


def _deform_conv_ref(
    x, w, offset, b=None, mask=None, *, strides, padding, dilation, groups, offset_groups
):
    """2-D deformable conv: sample every kernel tap at its offset position, then a matmul."""
    strides, padding, dilation = spatial_params(
        {"strides": strides, "padding": padding, "dilation": dilation}, 2
    )
    ct = _compute_dtype(x.dtype)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    k = kh * kw
    base_y = (np.arange(oh) * strides[0] - padding[0])[:, None, None, None] + (
        np.arange(kh) * dilation[0]
    )[None, None, :, None]
    base_x = (np.arange(ow) * strides[1] - padding[1])[None, :, None, None] + (
        np.arange(kw) * dilation[1]
    )[None, None, None, :]
    off = offset.astype(ct).reshape(n, offset_groups, k, 2, oh, ow)
    msk = None if mask is None else mask.astype(ct).reshape(n, offset_groups, k, oh, ow)
    cpg = c // offset_groups
    cols = np.empty((n, c, oh, ow, kh, kw), dtype=ct)
    for g in range(offset_groups):
        dy = off[:, g, :, 0].reshape(n, kh, kw, oh, ow).transpose(0, 3, 4, 1, 2)
        dx = off[:, g, :, 1].reshape(n, kh, kw, oh, ow).transpose(0, 3, 4, 1, 2)
        s = _bilinear_gather(x[:, g * cpg : (g + 1) * cpg].astype(ct), base_y + dy, base_x + dx)
        if msk is not None:
            s = s * msk[:, g].reshape(n, kh, kw, oh, ow).transpose(0, 3, 4, 1, 2)[:, None]
        cols[:, g * cpg : (g + 1) * cpg] = s
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, groups, cg * k).transpose(1, 0, 2)
    y = np.matmul(cols, w.astype(ct).reshape(groups, o // groups, cg * k).transpose(0, 2, 1))
    y = y.transpose(1, 0, 2).reshape(n, oh, ow, o).transpose(0, 3, 1, 2)
    return _bias(np.ascontiguousarray(y), b).astype(x.dtype)


register(
    OpDef(
        "deform_conv",
        _deform_conv_infer,
        _deform_conv_ref,
        {**_CONV_ATTRS, "offset_groups": 1},
        Pattern.OPAQUE,
        (3, 5),
        doc="2-D deformable convolution (data, weight, offset, bias?, mask?): each kernel tap "
        "reads the input bilinearly at its position plus a learned offset.",
    )
)


# ---------------------------------------------------------------------------------------------
# windowed pooling


def _pool_infer(name: str, nd: int | None, indices: bool = False):
    def infer(args, attrs):
        x = tensor(args[0], name)
        rank = x.ndim if nd is None else nd + 2
        _check_rank(name, x, rank)
        k = attrs["kernel"]
        strides, padding, dilation = spatial_params(attrs, rank - 2)
        _check_lengths(name, rank - 2, strides, padding, dilation, k)
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
        _positive(name, out)
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
    xp = _pad(x, list(padding[:nd]) + end, fill)
    return _windows(xp, kernel, strides, dilation, out), out, end


def _window_sum(x, kernel, strides, padding, dilation, ceil_mode, count_include_pad):
    """(sum over each window, number of counted positions per window)."""
    nd = x.ndim - 2
    win, out, end = _pool_views(x, 0, kernel, strides, padding, dilation, ceil_mode)
    axes = tuple(range(-nd, 0))
    total = win.sum(axis=axes)
    # Explicit pads count when count_include_pad is set; the ceil-mode extension never does.
    ones = np.ones((1, 1, *x.shape[2:]), dtype=np.float64)
    if count_include_pad:
        ones = _pad(ones, padding, 1.0)
        mask_pad = [0] * nd + [end[i] - padding[nd + i] for i in range(nd)]
    else:
        mask_pad = list(padding[:nd]) + end
    mask = _pad(ones, mask_pad, 0.0)
    count = _windows(mask, kernel, strides, dilation, out).sum(axis=axes)
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
    ct = _compute_dtype(x.dtype)
    total, count = _window_sum(
        x.astype(ct, copy=False), kernel, s, p, d, ceil_mode, count_include_pad
    )
    return (total / count).astype(x.dtype)


def _lp_pool_ref(x, *, kernel, strides, padding, dilation, ceil_mode, p):
    s, pads, d = _spatial(x, strides, padding, dilation)
    ct = _compute_dtype(x.dtype)
    powered = np.abs(x.astype(ct, copy=False)) ** p
    total, _ = _window_sum(powered, kernel, s, pads, d, ceil_mode, True)
    return (total ** (1.0 / p)).astype(x.dtype)


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
        )
    )
    register(
        OpDef(
            f"lp_pool{_nd}d",
            _pool_infer(f"lp_pool{_nd}d", _nd),
            _lp_pool_ref,
            {**_POOL_ATTRS, "p": 2},
            Pattern.OUT_FUSABLE,
            doc=f"{_nd}-D Lp pooling: (sum over the window of |x|^p)^(1/p).",
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
    )
)


def _unpool_infer(args, attrs):
    x, idx = tensor(args[0], "max_unpool"), tensor(args[1], "max_unpool", "indices")
    if idx.ndim != x.ndim:
        raise ShapeError(f"op max_unpool: indices {idx} must have the shape of the input {x}")
    nd = x.ndim - 2
    if attrs["output_shape"] is not None:
        return TensorType(tuple(attrs["output_shape"]), x.dtype)
    if _optional(args, 2, "max_unpool", "output shape") is not None:
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
    return _crop(y, [0] * (2 * nd), list(want)[2:])


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
        "from the pooling geometry.",
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
    ct = _compute_dtype(x.dtype)
    s = (np.abs(x.astype(ct)) ** p).sum(axis=_global_axes(x), keepdims=True)
    return (s ** (1.0 / p)).astype(x.dtype)


register(
    OpDef(
        "global_avg_pool",
        _global_infer("global_avg_pool"),
        lambda x: x.mean(axis=_global_axes(x), keepdims=True, dtype=_compute_dtype(x.dtype)).astype(
            x.dtype
        ),
        pattern=Pattern.COMM_REDUCE,
        doc="Mean over all spatial axes, kept as size-1 axes.",
    )
)
register(
    OpDef(
        "global_max_pool",
        _global_infer("global_max_pool"),
        lambda x: x.max(axis=_global_axes(x), keepdims=True),
        pattern=Pattern.COMM_REDUCE,
        doc="Max over all spatial axes, kept as size-1 axes.",
    )
)
register(
    OpDef(
        "global_lp_pool",
        _global_infer("global_lp_pool"),
        _global_lp_ref,
        {"p": 2},
        Pattern.COMM_REDUCE,
        doc="Lp norm over all spatial axes, kept as size-1 axes.",
    )
)


# ---------------------------------------------------------------------------------------------
# normalization


def _channel_shape(x: np.ndarray, axis: int = 1) -> tuple:
    return tuple(-1 if i == axis else 1 for i in range(x.ndim))


def _batch_norm_infer(args, attrs):
    x = tensor(args[0], "batch_norm")
    if x.ndim < 2:
        raise ShapeError(f"op batch_norm: input must have rank >= 2, got {x}")
    for what, t in zip(("scale", "bias", "mean", "var"), args[1:]):
        _check_vector("batch_norm", tensor(t, "batch_norm", what), x.shape[1], what)
    return x


def _batch_norm_ref(x, scale, bias, mean, var, *, epsilon):
    ct = _compute_dtype(x.dtype)
    cs = _channel_shape(x)
    inv = scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(epsilon))
    shift = bias.astype(ct) - mean.astype(ct) * inv
    return (x.astype(ct) * inv.reshape(cs) + shift.reshape(cs)).astype(x.dtype)


def _batch_norm_train_infer(args, attrs):
    x = _batch_norm_infer(args, attrs)
    stats = tensor(args[3], "batch_norm_train", "mean")
    return TupleType((x, stats, stats))


def _batch_norm_train_ref(x, scale, bias, mean, var, *, epsilon, momentum):
    """Normalize with the batch statistics; also return the updated running statistics."""
    ct = _compute_dtype(x.dtype)
    axes = (0, *range(2, x.ndim))
    xc = x.astype(ct)
    batch_mean, batch_var = xc.mean(axis=axes), xc.var(axis=axes)
    y = _batch_norm_ref(x, scale, bias, batch_mean, batch_var, epsilon=epsilon)
    run_mean = mean.astype(ct) * momentum + batch_mean * (1 - momentum)
    run_var = var.astype(ct) * momentum + batch_var * (1 - momentum)
    return y, run_mean.astype(mean.dtype), run_var.astype(var.dtype)


register(
    OpDef(
        "batch_norm",
        _batch_norm_infer,
        _batch_norm_ref,
        {"epsilon": 1e-5},
        Pattern.BROADCAST,
        (5, 5),
        doc="Inference batch normalization (x, scale, bias, mean, var) over channel axis 1: "
        "a per-channel affine map.",
    )
)
register(
    OpDef(
        "batch_norm_train",
        _batch_norm_train_infer,
        _batch_norm_train_ref,
        {"epsilon": 1e-5, "momentum": 0.9},
        Pattern.OPAQUE,
        (5, 5),
        doc="Training batch normalization: (y, running_mean, running_var) where the running "
        "statistics move toward the batch statistics by 1 - momentum.",
    )
)


def _normalize(x: np.ndarray, axes: tuple, epsilon: float, ct: np.dtype):
    """(x - mean) * inv_std over `axes`, computed in `ct`; returns (y, mean, inv_std)."""
    xc = x.astype(ct, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    diff = xc - mean
    inv_std = 1.0 / np.sqrt((diff * diff).mean(axis=axes, keepdims=True) + ct.type(epsilon))
    return diff * inv_std, mean, inv_std


def _instance_norm_infer(args, attrs):
    x = tensor(args[0], "instance_norm")
    if x.ndim < 3:
        raise ShapeError(f"op instance_norm: input must have rank >= 3, got {x}")
    _check_vector("instance_norm", tensor(args[1], "instance_norm", "scale"), x.shape[1], "scale")
    _check_vector("instance_norm", tensor(args[2], "instance_norm", "bias"), x.shape[1], "bias")
    return x


def _instance_norm_ref(x, scale, bias, *, epsilon):
    ct = _compute_dtype(x.dtype)
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), epsilon, ct)
    cs = _channel_shape(x)
    return (y * scale.astype(ct).reshape(cs) + bias.astype(ct).reshape(cs)).astype(x.dtype)


register(
    OpDef(
        "instance_norm",
        _instance_norm_infer,
        _instance_norm_ref,
        {"epsilon": 1e-5},
        Pattern.OUT_FUSABLE,
        (3, 3),
        doc="Normalize each (sample, channel) over its spatial axes, then a per-channel "
        "affine map.",
    )
)


def _layer_norm_infer(name: str, stats: bool):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis = normalize_axis(attrs["axis"], x.ndim, name)
        for i, what in ((1, "scale"), (2, "bias")):
            t = _optional(args, i, name, what)
            if t is not None and t.ndim > x.ndim - axis:
                raise ShapeError(
                    f"op {name}: {what} {t} has more axes than the normalized ones of {x}"
                )
        if not stats:
            return x
        sdt = attrs["stash_type"]
        st = TensorType((*x.shape[:axis], *[1] * (x.ndim - axis)), sdt)
        return TupleType((x, st, st))

    return infer


def _layer_norm_parts(x, scale, bias, axis, epsilon, stash_type):
    axis = axis + x.ndim if axis < 0 else axis
    ct = np.promote_types(to_numpy(stash_type), _compute_dtype(x.dtype))
    y, mean, inv_std = _normalize(x, tuple(range(axis, x.ndim)), epsilon, ct)
    y = y * scale.astype(ct)
    if bias is not None:
        y = y + bias.astype(ct)
    return y.astype(x.dtype), mean, inv_std


def _layer_norm_ref(x, scale, bias=None, *, axis, epsilon, stash_type):
    return _layer_norm_parts(x, scale, bias, axis, epsilon, stash_type)[0]


def _layer_norm_stats_ref(x, scale, bias=None, *, axis, epsilon, stash_type):
    y, mean, inv_std = _layer_norm_parts(x, scale, bias, axis, epsilon, stash_type)
    sd = to_numpy(stash_type)
    return y, mean.astype(sd), inv_std.astype(sd)


_LN_ATTRS = {"axis": -1, "epsilon": 1e-5, "stash_type": "float32"}
register(
    OpDef(
        "layer_norm",
        _layer_norm_infer("layer_norm", False),
        _layer_norm_ref,
        dict(_LN_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 3),
        doc="Normalize over axes [axis, rank) computing in `stash_type`, then scale (+ bias), "
        "both broadcast against the normalized axes.",
    )
)
register(
    OpDef(
        "layer_norm_with_stats",
        _layer_norm_infer("layer_norm_with_stats", True),
        _layer_norm_stats_ref,
        dict(_LN_ATTRS),
        Pattern.OPAQUE,
        (2, 3),
        doc="layer_norm that also returns the mean and inverse standard deviation "
        "(in `stash_type`).",
    )
)


def _group_norm_infer(args, attrs):
    x = tensor(args[0], "group_norm")
    g = attrs["num_groups"]
    if x.ndim < 3:
        raise ShapeError(f"op group_norm: input must have rank >= 3, got {x}")
    if isinstance(x.shape[1], int) and x.shape[1] % g:
        raise ShapeError(f"op group_norm: {x.shape[1]} channels do not split into {g} groups")
    length = g if attrs["group_affine"] else x.shape[1]
    _check_vector("group_norm", tensor(args[1], "group_norm", "scale"), length, "scale")
    _check_vector("group_norm", tensor(args[2], "group_norm", "bias"), length, "bias")
    return x


def _group_norm_ref(x, scale, bias, *, num_groups, epsilon, group_affine, stash_type):
    ct = np.promote_types(to_numpy(stash_type), _compute_dtype(x.dtype))
    n, c = x.shape[:2]
    grouped = x.reshape(n, num_groups, -1)
    y, _, _ = _normalize(grouped, (2,), epsilon, ct)
    y = y.reshape(x.shape)
    if group_affine:
        scale, bias = np.repeat(scale, c // num_groups), np.repeat(bias, c // num_groups)
    cs = _channel_shape(x)
    return (y * scale.astype(ct).reshape(cs) + bias.astype(ct).reshape(cs)).astype(x.dtype)


register(
    OpDef(
        "group_norm",
        _group_norm_infer,
        _group_norm_ref,
        {"num_groups": REQUIRED, "epsilon": 1e-5, "group_affine": False, "stash_type": "float32"},
        Pattern.OUT_FUSABLE,
        (3, 3),
        doc="Normalize each sample's channel groups over (channels in group, spatial axes), then "
        "a per-channel affine map (per-group when `group_affine`).",
    )
)


def _rms_norm_ref(x, scale, *, axis, epsilon, stash_type):
    axis = axis + x.ndim if axis < 0 else axis
    ct = np.promote_types(to_numpy(stash_type), _compute_dtype(x.dtype))
    xc = x.astype(ct)
    ms = (xc * xc).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    return (xc / np.sqrt(ms + ct.type(epsilon)) * scale.astype(ct)).astype(x.dtype)


register(
    OpDef(
        "rms_norm",
        _layer_norm_infer("rms_norm", False),
        _rms_norm_ref,
        dict(_LN_ATTRS),
        Pattern.OUT_FUSABLE,
        (2, 2),
        doc="x / sqrt(mean(x^2 over axes [axis, rank)) + epsilon) * scale.",
    )
)


def _lrn_infer(args, attrs):
    x = tensor(args[0], "lrn")
    if x.ndim < 3:
        raise ShapeError(f"op lrn: input must have rank >= 3, got {x}")
    return x


def _lrn_ref(x, *, size, alpha, beta, bias):
    """Cross-channel normalization; window sums come from a cumulative sum over channels."""
    ct = _compute_dtype(x.dtype)
    sq = x.astype(ct) ** 2
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    c = x.shape[1]
    csum = np.cumsum(np.pad(sq, [(0, 0), (1, 0)] + [(0, 0)] * (x.ndim - 2)), axis=1)
    hi = np.minimum(np.arange(c) + after + 1, c)
    lo = np.maximum(np.arange(c) - before, 0)
    window = np.take(csum, hi, axis=1) - np.take(csum, lo, axis=1)
    return (x / (bias + alpha / size * window) ** beta).astype(x.dtype)


register(
    OpDef(
        "lrn",
        _lrn_infer,
        _lrn_ref,
        {"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
        Pattern.OUT_FUSABLE,
        doc="Local response normalization across `size` neighbouring channels.",
    )
)


# ---------------------------------------------------------------------------------------------
# depth <-> space rearrangement


def _depth_to_space_infer(args, attrs):
    x = tensor(args[0], "depth_to_space")
    _check_rank("depth_to_space", x, 4)
    b = attrs["block_size"]
    if isinstance(x.shape[1], int) and x.shape[1] % (b * b):
        raise ShapeError(f"op depth_to_space: {x.shape[1]} channels are not divisible by {b}*{b}")
    n, c, h, w = x.shape
    return TensorType((n, as_dim(c // (b * b)), as_dim(h * b), as_dim(w * b)), x.dtype)


def _depth_to_space_ref(x, *, block_size, mode):
    n, c, h, w = x.shape
    b = block_size
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_infer(args, attrs):
    x = tensor(args[0], "space_to_depth")
    _check_rank("space_to_depth", x, 4)
    b = attrs["block_size"]
    n, c, h, w = x.shape
    for d in (h, w):
        if isinstance(d, int) and d % b:
            raise ShapeError(f"op space_to_depth: spatial dims {h}x{w} are not divisible by {b}")
    return TensorType((n, as_dim(c * b * b), as_dim(h // b), as_dim(w // b)), x.dtype)


def _space_to_depth_ref(x, *, block_size, mode):
    n, c, h, w = x.shape
    b = block_size
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(order)
    return t.reshape(n, c * b * b, h // b, w // b)


register(
    OpDef(
        "depth_to_space",
        _depth_to_space_infer,
        _depth_to_space_ref,
        {"block_size": REQUIRED, "mode": "DCR"},
        Pattern.INJECTIVE,
        doc="Move channel blocks into b x b spatial blocks; mode DCR (depth-column-row) or CRD.",
    )
)
register(
    OpDef(
        "space_to_depth",
        _space_to_depth_infer,
        _space_to_depth_ref,
        {"block_size": REQUIRED, "mode": "DCR"},
        Pattern.INJECTIVE,
        doc="Move b x b spatial blocks into channels (inverse of depth_to_space in the same mode).",
    )
)


# ---------------------------------------------------------------------------------------------
# col2im


def _col2im_infer(args, attrs):
    x = tensor(args[0], "col2im")
    _check_rank("col2im", x, 3)
    image, block = attrs["image_shape"], attrs["block_shape"]
    if block is not None:
        ksize = prod(block)
        if isinstance(x.shape[1], int) and isinstance(ksize, int) and x.shape[1] % ksize:
            raise ShapeError(
                f"op col2im: input dim 1 ({x.shape[1]}) is not divisible by the block size {ksize}"
            )
        c = as_dim(x.shape[1] // ksize)
    else:
        c = fresh_var("col2im_c")
    nd = len(image) if image is not None else tensor(args[1], "col2im", "image_shape").shape[0]
    if not isinstance(nd, int):
        raise ShapeError("op col2im: the rank of image_shape must be known")
    dims = list(image) if image is not None else [fresh_var("col2im") for _ in range(nd)]
    return TensorType((x.shape[0], c, *dims), x.dtype)


def _col2im_ref(x, image=None, block=None, *, image_shape, block_shape, strides, padding, dilation):
    image = list(image_shape) if image_shape is not None else [int(v) for v in image]
    kernel = list(block_shape) if block_shape is not None else [int(v) for v in block]
    nd = len(image)
    s, p, d = spatial_params({"strides": strides, "padding": padding, "dilation": dilation}, nd)
    padded = [image[i] + p[i] + p[nd + i] for i in range(nd)]
    blocks = [(padded[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    n = x.shape[0]
    cols = x.reshape((n, -1, *kernel, *blocks))
    y = _scatter_windows(cols, padded, s, d)
    return _crop(y, p, image)


register(
    OpDef(
        "col2im",
        _col2im_infer,
        _col2im_ref,
        {
            "image_shape": None,
            "block_shape": None,
            "strides": None,
            "padding": None,
            "dilation": None,
        },
        Pattern.OPAQUE,
        (1, 3),
        doc="Sum the columns (N, C*prod(block), L) back into image blocks (N, C, *image). "
        "`image_shape`/`block_shape` attributes, or (when None) operands known at run time.",
    )
)


# ---------------------------------------------------------------------------------------------
# sampling: roi_align, grid_sample, affine_grid


def _roi_align_infer(args, attrs):
    x = tensor(args[0], "roi_align")
    rois = tensor(args[1], "roi_align", "rois")
    _check_rank("roi_align", x, 4)
    _check_rank("roi_align", rois, 2, "rois")
    return TensorType(
        (rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]), x.dtype
    )


def _roi_align_ref(
    x,
    rois,
    batch_indices,
    *,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
    half_pixel,
):
    """Average (or max) of bilinear samples on a regular grid in each output bin, per RoI."""
    ct = _compute_dtype(x.dtype)
    _, c, h, w = x.shape
    y = np.zeros((rois.shape[0], c, output_height, output_width), dtype=ct)
    offset = 0.5 if half_pixel else 0.0
    for r, (box, b) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        x0, y0, x1, y1 = box * spatial_scale - offset
        rh, rw = y1 - y0, x1 - x0
        if not half_pixel:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        bh, bw = rh / output_height, rw / output_width
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / output_height)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / output_width)
        ys = y0 + (np.arange(output_height)[:, None] + (np.arange(gh)[None, :] + 0.5) / gh) * bh
        xs = x0 + (np.arange(output_width)[:, None] + (np.arange(gw)[None, :] + 0.5) / gw) * bw
        vals = _roi_bilinear(x[int(b)].astype(ct), ys.reshape(-1), xs.reshape(-1), h, w, mode)
        vals = vals.reshape(c, output_height, gh, output_width, gw)
        y[r] = vals.max(axis=(2, 4)) if mode == "max" else vals.mean(axis=(2, 4))
    return y.astype(x.dtype)


def _roi_bilinear(img, ys, xs, h, w, mode):
    """(C, len(ys), len(xs)) samples with RoiAlign's border rule: outside [-1, size] is 0,
    coordinates are clamped into the image. In max mode the four weighted corners combine
    by max instead of sum, as ONNX defines it."""

    def axis(coords, size):
        valid = (coords >= -1.0) & (coords <= size)
        c = np.clip(coords, 0, None)
        lo = np.minimum(np.floor(c).astype(np.int64), size - 1)
        hi = np.minimum(lo + 1, size - 1)
        frac = np.where(lo >= size - 1, 0.0, c - lo)
        return lo, hi, 1 - frac, frac, valid

    ylo, yhi, wy0, wy1, vy = axis(ys, h)
    xlo, xhi, wx0, wx1, vx = axis(xs, w)
    corners = [
        img[:, yi[:, None], xi[None, :]] * (wy[:, None] * wx[None, :])
        for yi, wy in ((ylo, wy0), (yhi, wy1))
        for xi, wx in ((xlo, wx0), (xhi, wx1))
    ]
    combined = np.maximum.reduce(corners) if mode == "max" else sum(corners)
    return combined * (vy[:, None] & vx[None, :])


register(
    OpDef(
        "roi_align",
        _roi_align_infer,
        _roi_align_ref,
        {
            "mode": "avg",
            "output_height": 1,
            "output_width": 1,
            "sampling_ratio": 0,
            "spatial_scale": 1.0,
            "half_pixel": True,
        },
        Pattern.OPAQUE,
        (3, 3),
        doc="RoI Align (x, rois (R, 4) as x1 y1 x2 y2, batch_indices (R,)) -> (R, C, oh, ow). "
        "`half_pixel` shifts box corners by -0.5 pixel.",
    )
)


def _grid_sample_infer(args, attrs):
    x, grid = tensor(args[0], "grid_sample"), tensor(args[1], "grid_sample", "grid")
    nd = x.ndim - 2
    _check_rank("grid_sample", grid, nd + 2, "grid")
    if isinstance(grid.shape[-1], int) and grid.shape[-1] != nd:
        raise ShapeError(f"op grid_sample: grid {grid} must end in {nd} coordinates for input {x}")
    return TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)


def _reflect(x, lo: float, hi: float):
    """Fold coordinates outside [lo, hi] back inside by repeated mirroring at the borders."""
    rng = hi - lo
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(dx / rng) if rng > 0 else np.zeros_like(dx)
    r = dx - n * rng
    even = n % 2 == 0
    return np.where(
        below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x)
    )


def _cubic_coeffs(t):
    """Keys cubic convolution weights (alpha = -0.75) for taps -1, 0, 1, 2 at fraction t."""
    a = -0.75
    c0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
    c1 = ((a + 2) * t - (a + 3)) * t * t + 1
    c2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
    c3 = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a
    return [c0, c1, c2, c3]


def _grid_sample_ref(x, grid, *, mode, padding_mode, align_corners):
    """Sample x at normalized grid positions (last grid axis = x, y[, z]); every tap of the
    interpolation kernel is gathered for all output positions at once."""
    nd = x.ndim - 2
    dims = x.shape[2:]
    ct = _compute_dtype(x.dtype)
    coords = []
    for i in range(nd):
        g = grid[..., nd - 1 - i].astype(np.float64)
        size = dims[i]
        c = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
        coords.append(c.astype(np.float32).astype(np.float64))
    lo = [0.0 if align_corners else -0.5] * nd
    hi = [d - 1.0 if align_corners else d - 0.5 for d in dims]
    if mode == "nearest":
        coords = [np.rint(c) for c in coords]
    if padding_mode == "border":
        coords = [
            np.where((c < lo[i]) | (c > hi[i]), np.clip(c, 0, dims[i] - 1), c)
            for i, c in enumerate(coords)
        ]
    elif padding_mode == "reflection":
        coords = [_reflect(c, lo[i], hi[i]) for i, c in enumerate(coords)]

    if mode == "nearest":
        taps = [[(np.trunc(c).astype(np.int64), 1.0)] for c in coords]
    else:
        taps = []
        for c in coords:
            base = np.floor(c)
            t = c - base
            if mode == "linear":
                taps.append([(base.astype(np.int64), 1 - t), (base.astype(np.int64) + 1, t)])
            else:
                taps.append(
                    [(base.astype(np.int64) + k - 1, w) for k, w in enumerate(_cubic_coeffs(t))]
                )

    n = x.shape[0]
    bidx = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    out = 0
    for combo in itertools.product(*taps):
        weight, ok, index = 1.0, True, []
        for i, (idx, w) in enumerate(combo):
            weight = weight * w
            if padding_mode == "zeros":
                ok = ok & (idx >= 0) & (idx < dims[i])
                idx = np.clip(idx, 0, dims[i] - 1)
            elif padding_mode == "border":
                idx = np.clip(idx, 0, dims[i] - 1)
            else:
                idx = np.trunc(_reflect(idx.astype(np.float64), lo[i], hi[i])).astype(np.int64)
            index.append(idx)
        vals = x[(bidx, slice(None), *index)].astype(ct)  # N, *out, C
        out = out + vals * np.asarray(weight * ok, dtype=ct)[..., None]
    return np.moveaxis(np.asarray(out), -1, 1).astype(x.dtype)


register(
    OpDef(
        "grid_sample",
        _grid_sample_infer,
        _grid_sample_ref,
        {"mode": "linear", "padding_mode": "zeros", "align_corners": False},
        Pattern.OPAQUE,
        (2, 2),
        doc="Sample x (N, C, *spatial) at grid (N, *out, ndim) positions in [-1, 1]; mode "
        "nearest/linear/cubic, padding_mode zeros/border/reflection.",
    )
)


def _affine_grid_infer(args, attrs):
    theta = tensor(args[0], "affine_grid", "theta")
    _check_rank("affine_grid", theta, 3, "theta")
    size = attrs["size"]
    if size is not None:
        spatial = list(size[2:])
    else:
        n = tensor(args[1], "affine_grid", "size").shape[0]
        if not isinstance(n, int):
            raise ShapeError("op affine_grid: the length of the size operand must be known")
        spatial = [fresh_var("grid") for _ in range(n - 2)]
    return TensorType((theta.shape[0], *spatial, len(spatial)), theta.dtype)


def _affine_grid_ref(theta, size_operand=None, *, size, align_corners):
    """theta (N, nd, nd+1) applied to the homogeneous base grid of each output position."""
    size = list(size) if size is not None else [int(v) for v in size_operand]
    spatial = size[2:]
    axes = []
    for d in spatial:
        i = np.arange(d, dtype=np.float64)
        axes.append(np.linspace(-1.0, 1.0, d) if align_corners else (2 * i + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    homo = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)  # *spatial, nd+1 (x first)
    grid = np.einsum("...k,njk->n...j", homo, theta.astype(np.float64))
    return grid.astype(theta.dtype)


register(
    OpDef(
        "affine_grid",
        _affine_grid_infer,
        _affine_grid_ref,
        {"size": None, "align_corners": False},
        Pattern.OPAQUE,
        (1, 2),
        doc="Sampling grid (N, *spatial, nd) of the affine maps theta (N, nd, nd+1) for an "
        "output of shape `size` (N, C, *spatial) (attribute, or run-time operand when None).",
    )
)
