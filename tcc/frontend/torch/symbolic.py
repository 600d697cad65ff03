"""torch's symbolic sizes (sympy expressions over the program's size symbols) as tcc sizes.

`torch.export` describes every size as an expression of the symbols of its dynamic
dimensions (`s27*s45`, `FloorDiv(s0, 2)`) and of the values the program reads from tensors
(`u0`, from `.item()`); each symbol becomes a tcc size variable and each expression the same
arithmetic over those variables. A condition on sizes (`u0 <= s77`, torch's SymBool) becomes
the same comparison (`to_condition`).
"""

from __future__ import annotations

from collections.abc import Callable

from tcc.ir import expr as E
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


_RELATIONS = {"GreaterThan": "ge", "StrictGreaterThan": "gt", "LessThan": "le",
              "StrictLessThan": "lt", "Equality": "eq", "Unequality": "ne"}


def to_condition(expr, var_of: Callable[[object], Var]) -> E.PrimExpr | bool:
    """The tcc boolean of the sympy condition `expr` (comparisons of sizes joined by and, or,
    not); a Python bool where sympy already knows it."""
    import sympy

    if expr is sympy.true or expr is True:
        return True
    if expr is sympy.false or expr is False:
        return False
    kind = type(expr).__name__
    if kind in _RELATIONS:
        a, b = (to_dim(x, var_of) for x in expr.args)
        c = E.compare(_RELATIONS[kind], a, b)
        return bool(c.value) if isinstance(c, E.IntImm) else c
    parts = [to_condition(a, var_of) for a in expr.args]
    if isinstance(expr, sympy.Not):
        return (not parts[0]) if isinstance(parts[0], bool) else E.Not(parts[0])
    if isinstance(expr, (sympy.And, sympy.Or)):
        op = "and" if isinstance(expr, sympy.And) else "or"
        out = E.const(int(parts[0]), "bool") if isinstance(parts[0], bool) else parts[0]
        for p in parts[1:]:
            out = E.logic(op, out, E.const(int(p), "bool") if isinstance(p, bool) else p)
        return bool(out.value) if isinstance(out, E.IntImm) else out
    raise FrontendError(f"condition {expr} ({kind}) is not supported")


def _fold(args, fn):
    out = args[0]
    for a in args[1:]:
        out = fn(out, a)
    return out
