"""The IR text printer: golden text, precedence, immediates, attributes and names."""

import math

import numpy as np
import pytest

from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import (
    BinOp,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Logic,
    Not,
    Select,
    Var,
)
from tcc.ir.graph import CallTIR, TensorType
from tcc.ir.module import IRModule
from tcc.ir.printer import format_attr, format_expr, format_type, print_module
from tcc.ir.tir import (
    Block,
    Buffer,
    BufferRegion,
    BufferStore,
    For,
    ForKind,
    IterKind,
    IterVar,
    PrimFunc,
)

n, m = Var("n"), Var("m")


def _add(a, b):
    return BinOp("add", a, b, a.dtype)


def _sub(a, b):
    return BinOp("sub", a, b, a.dtype)


def _mul(a, b):
    return BinOp("mul", a, b, a.dtype)


def golden_module() -> IRModule:
    mod = IRModule()
    w = mod.add_constant("fc.weight", np.zeros((784, 10), "float32"))
    bb = FunctionBuilder()
    x = bb.param("input.1", TensorType((n, 784), "float32"))
    v0 = bb.emit("matmul", x, w, name="0")
    v1 = bb.emit("relu", v0, name="op")
    out = TensorType((n, 10), "float32")
    bb.bind(CallTIR("fused_add", (v0, v1), out), out, "y")
    mod.functions["main"] = bb.finish([v1], ["logits"])

    A, B = Buffer("A", (n, 10), "float32"), Buffer("B", (n, 10), "float32")
    C = Buffer("C", (n, 10), "float32")
    i, j, vi, vj = Var("i"), Var("j"), Var("vi"), Var("vj")
    block = Block(
        "C",
        (IterVar(vi, n, IterKind.SPATIAL, i), IterVar(vj, IntImm(10), IterKind.SPATIAL, j)),
        (BufferRegion(A, ((vi, IntImm(1)), (vj, IntImm(1)))),
         BufferRegion(B, ((vi, IntImm(1)), (IntImm(0), IntImm(10))))),
        (BufferRegion(C, ((vi, IntImm(1)), (vj, IntImm(1)))),),
        BufferStore(C, _add(A[vi, vj], B[vi, vj]), (vi, vj)),
    )
    loops = For(i, IntImm(0), n, ForKind.SERIAL,
                For(j, IntImm(0), IntImm(10), ForKind.VECTORIZED, block))
    mod.functions["fused_add"] = PrimFunc((A, B, C), loops)
    return mod


GOLDEN = '''\
# tcc IR module
constants = {
    "fc.weight": Tensor((784, 10), "float32"),
}


@function(inputs=["input.1"], outputs=["logits"])
def main(input_1: Tensor((n, 784), "float32")) -> Tensor((n, 10), "float32"):
    _0: Tensor((n, 10), "float32") = op.matmul(input_1, const("fc.weight"))
    op_: Tensor((n, 10), "float32") = op.relu(_0)
    y: Tensor((n, 10), "float32") = call_tir("fused_add", [_0, op_], out=Tensor((n, 10), "float32"))
    return op_


@prim_func
def fused_add(A: Buffer((n, 10), "float32"), B: Buffer((n, 10), "float32"), C: Buffer((n, 10), "float32")):
    for i in serial(0, n):
        for j in vectorized(0, 10):
            with block("C"):
                vi = axis.spatial(n, i)
                vj = axis.spatial(10, j)
                reads(A[vi, vj], B[vi, 0:10])
                writes(C[vi, vj])
                C[vi, vj] = A[vi, vj] + B[vi, vj]
'''


def test_golden_module():
    assert print_module(golden_module()) == GOLDEN


def test_module_str_is_the_text():
    assert str(golden_module()) == GOLDEN


@pytest.mark.parametrize(
    "e, text",
    [
        (_mul(_add(n, m), IntImm(2)), "(n + m) * 2"),
        (_add(n, _mul(m, IntImm(2))), "n + m * 2"),
        (_sub(n, _sub(m, IntImm(1))), "n - (m - 1)"),
        (_sub(_sub(n, m), IntImm(1)), "n - m - 1"),
        (BinOp("floordiv", n, IntImm(-3), "int64"), "n // -3"),
        (BinOp("floormod", _add(n, m), IntImm(4), "int64"), "(n + m) % 4"),
        (BinOp("min", n, _add(m, IntImm(1)), "int64"), "min(n, m + 1)"),
        (Cmp("lt", Cmp("lt", n, m), IntImm(1, "bool")), "(n < m) < True"),
        (Logic("and", Logic("or", Cmp("eq", n, m), Cmp("ne", n, m)), Not(Cmp("ge", n, m))),
         "(n == m or n != m) and not n >= m"),
        (Logic("and", IntImm(1, "bool"), Logic("and", IntImm(0, "bool"), IntImm(1, "bool"))),
         "True and (False and True)"),
        (Not(Logic("or", IntImm(1, "bool"), IntImm(0, "bool"))), "not (True or False)"),
        (Select(Cmp("gt", n, IntImm(0)), n, IntImm(0), "int64"), "select(n > 0, n, 0)"),
        (Cast(n, "float32"), 'cast("float32", n)'),
        (Call("exp", (FloatImm(1.5),), "float32"), "exp(1.5)"),
        (Call("isnan", (FloatImm(1.5),), "bool"), "isnan(1.5)"),
        (Call("exp", (FloatImm(1.5),), "float64"), 'exp(1.5, dtype="float64")'),
        (_mul(FloatImm(-0.5), FloatImm(2.0, "float64")), "-0.5 * float64(2.0)"),
    ],
)
def test_expressions_print_with_minimal_parentheses(e, text):
    assert format_expr(e) == text


@pytest.mark.parametrize(
    "e, text",
    [
        (IntImm(3), "3"),
        (IntImm(-3), "-3"),
        (IntImm(3, "int32"), "int32(3)"),
        (IntImm(-7, "int8"), "int8(-7)"),
        (IntImm(1, "bool"), "True"),
        (FloatImm(0.1), "0.1"),
        (FloatImm(1e-30), "1e-30"),
        (FloatImm(0.5, "float64"), "float64(0.5)"),
        (FloatImm(math.nan), 'float32("nan")'),
        (FloatImm(-math.inf, "float16"), 'float16("-inf")'),
    ],
)
def test_immediates_spell_non_default_dtypes(e, text):
    assert format_expr(e) == text


def test_attribute_values():
    assert format_attr([1, (2,), (), None, True, "a\"b"]) == '[1, (2,), (), None, True, "a\\"b"]'
    assert format_attr([math.nan, math.inf, -math.inf, -0.0]) == (
        '[float("nan"), float("inf"), float("-inf"), -0.0]'
    )
    assert format_attr(IntImm(4)) == "int64(4)"  # an immediate, not the plain number 4
    assert format_attr(_mul(n, IntImm(4))) == "n * 4"
    assert format_attr(np.int64(5)) == "5"


def test_types():
    assert format_type(TensorType((), "bool")) == 'Tensor((), "bool")'
    assert format_type(TensorType((n * 4,), "int8")) == 'Tensor((n * 4,), "int8")'


def test_names_are_sanitized_and_unique():
    bb = FunctionBuilder()
    a = bb.param("in put:0", TensorType((2,), "float32"))
    b = bb.param("lambda", TensorType((2,), "float32"))
    c = bb.emit("add", a, b, name="in_put_0")
    d = bb.emit("relu", c, name="Tensor")
    mod = IRModule({"my model": bb.finish([d], ["out"])})
    text = print_module(mod)
    assert '@function(name="my model", inputs=["in put:0", "lambda"], outputs=["out"])' in text
    assert "def my_model(in_put_0: Tensor((2,), \"float32\"), lambda_: " in text
    assert "in_put_0_1: Tensor((2,), \"float32\") = op.add(in_put_0, lambda_)" in text
    assert "Tensor_: Tensor((2,), \"float32\") = op.relu(in_put_0_1)" in text


def test_unusual_size_variables_are_declared():
    k = Var("k", "int32")
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((k, n), "float32"))
    y = bb.emit("reshape", x, shape=[n, k], name="y")
    text = print_module(IRModule({"main": bb.finish([y], ["y"])}))
    assert '@function(inputs=["x"], outputs=["y"], sizes={"k": "int32"})' in text
    assert "op.reshape(x, shape=[n, k])" in text
