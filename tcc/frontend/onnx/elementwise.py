"""Converters for elementwise ONNX ops (math, comparison, logic, activations)."""

from __future__ import annotations

from tcc.frontend.onnx.base import OnnxOp, converter


def _unary(op_type: str, tcc_op: str, since: int = 1) -> None:
    """Register a converter for a one-input op that maps onto `tcc_op` unchanged."""

    def v(cls, ctx, node):
        return ctx.emit(tcc_op, ctx.input(node, 0))

    converter(op_type)(type(op_type, (OnnxOp,), {f"v{since}": classmethod(v)}))


def _binary(op_type: str, tcc_op: str, since: int = 1) -> None:
    """Register a converter for a two-input broadcasting op (opset >= 7 broadcasting)."""

    def v(cls, ctx, node):
        return ctx.emit(tcc_op, ctx.input(node, 0), ctx.input(node, 1))

    converter(op_type)(type(op_type, (OnnxOp,), {f"v{since}": classmethod(v)}))


_unary("Relu", "relu")
_unary("Exp", "exp")
_binary("Add", "add")
_binary("Sub", "sub")
_binary("Mul", "mul")
_binary("Less", "less")
