"""Converters for linear-algebra ONNX ops: MatMul, Gemm, Einsum, Det, the quantization ops,
Attention, FlexAttention, RotaryEmbedding and LinearAttention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tcc.frontend.onnx import proto
from tcc.frontend.onnx.base import (
    CONVERTERS,
    OnnxNode,
    OnnxOp,
    converter,
    normalize_domain,
    onnx_dtype,
)
from tcc.frontend.onnx.importer import convert_node
from tcc.ir.errors import FrontendError, TccError
from tcc.ir.ops.quantize import QUANT_DTYPES

if TYPE_CHECKING:
    import onnx


def _dtype_attr(node: OnnxNode, name: str) -> str | None:
    """An attribute naming an ONNX element type, as a tcc dtype (None when absent or 0)."""
    code = node.attrs.get(name, 0)
    if not code:
        return None
    try:
        return onnx_dtype(code)
    except (FrontendError, TccError):
        raise node.error(
            f"attribute {name}={code} names an element type tcc does not support"
        ) from None


def _outputs(ctx, node: OnnxNode, value, count: int) -> list:
    """Split a tuple-valued call into one value per ONNX output (None where unused)."""
    return [
        ctx.bb.get_item(value, i, name=node.outputs[i])
        if i < len(node.outputs) and node.outputs[i]
        else None
        for i in range(count)
    ]


def _used_outputs(node: OnnxNode) -> int:
    """1 + the index of the last output the node names."""
    return max(i for i, name in enumerate(node.outputs) if name) + 1


@converter("MatMul")
class MatMul(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit("matmul", ctx.input(node, 0), ctx.input(node, 1))


@converter("Gemm")
class Gemm(OnnxOp):
    """Opsets before 7 name C's broadcasting with a `broadcast` attribute; tcc always
    broadcasts C unidirectionally, which accepts every model those opsets accept."""

    @classmethod
    def v1(cls, ctx, node):
        return ctx.emit(
            "gemm",
            ctx.input(node, 0),
            ctx.input(node, 1),
            ctx.input(node, 2),
            alpha=float(node.attrs.get("alpha", 1.0)),
            beta=float(node.attrs.get("beta", 1.0)),
            trans_a=bool(node.attrs.get("transA", 0)),
            trans_b=bool(node.attrs.get("transB", 0)),
        )


@converter("Einsum")
class Einsum(OnnxOp):
    @classmethod
    def v12(cls, ctx, node):
        equation = "".join(node.attrs["equation"].split())
        return ctx.emit("einsum", *ctx.inputs(node), equation=equation)


@converter("Det")
class Det(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        return ctx.emit("det", ctx.input(node, 0))


def _check_quant_dtype(node: OnnxNode, dtype: str) -> str:
    if dtype not in QUANT_DTYPES:
        raise node.error(
            f"quantized type {dtype} is unsupported; tcc supports {', '.join(QUANT_DTYPES)}"
        )
    return dtype


@converter("QuantizeLinear")
class QuantizeLinear(OnnxOp):
    """The output type is the zero point's, else `output_dtype`, else uint8; `saturate`
    (opset 19) only concerns float8 outputs."""

    @classmethod
    def v10(cls, ctx, node):
        zp = ctx.type_of(node, 2)
        out = zp.dtype if zp is not None else _dtype_attr(node, "output_dtype") or "uint8"
        return ctx.emit(
            "quantize_linear",
            ctx.input(node, 0),
            ctx.input(node, 1),
            ctx.input(node, 2),
            axis=node.attrs.get("axis", 1),
            block_size=node.attrs.get("block_size", 0),
            saturate=bool(node.attrs.get("saturate", 1)),
            out_dtype=_check_quant_dtype(node, out),
            precision=_dtype_attr(node, "precision"),
        )


@converter("DequantizeLinear")
class DequantizeLinear(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        _check_quant_dtype(node, ctx.type_of(node, 0).dtype)
        return ctx.emit(
            "dequantize_linear",
            ctx.input(node, 0),
            ctx.input(node, 1),
            ctx.input(node, 2),
            axis=node.attrs.get("axis", 1),
            block_size=node.attrs.get("block_size", 0),
            out_dtype=_dtype_attr(node, "output_dtype"),
        )


@converter("DynamicQuantizeLinear")
class DynamicQuantizeLinear(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        return _outputs(ctx, node, ctx.emit("dynamic_quantize_linear", ctx.input(node, 0)), 3)


@converter("MatMulInteger")
class MatMulInteger(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        return ctx.emit("matmul_integer", *[ctx.input(node, i) for i in range(4)])


@converter("QLinearMatMul")
class QLinearMatMul(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        return ctx.emit("qlinear_matmul", *[ctx.input(node, i) for i in range(8)])


@converter("Attention")
class Attention(OnnxOp):
    """Opset 24 adds the nonpad_kv_seqlen operand, opset 25 the sliding-window attributes;
    one method reads whichever the node has."""

    @classmethod
    def v23(cls, ctx, node):
        a = node.attrs
        n = _used_outputs(node)
        value = ctx.emit(
            "attention",
            *[ctx.input(node, i) for i in range(7)],
            scale=a.get("scale"),
            is_causal=bool(a.get("is_causal", 0)),
            q_num_heads=a.get("q_num_heads"),
            kv_num_heads=a.get("kv_num_heads"),
            softcap=float(a.get("softcap", 0.0)),
            qk_matmul_output_mode=a.get("qk_matmul_output_mode", 0),
            softmax_dtype=_dtype_attr(node, "softmax_precision"),
            left_window_size=a.get("left_window_size", -1),
            right_window_size=a.get("right_window_size", -1),
            num_outputs=n,
            bfloat16=ctx.type_of(node, 0).dtype == "bfloat16",
        )
        return _outputs(ctx, node, value, n)


@converter("RotaryEmbedding")
class RotaryEmbedding(OnnxOp):
    @classmethod
    def v23(cls, ctx, node):
        return ctx.emit(
            "rotary_embedding",
            *[ctx.input(node, i) for i in range(4)],
            interleaved=bool(node.attrs.get("interleaved", 0)),
            rotary_embedding_dim=node.attrs.get("rotary_embedding_dim", 0),
            num_heads=node.attrs.get("num_heads", 0),
        )


@converter("LinearAttention")
class LinearAttention(OnnxOp):
    @classmethod
    def v27(cls, ctx, node):
        rule = node.attrs.get("update_rule", "gated_delta")
        if rule not in ("linear", "gated", "delta", "gated_delta"):
            raise node.error(
                f"update_rule {rule!r} is unsupported; expected linear, gated, delta or gated_delta"
            )
        value = ctx.emit(
            "linear_attention",
            *[ctx.input(node, i) for i in range(6)],
            q_num_heads=node.attrs.get("q_num_heads", 0),
            kv_num_heads=node.attrs.get("kv_num_heads", 0),
            scale=float(node.attrs.get("scale", 0.0)),
            update_rule=rule,
        )
        return _outputs(ctx, node, value, 2)


def _inline_graph(ctx, node: OnnxNode, graph: onnx.GraphProto, arg, what: str):
    """Import the one-input, one-output `graph` (a node attribute) applied to `arg`, in
    place: the values it defines are renamed under the node's name so they cannot clash
    with the outer graph's, and its initializers become known constants."""
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise node.error(f"{what} must take and return one tensor")
    prefix = f"{node.name}/{what}/"
    # Names the graph defines get the prefix; others refer to the outer graph's values.
    local = {graph.input[0].name, *(t.name for t in graph.initializer)}
    local.update(out for p in graph.node for out in p.output)
    ctx.values[prefix + graph.input[0].name] = arg
    for init in graph.initializer:
        ctx.set_known(prefix + init.name, proto.to_array(init))
    for i, inner in enumerate(graph.node):
        domain = normalize_domain(inner.domain)
        if (domain, inner.op_type) not in CONVERTERS:
            raise node.error(f"{what} uses {inner.op_type}, which tcc does not support")
        renamed = proto.NodeProto()
        renamed.CopyFrom(inner)
        renamed.name = prefix + (inner.name or f"{inner.op_type}_{i}")
        for names in (renamed.input, renamed.output):
            names[:] = [prefix + n if n in local else n for n in names]
        convert_node(ctx, OnnxNode.from_proto(renamed, ctx.opsets.get(domain, 1), i))
    ctx.node = node
    return ctx.value(prefix + graph.output[0].name)


@converter("FlexAttention", domain="ai.onnx.preview")
class FlexAttention(OnnxOp):
    """Scores, the optional `score_mod` graph, softmax, the optional `prob_mod` graph and
    the product with V, each imported as its own op: the mod graphs are arbitrary ONNX and
    are inlined between the fixed stages. Softmax runs in `softmax_precision`, by default
    float32 for 16-bit inputs and the input type otherwise."""

    @classmethod
    def v1(cls, ctx, node):
        q = ctx.type_of(node, 0)
        precision = _dtype_attr(node, "softmax_precision")
        dtype = precision or ("float32" if q.dtype in ("float16", "bfloat16") else q.dtype)
        x = ctx.emit("attention_scores", ctx.input(node, 0), ctx.input(node, 1),
                     scale=node.attrs.get("scale"), out_dtype=dtype)  # fmt: skip
        if "score_mod" in node.attrs:
            x = _inline_graph(ctx, node, node.attrs["score_mod"], x, "score_mod")
        x = ctx.emit("softmax", x, axes=[-1])
        if "prob_mod" in node.attrs:
            x = _inline_graph(ctx, node, node.attrs["prob_mod"], x, "prob_mod")
        return ctx.emit("attention_values", x, ctx.input(node, 2))
