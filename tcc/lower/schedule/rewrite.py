"""Statement rewriting shared by the primitives: variable substitution and block predicates.

`substitute_stmt` replaces loop variables throughout a statement (loop bounds, block
bindings, predicates, indices) and keeps every subtree that does not mention them as the
same object, so a rewrite touches only what it must and unrelated code stays identical.
`guard` makes the blocks under a statement run only where a condition holds: it wraps each
block (or other leaf) in an `IfThenElse` placed right around it, merged with a predicate
already there, so the loops above stay perfectly nested for later primitives.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T


def substitute_expr(e: E.PrimExpr, mapping: dict) -> E.PrimExpr:
    """`e` with variables (keys of `mapping`, by identity) replaced; rebuilt (and integer parts simplified) only where it changes."""
    if isinstance(e, E.Var):
        return E.const(mapping.get(e, e))
    if isinstance(e, E.BinOp):
        a, b = substitute_expr(e.a, mapping), substitute_expr(e.b, mapping)
        if a is e.a and b is e.b:
            return e
        return E.binop(e.op, a, b)
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, E.PrimExpr):
            new = substitute_expr(v, mapping)
        elif isinstance(v, tuple) and v and isinstance(v[0], E.PrimExpr):
            new = tuple(substitute_expr(x, mapping) for x in v)
            new = v if all(x is y for x, y in zip(new, v)) else new
        else:
            continue
        if new is not v:
            changes[f.name] = new
    return dataclasses.replace(e, **changes) if changes else e


def _substitute_value(v, mapping: dict):
    if isinstance(v, E.PrimExpr):
        return substitute_expr(v, mapping)
    if isinstance(v, tuple):
        new = tuple(_substitute_value(x, mapping) for x in v)
        return v if all(x is y for x, y in zip(new, v)) else new
    if isinstance(v, (T.Stmt, T.IterVar, T.BufferRegion)):
        return substitute_stmt(v, mapping)
    return v  # buffers, names, kinds: never hold loop variables


def substitute_stmt(s, mapping: dict):
    """A statement (or IterVar/BufferRegion) with variables replaced throughout."""
    if not mapping:
        return s
    changes = {}
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        new = _substitute_value(v, mapping)
        if new is not v:
            changes[f.name] = new
    return dataclasses.replace(s, **changes) if changes else s


def guard(s: T.Stmt, cond: E.PrimExpr) -> T.Stmt:
    """`s` with every leaf under its loops and sequences run only where `cond` holds."""
    if isinstance(s, T.For):
        return dataclasses.replace(s, body=guard(s.body, cond))
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(guard(x, cond) for x in s.stmts))
    if isinstance(s, T.IfThenElse) and s.else_case is None and isinstance(s.then_case, T.Block):
        return T.IfThenElse(E.Logic("and", s.cond, cond), s.then_case)
    return T.IfThenElse(cond, s)
