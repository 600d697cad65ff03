"""Unswitching tile guards: a guard-free copy of each tile for the iterations where every
guard in it holds.

A split whose factor does not divide the extent (a symbolic extent always) guards its
blocks with `outer * factor + inner < extent`. The guard holds everywhere but in the last
tile, yet it keeps the lanes of a vectorized loop apart (the loop runs scalar) and is tested
at every step of the loops between. `unswitch_guards` rewrites the body of each guard's
*anchor* loop into

    if <every guard anchored here holds at the worst corner of the tile>:
        body with those guards removed
    else:
        body

Guards are taken one conjunct (`a < b`, `a <= b`, `a > b`, `a >= b` on integers) at a
time. A conjunct's anchor is found walking out from it: loops with a constant extent in
whose variable the conjunct is affine (a constant step) belong to the tile and stay free
in it; the first loop the conjunct depends on otherwise — a fused tile index, a symbolic
extent, or the outer loop of a split, whose step covers the tile below it — is the anchor.
The worst corner puts each tile variable at the end of its range that makes the conjunct
tightest, so the test implies the conjunct for every iteration of the tile and the copy
computes exactly what the original does. A test that is constant decides alone: false (a
padding window along the vector lanes is cut in every tile) keeps the conjunct where it
is, true drops it without a copy. Selects in blocks (a convolution's padding) are treated
like guards, with the block's iteration variables replaced by their bindings; a select
whose conditions all hold is its first value. A conjunct with no tile variable, one
depending on a variable bound inside the anchor other than by a loop, or one that reads a
buffer (a window whose start is a tensor's value: the read is no function of the tile's
corner, and the anchor's body may write what it reads) is left where it is.

Changes: control flow (the tested copies) and, inside a copy, the guards and select
conditions its test proves. Preserves: every block, its iterations and their order,
buffers and results.
"""

from __future__ import annotations

import dataclasses

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import INT_DTYPES
from tcc.lower.schedule.rewrite import conjunction, conjuncts, map_exprs

_FLIP = {"gt": "lt", "ge": "le"}


def unswitch_guards(func: T.PrimFunc) -> T.PrimFunc:
    """`func` with a guard-free copy of every tile whose guards can be tested up front."""
    body = _visit(func.body, [], _Memo())
    return func if body is func.body else dataclasses.replace(func, body=body)


class _Memo:
    """What one function's loops find again: every loop around a block collects the block's
    select conditions and works out each conjunct's anchor, but the block, its conditions
    and the loops above a conjunct are the same objects each time (a Winograd transform's
    body, 36 unrolled positions of selects, was walked once per loop around it)."""

    def __init__(self):
        # (id(stmt), id(its block's iteration variables)) -> (stmt, [(terms, in loops)])
        self.conditions: dict[tuple, tuple] = {}
        self.corners: dict[tuple, tuple] = {}  # (id(conjunct), bound, path ids) -> (kept, hit)

    def select_conditions(self, child: T.Stmt, block: T.Block) -> list:
        """The conjuncts of the selects' conditions in `child`, a statement of `block`, as
        written and with the block's iteration variables replaced by their bindings."""
        key = (id(child), id(block.iter_vars))
        hit = self.conditions.get(key)
        if hit is None or hit[0] is not child or hit[1] is not block.iter_vars:
            bindings = {iv.var: iv.binding for iv in block.iter_vars}
            found = []
            for cond in _select_conditions(child):
                terms = conjuncts(cond)
                found.append((terms, [E.substitute(c, bindings) for c in terms]))
            hit = self.conditions[key] = (child, block.iter_vars, found)
        return hit[2]

    def corner(self, analysed: E.PrimExpr, path: list[T.For], bound: set):
        """_worst_corner of the conjunct `analysed` (None where it reads a buffer or is no
        comparison) below the loops `path`, with the variables `bound` on the way."""
        key = (id(analysed), frozenset(bound), *map(id, path))
        hit = self.corners.get(key)
        if hit is None or hit[0][0] is not analysed:
            found = None
            if not E.has_load(analysed):
                slack = _slack(analysed)
                found = None if slack is None else _worst_corner(slack, path, bound)
            hit = self.corners[key] = ((analysed, path), found)
        return hit[1]


def _visit(s: T.Stmt, scope: list[T.For], memo: _Memo) -> T.Stmt:
    if isinstance(s, T.For):
        body = _visit(s.body, scope + [s], memo)
        body = _unswitch(s, body, scope + [s], memo)
        return s if body is s.body else dataclasses.replace(s, body=body)
    changes = {}
    for field in ("body", "then_case", "else_case", "init"):
        child = getattr(s, field, None)
        if isinstance(child, T.Stmt):
            new = _visit(child, scope, memo)
            if new is not child:
                changes[field] = new
    if isinstance(s, T.SeqStmt):
        stmts = tuple(_visit(x, scope, memo) for x in s.stmts)
        if any(a is not b for a, b in zip(stmts, s.stmts)):
            return T.SeqStmt(stmts)
        return s
    return dataclasses.replace(s, **changes) if changes else s


def _slack(c: E.PrimExpr) -> E.PrimExpr | None:
    """An integer expression that is >= 0 exactly when the comparison `c` holds."""
    if not isinstance(c, E.Cmp) or not (c.a.dtype in INT_DTYPES and c.b.dtype in INT_DTYPES):
        return None
    a, b, op = (c.b, c.a, _FLIP[c.op]) if c.op in _FLIP else (c.a, c.b, c.op)
    if op == "lt":
        return E.simplify(E.binop("sub", E.binop("sub", b, a), 1))
    if op == "le":
        return E.simplify(E.binop("sub", b, a))
    return None


def _step(e: E.PrimExpr, v: E.Var) -> int | None:
    """How much `e` grows when `v` grows by one, if that is a constant."""
    moved = E.substitute(e, {v: E.binop("add", v, 1)})
    diff = E.simplify(E.binop("sub", moved, e))
    return diff.value if isinstance(diff, E.IntImm) else None


def _worst_corner(slack: E.PrimExpr, path: list[T.For], bound_inside: set):
    """(anchor loop, the conjunct at the worst corner of the tile below it) or None."""
    if any(id(v) in bound_inside for v in E.free_vars(slack)):
        return None
    tile: dict[E.Var, E.PrimExpr] = {}
    span = 1  # distinct values the tile variables so far give the slack
    for loop in reversed(path):
        if not E.uses(slack, loop.var):
            continue
        step = _step(slack, loop.var)
        constant = isinstance(loop.extent, E.IntImm)
        covers = step is not None and span > 1 and abs(step) >= span
        if step is None or not constant or covers:
            if not tile:
                return None
            return loop, _at(slack, tile)
        if any(E.uses(loop.min, t) for t in tile):
            return None
        last = E.binop("add", loop.min, loop.extent.value - 1)
        tile[loop.var] = loop.min if step > 0 else last
        span += abs(step) * (loop.extent.value - 1)
    return None


def _at(slack: E.PrimExpr, tile: dict) -> E.PrimExpr:
    return E.Cmp("ge", E.simplify(E.substitute(slack, tile)), E.IntImm(0, slack.dtype))


def _guards(s: T.Stmt, path: list[T.For], bound: set, found: list, memo: _Memo) -> None:
    """Every condition to unswitch: (its conjuncts as written, the same conjuncts in loop
    variables, the loops from the outermost down to it, variables bound on the way) for
    guards and for the conditions of selects in blocks (a convolution's padding), whose
    iteration variables are replaced by their bindings."""
    if isinstance(s, T.IfThenElse) and s.else_case is None:
        terms = conjuncts(s.cond)
        found.append((terms, terms, path, bound))
    if isinstance(s, T.For):
        _guards(s.body, path + [s], bound, found, memo)
        return
    if isinstance(s, T.Block):
        inner = bound | {id(iv.var) for iv in s.iter_vars}
        for child in (s.init, s.body):
            if child is None:
                continue
            for terms, in_loops in memo.select_conditions(child, s):
                found.append((terms, in_loops, path, bound))
            _guards(child, path, inner, found, memo)
        return
    if isinstance(s, T.SeqStmt):
        for x in s.stmts:
            _guards(x, path, bound, found, memo)
        return
    for field in ("then_case", "else_case", "body"):
        child = getattr(s, field, None)
        if isinstance(child, T.Stmt):
            _guards(child, path, bound, found, memo)


def _select_conditions(s: T.Stmt) -> list[E.PrimExpr]:
    """The conditions of the selects in the stores of `s` (not inside nested blocks)."""
    found: list[E.PrimExpr] = []

    def visit(e):
        if isinstance(e, E.Select):
            found.append(e.cond)
        return None

    if isinstance(s, T.BufferStore):
        map_exprs(s.value, visit)
    elif isinstance(s, T.SeqStmt):
        for x in s.stmts:
            found += _select_conditions(x)
    elif isinstance(s, T.IfThenElse):
        found += _select_conditions(s.then_case)
        if s.else_case is not None:
            found += _select_conditions(s.else_case)
    return found


def _unswitch(loop: T.For, body: T.Stmt, scope: list[T.For], memo: _Memo) -> T.Stmt:
    found: list = []
    _guards(body, scope, set(), found, memo)
    proven: dict[E.PrimExpr, E.PrimExpr | None] = {}  # conjunct -> its test (None: always)
    for terms, in_loops, path, bound in found:
        for c, analysed in zip(terms, in_loops):
            hit = memo.corner(analysed, path, bound)
            if hit is None or hit[0] is not loop:
                continue
            known = hit[1].a if isinstance(hit[1].a, E.IntImm) else None
            if known is not None and known.value < 0:
                continue  # false somewhere in every tile (a window along the lanes)
            proven.setdefault(c, None if known is not None else hit[1])
    if not proven:
        return body
    tests = [t for t in dict.fromkeys(proven.values()) if t is not None]
    if not tests:  # holds in every tile: no copy needed
        return _drop(body, set(proven))
    return T.IfThenElse(conjunction(tests), _drop(body, set(proven)), body)


def _drop(s: T.Stmt, proven: set) -> T.Stmt:
    """`s` with the proven conjuncts removed from its guards and its selects' conditions (a
    select left without one is its first value)."""
    if isinstance(s, T.IfThenElse) and s.else_case is None:
        then = _drop(s.then_case, proven)
        keep = [c for c in conjuncts(s.cond) if c not in proven]
        return T.IfThenElse(conjunction(keep), then) if keep else then
    if isinstance(s, T.Block):
        return map_exprs(
            dataclasses.replace(
                s,
                body=_drop(s.body, proven),
                init=None if s.init is None else _drop(s.init, proven),
            ),
            lambda e: _drop_select(e, proven),
        )
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_drop(x, proven) for x in s.stmts))
    changes = {}
    for field in ("body", "then_case", "else_case", "init"):
        child = getattr(s, field, None)
        if isinstance(child, T.Stmt):
            changes[field] = _drop(child, proven)
    return dataclasses.replace(s, **changes) if changes else s


def _drop_select(e: E.PrimExpr, proven: set) -> E.PrimExpr | None:
    if not isinstance(e, E.Select):
        return None
    keep = [c for c in conjuncts(e.cond) if c not in proven]
    if len(keep) == len(conjuncts(e.cond)):
        return None
    return dataclasses.replace(e, cond=conjunction(keep)) if keep else e.true_value


