"""torch's symbolic sizes (sympy expressions over the program's size symbols) as tcc sizes.

`torch.export` describes every size as an expression of the symbols of its dynamic
dimensions (`s27*s45`, `FloorDiv(s0, 2)`); each symbol becomes a tcc size variable and each
expression the same arithmetic over those variables.
"""

from __future__ import annotations

from collections.abc import Callable

from tcc.ir.errors import FrontendError
from tcc.ir.expr import Dim, Var, as_dim, max_expr, min_expr


def to_dim(expr, var_of: Callable[[object], Var]) -> Dim:
    """The tcc size of the sympy expression `expr`; `var_of(symbol)` names each symbol."""
    import sympy

    if isinstance(expr, int):
        return expr
    if isinstance(expr, sympy.Integer) or (isinstance(expr, sympy.Number) and expr == int(expr)):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return var_of(expr)
    args = [to_dim(a, var_of) for a in expr.args]
    kind = type(expr).__name__
    if isinstance(expr, sympy.Add):
        return as_dim(_fold(args, lambda a, b: a + b))
    if isinstance(expr, sympy.Mul):
        return as_dim(_fold(args, lambda a, b: a * b))
    if kind in ("FloorDiv", "CleanDiv"):  # CleanDiv: a division torch knows to be exact
        return as_dim(args[0] // args[1])
    if kind == "CeilDiv":  # of sizes, so both operands are positive
        return as_dim((args[0] + args[1] - 1) // args[1])
    if kind in ("Mod", "PythonMod"):
        return as_dim(args[0] % args[1])
    if kind == "Max":
        return _fold(args, max_expr)
    if kind == "Min":
        return _fold(args, min_expr)
    if isinstance(expr, sympy.Pow) and isinstance(args[1], int) and args[1] >= 0:
        return as_dim(_fold([args[0]] * args[1], lambda a, b: a * b) if args[1] else 1)
    raise FrontendError(f"size expression {expr} ({kind}) is not supported; "
                        "export the model with static sizes for that dimension")


def _fold(args, fn):
    out = args[0]
    for a in args[1:]:
        out = fn(out, a)
    return out
