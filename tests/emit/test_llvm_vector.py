"""The vector plan's reading of flat offsets (tcc.emit.llvm_vector)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tcc.emit.llvm_vector import _linear_step, access_kind
from tcc.ir.expr import BinOp, IntImm, Var, evaluate, simplify

u, n, m = Var("u", "int64"), Var("n", "int64"), Var("m", "int64")
_ops = st.sampled_from(["add", "sub", "mul", "floordiv", "floormod"])


@st.composite
def offsets(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.one_of(st.sampled_from([u, n, m]), st.integers(-4, 9).map(
            lambda v: IntImm(v, "int64"))))
    op = draw(_ops)
    a, b = draw(offsets(depth=depth - 1)), draw(offsets(depth=depth - 1))
    if op in ("floordiv", "floormod"):
        b = IntImm(draw(st.integers(1, 6)), "int64")
    return BinOp(op, a, b, "int64")


@settings(max_examples=400, deadline=None)
@given(offsets(), st.integers(0, 40), st.integers(1, 30), st.integers(1, 30))
def test_the_linear_step_is_what_the_offset_grows_by(e, k, nv, mv):
    """Where the shortcut reads a step off the normal form, the offset grows by exactly that
    from lane k to lane k + 1, for every binding of the other variables."""
    flat = simplify(e)
    step = _linear_step(flat, u)
    if step is not None:
        grow = evaluate(flat, {u: k + 1, n: nv, m: mv}) - evaluate(flat, {u: k, n: nv, m: mv})
        assert grow == step


def test_access_kinds():
    row = simplify(BinOp("add", BinOp("mul", n, IntImm(64, "int64"), "int64"), u, "int64"))
    assert access_kind(row, u) == "contiguous"
    assert access_kind(simplify(BinOp("mul", u, IntImm(3, "int64"), "int64")), u) == "gather"
    assert access_kind(simplify(BinOp("add", n, m, "int64")), u) == "uniform"
    # u inside a division: the shortcut gives up and the offset is simplified
    halves = simplify(BinOp("floordiv", u, IntImm(2, "int64"), "int64"))
    assert _linear_step(halves, u) is None
    assert access_kind(halves, u) == "gather"
    whole = simplify(BinOp("add", BinOp("floordiv", n, IntImm(2, "int64"), "int64"), u, "int64"))
    assert _linear_step(whole, u) == 1 and access_kind(whole, u) == "contiguous"
