"""Convolution ops: conv1d/2d/3d and their transposes, conv_integer, qlinear_conv,
deform_conv.

Layouts are channels-first (NC + spatial dims), as ONNX defines them. Spatial attributes
(`strides`, `padding`, `dilation`) are lists with one entry per spatial axis; `padding` lists
every axis's begin pad, then every axis's end pad (ONNX order). `None` means stride/dilation
1 and padding 0 on every axis.

Convolutions are OUT_FUSABLE, as in TVM: an elementwise epilogue fuses into them.
deform_conv samples at data-dependent positions, so it is OPAQUE. The numpy references are
vectorized (strided window views + BLAS matmuls) because the interpreter runs whole CNNs
through them.

Loop programs: one reduction stage over (input channels of the group, kernel taps); a padded
tap reads the input under `if_then_else` on its index, so it never loads out of bounds.
Half floats accumulate in float32 and, like the bias, are added and rounded in a second
stage, as the references do. A transposed convolution gathers: output position q reads
input position (q + pad - tap * dilation) / stride where that divides exactly. deform_conv
first samples every tap bilinearly into a stage of columns, then multiplies them with the
weights. Bool operands have no loop program.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, as_dim
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    accumulate_dtype,
    channels_match,
    check_lengths,
    check_positive,
    check_rank,
    check_vector,
    clamp_index,
    compute_dtype,
    crop_spatial,
    data_op,
    float_position,
    optional_tensor,
    pad_spatial,
    scatter_windows,
    sliding_windows,
    spatial_params,
    te_type,
    window_out_dim,
    window_taps,
)
from tcc.ir.ops.registry import OpDef, Pattern, register, tensor

# ---------------------------------------------------------------------------------------------
# convolution


def _conv_core(x, w, groups, strides, padding, dilation):
    """Grouped convolution as im2col + (batched) matmul; returns (N, O, *out) in x's dtype."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    kernel = w.shape[2:]
    xp = pad_spatial(x, padding)
    out = [
        (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)
    ]
    win = sliding_windows(xp, kernel, strides, dilation, out)  # N, C, *out, *k
    npos, ksize = int(np.prod(out)), int(np.prod(kernel))
    # (N, *out, C, *k) -> (G, N*P, Cg*K): one copy, then one matmul per group.
    cols = np.moveaxis(win, 1, 1 + nd).reshape(n * npos, groups, cg * ksize).transpose(1, 0, 2)
    wg = w.reshape(groups, o // groups, cg * ksize).transpose(0, 2, 1)
    y = np.matmul(cols, wg)  # G, N*P, Og
    y = y.transpose(1, 0, 2).reshape((n, *out, o))
    return np.ascontiguousarray(np.moveaxis(y, -1, 1))


def _bias(y: np.ndarray, b) -> np.ndarray:
    if b is None:
        return y
    return y + b.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype)


def _conv_infer(name: str, nd: int):
    def infer(args, attrs):
        x, w = tensor(args[0], name), tensor(args[1], name, "weight")
        check_rank(name, x, nd + 2)
        check_rank(name, w, nd + 2, "weight")
        strides, padding, dilation = spatial_params(attrs, nd)
        check_lengths(name, nd, strides, padding, dilation)
        groups = attrs["groups"]
        channels_match(
            name,
            x.shape[1],
            w.shape[1] * groups,
            "input channels must equal weight channels x groups",
        )
        if isinstance(w.shape[0], int) and w.shape[0] % groups:
            raise ShapeError(
                f"op {name}: {w.shape[0]} output channels do not split into {groups} groups"
            )
        check_vector(name, optional_tensor(args, 2, name, "bias"), w.shape[0], "bias")
        out = [
            window_out_dim(
                x.shape[2 + i], w.shape[2 + i], strides[i], padding[i], padding[nd + i], dilation[i]
            )
            for i in range(nd)
        ]
        check_positive(name, out)
        return TensorType((x.shape[0], w.shape[0], *out), x.dtype)

    return infer


def _conv_ref(x, w, b=None, *, strides, padding, dilation, groups):
    nd = x.ndim - 2
    strides, padding, dilation = spatial_params(
        {"strides": strides, "padding": padding, "dilation": dilation}, nd
    )
    ct = compute_dtype(x.dtype)
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
        check_rank(name, x, nd + 2)
        check_rank(name, w, nd + 2, "weight")
        strides, padding, dilation = spatial_params(attrs, nd)
        check_lengths(name, nd, strides, padding, dilation)
        channels_match(name, x.shape[1], w.shape[0], "input channels must equal weight dim 0")
        o = as_dim(w.shape[1] * attrs["groups"])
        check_vector(name, optional_tensor(args, 2, name, "bias"), o, "bias")
        out = _conv_transpose_out(x, w, attrs, nd)
        check_positive(name, out)
        return TensorType((x.shape[0], o, *out), x.dtype)

    return infer


def _conv_transpose_ref(x, w, b=None, *, strides, padding, dilation, groups, output_padding):
    nd = x.ndim - 2
    strides, padding, dilation = spatial_params(
        {"strides": strides, "padding": padding, "dilation": dilation}, nd
    )
    extra = output_padding or [0] * nd
    ct = compute_dtype(x.dtype)
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
    y = scatter_windows(cols, full, strides, dilation)
    out = [full[i] + extra[i] - padding[i] - padding[nd + i] for i in range(nd)]
    return _bias(crop_spatial(y, padding, out), b).astype(x.dtype, copy=False)


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


# ---------------------------------------------------------------------------------------------
# loop programs


def _attrs(strides, padding, dilation, **extra) -> dict:
    return {"strides": strides, "padding": padding, "dilation": dilation, **extra}


def _group_channel(o, out_per_group, in_per_group, groups: int, rc):
    """Input channel `rc` of the group that output channel `o` belongs to."""
    return rc if groups == 1 else (o // out_per_group) * in_per_group + rc


def _tap_axes(w, nd: int) -> list:
    """One reduce axis per kernel dim (rk; or rz, ry, rx)."""
    names = ["rk"] if nd == 1 else ["rz", "ry", "rx"][3 - nd :]
    return [te.reduce_axis(w.shape[2 + i], names[i]) for i in range(nd)]


def _conv_sum(x, w, shape, attrs, acc: str, name: str, load_x=None, load_w=None):
    """sum over (c, taps) of load_x(x tap, n) * load_w(w[o, c, taps], o) in `acc`; a tap in the
    padding contributes 0. `load_*` default to a cast to `acc`."""
    nd = x.ndim - 2
    load_x = load_x or (lambda v, o: te.cast(v, acc))
    load_w = load_w or (lambda v, o: te.cast(v, acc))
    strides, padding, dilation = spatial_params(attrs, nd)
    groups = attrs["groups"]
    rc = te.reduce_axis(w.shape[1], "rc")
    taps = _tap_axes(w, nd)
    out_per_group = as_dim(w.shape[0] // groups)

    def body(*idx):
        n, o, pos = idx[0], idx[1], idx[2:]
        at, cond = window_taps(x.shape[2:], pos, taps, strides, padding, dilation)
        c = _group_channel(o, out_per_group, w.shape[1], groups, rc)
        v = load_x(x[(n, c, *at)], o)
        if cond is not None:
            v = te.if_then_else(cond, v, te.const(0, acc))
        return te.sum(data_op("mul", v, load_w(w[(o, rc, *taps)], o)), axis=[rc, *taps])

    return te.compute(shape, body, name)


def _epilogue(y, b, dtype: str, name: str):
    """y + bias (in y's dtype, after the whole sum, as the references add it), then the cast
    back to `dtype`; y itself when there is nothing to do."""
    if b is None and y.dtype == dtype:
        return y

    def body(*idx):
        v = y[idx]
        if b is not None:
            v = v + te.cast(b[idx[1]], y.dtype)
        return te.cast(v, dtype)

    return te.compute(y.shape, body, name)


def _no_bool(op: str, x) -> None:
    if x.dtype == "bool":
        raise NoLoopProgram(f"op {op}: bool operands have no loop program")


def _conv_compute(name: str, nd: int):
    def compute(x, w, b=None, *, strides, padding, dilation, groups):
        _no_bool(name, x)
        attrs = _attrs(strides, padding, dilation, groups=groups)
        shape = _conv_infer(name, nd)([te_type(x), te_type(w), te_type(b)], attrs).shape
        acc = accumulate_dtype(x.dtype)
        y = _conv_sum(x, w, shape, attrs, acc, name)
        return _epilogue(y, b, x.dtype, f"{name}_epilogue")

    return compute


def _conv_transpose_compute(name: str, nd: int):
    def compute(x, w, b=None, *, strides, padding, dilation, groups, output_padding):
        _no_bool(name, x)
        attrs = _attrs(strides, padding, dilation, groups=groups, output_padding=output_padding)
        shape = _conv_transpose_infer(name, nd)([te_type(x), te_type(w), te_type(b)], attrs).shape
        strides, padding, dilation = spatial_params(attrs, nd)
        acc = accumulate_dtype(x.dtype)
        in_per_group = as_dim(x.shape[1] // groups)
        rc = te.reduce_axis(in_per_group, "rc")
        taps = _tap_axes(w, nd)

        def body(*idx):
            n, o, pos = idx[0], idx[1], idx[2:]
            at, conds = [], []
            for i in range(nd):
                t = pos[i] + padding[i] - taps[i] * dilation[i]
                at.append(t if strides[i] == 1 else t // strides[i])
                conds.append(te.greater_equal(t, 0))
                if strides[i] != 1:
                    conds.append(te.equal(t % strides[i], 0))
                conds.append(te.less(at[-1], x.shape[2 + i]))
            cond = conds[0]
            for c in conds[1:]:
                cond = te.logical_and(cond, c)
            c = _group_channel(o, w.shape[1], in_per_group, groups, rc)
            oc = o if groups == 1 else o % w.shape[1]
            v = te.if_then_else(cond, te.cast(x[(n, c, *at)], acc), te.const(0, acc))
            return te.sum(data_op("mul", v, te.cast(w[(c, oc, *taps)], acc)), axis=[rc, *taps])

        return _epilogue(te.compute(shape, body, name), b, x.dtype, f"{name}_epilogue")

    return compute


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
            compute=_conv_compute(f"conv{_nd}d", _nd),
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
            compute=_conv_transpose_compute(f"conv{_nd}d_transpose", _nd),
        )
    )


def _scalar(p, op: str = "qlinear_conv"):
    """A per-tensor parameter's value (rank 0, or 1-D of one element)."""
    if p.ndim == 0:
        return p[()]
    if all(isinstance(d, int) and d == 1 for d in p.shape):
        return p[(0,) * p.ndim]
    raise NoLoopProgram(f"op {op}: a per-tensor parameter of shape {p.shape} has no loop program")


def _per_channel(p, op: str = "qlinear_conv"):
    """`fn(o)` loading a parameter that is per tensor or per output channel (1-D)."""
    if p.ndim == 0 or all(isinstance(d, int) and d == 1 for d in p.shape):
        value = _scalar(p, op)
        return lambda o: value
    if p.ndim == 1:
        return lambda o: p[o]
    raise NoLoopProgram(f"op {op}: a per-channel parameter of shape {p.shape} has no loop program")


def _integer_conv_sum(x, w, x_zp, w_zp, shape, attrs, name: str):
    """The int32 sum of (x - x_zp) * (w - w_zp); padding contributes exact zeros."""
    x_z = None if x_zp is None else te.cast(_scalar(x_zp, name), "int32")
    w_z = None if w_zp is None else _per_channel(w_zp, name)

    def load_x(v, o):
        v = te.cast(v, "int32")
        return v if x_z is None else data_op("sub", v, x_z)

    def load_w(v, o):
        v = te.cast(v, "int32")
        return v if w_z is None else data_op("sub", v, te.cast(w_z(o), "int32"))

    return _conv_sum(x, w, shape, attrs, "int32", name, load_x, load_w)


def _conv_integer_compute(x, w, x_zero_point=None, w_zero_point=None, **attrs):
    shape = _conv_integer_infer([te_type(x), te_type(w)], attrs).shape
    return _integer_conv_sum(x, w, x_zero_point, w_zero_point, shape, attrs, "conv_integer")


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
        compute=_conv_integer_compute,
    )
)


def _qlinear_conv_infer(args, attrs):
    x, w = tensor(args[0], "qlinear_conv"), tensor(args[3], "qlinear_conv", "weight")
    nd = x.ndim - 2
    if nd < 1:
        raise ShapeError(f"op qlinear_conv: input must have rank >= 3, got {x}")
    t = _conv_infer("qlinear_conv", nd)(
        [x, w, optional_tensor(args, 8, "qlinear_conv", "bias")], attrs
    )
    y_zp = optional_tensor(args, 7, "qlinear_conv", "output zero point")
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


def _qlinear_conv_compute(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp=None, b=None, **attrs):
    op = "qlinear_conv"
    types = [te_type(t) for t in (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b)]
    shape = _qlinear_conv_infer(types, attrs).shape
    acc = _integer_conv_sum(x, w, x_zp, w_zp, shape, attrs, op)
    out = y_zp.dtype if y_zp is not None else x.dtype
    info = np.iinfo(out)
    w_s = _per_channel(w_scale)
    x_s, y_s = te.cast(_scalar(x_scale), "float64"), te.cast(_scalar(y_scale), "float64")
    zp = None if y_zp is None else te.cast(_scalar(y_zp), "float64")

    def requantize(*idx):
        v = acc[idx]
        if b is not None:
            v = v + te.cast(b[idx[1]], "int32")
        # As the reference: the scale ratio and the product in float64, rounded half to even
        # before the zero point is added.
        d = te.nearbyint(te.cast(v, "float64") * (x_s * te.cast(w_s(idx[1]), "float64") / y_s))
        if zp is not None:
            d = d + zp
        d = te.min(
            te.max(d, te.const(int(info.min), "float64")), te.const(int(info.max), "float64")
        )
        return te.cast(d, out)

    return te.compute(shape, requantize, f"{op}_requantize")


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
        compute=_qlinear_conv_compute,
    )
)


# ---------------------------------------------------------------------------------------------
# deformable convolution


def _deform_conv_infer(args, attrs):
    x, w = tensor(args[0], "deform_conv"), tensor(args[1], "deform_conv", "weight")
    off = tensor(args[2], "deform_conv", "offset")
    nd = x.ndim - 2
    t = _conv_infer("deform_conv", nd)(
        [x, w, optional_tensor(args, 3, "deform_conv", "bias")], attrs
    )
    check_rank("deform_conv", off, nd + 2, "offset")
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
    ct = compute_dtype(x.dtype)
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


def _deform_conv_compute(
    x, w, offset, b=None, mask=None, *, strides, padding, dilation, groups, offset_groups
):
    """Two stages, as the reference: every kernel tap sampled bilinearly (in float64, as
    numpy promotes the integer base positions plus the offsets) at its offset position and
    masked, then the grouped product with the weights in the compute dtype."""
    if len(x.shape) != 4 or any(t is not None and t.dtype != x.dtype for t in (w, offset, b, mask)) \
            or x.dtype not in ("float16", "float32", "float64"):
        raise NoLoopProgram("op deform_conv: only 2-D float operands of one dtype have a loop "
                            "program")
    s, p, d = spatial_params({"strides": strides, "padding": padding, "dilation": dilation}, 2)
    ct, f64 = str(compute_dtype(np.dtype(x.dtype))), "float64"
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    taps = kh * kw
    per_group = as_dim(c // offset_groups)

    def sample(bn, ch, y, xx, i, j):
        g, k = ch // per_group, i * kw + j
        at = 2 * (g * taps + k)
        ys = te.cast(y * s[0] - p[0] + i * d[0], f64) + te.cast(offset[bn, at, y, xx], f64)
        xs = te.cast(xx * s[1] - p[1] + j * d[1], f64) + te.cast(offset[bn, at + 1, y, xx], f64)
        y0, x0 = te.floor(ys), te.floor(xs)
        total = te.const(0.0, f64)
        for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
            yy, xf = y0 + float(dy), x0 + float(dx)
            weight = (1.0 - te.abs(ys - yy)) * (1.0 - te.abs(xs - xf))
            ok = te.logical_and(
                te.logical_and(te.greater_equal(yy, 0.0), te.less(yy, te.cast(h, f64))),
                te.logical_and(te.greater_equal(xf, 0.0), te.less(xf, te.cast(wd, f64))))
            yi = clamp_index(float_position(yy, h, 1.0), h)
            xi = clamp_index(float_position(xf, wd, 1.0), wd)
            value = te.cast(te.cast(x[bn, ch, yi, xi], ct), f64)
            total = total + value * te.if_then_else(ok, weight, te.const(0.0, f64))
        if mask is not None:
            total = total * te.cast(te.cast(mask[bn, g * taps + k, y, xx], ct), f64)
        return te.cast(total, ct)

    cols = te.compute((n, c, oh, ow, kh, kw), sample, "deform_conv_cols")
    out_per_group = as_dim(o // groups)

    def product(bn, oc, y, xx):
        ci, i, j = te.reduce_axis(cg, "ci"), te.reduce_axis(kh, "i"), te.reduce_axis(kw, "j")
        ch = oc // out_per_group * cg + ci
        return te.sum(cols[bn, ch, y, xx, i, j] * te.cast(w[oc, ci, i, j], ct), axis=[ci, i, j])

    y = te.compute((n, o, oh, ow), product, "deform_conv_product")
    if b is None:
        return te.compute(y.shape, lambda *i: te.cast(y[i], x.dtype), "deform_conv")
    return te.compute(y.shape, lambda bn, oc, yy, xx: te.cast(
        y[bn, oc, yy, xx] + te.cast(b[oc], ct), x.dtype), "deform_conv")


register(
    OpDef(
        "deform_conv",
        _deform_conv_infer,
        _deform_conv_ref,
        {**_CONV_ATTRS, "offset_groups": 1},
        Pattern.OPAQUE,
        (3, 5),
        compute=_deform_conv_compute,
        doc="2-D deformable convolution (data, weight, offset, bias?, mask?): each kernel tap "
        "reads the input bilinearly at its position plus a learned offset.",
    )
)
