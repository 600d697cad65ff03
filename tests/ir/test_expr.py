"""Symbolic integer arithmetic: simplification keeps values and reaches canonical forms."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcc.ir.expr import (
    BinOp,
    IntImm,
    Var,
    as_dim,
    binop,
    evaluate,
    max_expr,
    min_expr,
    prove_equal,
    simplify,
)

n, m = Var("n"), Var("m")


@pytest.mark.parametrize(
    "expr, expected",
    [
        (n * 4 // 4, n),
        (n - n, 0),
        ((n * 4 + 3) // 4, n),
        ((n * 6 + 4) % 3, 1),
        ((n * 12) // (n * 3), 4),
        ((n * m * 8) // (n * 2), m * 4),
        (n * 2 + n, n * 3),
        ((n + 1) * (n - 1), n * n - 1),
        (max_expr(n + 1, n), n + 1),
        (min_expr(n + 1, n), n),
        ((n + m) // (n + m), 1),
    ],
)
def test_simplifies_to_canonical_form(expr, expected):
    assert prove_equal(expr, expected)
    assert as_dim(expr) == as_dim(expected)


def test_constants_fold_to_ints():
    assert as_dim(n * 0 + 5) == 5
    assert isinstance(simplify(binop("add", IntImm(2), IntImm(3))), IntImm)


def test_unknown_relations_stay_symbolic():
    assert not prove_equal(n, m)
    assert not isinstance(as_dim((n + 5) % 4), int)


_ops = st.sampled_from(["add", "sub", "mul", "floordiv", "floormod", "min", "max"])


@st.composite
def int_exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.one_of(st.sampled_from([n, m]), st.integers(-5, 9).map(IntImm)))
    op = draw(_ops)
    a = draw(int_exprs(depth=depth - 1))
    b = draw(int_exprs(depth=depth - 1))
    if op in ("floordiv", "floormod"):
        b = IntImm(draw(st.integers(1, 6)))
    return BinOp(op, a, b, "int64")  # raw tree: no simplification while building


@settings(max_examples=300, deadline=None)
@given(int_exprs(), st.integers(1, 50), st.integers(1, 50))
def test_simplification_preserves_value(e, nv, mv):
    """The canonical form evaluates like the raw tree, for every binding."""
    env = {n: nv, m: mv}
    assert evaluate(simplify(e), env) == evaluate(e, env)
