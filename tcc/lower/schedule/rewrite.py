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
from tcc.ir.fields import field_names


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
    for fname in field_names(e):
        v = getattr(e, fname)
        if isinstance(v, E.PrimExpr):
            new = substitute_expr(v, mapping)
        elif isinstance(v, tuple) and v and isinstance(v[0], E.PrimExpr):
            new = tuple(substitute_expr(x, mapping) for x in v)
            new = v if all(x is y for x, y in zip(new, v)) else new
        else:
            continue
        if new is not v:
            changes[fname] = new
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
    for fname in field_names(s):
        v = getattr(s, fname)
        new = _substitute_value(v, mapping)
        if new is not v:
            changes[fname] = new
    return dataclasses.replace(s, **changes) if changes else s


def conjuncts(cond: E.PrimExpr) -> list[E.PrimExpr]:
    """The terms of a chain of `and`s (the condition itself when it is not one)."""
    if isinstance(cond, E.Logic) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def conjunction(conds: list[E.PrimExpr]) -> E.PrimExpr:
    """`conds[0] and conds[1] and ...` (at least one condition)."""
    cond = conds[0]
    for c in conds[1:]:
        cond = E.Logic("and", cond, c)
    return cond


def guard(s: T.Stmt, cond: E.PrimExpr) -> T.Stmt:
    """`s` with every leaf under its loops and sequences run only where `cond` holds."""
    if isinstance(s, T.For):
        return dataclasses.replace(s, body=guard(s.body, cond))
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(guard(x, cond) for x in s.stmts))
    if isinstance(s, T.IfThenElse) and s.else_case is None and isinstance(s.then_case, T.Block):
        return T.IfThenElse(E.Logic("and", s.cond, cond), s.then_case)
    return T.IfThenElse(cond, s)


def map_exprs(node, fn):
    """`node` (a statement, IterVar, BufferRegion or expression) with every expression
    rebuilt bottom-up and passed through `fn`, which returns a replacement or None to keep
    it; subtrees that do not change stay the same objects."""
    if isinstance(node, E.PrimExpr):
        rebuilt = _map_fields(node, fn)
        new = fn(rebuilt)
        return rebuilt if new is None else new
    if isinstance(node, (T.Stmt, T.IterVar, T.BufferRegion)):
        return _map_fields(node, fn)
    return node


def _map_fields(node, fn):
    changes = {}
    for fname in field_names(node):
        v = getattr(node, fname)
        if isinstance(v, tuple):
            new = tuple(
                tuple(map_exprs(y, fn) for y in x) if isinstance(x, tuple) else map_exprs(x, fn)
                for x in v
            )
            new = v if all(_same(x, y) for x, y in zip(new, v)) else new
        else:
            new = map_exprs(v, fn)
        if new is not v:
            changes[fname] = new
    return dataclasses.replace(node, **changes) if changes else node


def _same(x, y) -> bool:
    if isinstance(x, tuple) and isinstance(y, tuple):
        return all(a is b for a, b in zip(x, y))
    return x is y


def replace_buffer(node, old: T.Buffer, new: T.Buffer):
    """`node` with every store, load and region of buffer `old` using `new` instead."""

    def swap(x):
        if isinstance(x, (E.BufferLoad, T.BufferStore, T.BufferRegion)) and x.buffer is old:
            return dataclasses.replace(x, buffer=new)
        return x

    def in_stmt(s):
        s = map_exprs(s, lambda e: swap(e) if isinstance(e, E.BufferLoad) else None)
        return _swap_stmts(s, swap)

    return in_stmt(node)


def _swap_stmts(node, swap):
    """Apply `swap` to every statement and region under `node` (expressions excluded)."""
    if isinstance(node, tuple):
        new = tuple(_swap_stmts(x, swap) for x in node)
        return node if all(a is b for a, b in zip(new, node)) else new
    if not isinstance(node, (T.Stmt, T.BufferRegion)):
        return node
    changes = {}
    for fname in field_names(node):
        v = getattr(node, fname)
        new = _swap_stmts(v, swap)
        if new is not v:
            changes[fname] = new
    return swap(dataclasses.replace(node, **changes) if changes else node)


def map_blocks(s: T.Stmt, fn) -> T.Stmt | None:
    """`s` with every block `b` (outermost first) replaced by `fn(b)`; None removes a block,
    and the loops and branches its removal leaves empty go with it (None when nothing of
    `s` is left)."""
    if isinstance(s, T.Block):
        new = fn(s)
        if new is None:
            return None
        body = map_blocks(new.body, fn)
        body = T.SeqStmt(()) if body is None else body
        return new if body is new.body else dataclasses.replace(new, body=body)
    if isinstance(s, (T.For, T.Allocate)):
        body = map_blocks(s.body, fn)
        if body is None:
            return None
        return s if body is s.body else dataclasses.replace(s, body=body)
    if isinstance(s, T.IfThenElse):
        then = map_blocks(s.then_case, fn)
        other = None if s.else_case is None else map_blocks(s.else_case, fn)
        if then is None and other is None:
            return None
        if then is s.then_case and other is s.else_case:
            return s
        return T.IfThenElse(s.cond, T.SeqStmt(()) if then is None else then, other)
    if isinstance(s, T.SeqStmt):
        items = [map_blocks(x, fn) for x in s.stmts]
        kept = [x for x in items if x is not None]
        if s.stmts and not kept:
            return None
        if all(a is b for a, b in zip(items, s.stmts)):
            return s
        return T.seq(*kept)
    return s
