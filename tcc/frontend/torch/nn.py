"""Converters for ATen's linear algebra and neural-network ops: matrix products,
convolutions, normalizations, softmax, pooling and upsampling.

tcc's spatial attributes list every axis's begin pad, then every end pad (ONNX order);
torch gives one symmetric pad per axis.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.frontend.torch.base import converter
from tcc.ir.ops.registry import normalize_axis, prod


@converter("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _matmul(ctx, node):
    return ctx.emit("matmul", node.arg(0, "self"), node.arg(1, "mat2"))


@converter("aten.addmm.default")
def _addmm(ctx, node):
    """beta * bias + alpha * (a @ b)."""
    bias, a, b = node.arg(0, "self"), node.arg(1, "mat1"), node.arg(2, "mat2")
    beta, alpha = node.arg(3, "beta", 1), node.arg(4, "alpha", 1)
    dtype = ctx.out_dtype(node)
    y = ctx.emit("matmul", a, b)
    if alpha != 1:
        y = ctx.emit("mul", y, ctx.tensor(alpha, dtype))
    if beta == 0:
        return y
    bias = ctx.tensor(bias, dtype)
    if beta != 1:
        bias = ctx.emit("mul", bias, ctx.tensor(beta, dtype))
    return ctx.emit("add", y, bias)


@converter("aten.convolution.default")
def _convolution(ctx, node):
    x, w, b = node.arg(0, "input"), node.arg(1, "weight"), node.arg(2, "bias")
    stride, padding, dilation = (list(node.arg(i, n)) for i, n in
                                 ((3, "stride"), (4, "padding"), (5, "dilation")))
    transposed, output_padding, groups = node.arg(6, "transposed"), node.arg(7, "output_padding"), node.arg(8, "groups")
    nd = ctx.ndim_of(x) - 2
    if nd not in (1, 2, 3):
        raise node.error(f"convolution over {nd} spatial axes is not supported")
    attrs = dict(strides=_per_axis(stride, nd), padding=_per_axis(padding, nd) * 2,
                 dilation=_per_axis(dilation, nd), groups=int(groups))
    op = f"conv{nd}d"
    if transposed:
        op += "_transpose"
        attrs["output_padding"] = _per_axis(output_padding, nd)
    args = (x, w) if b is None else (x, w, b)
    return ctx.emit(op, *args, **attrs)


def _per_axis(values, nd: int) -> list[int]:
    values = list(values)
    return values * nd if len(values) == 1 else values


@converter("aten._softmax.default", "aten._log_softmax.default", "aten.softmax.int",
           "aten.log_softmax.int")
def _softmax(ctx, node):
    x = ctx.tensor(node.arg(0, "self"), ctx.out_dtype(node))
    op = "log_softmax" if "log_softmax" in node.target else "softmax"
    return ctx.emit(op, x, axes=[node.arg(1, "dim")])


@converter("aten.native_layer_norm.default")
def _layer_norm(ctx, node):
    x, shape = node.arg(0, "input"), list(node.arg(1, "normalized_shape"))
    w, b, eps = node.arg(2, "weight"), node.arg(3, "bias"), node.arg(4, "eps")
    norm_shape = ctx.shape_of(x)[-len(shape):]
    dtype = ctx.dtype_of(x)
    if w is None:
        w = ctx.emit("full", shape=list(norm_shape), value=1, dtype=dtype)
    args = (x, w) if b is None else (x, w, b)
    if node.used_results() & {1, 2}:  # the mean and 1/std, kept over the normalized axes
        out = ctx.emit("layer_norm_with_stats", *args, axis=-len(shape), epsilon=float(eps))
        return [ctx.bb.get_item(out, i, name=f"{node.name}_{i}") for i in range(3)]
    return [ctx.emit("layer_norm", *args, axis=-len(shape), epsilon=float(eps)), None, None]


@converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(ctx, node):
    x, w, b, mean, var = (node.arg(i, n) for i, n in
                          enumerate(("input", "weight", "bias", "running_mean", "running_var")))
    eps = node.arg(6, "eps")
    channels = ctx.shape_of(x)[1]
    dtype = ctx.dtype_of(x)
    w = w if w is not None else ctx.emit("full", shape=[channels], value=1, dtype=dtype)
    b = b if b is not None else ctx.emit("full", shape=[channels], value=0, dtype=dtype)
    empty = [ctx.emit("full", shape=[0], value=0, dtype=dtype) for _ in range(2)]  # as torch
    return [ctx.emit("batch_norm", x, w, b, mean, var, epsilon=float(eps)), *empty]


@converter("aten._native_batch_norm_legit.no_stats")
def _batch_statistics_norm(ctx, node):
    """Normalization by the statistics of the batch itself, without running statistics to
    update: what instance norm becomes (over every axis but the channels)."""
    x, w, b, eps = node.arg(0, "input"), node.arg(1, "weight"), node.arg(2, "bias"), node.arg(5, "eps")
    dtype = ctx.dtype_of(x)
    axes = [a for a in range(ctx.ndim_of(x)) if a != 1]
    centered = ctx.emit("sub", x, ctx.emit("reduce_mean", x, axes=axes, keepdims=True))
    var = ctx.emit("reduce_mean", ctx.emit("mul", centered, centered), axes=axes, keepdims=True)
    inv_std = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", var, ctx.tensor(float(eps), dtype))))
    y = ctx.emit("mul", centered, inv_std)
    channel = [ctx.shape_of(x)[1]] + [1] * (ctx.ndim_of(x) - 2)
    if w is not None:
        y = ctx.emit("mul", y, ctx.emit("reshape", w, shape=channel))
    if b is not None:
        y = ctx.emit("add", y, ctx.emit("reshape", b, shape=channel))
    return [y, None, None]


@converter("aten._native_batch_norm_legit.default", "aten._native_batch_norm_legit_functional.default",
           "aten.native_batch_norm.default")
def _batch_norm_training(ctx, node):
    raise node.error("batch norm in training mode (batch statistics); export the model "
                     "after model.eval()")


@converter("aten.native_group_norm.default")
def _group_norm(ctx, node):
    x, w, b = node.arg(0, "input"), node.arg(1, "weight"), node.arg(2, "bias")
    channels, groups, eps = node.arg(4, "C"), node.arg(6, "group"), node.arg(7, "eps")
    dtype = ctx.dtype_of(x)
    w = w if w is not None else ctx.emit("full", shape=[channels], value=1, dtype=dtype)
    b = b if b is not None else ctx.emit("full", shape=[channels], value=0, dtype=dtype)
    flat = ctx.ndim_of(x) == 2  # (N, C): tcc's group_norm wants a spatial axis
    y = ctx.emit("group_norm", ctx.emit("expand_dims", x, axes=[2]) if flat else x, w, b,
                 num_groups=int(groups), epsilon=float(eps))
    if flat:
        y = ctx.emit("squeeze", y, axes=[2])
    if not node.used_results() & {1, 2}:
        return [y, None, None]
    # the statistics per (sample, group), as torch returns them: (N, groups)
    n = ctx.shape_of(x)[0]
    grouped = ctx.emit("reshape", x, shape=[n, int(groups), -1])
    mean = ctx.emit("reduce_mean", grouped, axes=[2], keepdims=True)
    centered = ctx.emit("sub", grouped, mean)
    var = ctx.emit("reduce_mean", ctx.emit("mul", centered, centered), axes=[2], keepdims=False)
    rstd = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", var, ctx.tensor(float(eps), dtype))))
    return [y, ctx.emit("squeeze", mean, axes=[2]), rstd]


def _spatial_axes(node) -> int:
    """The spatial axes of a pooling op, from its name (avg_pool2d: 2)."""
    return int(node.target.split(".")[1].split("pool")[1][0])


def _unbatched(ctx, node, x, convert):
    """`convert(x)` on a batch of one when x has no batch axis, as torch accepts for pools."""
    if ctx.ndim_of(x) == _spatial_axes(node) + 1:
        out = convert(ctx.emit("expand_dims", x, axes=[0]))
        if isinstance(out, list):
            return [None if o is None else ctx.emit("squeeze", o, axes=[0]) for o in out]
        return ctx.emit("squeeze", out, axes=[0])
    return convert(x)


@converter("aten.avg_pool2d.default", "aten.avg_pool1d.default", "aten.avg_pool3d.default")
def _avg_pool(ctx, node):
    return _unbatched(ctx, node, node.arg(0, "self"), lambda x: _avg_pool_batched(ctx, node, x))


def _window(node, nd: int) -> dict:
    """A pool's kernel, strides (the kernel when absent) and padding as tcc's attributes."""
    kernel = _per_axis(node.arg(1, "kernel_size"), nd)
    stride = list(node.arg(2, "stride", []) or kernel)
    padding = _per_axis(node.arg(3, "padding", [0]), nd)
    return dict(kernel=kernel, strides=_per_axis(stride, nd), padding=padding * 2)


def _avg_pool_batched(ctx, node, x):
    nd = ctx.ndim_of(x) - 2
    ceil_mode, include_pad = node.arg(4, "ceil_mode", False), node.arg(5, "count_include_pad", True)
    if node.arg(6, "divisor_override") is not None:
        raise node.error("avg_pool with divisor_override is not supported")
    return ctx.emit(f"avg_pool{nd}d", x, **_window(node, nd), ceil_mode=bool(ceil_mode),
                    count_include_pad=bool(include_pad))


@converter("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default",
           "aten.max_pool2d.default", "aten.max_pool1d.default")
def _max_pool(ctx, node):
    return _unbatched(ctx, node, node.arg(0, "self"), lambda x: _max_pool_batched(ctx, node, x))


def _max_pool_batched(ctx, node, x):
    nd = ctx.ndim_of(x) - 2
    attrs = dict(**_window(node, nd), dilation=_per_axis(node.arg(4, "dilation", [1]), nd),
                 ceil_mode=bool(node.arg(5, "ceil_mode", False)))
    if "with_indices" not in node.target:
        return ctx.emit(f"max_pool{nd}d", x, **attrs)
    if 1 not in node.used_results():
        return [ctx.emit(f"max_pool{nd}d", x, **attrs), None]
    out = ctx.emit("max_pool_with_indices", x, **attrs)
    values, flat = (ctx.bb.get_item(out, i, name=f"{node.name}_{i}") for i in range(2))
    # tcc's indices count over the whole tensor, torch's within each channel's plane
    return [values, ctx.emit("floor_mod", flat, ctx.tensor(prod(ctx.shape_of(x)[2:]), "int64"))]


@converter("aten.max_pool2d_with_indices_backward.default",
           "aten.max_pool3d_with_indices_backward.default")
def _max_pool_backward(ctx, node):
    """Each output gradient added at the input position its maximum came from."""
    grad, x, indices = node.arg(0, "grad_output"), node.arg(1, "self"), node.arg(7, "indices")
    shape = list(ctx.shape_of(x))
    spatial = 3 if "pool3d" in node.target else 2
    lead = shape[:-spatial]  # (N, C), or (C) for an input without a batch axis
    flat_grad = ctx.emit("reshape", grad, shape=[*lead, -1])
    flat_idx = ctx.emit("reshape", indices, shape=[*lead, -1])
    zeros = ctx.emit("full", shape=[*lead, prod(shape[-spatial:])], value=0,
                     dtype=ctx.dtype_of(grad))
    summed = ctx.emit("scatter_elements", zeros, flat_idx, flat_grad, axis=len(lead),
                      reduction="add")
    return ctx.emit("reshape", summed, shape=shape)


@converter("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def _grid_sampler(ctx, node):
    x, grid = node.arg(0, "input"), node.arg(1, "grid")
    modes = {0: "linear", 1: "nearest", 2: "cubic"}
    paddings = {0: "zeros", 1: "border", 2: "reflection"}
    mode, padding = node.arg(2, "interpolation_mode"), node.arg(3, "padding_mode")
    if mode not in modes or padding not in paddings:
        raise node.error(f"grid sampling mode {mode} with padding {padding} is not supported")
    return ctx.emit("grid_sample", x, grid, mode=modes[mode], padding_mode=paddings[padding],
                    align_corners=bool(node.arg(4, "align_corners")))


@converter("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool1d.default",
           "aten._adaptive_avg_pool3d.default")
def _adaptive_avg_pool(ctx, node):
    """Global pooling, or a plain pool when each output cell covers an equal window."""
    x = node.arg(0, "self")
    nd = ctx.ndim_of(x) - 2
    out = _per_axis(node.arg(1, "output_size"), nd)
    spatial = ctx.shape_of(x)[2:]
    if all(o == 1 for o in out):
        return ctx.emit("global_avg_pool", x)
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, out)):
        raise node.error(f"adaptive average pooling from {list(spatial)} to {out} needs "
                         "windows of unequal sizes, which tcc does not support")
    kernel = [s // o for s, o in zip(spatial, out)]
    return ctx.emit(f"avg_pool{nd}d", x, kernel=kernel, strides=kernel)


@converter("aten.upsample_nearest2d.vec", "aten.upsample_nearest1d.vec",
           "aten.upsample_nearest3d.vec", "aten.upsample_nearest2d.default")
def _upsample_nearest(ctx, node):
    return _resize(ctx, node, 2, mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")


@converter("aten.upsample_bilinear2d.vec", "aten.upsample_linear1d.vec",
           "aten.upsample_trilinear3d.vec", "aten.upsample_bilinear2d.default")
def _upsample_linear(ctx, node):
    align = node.arg(2, "align_corners", False)
    return _resize(ctx, node, 3, mode="linear",
                   coordinate_transformation_mode="align_corners" if align else "pytorch_half_pixel")


def _resize(ctx, node, factors_at: int, **attrs):
    """Resize to torch's output size; the `.vec` overloads' scale factors (operand
    `factors_at`), when given, map the coordinates as torch maps them."""
    x = node.arg(0, "input")
    in_shape, out_shape = ctx.shape_of(x), ctx.out_shape(node)
    if not all(isinstance(d, int) for d in (*in_shape[2:], *out_shape[2:])):
        raise node.error("upsampling of symbolic spatial sizes is not supported")
    scales = [1.0, 1.0] + [o / i for o, i in zip(out_shape[2:], in_shape[2:])]
    factors = node.arg(factors_at, "scale_factors") if node.target.endswith(".vec") else None
    if factors and all(f is not None for f in factors):
        scales = [1.0, 1.0] + [float(f) for f in factors]
    return ctx.emit("resize", x, sizes=list(out_shape), scales=scales, **attrs)


@converter("aten.native_dropout.default")
def _dropout(ctx, node):
    x, train = node.arg(0, "input"), node.arg(2, "train")
    if train:
        raise node.error("dropout in training mode; export the model after model.eval()")
    return [x, ctx.emit("full", shape=list(ctx.shape_of(x)), value=1, dtype="bool")]


@converter("aten.cumsum.default")
def _cumsum(ctx, node):
    x = ctx.tensor(node.arg(0, "self"), ctx.out_dtype(node))
    axis = node.arg(1, "dim")
    if ctx.ndim_of(x) == 0:
        return x
    return ctx.emit("cumsum", x, axis=normalize_axis(axis, ctx.ndim_of(x), "cumsum"))


@converter("aten.tril.default", "aten.triu.default")
def _trilu(ctx, node):
    x, k = node.arg(0, "self"), node.arg(1, "diagonal", 0)
    return ctx.emit("trilu", x, ctx.tensor(np.int64(k)), upper=node.target == "aten.triu.default")


@converter("aten.scaled_dot_product_attention.default")
def _sdpa(ctx, node):
    """softmax(q k^T * scale + mask) v, as the matmul, softmax and matmul the graph passes
    fuse and schedule as they do for an ONNX export's attention. Key and value heads shared
    by groups of query heads (enable_gqa) are broadcast to the query's heads."""
    q, k, v = node.arg(0, "query"), node.arg(1, "key"), node.arg(2, "value")
    mask = node.arg(3, "attn_mask")
    if node.arg(4, "dropout_p", 0.0):
        raise node.error("attention dropout in training mode; export the model after model.eval()")
    is_causal, scale = bool(node.arg(5, "is_causal", False)), node.kwargs.get("scale")
    dtype, ndim = ctx.dtype_of(q), ctx.ndim_of(q)
    if ndim >= 3 and ctx.ndim_of(k) == ndim:
        k, v = (_shared_heads(ctx, t, ctx.shape_of(q)[-3]) for t in (k, v))
    head_size = ctx.shape_of(q)[-1]
    if scale is None:
        if not isinstance(head_size, int):
            raise node.error("attention with a symbolic head size needs an explicit scale")
        scale = 1.0 / math.sqrt(head_size)
    axes = list(range(ndim - 2)) + [ndim - 1, ndim - 2]
    scores = ctx.emit("matmul", q, ctx.emit("transpose", k, axes=axes))
    scores = ctx.emit("mul", scores, ctx.tensor(float(scale), dtype))
    length, keys = ctx.shape_of(q)[-2], ctx.shape_of(k)[-2]
    if is_causal:  # query i sees keys 0..i
        ones = ctx.emit("full", shape=[length, keys], value=True, dtype="bool")
        mask = ctx.emit("trilu", ones, upper=False)
    if mask is not None and ctx.dtype_of(mask) == "bool":
        scores = ctx.emit("where", mask, scores, ctx.tensor(float("-inf"), dtype))
    elif mask is not None:
        scores = ctx.emit("add", scores, ctx.tensor(mask, dtype))
    return ctx.emit("matmul", ctx.emit("softmax", scores, axes=[-1]), v)


def _shared_heads(ctx, t, heads):
    """`t` (..., kv heads, length, size) with each head repeated for its group of `heads`."""
    shape = list(ctx.shape_of(t))
    kv = shape[-3]
    if kv is heads or kv == heads or not (isinstance(kv, int) and isinstance(heads, int)):
        return t
    grouped = ctx.emit("expand_dims", t, axes=[len(shape) - 2])
    wide = shape[:-3] + [kv, heads // kv] + shape[-2:]
    return ctx.emit("reshape", ctx.emit("broadcast_to", grouped, shape=wide),
                    shape=shape[:-3] + [heads] + shape[-2:])
