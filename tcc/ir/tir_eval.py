"""A reference evaluator of PrimFuncs on numpy arrays, statement by statement.

It exists to check te programs, legalization and schedule primitives without any code
generation: `run_prim_func(func, arrays)` binds the size variables from the arrays' shapes
(checking every other occurrence), then runs the body, writing the outputs in place.

Semantics it pins down for the backends: every loop kind runs serially (in order), so a
`syncthreads()` barrier does nothing (tcc.ir.gpu_eval runs GPU-bound loops as threads); a
block's `init` runs when all its reduce iteration variables are 0; a Select evaluates only
the branch it picks (padding loads out of bounds in the other); integer `//` and `%` round
toward minus infinity (tir floordiv/floormod); integer casts wrap around; arithmetic runs in
the expression's own dtype (float32 stays float32). Accesses outside a buffer and block
iteration values outside their extent are errors, never silent. Slow (a closure call per
node per point); tests keep shapes small.

Statements and expressions are first compiled into Python closures over one environment
dict (variables and buffers, by identity), so the tree is dispatched on once, not per point.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import INDEX_DTYPE, is_float, round_to_bfloat16, to_numpy
from tcc.ir.errors import InputError, TccError

Env = dict
ExprFn = Callable[[Env], Any]
StmtFn = Callable[[Env], None]


class TirEvalError(TccError):
    """A PrimFunc that goes wrong while it runs: an access out of bounds, an unbound
    variable, an iteration value outside its extent, an integer division by zero."""


def run_prim_func(func: T.PrimFunc, arrays: Sequence) -> None:
    """Run `func` on `arrays` (one per parameter: ndarrays for buffers, ints for scalar
    parameters); outputs are written in place."""
    env: Env = {}
    _bind_params(func, list(arrays), env)
    execute(_Compiler().stmt(func.body), env)


def execute(body: StmtFn, env: Env) -> None:
    """Run a compiled body, turning a variable looked up outside its scope into an error."""
    with np.errstate(all="ignore"):  # int wrap-around and inf/nan are the semantics, not noise
        try:
            body(env)
        except KeyError as e:
            name = getattr(e.args[0], "name", e.args[0]) if e.args else "?"
            raise TirEvalError(
                f"{name!r} is used outside the scope that defines it; "
                "define it in an enclosing loop, block or parameter"
            ) from None


# ---------------------------------------------------------------------------------------------
# parameters


def _bind_params(func: T.PrimFunc, arrays: list, env: Env, who: str = "run_prim_func") -> None:
    names = ", ".join(p.name for p in func.params)
    if len(arrays) != len(func.params):
        raise InputError(
            f"{who}: expected {len(func.params)} arguments ({names}), got {len(arrays)}"
        )
    origin: dict[E.Var, str] = {}
    for pos, (p, a) in enumerate(zip(func.params, arrays)):
        where = f"{who} argument {pos} ({p.name!r})"
        if isinstance(p, E.Var):
            if isinstance(a, np.ndarray) or not isinstance(a, (int, float, np.generic)):
                raise InputError(f"{where}: expected a {p.dtype} scalar, got {type(a).__name__}")
            env[p] = _scalar_type(p.dtype)(a)
            origin[p] = "its scalar argument"
            continue
        if not isinstance(a, np.ndarray):
            raise InputError(f"{where}: expected a numpy array, got {type(a).__name__}")
        if a.dtype != to_numpy(p.dtype):
            raise InputError(f"{where}: dtype {a.dtype}, expected {p.dtype}")
        if a.ndim != len(p.shape):
            raise InputError(
                f"{where}: rank {a.ndim} (shape {a.shape}), expected rank "
                f"{len(p.shape)} (shape {_dims_text(p.shape)})"
            )
        env[p] = a
        for axis, d in enumerate(p.shape):
            if isinstance(d, E.Var) and d not in env:
                env[d] = int(a.shape[axis])
                origin[d] = f"{p.name!r} dimension {axis}"
    for pos, (p, a) in enumerate(zip(func.params, arrays)):
        if isinstance(p, E.Var):
            continue
        for axis, d in enumerate(p.shape):
            try:
                want = int(E.evaluate(d, env))
            except KeyError as e:
                raise InputError(
                    f"{who}: size variable {e.args[0]!r} of {p.name!r} "
                    "is no plain dimension of any buffer, so it cannot be bound; "
                    "name it alone in some parameter's shape"
                ) from None
            if want != a.shape[axis]:
                expected = str(want) if isinstance(d, int) else f"{d} = {want}"
                bound = [f"{v.name} from {origin[v]}" for v in E.free_vars(d) if v in origin]
                why = f" ({', '.join(bound)})" if bound else ""
                raise InputError(
                    f"{who} argument {pos} ({p.name!r}): dimension {axis} "
                    f"is {a.shape[axis]}, expected {expected}{why}; pass an array "
                    f"of shape {_dims_text(p.shape, env)}"
                )


def _dims_text(shape, env: Env | None = None) -> str:
    if env is not None:
        return str(tuple(int(E.evaluate(d, env)) for d in shape))
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _scalar_type(dtype: str) -> Callable[[Any], Any]:
    """Converts a value to the representation of `dtype`: Python int for the index dtype
    (exact loop arithmetic), a numpy scalar of the right width otherwise."""
    if dtype == INDEX_DTYPE:
        return int
    return to_numpy(dtype).type


# ---------------------------------------------------------------------------------------------
# expressions

_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}
_CMP = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


def _erf(x):
    return math.erf(float(x))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_INTRINSICS: dict[str, Callable] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "erf": _erf, "sigmoid": _sigmoid, "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "nearbyint": np.rint,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "pow": np.power, "fmod": np.fmod,
    "isnan": np.isnan, "isinf": np.isinf, "exp2": np.exp2, "log2": np.log2,
    "log1p": np.log1p, "expm1": np.expm1, "atan2": np.arctan2, "copysign": np.copysign,
}  # fmt: skip


def _index(fns: list[ExprFn], env: Env, buf: T.Buffer, arr: np.ndarray) -> tuple:
    idx = tuple(int(f(env)) for f in fns)
    for i, s in zip(idx, arr.shape):
        if not 0 <= i < s:
            raise TirEvalError(
                f"buffer {buf.name!r} accessed at {idx}, outside its shape "
                f"{arr.shape}; guard the access or fix its index"
            )
    return idx


class _Compiler:
    """Turns IR nodes into closures `fn(env)`."""

    def expr(self, e: E.PrimExpr) -> ExprFn:
        method = getattr(self, f"_{type(e).__name__}", None)
        if method is None:
            raise TirEvalError(f"cannot evaluate a {type(e).__name__} expression")
        return method(e)

    def _Var(self, e: E.Var) -> ExprFn:
        if e.dtype == INDEX_DTYPE:
            return lambda env: env[e]
        conv = _scalar_type(e.dtype)
        return lambda env: conv(env[e])

    def _IntImm(self, e: E.IntImm) -> ExprFn:
        v = np.bool_(e.value) if e.dtype == "bool" else _scalar_type(e.dtype)(e.value)
        return lambda env: v

    def _FloatImm(self, e: E.FloatImm) -> ExprFn:
        v = _scalar_type(e.dtype)(e.value)
        return lambda env: v

    def _BinOp(self, e: E.BinOp) -> ExprFn:
        a, b, op = self.expr(e.a), self.expr(e.b), e.op
        if op in _ARITH:
            f = _ARITH[op]
            return lambda env: f(a(env), b(env))
        if op in ("min", "max"):
            f = (
                (np.minimum if op == "min" else np.maximum)
                if is_float(e.dtype)
                else (min if op == "min" else max)
            )
            return lambda env: f(a(env), b(env))
        if op == "div" and is_float(e.dtype):
            return lambda env: a(env) / b(env)
        if op not in ("div", "floordiv", "floormod"):
            raise TirEvalError(f"unknown binary operator {op!r}")
        f = operator.mod if op == "floormod" else operator.floordiv
        if is_float(e.dtype):
            return lambda env: f(a(env), b(env))

        def int_div(env):
            x, y = a(env), b(env)
            if y == 0:
                raise TirEvalError(f"integer division by zero in `{e}`")
            return f(x, y)

        return int_div

    def _Cmp(self, e: E.Cmp) -> ExprFn:
        a, b, f = self.expr(e.a), self.expr(e.b), _CMP[e.op]
        return lambda env: f(a(env), b(env))

    def _Logic(self, e: E.Logic) -> ExprFn:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op == "and":
            return lambda env: bool(a(env)) and bool(b(env))
        return lambda env: bool(a(env)) or bool(b(env))

    def _Not(self, e: E.Not) -> ExprFn:
        a = self.expr(e.a)
        return lambda env: not a(env)

    def _Select(self, e: E.Select) -> ExprFn:
        c, t, f = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)
        return lambda env: t(env) if c(env) else f(env)

    def _Cast(self, e: E.Cast) -> ExprFn:
        value = self.expr(e.value)
        src, dst = to_numpy(e.value.dtype), to_numpy(e.dtype)
        conv = _scalar_type(e.dtype)
        if e.dtype == "bfloat16":
            return lambda env: round_to_bfloat16(np.asarray(value(env), src).astype(dst))[()]
        return lambda env: conv(np.asarray(value(env), src).astype(dst)[()])

    def _Call(self, e: E.Call) -> ExprFn:
        if e.name == "syncthreads":  # a barrier orders threads; run serially it does nothing
            zero = np.int32(0)
            return lambda env: zero
        if e.name == "reinterpret":
            (a,) = [self.expr(x) for x in e.args]
            src, dst = to_numpy(e.args[0].dtype), to_numpy(e.dtype)
            return lambda env: np.asarray(a(env), src).view(dst)[()]
        fn = _INTRINSICS.get(e.name)
        if fn is None:
            raise TirEvalError(f"unknown intrinsic {e.name!r}; known: {', '.join(_INTRINSICS)}")
        args = [self.expr(a) for a in e.args]
        conv = np.bool_ if e.dtype == "bool" else _scalar_type(e.dtype)
        if len(args) == 1:
            (a,) = args
            return lambda env: conv(fn(a(env)))
        return lambda env: conv(fn(*(a(env) for a in args)))

    def _BufferLoad(self, e: E.BufferLoad) -> ExprFn:
        buf, fns = e.buffer, [self.expr(i) for i in e.indices]

        def load(env):
            arr = env[buf]
            return arr[_index(fns, env, buf, arr)]

        return load

    # -- statements ------------------------------------------------------------------------

    def stmt(self, s: T.Stmt) -> StmtFn:
        method = getattr(self, f"_{type(s).__name__}", None)
        if method is None:
            raise TirEvalError(f"cannot run a {type(s).__name__} statement")
        return method(s)

    def _SeqStmt(self, s: T.SeqStmt) -> StmtFn:
        fns = [self.stmt(x) for x in s.stmts]

        def run(env):
            for f in fns:
                f(env)

        return run

    def _For(self, s: T.For) -> StmtFn:
        lo, ext, body, var = self.expr(s.min), self.expr(s.extent), self.stmt(s.body), s.var

        def run(env):
            start = int(lo(env))
            for v in range(start, start + int(ext(env))):
                env[var] = v
                body(env)

        return run

    def _IfThenElse(self, s: T.IfThenElse) -> StmtFn:
        cond, then = self.expr(s.cond), self.stmt(s.then_case)
        other = self.stmt(s.else_case) if s.else_case is not None else None

        def run(env):
            if cond(env):
                then(env)
            elif other is not None:
                other(env)

        return run

    def _Allocate(self, s: T.Allocate) -> StmtFn:
        body, buf = self.stmt(s.body), s.buffer

        def run(env):
            env[buf] = _allocate(buf, env)
            body(env)
            del env[buf]

        return run

    def _BufferStore(self, s: T.BufferStore) -> StmtFn:
        buf, value, fns = s.buffer, self.expr(s.value), [self.expr(i) for i in s.indices]
        bf16 = buf.dtype == "bfloat16"

        def run(env):
            arr = env[buf]
            v = value(env)
            arr[_index(fns, env, buf, arr)] = round_to_bfloat16(v)[()] if bf16 else v

        return run

    def _Evaluate(self, s: T.Evaluate) -> StmtFn:
        value = self.expr(s.value)

        def run(env):
            value(env)

        return run

    def _Block(self, s: T.Block) -> StmtFn:
        enter, name = self.block_entry(s), s.name
        init = self.stmt(s.init) if s.init is not None else None
        body = self.stmt(s.body)

        def run(env):
            try:
                if enter(env) and init is not None:
                    init(env)
                body(env)
            except TirEvalError as err:
                located = in_block(err, name)
                if located is err:
                    raise
                raise located from None

        return run

    def block_entry(self, s: T.Block) -> Callable[[Env], bool]:
        """A closure that binds the block's iteration variables (checking each against its
        extent) and allocates its buffers; it returns whether the block's init runs (all
        its reduce iteration variables are 0)."""
        binds = [(iv.var, self.expr(iv.binding), self.expr(iv.extent)) for iv in s.iter_vars]
        reduce_vars = [iv.var for iv in s.iter_vars if iv.kind == T.IterKind.REDUCE]
        allocs = [self.allocation(buf) for buf in s.alloc_buffers]

        def enter(env) -> bool:
            for var, binding, extent in binds:
                v, n = int(binding(env)), int(extent(env))
                if not 0 <= v < n:
                    raise TirEvalError(
                        f"iteration variable {var.name} = {v} is outside its "
                        f"extent [0, {n}); fix its binding or add a predicate"
                    )
                env[var] = v
            for alloc in allocs:
                alloc(env)
            return all(env[v] == 0 for v in reduce_vars)

        return enter

    def allocation(self, buf: T.Buffer) -> StmtFn:
        """A closure giving `buf` fresh storage in the environment."""

        def alloc(env):
            env[buf] = _allocate(buf, env)

        return alloc


def in_block(err: TirEvalError, name: str) -> TirEvalError:
    """`err` located in block `name` (same error class), or `err` itself if already located."""
    if getattr(err, "block", None) is not None:
        return err
    located = type(err)(f"block {name!r}: {err}")
    located.block = name
    return located


def _allocate(buf: T.Buffer, env: Env) -> np.ndarray:
    """Fresh storage; floats start as NaN so that reading before writing shows in results."""
    shape = tuple(int(E.evaluate(d, env)) for d in buf.shape)
    dtype = to_numpy(buf.dtype)
    if is_float(buf.dtype):
        return np.full(shape, np.nan, dtype)
    return np.zeros(shape, dtype)
