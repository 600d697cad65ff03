"""Converters for reductions, arg max/min, the softmax family, scans, TopK, losses,
normalizations and the signal ops (DFT, STFT, windows, MelWeightMatrix).

Axes, counts and sizes that ONNX passes as tensors become attributes when they are known
at import time; otherwise they are passed on as operands (see tcc/ir/ops/reduce.py).
"""

from __future__ import annotations

from tcc.frontend.onnx.base import OnnxOp, converter, onnx_dtype

# ---------------------------------------------------------------------------------------------
# reductions


def _known_ints(ctx, node, i: int) -> list[int] | None:
    """Operand `i` as a list of ints when known at import time."""
    v = ctx.const_value(node, i)
    return None if v is None else [int(a) for a in v.reshape(-1)]


def _reduce_attr_axes(ctx, node, op: str):
    """Opsets where `axes` is an attribute (absent or empty: every axis)."""
    axes = node.attrs.get("axes") or None
    return ctx.emit(op, ctx.input(node, 0), axes=axes, keepdims=bool(node.attrs.get("keepdims", 1)))


def _reduce_input_axes(ctx, node, op: str):
    """Opsets where `axes` is an optional input and an empty list may mean "no reduction"."""
    x = ctx.input(node, 0)
    keepdims = bool(node.attrs.get("keepdims", 1))
    noop = bool(node.attrs.get("noop_with_empty_axes", 0))
    if not node.has_input(1):
        return x if noop else ctx.emit(op, x, keepdims=keepdims)
    axes = _known_ints(ctx, node, 1)
    if axes is not None:
        if not axes:
            return x if noop else ctx.emit(op, x, keepdims=keepdims)
        return ctx.emit(op, x, axes=axes, keepdims=keepdims)
    axes_t = ctx.type_of(node, 1)
    if axes_t.ndim != 1 or not isinstance(axes_t.shape[0], int):
        raise node.error(f"axes must be constant or a 1-D tensor of static length, got {axes_t}")
    if axes_t.shape[0] == 0 and noop:
        return x
    return ctx.emit(op, x, ctx.input(node, 1), keepdims=keepdims)


def _reduction(op_type: str, op: str, axes_input_since: int) -> None:
    """Register `op_type`: axes attribute from opset 1, axes input from `axes_input_since`."""

    def attr_form(cls, ctx, node):
        return _reduce_attr_axes(ctx, node, op)

    def input_form(cls, ctx, node):
        return _reduce_input_axes(ctx, node, op)

    methods = {"v1": classmethod(attr_form), f"v{axes_input_since}": classmethod(input_form)}
    converter(op_type)(type(op_type, (OnnxOp,), methods))


_reduction("ReduceSum", "reduce_sum", 13)
_reduction("ReduceMax", "reduce_max", 18)
_reduction("ReduceMin", "reduce_min", 18)
_reduction("ReduceMean", "reduce_mean", 18)
_reduction("ReduceProd", "reduce_prod", 18)
_reduction("ReduceL1", "reduce_l1", 18)
_reduction("ReduceL2", "reduce_l2", 18)
_reduction("ReduceLogSum", "reduce_log_sum", 18)
_reduction("ReduceLogSumExp", "reduce_log_sum_exp", 18)
_reduction("ReduceSumSquare", "reduce_sum_square", 18)


def _arg(op_type: str, op: str) -> None:
    def v1(cls, ctx, node):
        return ctx.emit(
            op,
            ctx.input(node, 0),
            axis=node.attrs.get("axis", 0),
            keepdims=bool(node.attrs.get("keepdims", 1)),
            select_last_index=bool(node.attrs.get("select_last_index", 0)),
        )

    converter(op_type)(type(op_type, (OnnxOp,), {"v1": classmethod(v1)}))


_arg("ArgMax", "argmax")
_arg("ArgMin", "argmin")


# ---------------------------------------------------------------------------------------------
# softmax family


def _softmax(op_type: str, op: str) -> None:
    """Before opset 13 the input is seen as 2-D, split at `axis` (default 1), and normalized
    over the whole trailing block; from 13 on over the one `axis` (default -1)."""

    def v1(cls, ctx, node):
        ndim = ctx.type_of(node, 0).ndim
        axis = node.attrs.get("axis", 1)
        start = axis + ndim if axis < 0 else axis
        if not 0 <= start < ndim:
            raise node.error(f"axis {axis} is out of range for rank {ndim}")
        return ctx.emit(op, ctx.input(node, 0), axes=list(range(start, ndim)))

    def v13(cls, ctx, node):
        return ctx.emit(op, ctx.input(node, 0), axes=[node.attrs.get("axis", -1)])

    converter(op_type)(type(op_type, (OnnxOp,), {"v1": classmethod(v1), "v13": classmethod(v13)}))


_softmax("Softmax", "softmax")
_softmax("LogSoftmax", "log_softmax")
_softmax("Hardmax", "hardmax")


# ---------------------------------------------------------------------------------------------
# scans and TopK


def _scan(op_type: str, op: str, since: int) -> None:
    def v(cls, ctx, node):
        x = ctx.input(node, 0)
        flags = {
            "exclusive": bool(node.attrs.get("exclusive", 0)),
            "reverse": bool(node.attrs.get("reverse", 0)),
        }
        axis = _known_ints(ctx, node, 1)
        if axis is not None:
            return ctx.emit(op, x, axis=axis[0], **flags)
        return ctx.emit(op, x, ctx.input(node, 1), **flags)

    converter(op_type)(type(op_type, (OnnxOp,), {f"v{since}": classmethod(v)}))


_scan("CumSum", "cumsum", 11)
_scan("CumProd", "cumprod", 26)


@converter("TopK")
class TopK(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return cls._emit(ctx, node, ctx.input(node, 0), k=node.attrs["k"])

    @classmethod
    def v10(cls, ctx, node):
        x = ctx.input(node, 0)
        k = _known_ints(ctx, node, 1)
        if k is not None:
            return cls._emit(ctx, node, x, k=k[0])
        return cls._emit(ctx, node, x, ctx.input(node, 1))

    @classmethod
    def _emit(cls, ctx, node, *args, **attrs):
        out = ctx.emit(
            "topk",
            *args,
            axis=node.attrs.get("axis", -1),
            largest=bool(node.attrs.get("largest", 1)),
            sorted=bool(node.attrs.get("sorted", 1)),
            **attrs,
        )
        return [ctx.bb.get_item(out, i, name=node.outputs[i] or "v") for i in range(2)]


# ---------------------------------------------------------------------------------------------
# losses


def _loss_attrs(node) -> dict:
    reduction = node.attrs.get("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise node.error(f"unsupported reduction {reduction!r}; expected none, sum or mean")
    return {"reduction": reduction, "ignore_index": node.attrs.get("ignore_index")}


@converter("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(OnnxOp):
    @classmethod
    def v12(cls, ctx, node):
        return ctx.emit("nll_loss", *ctx.inputs(node), **_loss_attrs(node))


@converter("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(OnnxOp):
    """nll_loss of log_softmax over the class axis; the second output is the log_softmax."""

    @classmethod
    def v12(cls, ctx, node):
        log_prob = ctx.emit("log_softmax", ctx.input(node, 0), axes=[1])
        loss = ctx.emit("nll_loss", log_prob, *ctx.inputs(node)[1:], **_loss_attrs(node))
        return [loss, log_prob]


# ---------------------------------------------------------------------------------------------
# normalizations


@converter("LpNormalization")
class LpNormalization(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        p = node.attrs.get("p", 2)
        if p not in (1, 2):
            raise node.error(f"unsupported p={p}; only the L1 and L2 norms are defined")
        return ctx.emit("lp_normalize", ctx.input(node, 0), axis=node.attrs.get("axis", -1), p=p)


@converter("MeanVarianceNormalization")
class MeanVarianceNormalization(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        axes = node.attrs.get("axes", [0, 2, 3])
        return ctx.emit("mean_variance_normalize", ctx.input(node, 0), axes=axes)


# ---------------------------------------------------------------------------------------------
# signal


def _known_scalar(ctx, node, i: int):
    """Operand `i` as a Python scalar when known at import time, else None."""
    v = ctx.const_value(node, i)
    return None if v is None else v.reshape(-1)[0].item()


def _operand_or_attr(ctx, node, i: int, attr: str, attrs: dict):
    """Put operand `i` in `attrs[attr]` when known, else return it as a graph operand."""
    if not node.has_input(i):
        return None
    v = _known_scalar(ctx, node, i)
    if v is not None:
        attrs[attr] = int(v)
        return None
    return ctx.input(node, i)


@converter("DFT")
class DFT(OnnxOp):
    @classmethod
    def v17(cls, ctx, node):
        return cls._emit(ctx, node, axis=node.attrs.get("axis", 1), axis_input=False)

    @classmethod
    def v20(cls, ctx, node):
        return cls._emit(ctx, node, axis=-2, axis_input=True)

    @classmethod
    def _emit(cls, ctx, node, axis: int, axis_input: bool):
        attrs = {
            "axis": axis,
            "inverse": bool(node.attrs.get("inverse", 0)),
            "onesided": bool(node.attrs.get("onesided", 0)),
        }
        length = _operand_or_attr(ctx, node, 1, "length", attrs)
        axis_t = _operand_or_attr(ctx, node, 2, "axis", attrs) if axis_input else None
        args = [ctx.input(node, 0), length, axis_t]
        while args[-1] is None:
            args.pop()
        return ctx.emit("dft", *args, **attrs)


@converter("STFT")
class STFT(OnnxOp):
    @classmethod
    def v17(cls, ctx, node):
        attrs = {"onesided": bool(node.attrs.get("onesided", 1))}
        step = _operand_or_attr(ctx, node, 1, "frame_step", attrs)
        length = _operand_or_attr(ctx, node, 3, "frame_length", attrs)
        if node.has_input(2):  # the window fixes the frame length
            length = None
            attrs.pop("frame_length", None)
        args = [ctx.input(node, 0), ctx.input(node, 2), step, length]
        while args[-1] is None:
            args.pop()
        return ctx.emit("stft", *args, **attrs)


def _window(op_type: str, kind: str) -> None:
    def v17(cls, ctx, node):
        attrs = {
            "kind": kind,
            "periodic": bool(node.attrs.get("periodic", 1)),
            "dtype": onnx_dtype(node.attrs.get("output_datatype", 1)),
        }
        size = _operand_or_attr(ctx, node, 0, "size", attrs)
        return ctx.emit("window", *([size] if size is not None else []), **attrs)

    converter(op_type)(type(op_type, (OnnxOp,), {"v17": classmethod(v17)}))


_window("HannWindow", "hann")
_window("HammingWindow", "hamming")
_window("BlackmanWindow", "blackman")


@converter("MelWeightMatrix")
class MelWeightMatrix(OnnxOp):
    @classmethod
    def v17(cls, ctx, node):
        dtype = onnx_dtype(node.attrs.get("output_datatype", 1))
        known = [_known_scalar(ctx, node, i) for i in range(5)]
        if any(v is None for v in known):
            return ctx.emit("mel_weight_matrix", *ctx.inputs(node)[:5], dtype=dtype)
        names = ("num_mel_bins", "dft_length", "sample_rate", "lower_hz", "upper_hz")
        params = {n: int(v) if i < 3 else float(v) for i, (n, v) in enumerate(zip(names, known))}
        return ctx.emit("mel_weight_matrix", dtype=dtype, **params)
