"""The IR text parser: hand-written text, exact node structure, and one test per error."""

import math
import re
from pathlib import Path

import pytest

from tcc.ir.errors import ParseError
from tcc.ir.expr import BinOp, FloatImm, IntImm, Logic, Var
from tcc.ir.graph import Call, CallTIR, Function, TensorType, TupleType
from tcc.ir.parser import parse_expr, parse_module
from tcc.ir.tir import Block, For, ForKind, IterKind, PrimFunc

GRAPH = '''\
constants = {"w": Tensor((4, 3), "float32")}

@function(inputs=["x:0"], outputs=["y"])
def main(x: Tensor((n, 4), "float32")) -> Tensor((n, 3), "float32"):
    a: Tensor((n, 3), "float32") = op.matmul(x, const("w"))
    y: Tensor((n, 3), "float32") = op.relu(a)
    return y
'''


def test_graph_function():
    mod = parse_module(GRAPH)
    f = mod["main"]
    assert isinstance(f, Function)
    assert f.input_names == ("x:0",) and f.output_names == ("y",)
    (x,) = f.params
    n = x.type.shape[0]
    assert isinstance(n, Var) and n.name == "n" and n.dtype == "int64"
    a, y = (b.var for b in f.bindings)
    assert isinstance(f.bindings[0].value, Call) and f.bindings[0].value.op == "matmul"
    assert a.type == TensorType((n, 3), "float32") and f.ret is y
    assert mod.const_types == {"w": TensorType((4, 3), "float32")} and mod.const_values == {}


def test_fresh_dimensions_are_bound_by_position():
    mod = parse_module('''\
@function(inputs=["x", "k"], outputs=["v"])
def main(x: Tensor((n, 8), "float32"), k: Tensor((1,), "int64")) -> Tensor((n, kk), "float32"):
    t: Tuple(Tensor((n, kk), "float32"), Tensor((n, kk), "int64")) = op.topk(x, k, axis=-1)
    v: Tensor((n, kk), "float32") = t[0]
    return v
''')
    t = mod["main"].bindings[0].var.type
    assert isinstance(t, TupleType)
    assert t.fields[0].shape[1] is t.fields[1].shape[1]
    assert t.fields[0].shape[1].name == "kk"


def test_expressions_are_built_without_simplifying():
    n = Var("n")
    e = parse_expr("n * 4 // 4 + 0", {"n": n})
    assert e == BinOp("add", BinOp("floordiv", BinOp("mul", n, IntImm(4), "int64"), IntImm(4),
                                   "int64"), IntImm(0), "int64")
    assert parse_expr("True and False and True") == Logic(
        "and", Logic("and", IntImm(1, "bool"), IntImm(0, "bool"), "bool"), IntImm(1, "bool"))
    assert parse_expr("int8(-3)") == IntImm(-3, "int8")
    assert parse_expr("float64(-0.5)") == FloatImm(-0.5, "float64")
    assert math.isnan(parse_expr('float16("nan")').value)


def test_prim_func():
    mod = parse_module('''\
@prim_func
def f(A: Buffer((n,), "float32"), B: Buffer((1,), "float32")):
    for i in parallel(0, n):
        with block("sum"):
            vi = axis.reduce(n, i)
            reads(A[vi])
            writes(B[0])
            with init():
                B[0] = 0.0
            B[0] = B[0] + A[vi]
    for i in unrolled(0, 2, annotations={"pragma": [1, (2,)]}):
        pass
''')
    f = mod["f"]
    assert isinstance(f, PrimFunc)
    first, second = f.body.stmts
    assert isinstance(first, For) and first.kind is ForKind.PARALLEL
    block = first.body
    assert isinstance(block, Block) and block.iter_vars[0].kind is IterKind.REDUCE
    assert block.init is not None and block.reads[0].buffer is f.params[0]
    assert second.annotations == (("pragma", [1, (2,)]),)
    assert second.var is first.var  # the same name in a later sibling scope: the same variable


SEQUENCES = '''\
@function(inputs=["x", "opt"], outputs=["s", "y", "has"])
def main(x: Tensor((n, 4), "float32"), opt: Optional(Sequence(None, "int64"))) -> Tuple(Sequence((None, 4), "float32"), Tensor((d, 4), "float32"), Tensor((), "bool")):
    e: Sequence(None, "float32", empty=True) = op.sequence_empty(dtype="float32")
    s: Sequence((None, 4), "float32") = op.sequence_insert(e, x)
    y: Tensor((d, 4), "float32") = op.sequence_at(s, const("zero"))
    has: Tensor((), "bool") = op.optional_has_element(opt)
    return (s, y, has)
'''


def test_sequence_and_optional_types():
    """Sequence and optional types read as written and print back the same text; the element
    taken out of a sequence gets a fresh size variable, bound to the declared `d`."""
    from tcc.ir.graph import OptionalType, SequenceType
    from tcc.ir.printer import print_module

    text = 'constants = {"zero": Tensor((), "int64")}\n\n' + SEQUENCES
    mod = parse_module(text)
    f = mod["main"]
    assert f.params[1].type == OptionalType(SequenceType("int64", None))
    assert [b.var.type for b in f.bindings[:2]] == [
        SequenceType("float32", None, empty=True), SequenceType("float32", (None, 4))]
    assert print_module(mod).endswith(SEQUENCES)


def test_doc_examples_parse():
    doc = (Path(__file__).parents[2] / "docs" / "ir-text.md").read_text()
    graph, prim = re.findall(r"```python\n(.*?)```", doc, re.S)[1:3]
    mod = parse_module('constants = {"fc.weight": Tensor((784, 10), "float32")}\n' + graph + prim)
    assert isinstance(mod["main"].bindings[-1].value, CallTIR)


# ---------------------------------------------------------------------------------------------
# errors: each says what is wrong, at file:line:col


def _fn(*body: str, params: str = 'x: Tensor((n, 4), "float32")') -> str:
    lines = [f"def main({params}):", *(f"    {b}" for b in body)]
    return "\n".join(['@function(inputs=["x"], outputs=["y"])', *lines]) + "\n"


@pytest.mark.parametrize(
    "text, where, message",
    [
        ("def f(:\n", "1:7", "invalid Python syntax"),
        ("import os\n", "1:1", "unsupported statement at module level"),
        (_fn('y: Tensor((n, 4), "float32") = op.frobnicate(x)', "return y"), "3:36",
         "unknown op 'frobnicate'"),
        (_fn('y: Tensor((n, 4), "float32") = op.relu(z)', "return y"), "3:44",
         "undefined variable 'z'"),
        (_fn('y: Tensor[n, 4] = op.relu(x)', "return y"), "3:8", "bad type annotation"),
        (_fn('y: Tensor((n, 4), "float33") = op.relu(x)', "return y"), "3:23",
         "unknown dtype 'float33'"),
        (_fn('x: Tensor((n, 4), "float32") = op.relu(x)', "return x"), "3:5",
         "duplicate definition of 'x'"),
        (_fn('y: Tensor((n, 3), "float32") = op.relu(x)', "return y"), "3:8",
         'type annotation Tensor((n, 3), "float32") does not match the type op.relu infers: '
         'Tensor((n, 4), "float32")'),
        (_fn('y: Tensor((n, 4), "float32") = op.relu(x, alpha=1)', "return y"), "3:36",
         "op relu: unknown attribute(s) alpha"),
        (_fn('y: Tensor((n, 4), "float32") = op.add(x, const("w"))', "return y"), "3:46",
         "unknown constant 'w'"),
        (_fn('y: Tensor((n, 4), "float32") = call_tir("g", [x], out=Tensor((n, 4), "float32"))',
             "return y"), "3:36", "call_tir of 'g', which is not a prim_func"),
        (_fn("print(x)", "return x"), "3:5", "unsupported statement in a graph function"),
        (_fn("return x", params="x"), "2:10", "parameter 'x' needs a type annotation"),
        (_fn('y: Tensor((n, 4), "float32") = op.relu(x)'), "2:1", "must end with a return"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    while True:\n        pass\n",
         "3:5", "unsupported statement `while True:` here"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    A[0] = B[0]\n", "3:12",
         "undefined buffer 'B'"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    A[0] = 0.0 - -A[0]\n", "3:18",
         "a minus sign applies to number literals only"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    A[0] = frob(1.0)\n", "3:12",
         "unknown function 'frob'"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    for i in range(4):\n        pass\n",
         "3:14", "expected `for var in KIND(min, extent)`"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    with init():\n        pass\n",
         "3:5", "with init() belongs in a block header"),
        ("@prim_func\ndef f(A: Buffer((4,), \"float32\")):\n    A[0] = A[0] < 1.0 < 2.0\n",
         "3:12", "not chained"),
        ("@prim_func\ndef f(n: index):\n    pass\n", "2:10", "unknown dtype 'index'"),
        ("@jit\ndef f():\n    pass\n", "1:2", "expected one decorator, @function or @prim_func"),
        (_fn("return x", params='x: Sequence((n, 4), "float32")'), "2:23",
         "a sequence element dimension is an int or None"),
        (_fn("return x", params='x: Sequence((4,), "float32", empty=1)'), "2:45",
         "Sequence takes only `empty=True` or `empty=False`"),
        (_fn("return x", params='x: Optional(Shape(2))'), "2:13", "bad type annotation"),
        (_fn('y: Sequence((3,), "float32") = op.sequence_construct(x)', "return y"), "3:8",
         "does not match the type op.sequence_construct infers"),
    ],
)
def test_errors(text, where, message):
    with pytest.raises(ParseError) as info:
        parse_module(text, "m.txt")
    msg = str(info.value)
    assert msg.startswith(f"m.txt:{where}: "), msg
    assert message in msg, msg
    assert "\n" not in msg


_SUM = '''\
@prim_func
def f(A: Buffer((4,), "float32"), B: Buffer((1,), "float32")):
    for i in serial(0, {extent}):
        with block("sum"):
            vi = axis.reduce(4, i)
            reads(A[vi])
            writes(B[0])
            with init():
                B[0] = {init}
            B[0] = B[0] + A[vi]
'''


@pytest.mark.parametrize("terms", [200, 300, 30000])
def test_nesting_is_bounded_without_recursion(terms):
    """A chain of `+` is one nesting level per term; every pass recurses over expressions,
    so deeper ones are refused at parse time, with a message, whatever their depth."""
    text = _SUM.format(extent=4, init=" + ".join(["0.0"] * terms))
    if terms <= 256:
        assert isinstance(parse_module(text)["f"], PrimFunc)
        return
    with pytest.raises(ParseError, match="nest"):
        parse_module(text)
