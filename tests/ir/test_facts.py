"""Facts about size variables (tcc.ir.facts): ranges that bound size expressions while they
are assumed, read back from a function's entry checks."""

import pytest

from tcc.ir import expr as E
from tcc.ir import facts
from tcc.ir.builder import FunctionBuilder
from tcc.ir.errors import ParseError, ShapeError
from tcc.ir.graph import ShapeExpr, ShapeType, TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops.slicing import slice_length
from tcc.ir.parser import parse_module


def test_bounds_follow_the_assumed_ranges():
    n, m = E.Var("n"), E.Var("m")
    expr = E.as_dim(n // 20 - 1)
    assert facts.bounds(expr) == (-1, None) and not facts.known_nonneg(expr)
    with facts.assuming({n: (20, 4000)}):
        assert facts.bounds(expr) == (0, 199) and facts.known_nonneg(expr)
        assert facts.bounds(E.as_dim(n * m)) == (0, None)
        assert facts.bounds(E.min_expr(n, 64)) == (20, 64)
        with facts.assuming({n: (40, None), m: (2, 8)}):  # narrowed, never widened
            assert facts.range_of(n) == (40, 4000)
            assert facts.bounds(E.as_dim(n * m - n)) == (80 - 4000, 32000 - 40)
        assert facts.range_of(m) == (0, None)
    assert facts.range_of(n) == (0, None)


def test_a_slice_bound_the_range_makes_nonnegative():
    """`x[:, :n - 3]` has a length only where n >= 3: the shape rule refuses it without the
    fact and takes it with it."""
    n = E.Var("n")
    with pytest.raises(ShapeError, match="symbolic bounds must be nonnegative"):
        slice_length(n, 0, E.as_dim(n - 3), 1)
    with facts.assuming({n: (5, None)}):
        length = slice_length(n, 0, E.as_dim(n - 3), 1)
    assert E.evaluate(length, {n: 9}) == 6


def test_entry_ranges_are_the_checks_before_the_first_other_binding():
    n = E.Var("n")
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((n,), "float32"))
    bb.bind(ShapeExpr((), ((E.compare("ge", n, 5), "too small"), (E.compare("le", n, 64), "too big"))),
            ShapeType(0, ()), name="input_ranges")
    y = bb.emit("relu", x, name="y")
    bb.bind(ShapeExpr((), ((E.compare("le", n, 8), "later"),)), ShapeType(0, ()), name="later")
    fn = bb.finish([y], ["y"])
    assert facts.entry_ranges(fn) == {n: (5, 64)}


def _trimmed(checked: bool) -> IRModule:
    """`x[:, :n - 3]`, built where n >= 5 is known, with or without the entry check."""
    n = E.Var("n")
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((2, n), "float32"))
    if checked:
        bb.bind(ShapeExpr((), ((E.compare("ge", n, 5), "n must be at least 5"),)),
                ShapeType(0, ()), name="input_ranges")
    with facts.assuming({n: (5, None)}):
        y = bb.emit("strided_slice", x, name="y", begin=[0], end=[E.as_dim(n - 3)], axes=[1],
                    strides=[1])
    return IRModule({"main": bb.finish([y], ["y"])})


def test_the_parser_assumes_a_function_s_entry_checks():
    """The text of a function whose types rest on its ranges parses back: the parser
    assumes the ranges from the checks it read first. Without the check, the slice's end
    may be negative, and the text is refused."""
    text = str(_trimmed(checked=True))
    assert str(parse_module(text)) == text
    with pytest.raises(ParseError, match="symbolic bounds must be nonnegative"):
        parse_module(str(_trimmed(checked=False)))
