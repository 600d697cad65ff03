"""torch's size expressions (sympy, with torch's own FloorDiv and Mod) as tcc sizes: the
same value for every binding, and one line for what tcc cannot state."""

import pytest

from tcc.frontend.torch.symbolic import to_dim
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var, evaluate

pytest.importorskip("torch")
sympy = pytest.importorskip("sympy")
from torch.utils._sympy.functions import CeilDiv, FloorDiv, Mod  # noqa: E402

s, t = sympy.Symbol("s", integer=True, positive=True), sympy.Symbol("t", integer=True, positive=True)
VARS = {s: Var("s"), t: Var("t")}


@pytest.mark.parametrize("expr", [
    s * t, 32 * s - 1, FloorDiv(s, 20) - 1, FloorDiv(s - 10, 5) + 1, Mod(s, 7), CeilDiv(s, 16),
    sympy.Max(s, t), sympy.Min(s, 2 * t), s ** 2, FloorDiv(s * t * 8, t),
])
def test_same_value_for_every_binding(expr):
    dim = to_dim(expr, VARS.__getitem__)
    for sv, tv in ((1, 1), (37, 5), (200, 64), (4001, 3)):
        want = int(expr.subs({s: sv, t: tv}))
        got = evaluate(dim, {VARS[s]: sv, VARS[t]: tv}) if not isinstance(dim, int) else dim
        assert got == want, (expr, sv, tv)


def test_an_unsupported_expression_is_one_line():
    with pytest.raises(FrontendError, match=r"size expression .* is not supported; export the model"):
        to_dim(sympy.sqrt(s), VARS.__getitem__)
