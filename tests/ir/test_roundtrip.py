"""print -> parse -> structurally equal, for hand-built modules of both levels, random
modules (tests/ir/strategies.py), and real ONNX imports; and printing the parsed module
gives the same text again."""

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings

from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import (
    BinOp,
    BufferLoad,
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
from tcc.ir.graph import CallTIR, ShapeType, TensorType, Tuple, TupleGetItem
from tcc.ir.module import IRModule
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.tir import (
    Allocate,
    Block,
    Buffer,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    seq,
)
from tests.ir.strategies import modules, prim_funcs


def assert_roundtrip(mod: IRModule) -> None:
    text = print_module(mod)
    parsed = parse_module(text)
    assert structural_equal(parsed, mod), text
    assert print_module(parsed) == text


def test_graph_module():
    n = Var("n")
    mod = IRModule()
    w = mod.add_constant("weights/0 (odd)", np.ones((4,), "float32"))
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((n, 4), "float32"))
    k = bb.param("k", TensorType((1,), "int64"))
    a = bb.emit("add", x, w)
    s = bb.emit("reduce_sum", a, None, axes=[1], keepdims=True)
    t = bb.emit("topk", a, k, axis=-1)
    top = bb.get_item(t, 0)
    r = bb.emit("reshape", x, shape=[n * 2, 2])
    shape = bb.shape([n, 2])
    indices = bb.bind(TupleGetItem(t, 1), t.type.fields[1], "indices")
    out = TensorType((n, 4), "float32")
    y = bb.bind(CallTIR("f", (x, Tuple((a, r)), None), out, (n * 4,)), out, "y")
    mod.functions["main"] = bb.finish([y, top, s, indices], ["y", "top", "s", "indices"])
    mod.functions["f"] = PrimFunc((Buffer("A", (n, 4), "float32"),), seq())
    assert shape.type == ShapeType(2)
    assert_roundtrip(mod)


def test_prim_func_module():
    n, m = Var("n"), Var("m", "int32")
    A = Buffer("A", (n, 16), "float32")
    B = Buffer("B", (16,), "float64", "shared")
    i, j, vi, vk = Var("i"), Var("j", "int32"), Var("vi"), Var("vk")
    acc = Buffer("acc", (1,), "float32", "local")
    tmp = Buffer("tmp", (4, m), "int32", "local")
    value = Select(Logic("or", Cmp("lt", vi, IntImm(3)), Not(IntImm(0, "bool"))),
                   Cast(BufferLoad(B, (vk,)), "float32"),
                   Call("exp", (FloatImm(-math.inf),), "float32"), "float32")
    block = Block(
        "reduce \"it\"",
        (IterVar(vi, n, IterKind.SPATIAL, i), IterVar(vk, IntImm(16), IterKind.REDUCE, j)),
        (BufferRegion(B, ((vk, IntImm(4)),)),),
        (BufferRegion(A, ((vi, IntImm(1)), (IntImm(0), IntImm(16)))),),
        BufferStore(A, BinOp("add", BufferLoad(A, (vi, vk)), value, "float32"), (vi, vk)),
        init=BufferStore(A, FloatImm(0.0), (vi, vk)),
        alloc_buffers=(acc,),
        annotations=(("schedule", ["tile", (4, 8)]), ("n", n)),
    )
    body = seq(
        For(i, IntImm(0), n, ForKind.PARALLEL,
            For(j, IntImm(0, "int32"), IntImm(16, "int32"), ForKind.THREAD_BINDING, block,
                "threadIdx.x", (("unroll", 4),))),
        Allocate(tmp, IfThenElse(Cmp("gt", m, IntImm(0, "int32")),
                                 BufferStore(tmp, IntImm(-1, "int32"), (IntImm(0), IntImm(0))),
                                 Evaluate(Call("isnan", (FloatImm(math.nan),), "bool")))),
    )
    func = PrimFunc((A, B, m), body, (("global_symbol", "k"), ("tir.noalias", True)))
    assert_roundtrip(IRModule({"k": func}))


def test_sibling_loops_sharing_a_variable():
    i = Var("i")
    A = Buffer("A", (8,), "float32")
    loop = For(i, IntImm(0), IntImm(8), ForKind.SERIAL, BufferStore(A, FloatImm(1.0), (i,)))
    other = For(Var("i"), IntImm(0), IntImm(8), ForKind.UNROLLED, Evaluate(IntImm(0)))
    assert_roundtrip(IRModule({"f": PrimFunc((A,), seq(loop, loop, other))}))


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(modules())
def test_random_modules(mod):
    assert_roundtrip(mod)


@SETTINGS
@given(prim_funcs())
def test_random_prim_funcs(func):
    assert_roundtrip(IRModule({"f": func}))


LIGHT = sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("*.onnx"))


@pytest.mark.parametrize("path", LIGHT, ids=[p.stem for p in LIGHT])
def test_onnx_light_models(path):
    from tcc.frontend.onnx import from_onnx

    assert_roundtrip(from_onnx(path))


@pytest.mark.parametrize("builder", ["bert_encoder", "gpt2_decoder"])
def test_transformer_imports(builder):
    """The dynamic-shape test transformers: symbolic dims, shape arithmetic, many op kinds."""
    from tcc.frontend.onnx import from_onnx
    from tests.models import builders

    assert_roundtrip(from_onnx(getattr(builders, builder)()))
