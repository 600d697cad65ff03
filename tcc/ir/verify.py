"""Well-formedness of a module read from outside (a .tcir file): what the parser accepts as
text but no stage may be handed. `verify_module` runs on every module `load_module` reads;
it changes nothing and raises a VerifyError naming the function and the statement.

Always checked: every loop's extent, when it is a constant, is not negative. With
TCC_VERIFY=1 (or `accesses=True`), also every buffer load and store: each index must be
proven within its dimension by interval arithmetic over the loops, block bindings and
conditions around it (`unproven_accesses`). Size variables are taken to be >= 0, and >= 1
inside a loop whose extent needs them to be for its body to run. An access that is in
bounds only under a condition on the sizes alone (a concat of inputs whose shapes name one
dimension with two variables needs `a <= b`; a gather's clamped index needs `n >= 1`) is
proven once the PrimFunc's PRECONDITIONS_ATTR states it: the kernel's entry checks those
once per call and refuses arguments that break one (tcc/emit/llvm_abi.py).

`guard_accesses`, which tcc.api runs on every kernel it legalizes and on every .tcir it
loads, adds such preconditions and makes each other access it cannot prove run only when
its index is in bounds. Of the 3,395 kernels the ONNX node tests legalize to, all 3,395 are
proven as legalized (137 of them under size preconditions) and all after the default
schedule rules (`python tests/conformance/bounds_proof.py`). Under TCC_VERIFY=1, which the test suite
sets, `verify_if_asked` also checks the module after every graph pass, after legalization
(refusing what had to be guarded) and after scheduling.
"""

from __future__ import annotations

import dataclasses
import os

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.errors import TccError
from tcc.ir.printer import format_expr

# PrimFunc attribute: conditions on size variables alone that the kernel's accesses need
# (`a <= b`); the kernel's entry refuses a call whose arguments break one (tcc.emit.llvm_abi).
PRECONDITIONS_ATTR = "preconditions"


class VerifyError(TccError):
    """A loaded module breaks a rule every stage relies on."""


def verify_if_asked(mod, stage: str, guarded: list[str] = (), stated: bool = True) -> None:
    """Under TCC_VERIFY=1, verify `mod` with its accesses, naming the stage that produced it
    (the pass pipeline, legalization and scheduling call this after each step); `guarded`
    (what guard_module just guarded) is refused as an unproven access would be. With
    `stated`, a size condition an access needs must be among its kernel's preconditions
    (graph passes run before legalization adds them, and pass False)."""
    if os.environ.get("TCC_VERIFY") == "1":
        if guarded:
            raise _refusal(f"after {stage}", guarded)
        verify_module(mod, f"after {stage}", accesses=True, stated=stated)


def verify_module(mod, where: str = "the module", accesses: bool | None = None, stated: bool = False) -> None:
    """Raise VerifyError for the first rule `mod` breaks. With `accesses` (default: when the
    environment sets TCC_VERIFY=1), every buffer access must also be proven in bounds, where
    needed under conditions on the sizes alone; with `stated`, those conditions must be among
    the kernel's preconditions (guard_accesses adds them to a module it reads)."""
    if accesses is None:
        accesses = os.environ.get("TCC_VERIFY") == "1"
    for name, func in mod.functions.items():
        if isinstance(func, T.PrimFunc):
            _verify_stmt(func.body, f"{where}: prim_func {name!r}")
            if accesses:
                unproven = unproven_accesses(func, name, stated)
                if unproven:
                    raise _refusal(where, unproven)


def _refusal(where: str, unproven: list[str]) -> VerifyError:
    more = f" (and {len(unproven) - 1} more)" if len(unproven) > 1 else ""
    return VerifyError(f"{where}: {unproven[0]}{more}; tcc refuses an access it cannot prove in bounds")


def _verify_stmt(stmt, where: str) -> None:
    stack = [stmt]
    while stack:  # iterative: a crafted module may nest deeply
        s = stack.pop()
        if isinstance(s, T.For):
            if isinstance(s.extent, E.IntImm) and s.extent.value < 0:
                raise VerifyError(f"{where}: loop {s.var.name!r} has extent {s.extent.value}; the second "
                                  "argument of a loop is its number of iterations and must not be negative")
            stack.append(s.body)
        elif isinstance(s, T.SeqStmt):
            stack.extend(s.stmts)
        elif isinstance(s, T.IfThenElse):
            stack.extend(x for x in (s.then_case, s.else_case) if x is not None)
        elif isinstance(s, T.Block):
            stack.extend(x for x in (s.body, s.init) if x is not None)
        elif isinstance(s, T.Allocate):
            stack.append(s.body)


# -- buffer accesses in bounds ---------------------------------------------------------------------

Range = tuple  # (lo, hi): inclusive PrimExpr bounds, either None when unknown


class _Prover:
    """Bounds of index expressions under the loops, block bindings and conditions around them.

    Interval arithmetic over loop ranges (a loop variable ranges over [min, min + extent - 1],
    its endpoints bounded in turn by the loops outside), with `facts`: what a condition around
    the access (an `if`, or a select's chosen branch) says about a subexpression, applied
    wherever that subexpression appears. A load used as an index is unbounded, but
    min/max/modulo around it bound it (gathers clamp their indices so)."""

    def __init__(self):
        self.loops: dict[int, tuple] = {}  # id(var) -> (min, max) expressions
        self.bindings: dict[int, E.PrimExpr] = {}  # id(block iter var) -> its binding
        self.by_var: dict[E.Var, E.PrimExpr] = {}  # the same, for substitution
        self.facts: list[tuple[E.PrimExpr, E.PrimExpr | None, E.PrimExpr | None]] = []
        self.positive: list[int] = []  # size variables (by id) >= 1 where the loops around run
        self.least: dict[int, int] = {}  # id(size variable) -> its least value (a precondition's)
        self.running: list = []  # the extents (>= 1) of those loops that depend on sizes

    def range(self, e, depth: int = 0) -> Range:
        if depth > 64:
            return None, None
        lo, hi = self._range(e, depth)
        if self.facts:
            key = E.simplify(e)
            for k, flo, fhi in self.facts:
                if k == key:
                    lo = flo if lo is None else lo if flo is None else E.binop("max", lo, flo)
                    hi = fhi if hi is None else hi if fhi is None else E.binop("min", hi, fhi)
        return lo, hi

    def _range(self, e, depth: int) -> Range:
        if isinstance(e, E.IntImm):
            return e, e
        if isinstance(e, E.Var):
            if id(e) in self.bindings:
                return self.range(self.bindings[id(e)], depth + 1)
            if id(e) in self.loops:
                lo, hi = self.loops[id(e)]
                return self.range(lo, depth + 1)[0], self.range(hi, depth + 1)[1]
            return e, e  # a size variable or a scalar parameter: fixed for the call
        if isinstance(e, E.Cast) and not E.is_float(e.dtype) and not E.is_float(e.value.dtype):
            return self.range(e.value, depth + 1)
        if isinstance(e, E.Select):
            t = self.assuming(e.cond, True, lambda: self.range(e.true_value, depth + 1))
            f = self.assuming(e.cond, False, lambda: self.range(e.false_value, depth + 1))
            return _join("min", t[0], f[0]), _join("max", t[1], f[1])
        if not isinstance(e, E.BinOp):
            return None, None
        if not E.has_load(e) and not self._looped(e):
            return e, e  # sizes only (`batch * seq - 1`): fixed for the call
        a, b = self.range(e.a, depth + 1), self.range(e.b, depth + 1)
        if e.op == "add":
            return _both("add", a[0], b[0]), _both("add", a[1], b[1])
        if e.op == "sub":
            return _both("sub", a[0], b[1]), _both("sub", a[1], b[0])
        if e.op == "min":  # below the smaller lower bound; above neither upper bound
            return _both("min", a[0], b[0]), _either("min", a[1], b[1])
        if e.op == "max":
            return _either("max", a[0], b[0]), _both("max", a[1], b[1])
        c = _constant(b)
        if e.op in ("floordiv", "floormod") and c is None and self._size(e.b):
            return self._by_size(e.op, a, e.b)
        if e.op == "mul" and c is None:
            a, c = b, _constant(a)
        if c is None:
            return None, None
        if e.op == "mul":
            lo, hi = _both("mul", a[0], E.const(c)), _both("mul", a[1], E.const(c))
            return (lo, hi) if c >= 0 else (hi, lo)
        if c <= 0:
            return None, None
        if e.op == "floordiv":
            return _both("floordiv", a[0], E.const(c)), _both("floordiv", a[1], E.const(c))
        if e.op == "floormod":
            return E.const(0), E.const(c - 1)
        return None, None

    def _size(self, e) -> bool:
        """Whether `e` is fixed for the call and at least 1 where it is used (`seq` inside a
        loop over it, `(seq + 15) // 16 * 4`, a factor of the extent of a loop around)."""
        if E.has_load(e) or self._looped(e):
            return False
        e = E.simplify(e)
        positive = self.least_values()
        lo = _lowest(e, set(), positive)
        if lo is not None and lo >= 1:
            return True
        # a factor of a running loop's extent (>= 1), the rest >= 0: then e >= 1 too, whatever
        # interval arithmetic says of e alone (`n // 4 - 1` of a fused `b * (n // 4) - b`)
        for extent in self.running:
            q = _divide(extent, e)
            q_lowest = None if q is None else _lowest(q, set(), positive)
            if q_lowest is not None and q_lowest >= 0:
                return True
        return False

    def _by_size(self, op: str, a: Range, d) -> Range:
        """`a // d` and `a % d` for a size expression d (>= 1) and `a` >= 0: a fused loop over
        `batch * heads * seq` split back into its indices."""
        lo, hi = a
        if lo is None or not self.nonneg(lo):
            return None, None
        if op == "floormod":
            return E.const(0), d - 1
        if hi is None:
            return E.const(0), None
        quotient = _divide(E.simplify(hi + 1), E.simplify(d))
        return E.const(0), None if quotient is None else quotient - 1  # (q * d - 1) // d == q - 1

    def assuming(self, cond, holds: bool, fn):
        """`fn()` with what `cond` (or its negation) says about its operands as facts."""
        n, m = len(self.facts), len(self.positive)
        self._learn(cond, holds)
        try:
            return fn()
        finally:
            del self.facts[n:]
            del self.positive[m:]

    def _learn(self, cond, holds: bool) -> None:
        if isinstance(cond, E.Logic) and cond.op == ("and" if holds else "or"):
            self._learn(cond.a, holds)
            self._learn(cond.b, holds)
        elif isinstance(cond, E.Not):
            self._learn(cond.a, not holds)
        elif isinstance(cond, E.Cmp) and not E.is_float(cond.a.dtype):
            op = cond.op if holds else _NEGATED.get(cond.op)
            one = E.const(1, cond.a.dtype)
            a, b = cond.a, cond.b
            if op == "lt":
                self._fact(a, None, b - one), self._fact(b, a + one, None)
            elif op == "le":
                self._fact(a, None, b), self._fact(b, a, None)
            elif op == "gt":
                self._fact(a, b + one, None), self._fact(b, None, a - one)
            elif op == "ge":
                self._fact(a, b, None), self._fact(b, None, a)
                if isinstance(a, E.Var) and isinstance(b, E.IntImm) and b.value >= 1:
                    self.positive.append(id(a))  # a size the branch runs with only when >= 1
            elif op == "eq":
                self._fact(a, b, b), self._fact(b, a, a)

    def in_loops(self, e, simplify: bool = True):
        """`e` with block iteration variables replaced by their bindings (simplified: an index
        into a compacted buffer, `v_i - fused // 4` with v_i bound to `fused // 4`, then
        cancels before it is bounded)."""
        for _ in range(8):  # a binding may name an outer block's variables
            if not any(v in self.by_var for v in E.free_vars(e)):
                break
            e = E.substitute(e, self.by_var)
        return E.simplify(e) if simplify else e

    def _fact(self, e, lo, hi) -> None:
        e = self.in_loops(e)
        if isinstance(e, E.IntImm):
            return
        lo = None if lo is None else self.in_loops(lo)
        hi = None if hi is None else self.in_loops(hi)
        if not self._looped(e) and any(b is not None and self._looped(b) for b in (lo, hi)):
            return  # `d0 <= i`: the mirror fact `i >= d0` says it, and loop bounds stay fixed
        self.facts.append((e, lo, hi))
        self._solve(e, lo, hi)

    def _solve(self, e, lo, hi) -> None:
        """From a bound on a linear expression, the bounds it puts on its parts: `x + k`,
        `s - x` (s fixed for the call) and `x * c` bounded bound x in turn (`93 - i * 16 >= 0`
        gives `i <= 5`; `n - j * 8 - 8 >= 0` gives `j <= (n - 8) // 8`)."""
        if not isinstance(e, E.BinOp) or (lo is None and hi is None):
            return

        def fixed(x):
            return not self._looped(x) and not E.has_load(x)

        def minus(b, k):  # b - k
            return None if b is None else E.simplify(b - k)

        def plus(b, k):  # b + k
            return None if b is None else E.simplify(b + k)

        def from_(k, b):  # k - b
            return None if b is None else E.simplify(k - b)

        if e.op == "add" and fixed(e.b):
            self._fact(e.a, minus(lo, e.b), minus(hi, e.b))
        elif e.op == "add" and fixed(e.a):
            self._fact(e.b, minus(lo, e.a), minus(hi, e.a))
        elif e.op == "sub" and fixed(e.b):
            self._fact(e.a, plus(lo, e.b), plus(hi, e.b))
        elif e.op == "sub" and fixed(e.a):  # s - x in [lo, hi]: x in [s - hi, s - lo]
            self._fact(e.b, from_(e.a, hi), from_(e.a, lo))
        elif e.op == "mul" and isinstance(e.b, E.IntImm) and e.b.value > 0:
            c = E.const(e.b.value, e.dtype)
            self._fact(e.a, None if lo is None else E.simplify(E.binop("floordiv", lo + (c - 1), c)),
                       None if hi is None else E.simplify(E.binop("floordiv", hi, c)))
        elif e.op == "mul" and isinstance(e.b, E.IntImm) and e.b.value < 0:
            # x * -c in [lo, hi]: x * c in [-hi, -lo] (`183 - i % 13 * 16 >= 0`: i % 13 <= 11)
            self._fact(E.binop("mul", e.a, E.const(-e.b.value, e.dtype)), from_(0, hi), from_(0, lo))

    def _looped(self, e) -> bool:
        return any(id(v) in self.loops or id(v) in self.bindings for v in E.free_vars(e))

    def within(self, index, dim) -> tuple | None:
        """Whether 0 <= index <= dim - 1 always: by the interval of the index as written or
        simplified, or by a condition around it that states the bound (`if i * 8 + j < n`);
        a select is taken branch by branch. Returns () when proven, None when not, or the
        conditions on size variables alone under which it holds (`a <= b`, for a concat
        whose inputs' shapes name the same dimension with different variables)."""
        written = self.in_loops(index, False)
        whole = self._within(written, dim)
        if whole == () or not isinstance(written, E.Select):
            return whole
        t = self.assuming(written.cond, True, lambda: self.within(written.true_value, dim))
        f = self.assuming(written.cond, False, lambda: self.within(written.false_value, dim))
        return whole if t is None or f is None else t + tuple(c for c in f if c not in t)

    def _within(self, written, dim) -> tuple | None:
        simple = self.in_loops(written)
        ranges = (self.range(written), self.range(simple))
        top = E.const(dim) - 1
        needs: list = []
        if not (any(self.at_least(lo, E.const(0)) for lo, _ in ranges) or self.implied(simple)):
            needs.append(self._needed([lo for lo, _ in ranges], self._nonneg_condition))
        if not (any(self.at_most(hi, top) for _, hi in ranges) or self.implied_at_most(simple, top)):
            needs.append(self._needed([hi for _, hi in ranges],
                                      lambda hi: E.Cmp("le", E.simplify(hi + 1), E.simplify(E.const(dim)))))
        return None if None in needs else tuple(needs)

    def implied_at_most(self, e, top) -> bool:
        """Whether conditions around say `e` <= `top` (`implied`), also through a division
        by a constant: `x // c <= top` where `x <= (top + 1) * c - 1` (a row of 16 lanes
        guarded by `i % 13 * 16 + lane <= 198`, read through a reshape's `// 64`)."""
        if self.implied(top - e):
            return True
        if isinstance(e, E.BinOp) and e.op == "floordiv" and isinstance(e.b, E.IntImm) and e.b.value > 0:
            return self.implied(E.simplify((top + 1) * e.b - 1 - e.a))
        return False

    def _nonneg_condition(self, lo):
        """`lo >= 0`, readably: the side of a min that is not already proven (a clamp's
        `min(0, n - 1)` needs `n >= 1`), a constant moved to the right."""
        while isinstance(lo, E.BinOp) and lo.op == "min":
            if self.nonneg(lo.a):
                lo = lo.b
            elif self.nonneg(lo.b):
                lo = lo.a
            else:
                break
        if isinstance(lo, E.BinOp) and lo.op == "sub" and isinstance(lo.b, E.IntImm):
            return E.Cmp("ge", lo.a, lo.b)
        return E.Cmp("ge", lo, E.const(0, lo.dtype))

    def _needed(self, bounds, condition):
        """The condition on a bound free of loop variables that the access needs, or None when
        no bound is (or the condition is false whatever the sizes)."""
        for bound in bounds:
            if bound is None:
                continue
            bound = E.simplify(bound)
            if self._looped(bound) or E.has_load(bound):
                continue
            cond = condition(bound)
            slack = E.simplify(cond.b - cond.a if cond.op == "le" else cond.a - cond.b)
            return None if isinstance(slack, E.IntImm) else cond  # a constant: false, as not proven
        return None

    def implied(self, e) -> bool:
        """Whether a condition around says `e` >= 0: some `g >= 0` it states leaves `e - g`
        non-negative over the loops (`n - 1 - (i * 8 + j)` from `n - i * 8 - 8 >= 0`, j < 8)."""
        terms = _var_terms(E.simplify(e))
        for key, lo, hi in self.facts:
            for g in ((key - lo) if lo is not None else None, (hi - key) if hi is not None else None):
                if g is None:
                    continue
                # e - m * g for the m that cancels a loop variable's term (2 * (16 * i + j) in
                # 32 * i + 2 * j + r), else m = 1
                scales = {1} | {c // cg for v, cg in _var_terms(E.simplify(g)).items()
                                for c in [terms.get(v)] if c and cg and c % cg == 0 and c // cg > 0}
                for m in sorted(scales):
                    d = E.simplify(e - g * m if m != 1 else e - g)
                    low = d if isinstance(d, E.IntImm) else self.range(d)[0]
                    if low is not None and self.nonneg(low):
                        return True
        return False

    def at_least(self, e, limit) -> bool:
        """Whether `e` >= `limit` always."""
        return self._bounded(e, limit, upper=False)

    def at_most(self, e, limit) -> bool:
        """Whether `e` <= `limit` always."""
        return self._bounded(e, limit, upper=True)

    def _bounded(self, e, limit, upper: bool) -> bool:
        """`e` <= `limit` (upper) or >= it: through a min or max (one side suffices for the
        min of an upper bound and the max of a lower one, else both must hold) and a
        constant shift, else by `nonneg` of the difference."""
        if e is None:
            return False
        if isinstance(e, E.BinOp) and e.op in ("min", "max"):
            sides = (self._bounded(e.a, limit, upper), self._bounded(e.b, limit, upper))
            return any(sides) if (e.op == "min") == upper else all(sides)
        if isinstance(e, E.BinOp) and e.op == "add":  # x + min(p, q) is min(x + p, x + q)
            for m, other in ((e.a, e.b), (e.b, e.a)):
                if isinstance(m, E.BinOp) and m.op in ("min", "max"):
                    spread = E.BinOp(m.op, E.binop("add", m.a, other), E.binop("add", m.b, other),
                                     m.dtype)
                    return self._bounded(spread, limit, upper)
        if isinstance(e, E.BinOp) and e.op in ("add", "sub") and isinstance(e.b, E.IntImm) \
                and self._bounded(e.a, limit - e.b if e.op == "add" else limit + e.b, upper):
            return True
        if upper and isinstance(e, E.BinOp) and e.op == "mul" and isinstance(e.b, E.IntImm) \
                and e.b.value > 0 and self._bounded_product(e.a, e.b.value, limit):
            return True
        return self.nonneg(limit - e if upper else e - limit)

    def _bounded_product(self, x, k: int, limit) -> bool:
        """`x * k <= limit` for k > 0: through a min or max of x, a constant shift, and
        `(a // c) * k <= a * (k // c)` where c divides k (a tiled loop's last full tile,
        `(n - 16) // 16 * 16 <= n - 16`)."""
        if isinstance(x, E.BinOp) and x.op in ("min", "max"):
            sides = (self._bounded(E.binop("mul", x.a, k), limit, True),
                     self._bounded(E.binop("mul", x.b, k), limit, True))
            return any(sides) if x.op == "min" else all(sides)
        if isinstance(x, E.BinOp) and x.op in ("add", "sub") and isinstance(x.b, E.IntImm):
            shift = x.b.value * k
            return self._bounded(E.binop("mul", x.a, k), limit - shift if x.op == "add"
                                 else limit + shift, True)
        if isinstance(x, E.BinOp) and x.op == "floordiv" and isinstance(x.b, E.IntImm) \
                and x.b.value > 0 and k % x.b.value == 0:
            return self._bounded(E.binop("mul", x.a, k // x.b.value), limit, True)
        return False

    def nonneg(self, e) -> bool:
        """Whether `e` >= 0 for every value of the loop variables and size variables >= 0."""
        if e is None:
            return False
        e = E.simplify(e)
        if isinstance(e, E.IntImm):
            return e.value >= 0
        lo = self.range(e)[0]  # loop variables relaxed
        if lo is None:
            return False
        lo = E.simplify(lo)
        looped = set(self.loops) | set(self.bindings)
        if isinstance(lo, E.IntImm) and lo.value >= 0 or _nonneg_in_sizes(lo, looped, self.least_values()):
            return True
        relaxed = _relax_floordiv(lo, 1)
        if relaxed is lo:
            return False
        relaxed = E.simplify(relaxed)
        return isinstance(relaxed, E.IntImm) and relaxed.value >= 0 or _nonneg_in_sizes(
            relaxed, looped, self.least_values())

    def least_values(self) -> dict[int, int]:
        """id(size variable) -> the least value it takes here, where more than 0 is known."""
        least = dict.fromkeys(self.positive, 1)
        for key, value in self.least.items():
            least[key] = max(value, least.get(key, 0))
        return least


def _relax_floordiv(e, sign: int):
    """A lower bound of `sign * e` (as an expression for e's place) with each term
    `(a // c) * k` of a sum, c dividing k, replaced by what bounds it without the division:
    `a * (k // c)` where the term counts negatively, `(a - c + 1) * (k // c)` where it counts
    positively (`5 * ((n - 10) // 5) <= n - 10`). The same object when nothing changes."""
    if isinstance(e, E.BinOp) and e.op in ("add", "sub"):
        a = _relax_floordiv(e.a, sign)
        b = _relax_floordiv(e.b, sign if e.op == "add" else -sign)
        return e if a is e.a and b is e.b else E.BinOp(e.op, a, b, e.dtype)
    if isinstance(e, E.BinOp) and e.op == "mul" and isinstance(e.b, E.IntImm) and e.b.value > 0:
        q, k = e.a, e.b.value
        if isinstance(q, E.BinOp) and q.op == "floordiv" and isinstance(q.b, E.IntImm) \
                and q.b.value > 0 and k % q.b.value == 0:
            c = q.b.value
            inner = q.a if sign < 0 else E.BinOp("sub", q.a, E.IntImm(c - 1, q.dtype), q.dtype)
            return E.BinOp("mul", inner, E.IntImm(k // c, e.dtype), e.dtype)
    return e


def _var_terms(e) -> dict:
    """The constant coefficient of each variable that appears in `e` as `v` or `v * c` in a
    sum or difference (other terms are left out)."""
    terms: dict = {}
    stack = [(e, 1)]
    while stack:
        x, sign = stack.pop()
        if isinstance(x, E.Var):
            terms[x] = terms.get(x, 0) + sign
        elif isinstance(x, E.BinOp) and x.op in ("add", "sub"):
            stack += [(x.a, sign), (x.b, sign if x.op == "add" else -sign)]
        elif isinstance(x, E.BinOp) and x.op == "mul" and isinstance(x.a, E.Var) and isinstance(x.b, E.IntImm):
            terms[x.a] = terms.get(x.a, 0) + sign * x.b.value
    return terms


def _factors(e) -> tuple[int, list]:
    """`e` as a constant times a list of other factors, by flattening its products."""
    if isinstance(e, E.IntImm):
        return e.value, []
    if isinstance(e, E.BinOp) and e.op == "mul":
        (ca, fa), (cb, fb) = _factors(e.a), _factors(e.b)
        return ca * cb, fa + fb
    return 1, [e]


def _divide(top, d):
    """`top / d` when `d`'s factors are among `top`'s (and its constant divides top's), or
    when top is d times the variables d does not have (a fused extent `b * (n // 4) - b`
    over the sum `n // 4 - 1`), else None."""
    (ct, ft), (cd, fd) = _factors(top), _factors(d)
    if cd <= 0 or ct % cd:
        return _divide_expanded(top, d)
    rest = list(ft)
    for f in fd:
        if f not in rest:
            return _divide_expanded(top, d)
        rest.remove(f)
    q = E.const(ct // cd)
    for f in rest:
        q = f if isinstance(q, E.IntImm) and q.value == 1 else q * f
    return q


def _divide_expanded(top, d):
    others = [v for v in E.free_vars(top) if not E.uses(d, v)]
    candidates = [*others, *([_product(others)] if len(others) > 1 else [])]
    return next((q for q in candidates if E.prove_equal(q * d, top)), None)


def _product(factors):
    out = factors[0]
    for f in factors[1:]:
        out = out * f
    return out


_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def _both(op, a, b):
    return None if a is None or b is None else E.binop(op, a, b)


def _either(op, a, b):
    return b if a is None else a if b is None else E.binop(op, a, b)


def _join(op, a, b):
    return None if a is None or b is None else E.binop(op, a, b)


def _constant(r: Range) -> int | None:
    lo, hi = r
    if lo is None or hi is None:
        return None
    lo, hi = E.simplify(lo), E.simplify(hi)
    return lo.value if isinstance(lo, E.IntImm) and lo == hi else None


def _nonneg_in_sizes(e, looped: set[int], positive: dict[int, int]) -> bool:
    """Whether `e`, over size variables only, is >= 0 for all sizes >= 0, those in `positive`
    at least the value it gives. A loop or block variable left in `e` (from a condition's
    bound) is not a size: nothing is known."""
    lo = _lowest(e, looped, positive)
    return lo is not None and lo >= 0


def _lowest(e, looped: set[int], positive: dict[int, int]) -> int | None:
    """The least value of `e` with size variables >= 0 (those in `positive` at least the
    value it gives), when interval arithmetic tells."""
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Var):
        return None if id(e) in looped else positive.get(id(e), 0)
    if not isinstance(e, E.BinOp):
        return None
    a = _lowest(e.a, looped, positive)
    if e.op == "add":
        b = _lowest(e.b, looped, positive)
        return None if a is None or b is None else a + b
    if e.op == "sub":
        return None if a is None or not isinstance(e.b, E.IntImm) else a - e.b.value
    if e.op == "mul":
        b = _lowest(e.b, looped, positive)
        return a * b if a is not None and b is not None and a >= 0 and b >= 0 else None
    if e.op == "min":
        b = _lowest(e.b, looped, positive)
        return None if a is None or b is None else min(a, b)
    if e.op == "max":  # at least either operand's least value, even where one is unknown
        b = _lowest(e.b, looped, positive)
        return a if b is None else b if a is None else max(a, b)
    if e.op == "floordiv" and isinstance(e.b, E.IntImm) and e.b.value > 0:
        return None if a is None else a // e.b.value
    if e.op == "floordiv":  # a size divided by a size: the VM refused a zero divisor already
        b = _lowest(e.b, looped, positive)
        return 0 if a is not None and a >= 0 and b is not None and b >= 0 else None
    return None


def _positive_when(e, least: int = 1) -> set[int]:
    """The size variables (by id) that `e >= least` makes at least 1: a loop of extent
    `(n + 15) // 16 * b` runs its body only when n and b are."""
    if isinstance(e, E.Var):
        return {id(e)} if least >= 1 else set()
    if not isinstance(e, E.BinOp):
        return set()
    if e.op in ("add", "sub") and isinstance(e.b, E.IntImm):
        return _positive_when(e.a, least - e.b.value if e.op == "add" else least + e.b.value)
    if e.op == "floordiv" and isinstance(e.b, E.IntImm) and e.b.value > 0 and least >= 1:
        return _positive_when(e.a, least * e.b.value)
    if e.op == "mul" and least >= 1 and all(_nonneg_in_sizes(x, set(), {}) for x in (e.a, e.b)):
        return _positive_when(e.a) | _positive_when(e.b)  # factors >= 0: each must be >= 1
    if e.op == "min":
        return _positive_when(e.a, least) | _positive_when(e.b, least)
    if e.op == "max" and isinstance(e.b, E.IntImm) and e.b.value < least:  # max(x, 0) >= 1: x >= 1
        return _positive_when(e.a, least)
    return set()


def unproven_accesses(func: T.PrimFunc, name: str, stated: bool = True) -> list[str]:
    """Every buffer access of `func` whose index cannot be proven within the buffer's shape
    (with `stated`, also one proven only under conditions on the sizes that its
    PRECONDITIONS_ATTR does not state), named with its block and the index that fails;
    empty when all are proven."""
    unmet: list[str] = []
    guarded = _guard(func, name, unmet)[1]
    return guarded + unmet if stated else guarded


# -- guarding what cannot be proven ------------------------------------------------------------------


def guard_accesses(func: T.PrimFunc, name: str) -> tuple[T.PrimFunc, list[str]]:
    """`func` with every access that cannot be proven in bounds made safe: a load becomes
    `select(index in bounds, load, 0)` (only the chosen side is evaluated), a store runs
    under `if index in bounds`. An access in bounds whenever some condition on the size
    variables alone holds (`a <= b`) is left as it is, and the condition is added to the
    function's PRECONDITIONS_ATTR, which the kernel's entry checks once per call. Proven
    accesses, and so every function with none unproven, are left as they are (the same
    objects). Returns the function and, for each guarded access, why it was not proven."""
    return _guard(func, name, [])


def _implied_by(p, cond, have) -> bool:
    """Whether a stated precondition `a <= b` implies `cond` = `x <= b` because x <= a (a
    tiled loop's last index needs `min(..., n - 64) + 64 <= m` where `n <= m` is stated)."""
    if not (isinstance(cond, E.Cmp) and cond.op == "le"):
        return False
    return any(isinstance(h, E.Cmp) and h.op == "le" and E.prove_equal(h.b, cond.b)
               and p.at_most(cond.a, h.a) for h in have)


def _guard(func: T.PrimFunc, name: str, unmet: list[str]) -> tuple[T.PrimFunc, list[str]]:
    """guard_accesses; also lists in `unmet` each access proven only under size conditions
    that `func`'s preconditions do not state yet."""
    p = _Prover()
    guarded: list[str] = []
    sizes = {id(v) for v in func.params if isinstance(v, E.Var)}
    sizes |= {id(v) for b in func.buffers for d in b.shape if isinstance(d, E.PrimExpr) for v in E.free_vars(d)}
    have = tuple(dict(func.attrs).get(PRECONDITIONS_ATTR, ()))
    needed: list = list(have)
    for cond in have:  # the entry checks them: what they say holds everywhere inside
        p._learn(cond, True)
        if cond.op == "ge" and isinstance(cond.a, E.Var) and isinstance(cond.b, E.IntImm) and cond.b.value >= 1:
            p.least[id(cond.a)] = max(cond.b.value, p.least.get(id(cond.a), 0))

    def unproven(buf, indices, where: str, kind: str) -> str | None:
        """Why the access is not proven (its first index that may leave the buffer), or None
        (then with what it needs of the sizes added to `needed`)."""
        if len(indices) != len(buf.shape):
            raise VerifyError(f"{where}: {kind} {buf.name} with {len(indices)} indices, but it has "
                              f"{len(buf.shape)} dimensions")
        needs: list = []
        for d, (idx, dim) in enumerate(zip(indices, buf.shape)):
            conds = p.within(idx, dim)
            if conds is None or not all(id(v) in sizes for c in conds for v in E.free_vars(c)):
                return (f"{where}: {kind} {buf.name}[{', '.join(format_expr(i) for i in indices)}]: index {d} "
                        f"({format_expr(idx)}) is not provably within 0..{format_expr(E.const(dim))} - 1")
            needs += conds
        missing = [c for c in needs if c not in have and not _implied_by(p, c, have)]
        if missing:
            unmet.append(f"{where}: {kind} {buf.name}[{', '.join(format_expr(i) for i in indices)}] is in "
                         f"bounds only if {format_expr(missing[0])}, which the kernel's preconditions "
                         "do not state")
        needed.extend(c for c in missing if c not in needed)
        return None

    def in_bounds(buf, indices):
        cond = None
        for i, dim in zip(indices, buf.shape):
            c = E.Logic("and", E.Cmp("ge", i, E.const(0, i.dtype)), E.Cmp("lt", i, E.const(dim, i.dtype)))
            cond = c if cond is None else E.Logic("and", cond, c)
        return cond if cond is not None else E.const(True)

    def expr(e, where):
        if isinstance(e, E.BufferLoad):
            indices = tuple(expr(i, where) for i in e.indices)
            load = e if all(a is b for a, b in zip(indices, e.indices)) else E.BufferLoad(e.buffer, indices)
            why = unproven(e.buffer, indices, where, "load")
            if why is None:
                return load
            guarded.append(why)
            zero = E.const(0.0 if E.is_float(e.dtype) else 0, e.dtype)
            return E.Select(in_bounds(e.buffer, indices), load, zero, e.dtype)
        if isinstance(e, E.Select):
            cond = expr(e.cond, where)
            t = p.assuming(e.cond, True, lambda: expr(e.true_value, where))
            f = p.assuming(e.cond, False, lambda: expr(e.false_value, where))
            if cond is e.cond and t is e.true_value and f is e.false_value:
                return e
            return E.Select(cond, t, f, e.dtype)
        if isinstance(e, (E.BinOp, E.Cmp, E.Logic)):
            a, b = expr(e.a, where), expr(e.b, where)
            return e if a is e.a and b is e.b else dataclasses.replace(e, a=a, b=b)
        if isinstance(e, E.Not):
            a = expr(e.a, where)
            return e if a is e.a else E.Not(a)
        if isinstance(e, E.Cast):
            v = expr(e.value, where)
            return e if v is e.value else E.Cast(v, e.dtype)
        if isinstance(e, E.Call):
            args = tuple(expr(a, where) for a in e.args)
            return e if all(a is b for a, b in zip(args, e.args)) else E.Call(e.name, args, e.dtype)
        return e

    def stmt(s, where):
        if isinstance(s, T.SeqStmt):
            new = tuple(stmt(x, where) for x in s.stmts)
            return s if all(a is b for a, b in zip(new, s.stmts)) else T.SeqStmt(new)
        if isinstance(s, T.For):
            p.loops[id(s.var)] = (s.min, E.simplify(s.min + s.extent - 1))
            n, extent = (len(p.positive), len(p.running)), E.simplify(E.const(s.extent))
            p.positive += _positive_when(extent)
            if not isinstance(extent, E.IntImm):
                p.running.append(extent)
            body = stmt(s.body, where)
            del p.positive[n[0]:], p.running[n[1]:]
            return s if body is s.body else dataclasses.replace(s, body=body)
        if isinstance(s, T.IfThenElse):
            cond = expr(s.cond, where)
            then = p.assuming(s.cond, True, lambda: stmt(s.then_case, where))
            other = None if s.else_case is None else p.assuming(s.cond, False, lambda: stmt(s.else_case, where))
            if cond is s.cond and then is s.then_case and other is s.else_case:
                return s
            return T.IfThenElse(cond, then, other)
        if isinstance(s, T.Block):
            inner = f"{where}, block {s.name!r}"
            for iv in s.iter_vars:
                p.bindings[id(iv.var)] = iv.binding
                p.by_var[iv.var] = iv.binding
            init = None if s.init is None else stmt(s.init, inner)
            body = stmt(s.body, inner)
            return s if body is s.body and init is s.init else dataclasses.replace(s, body=body, init=init)
        if isinstance(s, T.Allocate):
            body = stmt(s.body, where)
            return s if body is s.body else dataclasses.replace(s, body=body)
        if isinstance(s, T.BufferStore):
            value = expr(s.value, where)
            indices = tuple(expr(i, where) for i in s.indices)
            new = s if value is s.value and all(a is b for a, b in zip(indices, s.indices)) else \
                T.BufferStore(s.buffer, value, indices)
            why = unproven(s.buffer, indices, where, "store to")
            if why is None:
                return new
            guarded.append(why)
            return T.IfThenElse(in_bounds(s.buffer, indices), new)
        if isinstance(s, T.Evaluate):
            value = expr(s.value, where)
            return s if value is s.value else T.Evaluate(value)
        return s

    body = stmt(func.body, f"prim_func {name!r}")
    if body is not func.body:
        func = dataclasses.replace(func, body=body)
    if len(needed) > len(have):
        attrs = tuple((k, v) for k, v in func.attrs if k != PRECONDITIONS_ATTR)
        func = dataclasses.replace(func, attrs=attrs + ((PRECONDITIONS_ATTR, tuple(needed)),))
    return func, guarded


def guard_module(mod) -> list[str]:
    """Guard every PrimFunc of `mod` in place (guard_accesses); returns what was guarded."""
    guarded: list[str] = []
    for name, func in list(mod.functions.items()):
        if isinstance(func, T.PrimFunc):
            new, g = guard_accesses(func, name)
            if new is not func:
                mod.functions[name] = new
            guarded += g
    return guarded
