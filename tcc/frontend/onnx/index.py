"""Converters for indexing ONNX ops (Gather*, Scatter*, Resize, NonZero, ...).

Size operands (Resize scales/sizes/roi, OneHot depth) known at import time become
attributes, symbolic dimensions included; otherwise they stay run-time operands of an op
variant whose output dimensions are data-dependent.
"""

from __future__ import annotations

import numpy as np

from tcc.frontend.onnx.base import OnnxOp, converter
from tcc.ir.ops.index import REDUCTIONS
from tcc.ir.ops.resize import (
    ASPECT_POLICIES,
    COORDINATE_MODES,
    MODES,
    NEAREST_MODES,
    full_roi,
    resize_plan,
)


@converter("Gather")
class Gather(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit(
            "gather", ctx.input(node, 0), ctx.input(node, 1), axis=node.attrs.get("axis", 0)
        )


@converter("GatherElements")
class GatherElements(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        data, idx = ctx.input(node, 0), ctx.input(node, 1)
        return ctx.emit("gather_elements", data, idx, axis=node.attrs.get("axis", 0))


@converter("GatherND")
class GatherND(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        data, idx = ctx.input(node, 0), ctx.input(node, 1)
        return ctx.emit("gather_nd", data, idx, batch_dims=node.attrs.get("batch_dims", 0))


def _scatter_elements(cls, ctx, node):
    reduction = node.choice("reduction", "none", REDUCTIONS)
    data, idx, upd = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    return ctx.emit(
        "scatter_elements", data, idx, upd, axis=node.attrs.get("axis", 0), reduction=reduction
    )


@converter("Scatter")
class Scatter(OnnxOp):
    """Scatter-9/10, the deprecated name of ScatterElements."""

    v9 = classmethod(_scatter_elements)


@converter("ScatterElements")
class ScatterElements(OnnxOp):
    v11 = classmethod(_scatter_elements)


@converter("ScatterND")
class ScatterND(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        reduction = node.choice("reduction", "none", REDUCTIONS)
        data, idx, upd = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
        return ctx.emit("scatter_nd", data, idx, upd, reduction=reduction)


@converter("TensorScatter")
class TensorScatter(OnnxOp):
    @classmethod
    def v24(cls, ctx, node):
        mode = node.choice("mode", "linear", ("linear", "circular"))
        return ctx.emit(
            "tensor_scatter",
            ctx.input(node, 0),
            ctx.input(node, 1),
            ctx.input(node, 2),
            mode=mode,
            axis=node.attrs.get("axis", -2),
        )


@converter("OneHot")
class OneHot(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        indices, values = ctx.input(node, 0), ctx.input(node, 2)
        axis = node.attrs.get("axis", -1)
        depth = ctx.sym_value(node.inputs[1])  # an integer scalar or 1-vector, maybe symbolic
        if depth is None:  # a float depth: the spec casts it to int64
            known = ctx.const_value(node, 1)
            depth = None if known is None else ([int(np.asarray(known).reshape(-1)[0])], True)
        if depth is not None:
            return ctx.emit("one_hot", indices, None, values, depth=depth[0][0], axis=axis)
        depth_v = ctx.input(node, 1)
        if ctx.type_of(node, 1).dtype != "int64":  # read as a size: the spec's cast to int64
            depth_v = ctx.emit("cast", depth_v, dtype="int64")
        return ctx.emit("one_hot", indices, depth_v, values, axis=axis)


@converter("NonZero")
class NonZero(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        return ctx.emit("nonzero", ctx.input(node, 0))


@converter("Unique")
class Unique(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        out = ctx.emit(
            "unique",
            ctx.input(node, 0),
            axis=node.attrs.get("axis"),
            sorted=bool(node.attrs.get("sorted", 1)),
        )
        return [
            ctx.bb.get_item(out, i, name=name) if name else None
            for i, name in enumerate(node.outputs)
        ]


@converter("NonMaxSuppression")
class NonMaxSuppression(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        operands = [ctx.input(node, i) for i in range(5)]
        return ctx.emit(
            "non_max_suppression", *operands, center_point_box=node.attrs.get("center_point_box", 0)
        )


@converter("ArrayFeatureExtractor", domain="ai.onnx.ml")
class ArrayFeatureExtractor(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit("array_feature_extractor", ctx.input(node, 0), ctx.input(node, 1))


@converter("Binarizer", domain="ai.onnx.ml")
class Binarizer(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit(
            "binarize", ctx.input(node, 0), threshold=float(node.attrs.get("threshold", 0.0))
        )


# ---------------------------------------------------------------------------------------------
# Resize and Upsample


def _sampling_attrs(node, ctm_default: str, nearest_default: str) -> dict:
    """The sampling attributes of a Resize node, validated."""
    attrs = {
        "mode": node.choice("mode", "nearest", MODES),
        "coordinate_transformation_mode": node.choice("coordinate_transformation_mode", ctm_default, COORDINATE_MODES
        ),
        "nearest_mode": node.choice("nearest_mode", nearest_default, NEAREST_MODES),
        "cubic_coeff_a": float(node.attrs.get("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(node.attrs.get("exclude_outside", 0)),
        "extrapolation_value": float(node.attrs.get("extrapolation_value", 0.0)),
        "antialias": bool(node.attrs.get("antialias", 0)),
    }
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise node.error("unsupported antialias with mode 'nearest' (only linear and cubic)")
    return attrs


def _present(node, i: int | None) -> bool:
    return i is not None and node.has_input(i)


def _known_floats(ctx, node, i: int | None) -> list[float] | None:
    """Operand i as floats: [] when absent or empty, None when only known at run time."""
    if not _present(node, i):
        return []
    value = ctx.const_value(node, i)
    return None if value is None else [float(v) for v in np.asarray(value).reshape(-1)]


def _emit_resize(ctx, node, roi_i: int | None, scales_i: int, sizes_i: int | None, attrs: dict):
    """Emit a static `resize` when scales or sizes (and the roi a crop needs) are known at
    import time, else `resize_dynamic` with them as run-time operands."""
    x_type = ctx.type_of(node, 0)
    axes = node.attrs.get("axes")
    policy = node.choice("keep_aspect_ratio_policy", "stretch", ASPECT_POLICIES)
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    roi = _known_floats(ctx, node, roi_i) if crop else []
    scales = _known_floats(ctx, node, scales_i)
    sizes = ctx.shape_value(node, sizes_i) if _present(node, sizes_i) else []
    if scales == [] and sizes == []:
        raise node.error("needs a non-empty scales or sizes input")
    by_sizes = scales == [] and sizes is not None
    known = roi is not None and (bool(scales) or by_sizes)
    if by_sizes and policy != "stretch" and not x_type.is_static:
        known = False  # keeping the aspect ratio compares ratios of static dimensions
    if known:
        out, full_scales = resize_plan(
            x_type.shape, scales or None, sizes if by_sizes else None, axes, policy
        )
        full = full_roi(roi, axes, x_type.ndim) if crop else None
        return ctx.emit(
            "resize", ctx.input(node, 0), sizes=out, scales=full_scales, roi=full, **attrs
        )
    roi_i = roi_i if crop else None  # only a crop reads the roi
    roi_v, scales_v, sizes_v = (
        ctx.input(node, i) if _present(node, i) else None for i in (roi_i, scales_i, sizes_i)
    )
    return _emit_resize_dynamic(ctx, ctx.input(node, 0), roi_v, scales_v, sizes_v,
                                axes=axes, keep_aspect_ratio_policy=policy, **attrs)


def _emit_resize_dynamic(ctx, x, roi, scales, sizes, **attrs):
    """resize_dynamic; run-time scales without sizes first give the sizes (resize_sizes),
    so the result's shape is read from an integer tensor as every dynamic shape is."""
    if scales is not None and sizes is None:
        sizes = ctx.emit("resize_sizes", x, scales, axes=attrs.get("axes"))
    return ctx.emit("resize_dynamic", x, roi, scales, sizes, **attrs)


@converter("Resize")
class Resize(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        """Resize-10: (X, scales); sampling as Upsample (asymmetric, legacy nearest rounding)."""
        attrs = _sampling_attrs(node, "asymmetric", "simple")
        if attrs["mode"] == "cubic":
            raise node.error("unsupported mode 'cubic' before opset 11")
        return _emit_resize(ctx, node, None, 1, None, attrs)

    @classmethod
    def v11(cls, ctx, node):
        """Resize-11..19: (X, roi, scales, sizes); later opsets only add attributes."""
        attrs = _sampling_attrs(node, "half_pixel", "round_prefer_floor")
        return _emit_resize(ctx, node, 1, 2, 3, attrs)


def _upsample_attrs(node) -> dict:
    mode = node.attrs.get("mode", "nearest")
    mode = {"bilinear": "linear"}.get(mode, mode)
    if mode not in ("nearest", "linear"):
        raise node.error(f"unsupported mode {mode!r}; supported: nearest, linear")
    return {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}


@converter("Upsample")
class Upsample(OnnxOp):
    @classmethod
    def v7(cls, ctx, node):
        """Upsample-7/8: scales as an attribute."""
        x_type = ctx.type_of(node, 0)
        scales = [float(s) for s in node.attrs["scales"]]
        out, full_scales = resize_plan(x_type.shape, scales, None, None)
        return ctx.emit(
            "resize", ctx.input(node, 0), sizes=out, scales=full_scales, **_upsample_attrs(node)
        )

    @classmethod
    def v9(cls, ctx, node):
        """Upsample-9/10: scales as an operand."""
        attrs = _upsample_attrs(node)
        scales = _known_floats(ctx, node, 1)
        if scales:
            out, full_scales = resize_plan(ctx.type_of(node, 0).shape, scales, None, None)
            return ctx.emit("resize", ctx.input(node, 0), sizes=out, scales=full_scales, **attrs)
        return _emit_resize_dynamic(ctx, ctx.input(node, 0), None, ctx.input(node, 1), None, **attrs)
