"""The parts of a buffer that blocks touch, stated in loop variables, and their bounds.

compute_at and reverse_compute_at need, for one iteration of a loop, the box of a buffer
that the blocks under it read or write. Each access is stated in loop variables (a block's
bindings substituted into its declared region); the loops inside the target loop are
relaxed over their ranges while the target loop and the loops around it stay symbolic; and
interval arithmetic bounds every index: sums, constant multiples, floor division and modulo
by a positive constant, min and max; an index free of relaxed variables is its own bound.
An index it cannot bound (a product of two relaxed variables, a load) makes the caller
refuse. A caller may also pass what the `if`s around an access guarantee (`upper_facts`:
`f < 1152` bounds `f` and so `f // 72`); compact_buffers does for shared buffers. `gapless` tells when a box is exactly the set of elements touched, not a cover of
it, which reverse_compute_at needs to know that it only reads elements already complete.
`accesses` lists every access under a statement (declared regions, loads, stores) in loop
variables with the loops around it, for the dependence check of parallel loops and for
compacting buffers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.structural import structural_equal
from tcc.lower.schedule.rewrite import conjuncts, substitute_expr

Interval = tuple[E.PrimExpr, E.PrimExpr]  # inclusive lower and upper bounds


@dataclass(frozen=True)
class Box:
    """Per buffer dimension, the first index and the number of indices."""

    mins: tuple[E.PrimExpr, ...]
    extents: tuple[E.PrimExpr, ...]


def const_value(e) -> int | None:
    """The value of an integer expression that simplifies to a constant."""
    e = E.simplify(E.const(e))
    return e.value if isinstance(e, E.IntImm) else None


def loop_ranges(loops) -> dict[int, Interval]:
    """Loop variable (by id) -> its inclusive range, for `bounds`."""
    return {id(f.var): (f.min, E.simplify(f.min + f.extent - 1)) for f in loops}


def bounds(e: E.PrimExpr, ranges: dict[int, Interval], facts=()) -> Interval | None:
    """Inclusive bounds of an integer expression when the variables in `ranges` vary over
    their ranges (other variables are fixed); None when it cannot tell. `facts` are
    (expression, constant) pairs known to hold as `expression <= constant` (`upper_facts`):
    a subexpression that is one of them is bounded by it too."""
    found = _bounds(e, ranges, facts)
    if found is not None and facts:
        for expr, most in facts:
            if structural_equal(e, expr):
                high = const_value(found[1])
                if high is not None and high > most:
                    found = (found[0], E.const(most))
    return found


def _bounds(e: E.PrimExpr, ranges: dict[int, Interval], facts) -> Interval | None:
    if isinstance(e, E.Var):
        return ranges.get(id(e), (e, e))
    if not E.has_load(e) and not any(id(v) in ranges for v in E.free_vars(e)):
        return e, e  # fixed: exact, where the rules below would lose `t % 4` to [0, 3]
    if not isinstance(e, E.BinOp):
        return None
    a, b = bounds(e.a, ranges, facts), bounds(e.b, ranges, facts)
    if a is None or b is None:
        return None
    if e.op == "add":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if e.op in ("min", "max"):
        return E.binop(e.op, a[0], b[0]), E.binop(e.op, a[1], b[1])
    return _scaled(e.op, a, b)


def _single(iv: Interval) -> int | None:
    """The value of an interval holding one constant."""
    lo, hi = const_value(iv[0]), const_value(iv[1])
    return lo if lo is not None and lo == hi else None


def _scaled(op: str, a: Interval, b: Interval) -> Interval | None:
    """Bounds of `a op b` for mul, floordiv and floormod when one side is a constant."""
    c = _single(b)
    if op == "mul" and c is None:
        a, c = b, _single(a)
    if c is None:
        return None
    if op == "mul":
        return (a[0] * c, a[1] * c) if c >= 0 else (a[1] * c, a[0] * c)
    if c <= 0:
        return None
    if op == "floordiv":
        return a[0] // c, a[1] // c
    if op == "floormod":
        lo, hi = const_value(a[0]), const_value(a[1])
        if lo is not None and hi is not None and lo // c == hi // c:
            return E.const(lo % c), E.const(hi % c)
        return E.const(0), E.const(c - 1)
    return None


def access_in_loops(block: T.Block, region: T.BufferRegion, bindings: dict) -> T.BufferRegion:
    """A region a block declares, stated in loop variables instead of iteration variables."""
    return T.BufferRegion(
        region.buffer,
        tuple((substitute_expr(lo, bindings), ext) for lo, ext in region.ranges),
    )


def box(regions: list[T.BufferRegion], ranges: dict[int, Interval], facts=None) -> Box | None:
    """The smallest box holding every region as the variables in `ranges` vary; None when
    an index cannot be bounded. `facts`, when given, holds per region what `bounds` may
    use of the conditions it is read or written under."""
    mins: list[E.PrimExpr] = []
    maxs: list[E.PrimExpr] = []
    for k, r in enumerate(regions):
        known = facts[k] if facts else ()
        for d, (lo, ext) in enumerate(r.ranges):
            low = bounds(lo, ranges, known)
            high = bounds(E.simplify(lo + ext - 1), ranges, known)
            if low is None or high is None:
                return None
            if d == len(mins):
                mins.append(low[0])
                maxs.append(high[1])
            else:
                mins[d] = E.simplify(E.binop("min", mins[d], low[0]))
                maxs[d] = E.simplify(E.binop("max", maxs[d], high[1]))
    extents = tuple(E.simplify(hi - lo + 1) for lo, hi in zip(mins, maxs))
    return Box(tuple(E.simplify(m) for m in mins), extents)


def _linear_terms(e: E.PrimExpr, relaxed: list[E.Var]) -> dict[int, int] | None:
    """Coefficient of each relaxed variable (by id) when `e` is affine in them."""
    zero = {v: E.const(0, v.dtype) for v in relaxed}
    base = substitute_expr(e, zero)
    coeffs: dict[int, int] = {}
    rebuilt = base
    for v in relaxed:
        c = const_value(substitute_expr(e, {**zero, v: E.const(1, v.dtype)}) - base)
        if c is None:
            return None
        if c:
            coeffs[id(v)] = c
            rebuilt = rebuilt + v * c
    return coeffs if E.prove_equal(E.simplify(rebuilt - e), 0) else None


def gapless(region: T.BufferRegion, loops: list[T.For]) -> bool:
    """Whether the elements `region` (in loop variables) touches as `loops` run fill a box
    with no gaps: every index affine in the loop variables with positive coefficients that
    step by at most what the smaller terms span, and no loop feeding two dimensions."""
    relaxed = [f.var for f in loops]
    extents = {id(f.var): const_value(f.extent) for f in loops}
    seen: set[int] = set()
    for lo, ext in region.ranges:
        if const_value(ext) != 1:
            return False
        coeffs = _linear_terms(lo, relaxed)
        if coeffs is None or seen & set(coeffs):
            return False
        seen |= set(coeffs)
        reach = 0  # the terms so far cover offsets 0..reach without a gap
        for var_id, c in sorted(coeffs.items(), key=lambda kv: kv[1]):
            n = extents[var_id]
            if c < 0 or n is None or c > reach + 1:
                return False
            reach += c * (n - 1)
    return True


def iter_loads(node) -> Iterator[E.BufferLoad]:
    """Every buffer load in a statement or expression (also inside load indices)."""
    if isinstance(node, E.BufferLoad):
        yield node
    if isinstance(node, tuple):
        for x in node:
            yield from iter_loads(x)
    elif isinstance(node, (E.PrimExpr, T.Stmt, T.IterVar, T.BufferRegion)):
        for name in node.__dataclass_fields__:
            yield from iter_loads(getattr(node, name))


@dataclass(frozen=True)
class Access:
    """One access to a buffer under a walked statement: a region a block declares, or a load
    or store in a body. `region` is as the IR states it (iteration variables), `in_loops`
    the same with every iteration variable replaced by its binding, and `loops` the loops
    around it under the walked statement, outermost first: the ones to relax for the part
    one iteration of an enclosing loop touches."""

    block: T.Block | None  # the innermost block around it; None outside every block
    kind: str  # "writes" or "reads"
    region: T.BufferRegion
    in_loops: T.BufferRegion
    loops: tuple[T.For, ...]
    bindings: dict  # iteration Var -> its value in loop variables, at the access
    guards: tuple[E.PrimExpr, ...] = ()  # conditions of the `if`s it is under, in loop variables

    @property
    def buffer(self) -> T.Buffer:
        return self.region.buffer


def point_region(buffer: T.Buffer, indices) -> T.BufferRegion:
    """The one element at `indices`."""
    return T.BufferRegion(buffer, tuple((i, E.const(1)) for i in indices))


def _expr_parts(s: T.Stmt) -> tuple:
    """The expressions a statement evaluates itself (not those of statements inside it)."""
    if isinstance(s, T.For):
        return (s.min, s.extent)
    if isinstance(s, T.IfThenElse):
        return (s.cond,)
    if isinstance(s, T.BufferStore):
        return (s.value, *s.indices)
    if isinstance(s, T.Evaluate):
        return (s.value,)
    return ()


def accesses(stmt: T.Stmt, bindings: dict | None = None) -> list[Access]:
    """Every access under `stmt` in program order: per block its declared writes and reads,
    then the stores and loads of its init and body; loads and stores outside blocks too.
    `bindings` gives the iteration variables of blocks around `stmt`."""
    found: list[Access] = []
    _walk_accesses(stmt, dict(bindings or {}), (), None, found, ())
    return found


def _walk_accesses(s, env: dict, loops: tuple, owner, found: list[Access], guards: tuple) -> None:
    if isinstance(s, T.Block):
        env = {**env, **{iv.var: substitute_expr(iv.binding, env) for iv in s.iter_vars}}
        for kind, regions in (("writes", s.writes), ("reads", s.reads)):
            found.extend(_access(s, kind, r, env, loops, guards) for r in regions)
        for part in (s.init, s.body):
            if part is not None:
                _walk_accesses(part, env, loops, s, found, guards)
        return
    if isinstance(s, T.BufferStore):
        found.append(_access(owner, "writes", point_region(s.buffer, s.indices), env, loops, guards))
    for ld in iter_loads(_expr_parts(s)):
        found.append(_access(owner, "reads", point_region(ld.buffer, ld.indices), env, loops, guards))
    if isinstance(s, T.For):
        _walk_accesses(s.body, env, (*loops, s), owner, found, guards)
    elif isinstance(s, T.SeqStmt):
        for x in s.stmts:
            _walk_accesses(x, env, loops, owner, found, guards)
    elif isinstance(s, T.IfThenElse):
        _walk_accesses(s.then_case, env, loops, owner, found, (*guards, substitute_expr(s.cond, env)))
        if s.else_case is not None:
            _walk_accesses(s.else_case, env, loops, owner, found, guards)
    elif isinstance(s, T.Allocate):
        _walk_accesses(s.body, env, loops, owner, found, guards)


def _access(block, kind: str, region: T.BufferRegion, env: dict, loops: tuple,
            guards: tuple) -> Access:
    in_loops = T.BufferRegion(
        region.buffer, tuple((substitute_expr(lo, env), ext) for lo, ext in region.ranges)
    )
    return Access(block, kind, region, in_loops, loops, env, guards)


def upper_facts(guards) -> list[tuple[E.PrimExpr, int]]:
    """(e, c) for each term `e < c + 1` or `e <= c` (a constant c) of the conditions
    `guards`: what holds wherever an access under them runs (a fused copy loop's guard of
    its last pass, `f < 1152`), for `bounds`."""
    facts = []
    for g in guards:
        for term in conjuncts(g):
            if isinstance(term, E.Cmp) and term.op in ("lt", "le"):
                c = const_value(term.b)
                if c is not None:
                    facts.append((term.a, c - 1 if term.op == "lt" else c))
    return facts
