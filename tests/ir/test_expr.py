"""Symbolic integer arithmetic: simplification keeps values and reaches canonical forms."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcc.ir.expr import (
    BinOp,
    BufferLoad,
    IntImm,
    PrimExpr,
    Var,
    as_dim,
    binop,
    evaluate,
    free_vars,
    has_load,
    max_expr,
    min_expr,
    prove_equal,
    simplify,
    uses,
)
from tcc.ir.tir import Buffer
from tests.ir.strategies import Env, exprs

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
        # absorption: a slice x[:, :n] of a 256-long buffer, broadcast against n
        (max_expr(max_expr(n, max_expr(min_expr(n, 256), n)), min_expr(n, 256)), n),
        (min_expr(max_expr(m, n * 2), n * 2), n * 2),
    ],
)
def test_simplifies_to_canonical_form(expr, expected):
    assert prove_equal(expr, expected)
    assert as_dim(expr) == as_dim(expected)


@pytest.mark.parametrize("a, b", [
    ((n - 10) // 5 + 1, n // 5 - 1),  # a strided conv's length, as two exporters write it
    ((n + 17) % 16, (n + 1) % 16),
    (n // 5 // 2, n // 10),
    ((((n - 10) // 5 + 1) - 3) // 2 + 1, n // 10 - 1),
])
def test_equal_divisions_written_differently(a, b):
    assert prove_equal(a, b)
    assert not prove_equal(a, b + 1)


def test_simplify_keeps_the_form_of_divisions():
    """Kernels' index expressions keep their forms: only prove_equal rewrites divisions."""
    assert str(simplify((n - 10) // 5)) == "(n - 10) // 5"
    assert str(simplify(n // 5 // 2)) == "n // 5 // 2"


def test_constants_fold_to_ints():
    assert as_dim(n * 0 + 5) == 5
    assert isinstance(simplify(binop("add", IntImm(2), IntImm(3))), IntImm)


def test_unknown_relations_stay_symbolic():
    assert not prove_equal(n, m)
    assert not prove_equal(max_expr(min_expr(n + 1, 4), n), n)  # n + 1 is not n
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


@settings(max_examples=300, deadline=None)
@given(int_exprs(), st.integers(1, 50), st.integers(1, 50))
def test_division_forms_preserve_value(e, nv, mv):
    """The stronger normal form prove_equal tries second evaluates like the raw tree too."""
    from tcc.ir import expr

    expr._DIVISION_FORMS[0] = True
    try:
        strong = expr._from_poly(expr._to_poly(e), "int64")
    finally:
        expr._DIVISION_FORMS[0] = False
    env = {n: nv, m: mv}
    assert evaluate(strong, env) == evaluate(e, env)


_x, _y, _i = Var("x", "float32"), Var("y", "int32"), Var("i")
_TABLE = Buffer("t", (4, n), "float32")


def _walk(e, found: list, loads: list) -> None:
    """free_vars' and has_load's answers, found by a plain walk of the whole tree."""
    if isinstance(e, Var):
        if not any(v is e for v in found):
            found.append(e)
        return
    if isinstance(e, BufferLoad):
        loads.append(e)
    for name in getattr(e, "__dataclass_fields__", ()):
        x = getattr(e, name)
        for y in x if isinstance(x, tuple) else (x,):
            if isinstance(y, PrimExpr):
                _walk(y, found, loads)


@settings(max_examples=200, deadline=None)
@given(exprs("float32", Env([n, m, _x, _y, _i], [_TABLE]), depth=4), st.booleans())
def test_kept_variables_and_loads_agree_with_a_walk(e, children_first):
    """A node keeps its variables and whether it loads; asked in any order (the children
    first, whose answers the parent then reuses), the answers are the whole tree's."""
    want, loads = [], []
    _walk(e, want, loads)
    if children_first:
        for name in e.__dataclass_fields__:
            x = getattr(e, name)
            for y in x if isinstance(x, tuple) else (x,):
                if isinstance(y, PrimExpr):
                    free_vars(y), has_load(y)
    for _ in range(2):  # found, then kept
        assert [id(v) for v in free_vars(e)] == [id(v) for v in want]
        assert has_load(e) == bool(loads)
        assert all(uses(e, v) for v in want) and not uses(e, Var("elsewhere"))
    both = [*want, *(v for v in (_x, m) if not any(v is w for w in want))]
    assert [id(v) for v in free_vars([e, _x, m])] == [id(v) for v in both]
