"""Whether the iterations of a loop are independent, from the accesses of its blocks.

`parallel`, `vectorize` and `bind` run the iterations of a loop at the same time, which
keeps the result only when no iteration touches an element another iteration writes (no
flow, anti or output dependence between iterations; the order inside one iteration is
kept). Every access under the loop is stated in loop variables (a block's bindings
substituted into its declared regions, its loads and its stores), and the loops inside the
target loop are relaxed over their ranges (`regions.py`), which bounds the box each access
touches in one iteration `t` as a function of `t`. The loop is accepted when

* no reduction variable of a block depends on it (its iterations would accumulate into
  the same element),
* for every buffer written under it (not allocated under it: such storage is private to an
  iteration), each written box and each other access of that buffer are *apart*: what
  iteration `t` writes never meets what another iteration `t'` touches,
* nothing outside blocks stores or branches on memory (undeclared accesses).

Two accesses are apart when some dimension separates them: both boxes' bounds move with
`t` by the same stride `c`, and `|c|` exceeds how far one box reaches past the other's
start. The loop variable enters through its *digits*: `t` itself, or `t // s % m` for a
fused loop; distinct iterations differ in one digit of a set that determines `t`, and
each digit of that set needs a dimension separating on it alone. A write and another
access naming the same one element (in loop variables) are also apart when the writer's
element names every spatial variable the loop feeds (one fused then split, a symbolic
fused extent: what strides cannot show). That relies on bindings mapping loop iterations
one-to-one onto block iterations, as te-built functions and the split and fuse primitives
keep; a producer compute_at recomputes in neighbouring tiles (a stencil's halo) breaks it,
and is refused by its consumer, which reads what the neighbour's producer writes too.
Whatever the analysis cannot bound is refused, with the access that failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.printer import format_expr
from tcc.lower.schedule import regions as R
from tcc.lower.schedule.rewrite import map_exprs, substitute_expr
from tcc.lower.schedule.state import walk


def _undeclared(s: T.Stmt, in_block: bool = False) -> str | None:
    """The reason to refuse when something under the loop touches memory without a block
    declaring it (inside a block, its regions, loads and stores state every access)."""
    if isinstance(s, T.Block):
        parts = [x for x in (s.init, s.body) if x is not None]
        return next((r for x in parts for r in [_undeclared(x, True)] if r), None)
    if isinstance(s, (T.For, T.Allocate)):
        return _undeclared(s.body, in_block)
    if isinstance(s, T.SeqStmt):
        return next((r for x in s.stmts for r in [_undeclared(x, in_block)] if r), None)
    if isinstance(s, T.IfThenElse):
        if not in_block and E.has_load(s.cond):
            return f"a condition reads memory (`{format_expr(s.cond)}`) outside any block"
        cases = [x for x in (s.then_case, s.else_case) if x is not None]
        return next((r for x in cases for r in [_undeclared(x, in_block)] if r), None)
    if isinstance(s, T.BufferStore) and not in_block:
        return f"it stores to '{s.buffer.name}' outside any block, where no region is declared"
    return None


def _unit(extent: E.PrimExpr) -> bool:
    return R.const_value(extent) == 1


def _point(region: T.BufferRegion) -> bool:
    return all(_unit(ext) for _, ext in region.ranges)


def _region_text(r: T.BufferRegion) -> str:
    parts = [
        format_expr(lo) if _unit(ext) else f"{format_expr(lo)}:{format_expr(lo + ext)}"
        for lo, ext in r.ranges
    ]
    return f"{r.buffer.name}[{', '.join(parts)}]"


def _private(loop: T.For) -> set[int]:
    """Buffers (by id) allocated under the loop: each iteration has its own."""
    found: set[int] = set()
    for loc in walk(loop.body):
        if isinstance(loc.stmt, T.Allocate):
            found.add(id(loc.stmt.buffer))
        elif isinstance(loc.stmt, T.Block):
            found.update(id(b) for b in loc.stmt.alloc_buffers)
    return found


def _fed(access: R.Access, var: E.Var) -> list[T.IterVar]:
    """The iteration variables of the access's block whose bindings use `var`."""
    block = access.block
    if block is None:
        return []
    return [iv for iv in block.iter_vars if E.uses(access.bindings[iv.var], var)]


def _check_reduction(access: R.Access, var: E.Var) -> str | None:
    for iv in _fed(access, var):
        if iv.kind is T.IterKind.REDUCE:
            return (
                f"it carries reduction variable {iv.var.name} of block '{access.block.name}', "
                "whose iterations accumulate into the same element"
            )
    return None


# ---------------------------------------------------------------------------------------------
# digits of the loop variable


@dataclass(frozen=True)
class _Digit:
    """`t // stride % modulus` of the loop variable `t` (modulus None: no modulo)."""

    stride: E.PrimExpr
    modulus: E.PrimExpr | None


class _Digits:
    """Rewrites expressions of the loop variable in terms of its digits, one fresh variable
    per digit, so that separation is judged digit by digit. A divisor is a positive
    constant or a symbolic product dividing the loop's extent, as fuse makes them (the
    loop then runs only where it is positive)."""

    def __init__(self, loop: T.For):
        self.loop = loop
        self.vars: dict[_Digit, E.Var] = {}
        self.of: dict[int, _Digit] = {}  # digit variable id -> its digit

    def _var(self, digit: _Digit) -> E.Var:
        if digit not in self.vars:
            v = E.Var(f"{self.loop.var.name}_digit", self.loop.var.dtype)
            self.vars[digit] = v
            self.of[id(v)] = digit
        return self.vars[digit]

    def rewrite(self, e: E.PrimExpr) -> E.PrimExpr:
        return map_exprs(e, self._step)

    def _step(self, e: E.PrimExpr) -> E.PrimExpr | None:
        if e is self.loop.var:
            return self._var(_Digit(E.const(1, e.dtype), None))
        if not isinstance(e, E.BinOp) or not isinstance(e.a, E.Var) or id(e.a) not in self.of:
            return None
        inner, c = self.of[id(e.a)], self._divisor(e.b)
        if c is None or inner.modulus is not None:
            return None
        if e.op == "floordiv":
            return self._var(_Digit(E.simplify(inner.stride * c), None))
        if e.op == "floormod":
            return self._var(_Digit(inner.stride, c))
        return None

    def _divisor(self, e: E.PrimExpr) -> E.PrimExpr | None:
        value = R.const_value(e)
        if value is not None:
            return E.const(value, e.dtype) if value > 0 else None
        if any(id(v) in self.of or v is self.loop.var for v in E.free_vars(e)):
            return None
        extent = self.loop.extent
        return e if E.prove_equal(E.binop("floordiv", extent, e) * e, extent) else None

    def determine_loop(self, digits: set[_Digit], stride: E.PrimExpr | None = None) -> bool:
        """Whether these digits together tell every two iterations of the loop apart: they
        chain from stride 1 (each next stride the last one times its modulus) up through the
        loop's whole range."""
        stride = E.const(1, self.loop.var.dtype) if stride is None else stride
        for d in digits:
            if not E.prove_equal(d.stride, stride):
                continue
            if d.modulus is None or self._covers(E.simplify(stride * d.modulus)):
                return True
            if self.determine_loop(digits - {d}, E.simplify(stride * d.modulus)):
                return True
        return False

    def _covers(self, span: E.PrimExpr) -> bool:
        """Whether the loop's range [0, extent) fits in [0, span)."""
        if R.const_value(self.loop.min) != 0:
            return False
        room = R.const_value(span - self.loop.extent)
        return E.prove_equal(span, self.loop.extent) or (room is not None and room >= 0)


# ---------------------------------------------------------------------------------------------
# whether two accesses are apart


def _bounds_per_dim(access: R.Access, digits: _Digits) -> list[R.Interval] | None:
    """Per dimension, the inclusive bounds of what the access touches in one iteration, in
    the digits of the loop variable."""
    loops = R.loop_ranges(access.loops)
    ranges = {k: (digits.rewrite(lo), digits.rewrite(hi)) for k, (lo, hi) in loops.items()}
    dims = []
    for lo, ext in access.in_loops.ranges:
        lo, ext = digits.rewrite(lo), digits.rewrite(ext)
        low = R.bounds(lo, ranges)
        high = R.bounds(E.simplify(lo + ext - 1), ranges)
        if low is None or high is None:
            return None
        dims.append((E.simplify(low[0]), E.simplify(high[1])))
    return dims


def _affine(e: E.PrimExpr, d: E.Var, digit_ids: set[int]) -> tuple[int, E.PrimExpr] | None:
    """(c, rest) with e == c * d + rest and rest free of every digit."""
    if not E.uses(e, d):
        return 0, e
    zero, one = E.const(0, d.dtype), E.const(1, d.dtype)
    c = R.const_value(substitute_expr(e, {d: one}) - substitute_expr(e, {d: zero}))
    if c is None:
        return None
    rest = E.simplify(e - d * c)
    if any(id(v) in digit_ids for v in E.free_vars(rest)):
        return None
    return c, rest


def _separates(
    dim_w: R.Interval, dim_a: R.Interval, d: E.Var, digit_ids: set[int], memo: dict
) -> bool:
    """Whether the boxes are disjoint on this dimension whenever digit `d` differs: both
    move by the same stride c along it and |c| exceeds what one reaches past the other.
    `memo` keeps _affine's answers by the bound's and digit's identity (one access's bounds
    are checked against many others')."""

    def affine(e):
        key = (id(e), id(d))
        if key not in memo:
            memo[key] = _affine(e, d, digit_ids)
        return memo[key]

    rests, c = [], 0
    for e in (*dim_w, *dim_a):  # the first bound that fails decides: most do not move with d
        term = affine(e)
        if term is None or term[0] == 0 or (rests and term[0] != c):
            return False
        c = term[0]
        rests.append(term[1])
    c = abs(c)
    lo_w, hi_w, lo_a, hi_a = rests
    gaps = (R.const_value(c + lo_a - hi_w), R.const_value(c + lo_w - hi_a))
    return all(g is not None and g > 0 for g in gaps)


class _Apart:
    """Whether pairs of accesses inside one loop are apart (see the module docstring). One
    per loop: the digits, each access's bounds in them and _affine's answers are shared by
    every pair (a digit that one pair's accesses do not use separates nothing there)."""

    def __init__(self, loop: T.For):
        self.loop = loop
        self.digits = _Digits(loop)
        self.bounds: dict[int, list[R.Interval] | None] = {}
        self.memo: dict = {}

    def __call__(self, w: R.Access, a: R.Access) -> bool:
        return _same_element_apart(w, a, self.loop.var) or self._strided(w, a)

    def _bounds(self, access: R.Access) -> list[R.Interval] | None:
        if id(access) not in self.bounds:
            self.bounds[id(access)] = _bounds_per_dim(access, self.digits)
        return self.bounds[id(access)]

    def _strided(self, w: R.Access, a: R.Access) -> bool:
        """Whether a dimension separates the two accesses for every digit that tells
        iterations apart."""
        bw, ba = self._bounds(w), self._bounds(a)
        if bw is None or ba is None:
            return False
        dims = list(zip(bw, ba))
        digit_ids = set(self.digits.of)
        separated = {
            digit
            for digit, d in self.digits.vars.items()
            if any(_separates(dim_w, dim_a, d, digit_ids, self.memo) for dim_w, dim_a in dims)
        }
        return self.digits.determine_loop(separated)


def _names_fed_vars(access: R.Access, var: E.Var) -> bool:
    """Whether the access is one element whose indices include every spatial variable of
    its block that the loop feeds (at least one)."""
    fed = [iv.var for iv in _fed(access, var) if iv.kind is T.IterKind.SPATIAL]
    indices = [lo for lo, _ in access.region.ranges]
    return bool(fed) and _point(access.region) and all(any(i is v for i in indices) for v in fed)


def _same_element_apart(w: R.Access, a: R.Access, var: E.Var) -> bool:
    """Both name one and the same element, which tells the iterations apart."""
    if not (_point(w.in_loops) and _point(a.in_loops)):
        return False
    same = [lo for lo, _ in w.in_loops.ranges] == [lo for lo, _ in a.in_loops.ranges]
    return same and (_names_fed_vars(w, var) or _names_fed_vars(a, var))


def _where(access: R.Access) -> str:
    return "a statement outside blocks" if access.block is None else f"block '{access.block.name}'"


def _self_overlap(w: R.Access, loop: T.For) -> str:
    if not any(E.uses(lo, loop.var) for lo, _ in w.in_loops.ranges):
        return f"every iteration runs {_where(w)} on the same elements"
    return f"{_where(w)} writes {_region_text(w.region)}, which does not tell the iterations apart"


def carried_dependence(loop: T.For) -> str | None:
    """Why the iterations of `loop` may not run at the same time, or None when they may."""
    reason = _undeclared(loop.body)
    if reason:
        return reason
    found = R.accesses(loop.body)
    for access in found:
        reason = _check_reduction(access, loop.var)
        if reason:
            return reason
    private = _private(loop)
    shared = [x for x in found if id(x.buffer) not in private]
    writes = [x for x in shared if x.kind == "writes"]
    apart = _Apart(loop)
    for w in writes:
        if not apart(w, w):
            return _self_overlap(w, loop)
    written = {id(w.buffer) for w in writes}
    for a in shared:
        if id(a.buffer) not in written:
            continue
        for w in writes:
            if w.buffer is a.buffer and w is not a and not apart(w, a):
                return (
                    f"{_where(a)} {a.kind} {_region_text(a.region)}, which other iterations "
                    "of the loop write"
                )
    return None
