"""Scalar expressions (PrimExpr): the tensor-level expression language and symbolic shapes.

A dimension of a symbolic shape is either a Python int or an integer PrimExpr over size
variables (`n`, `n * 4`). Python operators on integer expressions simplify as they build
(`n * 4 // 4` is `n`, `n - n` is `0`), so shape arithmetic stays canonical. Nodes are
immutable; `Var` compares by identity, every other node structurally.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Union

from tcc.ir.dtype import INDEX_DTYPE, is_float

Dim = Union[int, "PrimExpr"]

BIN_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
CMP_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC_OPS = ("and", "or")
# Math intrinsics a Call may name; codegen maps each to a libm/LLVM intrinsic.
INTRINSICS = frozenset(
    {
        "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "abs", "floor", "ceil",
        "round", "trunc", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
        "asinh", "acosh", "atanh", "pow", "fmod", "isnan", "isinf", "exp2", "log2",
        "log1p", "expm1", "atan2", "copysign", "nearbyint", "reinterpret",
    }
)  # fmt: skip
# Calls made for their effect, only as the value of an `Evaluate` statement: `syncthreads`
# is the block-wide GPU barrier (CUDA `__syncthreads()`); a serial run treats it as a no-op.
BUILTINS = frozenset({"syncthreads"})


class PrimExpr:
    """Base of scalar expressions; subclasses are frozen dataclasses with a `dtype`."""

    __slots__ = ()
    dtype: str

    def __add__(self, o):
        return binop("add", self, o)

    def __radd__(self, o):
        return binop("add", o, self)

    def __sub__(self, o):
        return binop("sub", self, o)

    def __rsub__(self, o):
        return binop("sub", o, self)

    def __mul__(self, o):
        return binop("mul", self, o)

    def __rmul__(self, o):
        return binop("mul", o, self)

    def __truediv__(self, o):
        return binop("div", self, o)

    def __rtruediv__(self, o):
        return binop("div", o, self)

    def __floordiv__(self, o):
        return binop("floordiv", self, o)

    def __rfloordiv__(self, o):
        return binop("floordiv", o, self)

    def __mod__(self, o):
        return binop("floormod", self, o)

    def __rmod__(self, o):
        return binop("floormod", o, self)

    def __neg__(self):
        return binop("sub", 0 if not is_float(self.dtype) else 0.0, self)

    def __lt__(self, o):
        return Cmp("lt", self, const(o, self.dtype))

    def __le__(self, o):
        return Cmp("le", self, const(o, self.dtype))

    def __gt__(self, o):
        return Cmp("gt", self, const(o, self.dtype))

    def __ge__(self, o):
        return Cmp("ge", self, const(o, self.dtype))

    def __bool__(self):
        raise TypeError("a symbolic expression has no truth value; use tcc.ir.expr.prove_equal")

    def __str__(self):
        from tcc.ir.printer import format_expr

        return format_expr(self)

    __repr__ = __str__

    def __getstate__(self):
        # a cached hash belongs to this process (str hashes are salted per process); what
        # else a node keeps (`_free`, `_loads`) is found again where it is asked for
        state = self.__dict__
        if any(k in state for k in _CACHED):
            return {k: v for k, v in state.items() if k not in _CACHED}
        return state


_CACHED = ("_hash", "_free", "_loads")  # what a node keeps of its own, not pickled


def _hash_once(cls):
    """Cache the structural hash the dataclass generated: it walks the whole tree, and a
    node is hashed again each time it keys a dict inside a bigger expression."""
    structural = cls.__hash__

    def __hash__(self):
        state = self.__dict__
        h = state.get("_hash")
        if h is None:
            h = state["_hash"] = structural(self)
        return h

    cls.__hash__ = __hash__
    return cls


@dataclass(frozen=True, eq=False, repr=False)
class Var(PrimExpr):
    """A scalar variable (a size variable, a loop variable, a block iteration variable)."""

    name: str
    dtype: str = INDEX_DTYPE


@_hash_once
@dataclass(frozen=True, repr=False)
class IntImm(PrimExpr):
    value: int
    dtype: str = INDEX_DTYPE


@_hash_once
@dataclass(frozen=True, repr=False)
class FloatImm(PrimExpr):
    value: float
    dtype: str = "float32"


@_hash_once
@dataclass(frozen=True, repr=False)
class BinOp(PrimExpr):
    """`op` in BIN_OPS; `div` is true division (floats), `floordiv`/`floormod` round down."""

    op: str
    a: PrimExpr
    b: PrimExpr
    dtype: str


@_hash_once
@dataclass(frozen=True, repr=False)
class Cmp(PrimExpr):
    op: str
    a: PrimExpr
    b: PrimExpr
    dtype: str = "bool"


@_hash_once
@dataclass(frozen=True, repr=False)
class Logic(PrimExpr):
    op: str
    a: PrimExpr
    b: PrimExpr
    dtype: str = "bool"


@_hash_once
@dataclass(frozen=True, repr=False)
class Not(PrimExpr):
    a: PrimExpr
    dtype: str = "bool"


@_hash_once
@dataclass(frozen=True, repr=False)
class Select(PrimExpr):
    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str


@_hash_once
@dataclass(frozen=True, repr=False)
class Cast(PrimExpr):
    value: PrimExpr
    dtype: str


@_hash_once
@dataclass(frozen=True, repr=False)
class Call(PrimExpr):
    """A math intrinsic (`exp`, `erf`, ...), named in INTRINSICS, or a builtin in BUILTINS."""

    name: str
    args: tuple[PrimExpr, ...]
    dtype: str


@_hash_once
@dataclass(frozen=True, repr=False)
class BufferLoad(PrimExpr):
    buffer: object  # tcc.ir.tir.Buffer
    indices: tuple[PrimExpr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.dtype

    def at_fixed_element(self) -> bool:
        """Whether the load reads one element known to be in bounds (a 0-d buffer, constant
        indices inside constant dimensions): it may run where a guard would not let an
        indexed load, as under a select's other branch."""
        for index, dim in zip(self.indices, self.buffer.shape):
            dim = dim.value if isinstance(dim, IntImm) else dim
            if not (isinstance(index, IntImm) and isinstance(dim, int) and 0 <= index.value < dim):
                return False
        return True


# ---------------------------------------------------------------------------------------------
# construction helpers


def const(value, dtype: str | None = None) -> PrimExpr:
    """Wrap a Python number as an immediate; a PrimExpr passes through."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        if dtype is not None and is_float(dtype):
            return FloatImm(float(value), dtype)
        return IntImm(value, dtype or INDEX_DTYPE)
    if isinstance(value, float):
        return FloatImm(value, dtype if dtype is not None and is_float(dtype) else "float32")
    if hasattr(value, "item"):  # numpy scalar
        return const(value.item(), dtype)
    raise TypeError(f"cannot make an expression of {value!r}")


def _is_index(e: PrimExpr) -> bool:
    return not is_float(e.dtype) and e.dtype != "bool"


def binop(op: str, a, b) -> PrimExpr:
    """Build `a op b`; integer expressions are simplified as they are built."""
    dtype = a.dtype if isinstance(a, PrimExpr) else b.dtype if isinstance(b, PrimExpr) else None
    a, b = const(a, dtype), const(b, dtype)
    if op == "div" and not is_float(a.dtype):
        op = "floordiv"
    if _is_index(a) and _is_index(b):
        return simplify(BinOp(op, a, b, a.dtype))
    return BinOp(op, a, b, a.dtype)


def min_expr(a, b) -> Dim:
    return as_dim(binop("min", a, b))


def max_expr(a, b) -> Dim:
    return as_dim(binop("max", a, b))


def select(cond, t, f) -> PrimExpr:
    t = const(t, f.dtype if isinstance(f, PrimExpr) else None)
    f = const(f, t.dtype)
    if isinstance(cond, IntImm):  # a condition known when built (an inlined constant index)
        return t if cond.value else f
    return Select(cond, t, f, t.dtype)


def logic(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """`a and b` / `a or b`; an operand known when built decides it or drops out."""
    for known, other in ((a, b), (b, a)):
        if isinstance(known, IntImm):
            if bool(known.value) == (op == "or"):
                return IntImm(int(op == "or"), "bool")
            return other
    return Logic(op, a, b)


def compare(op: str, a, b) -> PrimExpr:
    """`a op b` for op in CMP_OPS; two integer immediates fold to a bool immediate."""
    a = const(a, b.dtype if isinstance(b, PrimExpr) else None)
    b = const(b, a.dtype)
    if isinstance(a, IntImm) and isinstance(b, IntImm) and a.dtype != "bool":
        return IntImm(int(_EVAL_CMP[op](a.value, b.value)), "bool")
    return Cmp(op, a, b)


def as_dim(e) -> Dim:
    """Normalize a dimension: integer immediates become ints, expressions are simplified."""
    if isinstance(e, bool):
        raise TypeError("a dimension cannot be a bool")
    if isinstance(e, int):
        return e
    if hasattr(e, "dtype") and hasattr(e, "item") and not isinstance(e, PrimExpr):
        return int(e)
    if isinstance(e, PrimExpr):
        if not _is_index(e):
            raise TypeError(f"a dimension must be an integer expression, got {e.dtype}")
        e = simplify(e)
        return e.value if isinstance(e, IntImm) else e
    raise TypeError(f"not a dimension: {e!r}")


_fresh_counter = itertools.count()


def fresh_var(hint: str = "d") -> Var:
    """A new size variable, e.g. for a dimension only known when the program runs."""
    return Var(f"{hint}{next(_fresh_counter)}")


# ---------------------------------------------------------------------------------------------
# integer simplification: polynomial normal form over atoms (variables and opaque terms)

_Poly = dict  # monomial (tuple of atoms, sorted) -> int coefficient
POLY_OPS = frozenset({"add", "sub", "mul", "floordiv", "floormod", "min", "max"})  # what the normal form covers


def _atom_key(atom: PrimExpr) -> str:
    return f"{atom.name}" if isinstance(atom, Var) else str(atom)


def _mono_key(mono: tuple) -> tuple:
    return (len(mono), tuple(_atom_key(a) for a in mono))


def _poly_add(p: _Poly, q: _Poly, sign: int = 1) -> _Poly:
    r = dict(p)
    for m, c in q.items():
        r[m] = r.get(m, 0) + sign * c
        if r[m] == 0:
            del r[m]
    return r


def _poly_mul(p: _Poly, q: _Poly) -> _Poly:
    r: _Poly = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = tuple(sorted(m1 + m2, key=_atom_key))
            r[m] = r.get(m, 0) + c1 * c2
            if r[m] == 0:
                del r[m]
    return r


def _poly_const(p: _Poly) -> int | None:
    if not p:
        return 0
    if len(p) == 1 and () in p:
        return p[()]
    return None


def _to_poly(e: PrimExpr) -> _Poly:
    if isinstance(e, IntImm):
        return {(): e.value} if e.value else {}
    if isinstance(e, BinOp) and e.op in ("add", "sub", "mul"):
        pa, pb = _to_poly(e.a), _to_poly(e.b)
        if e.op == "add":
            return _poly_add(pa, pb)
        if e.op == "sub":
            return _poly_add(pa, pb, -1)
        return _poly_mul(pa, pb)
    if isinstance(e, BinOp) and e.op in ("floordiv", "floormod", "min", "max"):
        return _simplify_opaque(e.op, _to_poly(e.a), _to_poly(e.b), e.dtype)
    return {(e,): 1}


def _floordiv_int(a: int, b: int) -> int:
    return a // b


def _simplify_opaque(op: str, pa: _Poly, pb: _Poly, dtype: str) -> _Poly:
    ca, cb = _poly_const(pa), _poly_const(pb)
    if ca is not None and cb is not None:
        if op == "min":
            return _const_poly(min(ca, cb))
        if op == "max":
            return _const_poly(max(ca, cb))
        if cb == 0:  # leave division by zero for run time to report
            return {(BinOp(op, _from_poly(pa, dtype), _from_poly(pb, dtype), dtype),): 1}
        return _const_poly(ca // cb if op == "floordiv" else ca % cb)
    if op in ("min", "max"):
        diff = _poly_const(_poly_add(pa, pb, -1))
        if diff is not None:
            pick_a = (diff <= 0) if op == "min" else (diff >= 0)
            return pa if pick_a else pb
        # absorption: max(a, min(a, b)) == a == min(a, max(a, b)); a slice `x[:, :seq]` of
        # a 256-long buffer broadcast against seq gives max(seq, min(seq, 256))
        dual = "max" if op == "min" else "min"
        for this, other in ((pa, pb), (pb, pa)):
            inner = _single_atom(other)
            if (isinstance(inner, BinOp) and inner.op == dual
                    and this in (_to_poly(inner.a), _to_poly(inner.b))):
                return this
    if op in ("floordiv", "floormod") and cb is not None and cb > 0:
        if cb == 1:
            return pa if op == "floordiv" else {}
        nested = _single_atom(pa) if _DIVISION_FORMS[0] else None
        if (op == "floordiv" and isinstance(nested, BinOp) and nested.op == "floordiv"
                and isinstance(nested.b, IntImm) and nested.b.value > 0):  # a // b // c
            return _to_poly(BinOp(op, nested.a, IntImm(nested.b.value * cb, dtype), dtype))
        quot: _Poly = {}
        rest: _Poly = {}
        for m, c in pa.items():
            if m and c % cb == 0:
                quot[m] = c // cb
            else:
                rest[m] = c
        r = _poly_const(rest)
        if r is not None:
            return _poly_add(quot, _const_poly(r // cb)) if op == "floordiv" else _const_poly(r % cb)
        if op == "floormod" and quot:  # (c*k + x) mod c == x mod c
            pa = rest
        shift = rest.get((), 0) // cb if _DIVISION_FORMS[0] else 0
        if shift and not quot:  # (x + c*q + r) // c == (x + r) // c + q, one form for both
            pa = _poly_add(rest, _const_poly(-shift * cb))
            if op == "floordiv":
                return _poly_add(_simplify_opaque(op, pa, pb, dtype), _const_poly(shift))
    if op in ("floordiv", "floormod") and cb is None and len(pb) == 1:
        ((mb, coef_b),) = pb.items()
        if coef_b > 0 and all(_contains(m, mb) and c % coef_b == 0 for m, c in pa.items()):
            quot = {_remove(m, mb): c // coef_b for m, c in pa.items()}
            return quot if op == "floordiv" else {}
    if op == "floordiv" and pa == pb and pa:
        return _const_poly(1)
    atom = BinOp(op, _from_poly(pa, dtype), _from_poly(pb, dtype), dtype)
    return {(atom,): 1}


def _single_atom(p: _Poly) -> PrimExpr | None:
    """The atom of a polynomial that is exactly one atom (coefficient 1), else None."""
    if len(p) == 1:
        ((m, c),) = p.items()
        if c == 1 and len(m) == 1:
            return m[0]
    return None


def _contains(m: tuple, sub: tuple) -> bool:
    rest = list(m)
    for a in sub:
        for i, x in enumerate(rest):
            if x is a or x == a:
                del rest[i]
                break
        else:
            return False
    return True


def _remove(m: tuple, sub: tuple) -> tuple:
    rest = list(m)
    for a in sub:
        for i, x in enumerate(rest):
            if x is a or x == a:
                del rest[i]
                break
    return tuple(rest)


def _const_poly(c: int) -> _Poly:
    return {(): c} if c else {}


def _mono_expr(mono: tuple, coef: int, dtype: str) -> PrimExpr:
    e: PrimExpr | None = None
    for atom in mono:
        e = atom if e is None else BinOp("mul", e, atom, dtype)
    if e is None:
        return IntImm(coef, dtype)
    if coef != 1:
        e = BinOp("mul", e, IntImm(coef, dtype), dtype)
    return e


def _from_poly(p: _Poly, dtype: str) -> PrimExpr:
    # positive terms first, highest degree first, so `n*n*2 - n` and `3 - n` read naturally
    monos = sorted((m for m in p if m), key=lambda m: (p[m] < 0, -len(m), _mono_key(m)))
    c0 = p.get((), 0)
    e: PrimExpr | None = None
    if c0 > 0 and (not monos or p[monos[0]] < 0):
        e, c0 = IntImm(c0, dtype), 0
    for m in monos:
        c = p[m]
        if e is None:
            e = _mono_expr(m, c, dtype)
        elif c > 0:
            e = BinOp("add", e, _mono_expr(m, c, dtype), dtype)
        else:
            e = BinOp("sub", e, _mono_expr(m, -c, dtype), dtype)
    if e is None:
        return IntImm(c0, dtype)
    if c0 > 0:
        e = BinOp("add", e, IntImm(c0, dtype), dtype)
    elif c0 < 0:
        e = BinOp("sub", e, IntImm(-c0, dtype), dtype)
    return e


_SIMPLIFIED: dict = {}  # expression -> its canonical form (a pure function of the expression)
_SIMPLIFIED_MAX = 50_000


def simplify(e: PrimExpr) -> PrimExpr:
    """Canonical form of an integer expression (non-integer expressions are returned as is)."""
    if not isinstance(e, BinOp) or e.op not in POLY_OPS or not _is_index(e):
        return e
    # the schedule's checks and codegen simplify the same indices over and over (every
    # candidate of a tune, every unrolled copy); the normal form costs far more than a lookup
    try:
        out = _SIMPLIFIED.get(e)
    except TypeError:  # a term that cannot be hashed: nothing to remember it by
        return _from_poly(_to_poly(e), e.dtype)
    if out is None:
        out = _from_poly(_to_poly(e), e.dtype)
        if len(_SIMPLIFIED) >= _SIMPLIFIED_MAX:
            _SIMPLIFIED.clear()
        _SIMPLIFIED[e] = out
    return out


# Whether the normal form also rewrites divisions by constants into one form: a multiple of
# the divisor moved out of the constant term, a // b // c as a // (b*c). prove_equal turns it
# on for a second try (two exporters write a strided length as (n - 10) // 5 + 1 and as
# n // 5 - 1); simplify keeps it off, so the kernels' index expressions keep their forms.
_DIVISION_FORMS = [False]


def prove_equal(a: Dim, b: Dim) -> bool:
    """True when two dimensions are provably equal for every binding of their variables."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    diff = binop("sub", a, b)
    if as_dim(diff) == 0:
        return True
    if not isinstance(diff, PrimExpr):
        return False
    _DIVISION_FORMS[0] = True
    try:
        return not _to_poly(diff)
    finally:
        _DIVISION_FORMS[0] = False


def free_vars(e) -> list[Var]:
    """Variables of an expression (or of a nested list/tuple of them), in first-seen order."""
    return list(_free(e))


def _free(x) -> tuple[Var, ...]:
    """free_vars, kept by each expression node once found (as its hash is): the rules ask
    again for the variables of every subexpression of the trees they walk."""
    if isinstance(x, Var):
        return (x,)
    if isinstance(x, PrimExpr):
        state = x.__dict__
        found = state.get("_free")
        if found is None:
            found = state["_free"] = _merged([_free(getattr(x, f)) for f in x.__dataclass_fields__])
        return found
    if isinstance(x, (list, tuple)):
        return _merged([_free(y) for y in x])
    return ()


def _merged(parts: list[tuple]) -> tuple:
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return parts[0] if parts else ()
    seen: dict[int, Var] = {}
    for p in parts:
        for v in p:
            seen.setdefault(id(v), v)
    return tuple(seen.values())


def has_load(e) -> bool:
    """Whether evaluating `e` (an expression or nested lists of them) reads memory: a buffer
    load anywhere in it, inside another load's indices too. Kept by each node once found."""
    if isinstance(e, BufferLoad):
        return True
    if isinstance(e, PrimExpr):
        state = e.__dict__
        found = state.get("_loads")
        if found is None:
            found = state["_loads"] = any(has_load(getattr(e, f)) for f in e.__dataclass_fields__)
        return found
    if isinstance(e, (list, tuple)):
        return any(has_load(x) for x in e)
    return False


def uses(e, var: Var) -> bool:
    """True when `var` (by identity) occurs in `e` (an expression or nested lists of them).
    A tree whose variables are not kept yet is walked, to the first use (an index built for
    one question is never asked again, and keeping the variables of each of its nodes
    costs more than the walk)."""
    if isinstance(e, Var):
        return e is var
    if isinstance(e, PrimExpr):
        found = e.__dict__.get("_free")
        if found is not None:
            return any(v is var for v in found)
        return any(uses(getattr(e, f), var) for f in e.__dataclass_fields__)
    if isinstance(e, (list, tuple)):
        return any(uses(x, var) for x in e)
    return False


def substitute(e, mapping: dict) -> object:
    """Replace variables (by identity) with expressions or ints; works on nested lists too."""
    if isinstance(e, Var):
        v = mapping.get(e, e)
        return v
    if isinstance(e, list):
        return [substitute(x, mapping) for x in e]
    if isinstance(e, tuple):
        return tuple(substitute(x, mapping) for x in e)
    if isinstance(e, BinOp):
        return binop(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, Cmp):
        return compare(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, Logic):
        return logic(e.op, const(substitute(e.a, mapping)), const(substitute(e.b, mapping)))
    if isinstance(e, Not):
        return Not(const(substitute(e.a, mapping)))
    if isinstance(e, Select):
        return select(
            const(substitute(e.cond, mapping)),
            substitute(e.true_value, mapping),
            substitute(e.false_value, mapping),
        )
    if isinstance(e, Cast):
        return Cast(const(substitute(e.value, mapping)), e.dtype)
    if isinstance(e, Call):
        return Call(e.name, tuple(const(substitute(a, mapping)) for a in e.args), e.dtype)
    return e


_EVAL_BIN = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "floordiv": lambda a, b: a // b,
    "floormod": lambda a, b: a % b,
    "min": min,
    "max": max,
}
_EVAL_CMP = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


def evaluate(e, env: dict):
    """Evaluate a scalar expression (or a nested list of them) with variables bound in `env`.

    Raises KeyError naming an unbound variable.
    """
    if isinstance(e, (int, float, bool, str)) or e is None:
        return e
    if isinstance(e, list):
        return [evaluate(x, env) for x in e]
    if isinstance(e, tuple):
        return tuple(evaluate(x, env) for x in e)
    if isinstance(e, Var):
        if e not in env:
            raise KeyError(e.name)
        return env[e]
    if isinstance(e, (IntImm, FloatImm)):
        return bool(e.value) if e.dtype == "bool" else e.value
    if isinstance(e, BinOp):
        return _EVAL_BIN[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Cmp):
        return _EVAL_CMP[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Logic):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return (a and b) if e.op == "and" else (a or b)
    if isinstance(e, Not):
        return not evaluate(e.a, env)
    if isinstance(e, Select):
        c = evaluate(e.cond, env)
        return evaluate(e.true_value, env) if c else evaluate(e.false_value, env)
    if isinstance(e, Cast):
        v = evaluate(e.value, env)
        return float(v) if is_float(e.dtype) else (bool(v) if e.dtype == "bool" else int(v))
    if isinstance(e, Call):
        args = [evaluate(a, env) for a in e.args]
        fn = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh,
              "erf": math.erf, "abs": abs, "floor": math.floor, "ceil": math.ceil,
              "pow": math.pow}.get(e.name)  # fmt: skip
        if fn is None:
            raise KeyError(f"intrinsic {e.name}")
        return fn(*args)
    raise TypeError(f"cannot evaluate {e!r}")
