"""Sequence and optional ops: SequenceEmpty/Construct/Insert/Erase/At/Length, SplitToSequence,
ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement (tcc.ir.ops.sequence).

SequenceMap has no converter: its ONNX function body (a Loop of SequenceAt and
SequenceInsert) is imported instead.
"""

from __future__ import annotations

import numpy as np

from tcc.frontend.onnx import proto
from tcc.frontend.onnx.base import OnnxOp, converter, onnx_dtype
from tcc.ir.graph import OptionalType, type_of


@converter("SequenceEmpty")
class SequenceEmpty(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        return ctx.emit("sequence_empty", dtype=onnx_dtype(node.attrs.get("dtype", proto.TensorProto.FLOAT)))


def _operands_as_they_are(op_type: str, op: str) -> None:
    """Register converter `op_type` (opset 11 on): `op` on the node's operands, in order."""
    def v11(cls, ctx, node):
        return ctx.emit(op, *ctx.inputs(node))

    converter(op_type)(type(op_type, (OnnxOp,), {"v11": classmethod(v11)}))


for _op_type, _op in (("SequenceConstruct", "sequence_construct"),
                      ("SequenceInsert", "sequence_insert"), ("SequenceErase", "sequence_erase"),
                      ("SequenceAt", "sequence_at"), ("SequenceLength", "sequence_length")):
    _operands_as_they_are(_op_type, _op)


@converter("SplitToSequence")
class SplitToSequence(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        return ctx.emit("split_to_sequence", *ctx.inputs(node), axis=node.attrs.get("axis", 0),
                        keepdims=node.attrs.get("keepdims", 1))


@converter("ConcatFromSequence")
class ConcatFromSequence(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        if "axis" not in node.attrs:
            raise node.error("the axis attribute is required")
        return ctx.emit("concat_from_sequence", ctx.input(node, 0), axis=node.attrs["axis"],
                        new_axis=node.attrs.get("new_axis", 0))


@converter("Optional")
class Optional(OnnxOp):
    @classmethod
    def v15(cls, ctx, node):
        if node.has_input(0):
            return ctx.emit("optional", ctx.input(node, 0))
        tp = node.attrs.get("type")
        if tp is None:
            raise node.error("an Optional without an input needs the type attribute")
        sequence = tp.WhichOneof("value") == "sequence_type"
        if sequence:
            tp = tp.sequence_type.elem_type
        if tp.WhichOneof("value") != "tensor_type":
            raise node.error("only optional tensors and optional sequences of tensors are "
                             "supported")
        shape = None
        if tp.tensor_type.HasField("shape"):
            shape = [int(d.dim_value) if d.HasField("dim_value") else None
                     for d in tp.tensor_type.shape.dim]
        return ctx.emit("optional", None, dtype=onnx_dtype(tp.tensor_type.elem_type),
                        shape=shape, sequence=sequence)


def _is_optional(ctx, node) -> bool:
    return node.has_input(0) and isinstance(type_of(ctx.input(node, 0)), OptionalType)


@converter("OptionalHasElement")
class OptionalHasElement(OnnxOp):
    @classmethod
    def v15(cls, ctx, node):
        if node.has_input(0) and not _is_optional(ctx, node):  # a plain value is there
            ctx.set_known(node.outputs[0], np.array(True))
            return None
        return ctx.emit("optional_has_element", ctx.input(node, 0))


@converter("OptionalGetElement")
class OptionalGetElement(OnnxOp):
    @classmethod
    def v15(cls, ctx, node):
        if not _is_optional(ctx, node):  # a tensor or sequence is its own element
            return ctx.input(node, 0)
        return ctx.emit("optional_get_element", ctx.input(node, 0))
