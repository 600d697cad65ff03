"""Converters for neural-network ONNX ops: convolutions, pooling, normalizations, and the
sampling ops (RoiAlign, GridSample, AffineGrid).

`auto_pad` is resolved here into explicit pads (symbolic when the input size is), so the
graph ops only know explicit geometry. A shape operand known at import time (MaxUnpool's
output_shape, Col2Im's image/block shape, AffineGrid's size) becomes an attribute; one known
only at run time is passed to the op as a tensor and the result has run-time dimensions.
"""

from __future__ import annotations

from tcc.frontend.onnx.base import OnnxOp, converter, onnx_dtype
from tcc.ir.expr import Dim, as_dim, max_expr

# ---------------------------------------------------------------------------------------------
# helpers


def _spatial_rank(ctx, node, ranks=(1, 2, 3)) -> int:
    t = ctx.type_of(node, 0)
    nd = t.ndim - 2
    if nd not in ranks:
        raise node.error(
            f"input of rank {t.ndim} is not supported; "
            f"expected rank {', '.join(str(r + 2) for r in ranks)}"
        )
    return nd


def _same_pads(size: Dim, k: Dim, s: int, d: int, upper: bool) -> tuple[Dim, Dim]:
    """(begin, end) pads that make ceil(size / stride) windows; the odd pad goes to the end
    for SAME_UPPER and to the beginning for SAME_LOWER."""
    need = as_dim(((size + s - 1) // s - 1) * s + d * (k - 1) + 1 - size)
    total = max(need, 0) if isinstance(need, int) else max_expr(need, 0)
    small = as_dim(total // 2)
    big = as_dim(total - small)
    return (small, big) if upper else (big, small)


def _geometry(ctx, node, kernel) -> tuple[list[int], list[Dim], list[int]]:
    """(strides, pads, dilations) of a windowed op, with auto_pad resolved to explicit pads."""
    nd = len(kernel)
    shape = ctx.type_of(node, 0).shape[2:]
    strides = list(node.attrs.get("strides") or [1] * nd)
    dilations = list(node.attrs.get("dilations") or [1] * nd)
    pads: list[Dim] = list(node.attrs.get("pads") or [0] * (2 * nd))
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [
            _same_pads(shape[i], kernel[i], strides[i], dilations[i], auto_pad == "SAME_UPPER")
            for i in range(nd)
        ]
        pads = [p[0] for p in pairs] + [p[1] for p in pairs]
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    elif auto_pad != "NOTSET":
        raise node.error(
            f"unsupported auto_pad {auto_pad!r}; expected NOTSET, SAME_UPPER, SAME_LOWER or VALID"
        )
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise node.error(
            f"strides/dilations/pads must have {nd}/{nd}/{2 * nd} entries for a {nd}-D kernel"
        )
    return strides, pads, dilations


def _operands(*args):
    """Drop trailing absent optional operands."""
    args = list(args)
    while args and args[-1] is None:
        args.pop()
    return args


def _kernel(ctx, node) -> list[Dim]:
    return list(node.attrs.get("kernel_shape") or ctx.type_of(node, 1).shape[2:])


def _unpack(ctx, node, value, count: int) -> list:
    """The fields of a tuple-valued op as the node's outputs (None where the output is unused)."""
    outs = []
    for i in range(count):
        used = i < len(node.outputs) and node.outputs[i]
        outs.append(ctx.bb.get_item(value, i, name=node.outputs[i]) if used else None)
    return outs


def _wants_extra_outputs(node) -> bool:
    return any(o for o in node.outputs[1:])


# ---------------------------------------------------------------------------------------------
# convolutions


@converter("Conv")
class Conv(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        nd = _spatial_rank(ctx, node)
        strides, pads, dilations = _geometry(ctx, node, _kernel(ctx, node))
        return ctx.emit(
            f"conv{nd}d",
            *_operands(ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)),
            strides=strides,
            padding=pads,
            dilation=dilations,
            groups=node.attrs.get("group", 1),
        )


@converter("ConvInteger")
class ConvInteger(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        strides, pads, dilations = _geometry(ctx, node, _kernel(ctx, node))
        ops = [ctx.input(node, i) for i in range(4)]
        return ctx.emit(
            "conv_integer",
            *_operands(*ops),
            strides=strides,
            padding=pads,
            dilation=dilations,
            groups=node.attrs.get("group", 1),
        )


@converter("QLinearConv")
class QLinearConv(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        strides, pads, dilations = _geometry(
            ctx, node, list(node.attrs.get("kernel_shape") or ctx.type_of(node, 3).shape[2:])
        )
        ops = [ctx.input(node, i) for i in range(9)]
        return ctx.emit(
            "qlinear_conv",
            *_operands(*ops),
            strides=strides,
            padding=pads,
            dilation=dilations,
            groups=node.attrs.get("group", 1),
        )


@converter("ConvTranspose")
class ConvTranspose(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        nd = _spatial_rank(ctx, node)
        kernel = _kernel(ctx, node)
        size = ctx.type_of(node, 0).shape[2:]
        strides = list(node.attrs.get("strides") or [1] * nd)
        dilations = list(node.attrs.get("dilations") or [1] * nd)
        extra = list(node.attrs.get("output_padding") or [0] * nd)
        auto_pad = node.attrs.get("auto_pad", "NOTSET")
        out_shape = node.attrs.get("output_shape")
        if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out_shape = [size[i] * strides[i] for i in range(nd)]
        if out_shape is not None:
            out_shape = list(out_shape)[-nd:]
            pads = cls._pads_for_output(
                size, kernel, strides, dilations, extra, out_shape, auto_pad
            )
        elif auto_pad in ("NOTSET", "VALID"):
            pads = (
                list(node.attrs.get("pads") or [0] * (2 * nd))
                if auto_pad == "NOTSET"
                else [0] * (2 * nd)
            )
        else:
            raise node.error(
                f"unsupported auto_pad {auto_pad!r}; "
                "expected NOTSET, SAME_UPPER, SAME_LOWER or VALID"
            )
        return ctx.emit(
            f"conv{nd}d_transpose",
            *_operands(ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)),
            strides=strides,
            padding=pads,
            dilation=dilations,
            groups=node.attrs.get("group", 1),
            output_padding=extra,
        )

    @staticmethod
    def _pads_for_output(size, kernel, strides, dilations, extra, out_shape, auto_pad) -> list[Dim]:
        """Pads giving the requested output size; the odd unit goes to the end only for
        SAME_UPPER (a negative total zero-extends the output)."""
        begin, end = [], []
        for i in range(len(size)):
            total = as_dim(
                strides[i] * (size[i] - 1)
                + extra[i]
                + dilations[i] * (kernel[i] - 1)
                + 1
                - out_shape[i]
            )
            half = as_dim(total // 2)
            if auto_pad == "SAME_UPPER":
                begin.append(half)
                end.append(as_dim(total - half))
            else:
                begin.append(as_dim(total - half))
                end.append(half)
        return begin + end


@converter("DeformConv")
class DeformConv(OnnxOp):
    @classmethod
    def v19(cls, ctx, node):
        _spatial_rank(ctx, node, ranks=(2,))
        strides, pads, dilations = _geometry(ctx, node, _kernel(ctx, node))
        ops = [ctx.input(node, i) for i in range(5)]
        return ctx.emit(
            "deform_conv",
            *_operands(*ops),
            strides=strides,
            padding=pads,
            dilation=dilations,
            groups=node.attrs.get("group", 1),
            offset_groups=node.attrs.get("offset_group", 1),
        )


# ---------------------------------------------------------------------------------------------
# pooling


def _pool_attrs(ctx, node) -> dict:
    kernel = list(node.attrs["kernel_shape"])
    strides, pads, dilations = _geometry(ctx, node, kernel)
    return {
        "kernel": kernel,
        "strides": strides,
        "padding": pads,
        "dilation": dilations,
        "ceil_mode": bool(node.attrs.get("ceil_mode", 0)),
    }


@converter("MaxPool")
class MaxPool(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        x = ctx.input(node, 0)
        if _wants_extra_outputs(node):
            _spatial_rank(ctx, node, ranks=range(1, 9))
            attrs = _pool_attrs(ctx, node)
            pooled = ctx.emit(
                "max_pool_with_indices",
                x,
                storage_order=node.attrs.get("storage_order", 0),
                **attrs,
            )
            return _unpack(ctx, node, pooled, 2)
        nd = _spatial_rank(ctx, node)
        return ctx.emit(f"max_pool{nd}d", x, **_pool_attrs(ctx, node))


@converter("AveragePool")
class AveragePool(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        nd = _spatial_rank(ctx, node)
        return ctx.emit(
            f"avg_pool{nd}d",
            ctx.input(node, 0),
            count_include_pad=bool(node.attrs.get("count_include_pad", 0)),
            **_pool_attrs(ctx, node),
        )


@converter("LpPool")
class LpPool(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        nd = _spatial_rank(ctx, node)
        p = node.attrs.get("p", 2)
        return ctx.emit(f"lp_pool{nd}d", ctx.input(node, 0), p=p, **_pool_attrs(ctx, node))


@converter("MaxUnpool")
class MaxUnpool(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        nd = _spatial_rank(ctx, node)
        attrs = {
            "kernel": list(node.attrs["kernel_shape"]),
            "strides": list(node.attrs.get("strides") or [1] * nd),
            "padding": list(node.attrs.get("pads") or [0] * (2 * nd)),
        }
        ops = [ctx.input(node, 0), ctx.input(node, 1)]
        if node.has_input(2):
            shape = ctx.int_vector(node, 2)
            if shape is None:
                ops.append(ctx.input(node, 2))
            attrs["output_shape"] = shape
        return ctx.emit("max_unpool", *ops, **attrs)


def _global(op: str):
    def v1(cls, ctx, node):
        return ctx.emit(op, ctx.input(node, 0))

    return v1


@converter("GlobalAveragePool")
class GlobalAveragePool(OnnxOp):
    v1 = classmethod(_global("global_avg_pool"))


@converter("GlobalMaxPool")
class GlobalMaxPool(OnnxOp):
    v1 = classmethod(_global("global_max_pool"))


@converter("GlobalLpPool")
class GlobalLpPool(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit("global_lp_pool", ctx.input(node, 0), p=node.attrs.get("p", 2))


# ---------------------------------------------------------------------------------------------
# normalization


@converter("BatchNormalization")
class BatchNormalization(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        args = [ctx.input(node, i) for i in range(5)]
        eps = node.attrs.get("epsilon", 1e-5)
        if node.attrs.get("training_mode", 0):
            out = ctx.emit(
                "batch_norm_train", *args, epsilon=eps, momentum=node.attrs.get("momentum", 0.9)
            )
            return _unpack(ctx, node, out, 3)
        return ctx.emit("batch_norm", *args, epsilon=eps)


@converter("InstanceNormalization")
class InstanceNormalization(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        args = [ctx.input(node, i) for i in range(3)]
        return ctx.emit("instance_norm", *args, epsilon=node.attrs.get("epsilon", 1e-5))


def _stash_type(node) -> str:
    return onnx_dtype(node.attrs.get("stash_type", 1))


@converter("LayerNormalization")
class LayerNormalization(OnnxOp):
    @classmethod
    def v17(cls, ctx, node):
        args = _operands(ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2))
        attrs = {
            "axis": node.attrs.get("axis", -1),
            "epsilon": node.attrs.get("epsilon", 1e-5),
            "stash_type": _stash_type(node),
        }
        if _wants_extra_outputs(node):
            return _unpack(ctx, node, ctx.emit("layer_norm_with_stats", *args, **attrs), 3)
        return ctx.emit("layer_norm", *args, **attrs)


@converter("GroupNormalization")
class GroupNormalization(OnnxOp):
    @classmethod
    def v18(cls, ctx, node):
        """Opset 18 gives scale and bias per group."""
        return cls._emit(ctx, node, group_affine=True)

    @classmethod
    def v21(cls, ctx, node):
        return cls._emit(ctx, node, group_affine=False)

    @classmethod
    def _emit(cls, ctx, node, group_affine: bool):
        args = [ctx.input(node, i) for i in range(3)]
        return ctx.emit(
            "group_norm",
            *args,
            num_groups=node.attrs["num_groups"],
            epsilon=node.attrs.get("epsilon", 1e-5),
            group_affine=group_affine,
            stash_type=_stash_type(node),
        )


@converter("RMSNormalization")
class RMSNormalization(OnnxOp):
    @classmethod
    def v23(cls, ctx, node):
        return ctx.emit(
            "rms_norm",
            ctx.input(node, 0),
            ctx.input(node, 1),
            axis=node.attrs.get("axis", -1),
            epsilon=node.attrs.get("epsilon", 1e-5),
            stash_type=_stash_type(node),
        )


@converter("LRN")
class LRN(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit(
            "lrn",
            ctx.input(node, 0),
            size=node.attrs["size"],
            alpha=node.attrs.get("alpha", 1e-4),
            beta=node.attrs.get("beta", 0.75),
            bias=node.attrs.get("bias", 1.0),
        )


# ---------------------------------------------------------------------------------------------
# rearrangement


@converter("DepthToSpace")
class DepthToSpace(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit(
            "depth_to_space",
            ctx.input(node, 0),
            block_size=node.attrs["blocksize"],
            mode=node.choice("mode", "DCR", ("DCR", "CRD")),
        )


@converter("SpaceToDepth")
class SpaceToDepth(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit(
            "space_to_depth",
            ctx.input(node, 0),
            block_size=node.attrs["blocksize"],
            mode=node.choice("mode", "DCR", ("DCR", "CRD")),
        )


@converter("Col2Im")
class Col2Im(OnnxOp):
    @classmethod
    def v18(cls, ctx, node):
        image, block = ctx.int_vector(node, 1), ctx.int_vector(node, 2)
        nd = ctx.type_of(node, 1).shape[0]
        if not isinstance(nd, int):
            raise node.error("image_shape must have a static length")
        ops = [ctx.input(node, 0)]
        if image is None or block is None:
            ops += [ctx.input(node, 1), ctx.input(node, 2)]
        return ctx.emit(
            "col2im",
            *ops,
            image_shape=image,
            block_shape=block,
            strides=list(node.attrs.get("strides") or [1] * nd),
            padding=list(node.attrs.get("pads") or [0] * (2 * nd)),
            dilation=list(node.attrs.get("dilations") or [1] * nd),
        )


# ---------------------------------------------------------------------------------------------
# sampling


@converter("RoiAlign")
class RoiAlign(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        """Opset 10 has no coordinate_transformation_mode: boxes are not shifted."""
        return cls._emit(ctx, node, "output_half_pixel")

    @classmethod
    def v16(cls, ctx, node):
        return cls._emit(ctx, node, node.attrs.get("coordinate_transformation_mode", "half_pixel"))

    @classmethod
    def _emit(cls, ctx, node, transform: str):
        if transform not in ("half_pixel", "output_half_pixel"):
            raise node.error(f"unsupported coordinate_transformation_mode {transform!r}")
        mode = node.attrs.get("mode", "avg")
        if mode not in ("avg", "max"):
            raise node.error(f"unsupported mode {mode!r}; expected avg or max")
        return ctx.emit(
            "roi_align",
            *[ctx.input(node, i) for i in range(3)],
            mode=mode,
            output_height=node.attrs.get("output_height", 1),
            output_width=node.attrs.get("output_width", 1),
            sampling_ratio=node.attrs.get("sampling_ratio", 0),
            spatial_scale=node.attrs.get("spatial_scale", 1.0),
            half_pixel=transform == "half_pixel",
        )


_GRID_MODES = {
    "bilinear": "linear",
    "bicubic": "cubic",
    "linear": "linear",
    "cubic": "cubic",
    "nearest": "nearest",
}


@converter("GridSample")
class GridSample(OnnxOp):
    @classmethod
    def v16(cls, ctx, node):
        mode = node.attrs.get("mode", "linear" if node.opset >= 20 else "bilinear")
        padding = node.attrs.get("padding_mode", "zeros")
        if mode not in _GRID_MODES:
            raise node.error(f"unsupported mode {mode!r}; expected linear, cubic or nearest")
        if padding not in ("zeros", "border", "reflection"):
            raise node.error(
                f"unsupported padding_mode {padding!r}; expected zeros, border or reflection"
            )
        return ctx.emit(
            "grid_sample",
            ctx.input(node, 0),
            ctx.input(node, 1),
            mode=_GRID_MODES[mode],
            padding_mode=padding,
            align_corners=bool(node.attrs.get("align_corners", 0)),
        )


@converter("AffineGrid")
class AffineGrid(OnnxOp):
    @classmethod
    def v20(cls, ctx, node):
        size = ctx.int_vector(node, 1)
        ops = [ctx.input(node, 0)] if size is not None else [ctx.input(node, 0), ctx.input(node, 1)]
        return ctx.emit(
            "affine_grid", *ops, size=size, align_corners=bool(node.attrs.get("align_corners", 0))
        )
