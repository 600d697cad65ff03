"""The tensor-expression DSL (te): an op's output stated as a function of its indices.

```python
A = te.placeholder((n, k), "float32", "A")
B = te.placeholder((k, m), "float32", "B")
r = te.reduce_axis(k, "r")
C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=[r]), "C")
func = te.create_prim_func([A, B, C])
```

A te.Tensor is a placeholder (an input) or the output of one compute stage; indexing it
gives a `BufferLoad` on its `tir.Buffer`, so a stage's body is an ordinary PrimExpr over its
index variables. `create_prim_func` turns the stages into a PrimFunc in TensorIR form:
per stage, serial loops (spatial outside, reduction inside) around one `Block` that names
its iteration variables and the regions it reads and writes, with an `init` for
reductions, all inside a root block "root" that allocates the intermediate stages.
Everything is built deterministically, so the same te program always gives the same
(structurally equal, identically printed) PrimFunc.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import INDEX_DTYPE, check_dtype, is_float, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.fields import field_names

# Buffer (by id) -> the Tensor owning it, so that a BufferLoad met in a stage body leads back
# to the stage that produces it. Weak: a tensor nobody holds needs no entry.
_OWNER: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
# Reduce-axis variable -> its extent; reduce axes are plain Vars so they index like any var.
_REDUCE_EXTENT: weakref.WeakKeyDictionary[E.Var, E.Dim] = weakref.WeakKeyDictionary()

_INDEX_OPS = frozenset({"add", "sub", "mul", "floordiv", "floormod", "min", "max"})


class Tensor:
    """A te tensor: a placeholder (`body is None`) or the output of one compute stage."""

    __slots__ = ("buffer", "axis", "body", "inputs", "__weakref__")

    def __init__(self, buffer: T.Buffer, axis=(), body=None, inputs=()):
        self.buffer = buffer
        self.axis: tuple[E.Var, ...] = tuple(axis)
        self.body: E.PrimExpr | Reduce | None = body
        self.inputs: tuple[Tensor, ...] = tuple(inputs)
        _OWNER[id(buffer)] = self

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple[E.Dim, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    @property
    def is_placeholder(self) -> bool:
        return self.body is None

    def __getitem__(self, indices) -> E.BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise ShapeError(
                f"te tensor {self.name!r} has {self.ndim} dimensions but is "
                f"indexed with {len(indices)}; give one index per dimension"
            )
        idx = tuple(E.const(i) for i in indices)
        for i in idx:
            if is_float(i.dtype) or i.dtype == "bool":
                raise ShapeError(
                    f"te tensor {self.name!r} indexed with a {i.dtype} value "
                    f"({i}); indices must be integers, cast them with te.cast"
                )
        return E.BufferLoad(self.buffer, idx)

    def __repr__(self) -> str:
        kind = "placeholder" if self.is_placeholder else "compute"
        return f"te.Tensor({self.name!r}, {self.shape}, {self.dtype!r}, {kind})"


@dataclass(frozen=True)
class Reduce:
    """A reduction (`kind` sum/prod/max/min) of `source` over `axis`; only ever the whole
    body of a compute stage, which is what lets the stage become one block with an init."""

    kind: str
    source: E.PrimExpr
    axis: tuple[E.Var, ...]
    where: E.PrimExpr | None = None

    @property
    def dtype(self) -> str:
        return self.source.dtype

    def _refuse(self, *_):
        raise ShapeError(
            f"te.{self.kind}(...) must be the whole body of te.compute; compute "
            "the reduction in its own stage and use that tensor"
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __neg__ = _refuse


# ---------------------------------------------------------------------------------------------
# building tensors


def _shape(shape) -> tuple[E.Dim, ...]:
    if isinstance(shape, (int, E.PrimExpr)):
        shape = (shape,)
    return tuple(E.as_dim(d) for d in shape)


def var(name: str, dtype: str = INDEX_DTYPE) -> E.Var:
    """A size variable for symbolic shapes (`n = te.var("n")`)."""
    return E.Var(name, dtype)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of the te program."""
    return Tensor(T.Buffer(name, _shape(shape), check_dtype(dtype)))


def reduce_axis(extent, name: str = "r") -> E.Var:
    """A reduction variable over [0, extent); list it in the reduction's `axis=[...]`."""
    v = E.Var(name)
    _REDUCE_EXTENT[v] = E.as_dim(extent)
    return v


def _index_names(fcompute: Callable, ndim: int, name: str) -> list[str]:
    """The index variables' names: fcompute's own parameter names when it has them."""
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise ShapeError(
            f"te.compute {name!r}: fcompute takes {len(params)} index arguments "
            f"but the shape has {ndim} dimensions; take one index per dimension"
        )
    return [p.name for p in params]


def compute(shape, fcompute: Callable, name: str = "compute") -> Tensor:
    """A stage: `fcompute(*index_vars)` gives the value at each index (a PrimExpr or a
    reduction such as `te.sum(..., axis=[r])`)."""
    dims = _shape(shape)
    axis = tuple(E.Var(n) for n in _index_names(fcompute, len(dims), name))
    body = fcompute(*axis)
    if isinstance(body, (int, float, bool, np.generic)):
        body = E.const(body)
    if isinstance(body, (list, tuple)):
        raise ShapeError(
            f"te.compute {name!r}: fcompute returned {len(body)} values; a stage "
            "has one output, make one stage per output"
        )
    if not isinstance(body, (E.PrimExpr, Reduce)):
        raise ShapeError(
            f"te.compute {name!r}: fcompute returned {type(body).__name__}, "
            "expected a scalar expression or a te reduction"
        )
    exprs = (
        [body.source, *([body.where] if body.where is not None else [])]
        if isinstance(body, Reduce)
        else [body]
    )
    inputs: dict[int, Tensor] = {}
    for e in exprs:
        _check_types(e, name)
        for load in _loads(e):
            owner = _OWNER.get(id(load.buffer))
            if owner is None or owner.buffer is not load.buffer:
                raise ShapeError(
                    f"te.compute {name!r} reads buffer {load.buffer.name!r}, which "
                    "is not a te tensor; index te.placeholder/te.compute results"
                )
            inputs.setdefault(id(owner), owner)
    return Tensor(T.Buffer(name, dims, body.dtype), axis, body, inputs.values())


# ---------------------------------------------------------------------------------------------
# expression helpers


def const(value, dtype: str | None = None) -> E.PrimExpr:
    """An immediate of `dtype` (default: int64 for ints, float32 for floats, bool for bools)."""
    if isinstance(value, E.PrimExpr):
        return value if dtype is None else cast(value, dtype)
    if dtype is None:
        return E.const(value)
    check_dtype(dtype)
    if is_float(dtype):
        return E.FloatImm(float(value), dtype)
    if dtype == "bool":
        return E.IntImm(int(bool(value)), "bool")
    return E.IntImm(int(value), dtype)


def cast(a, b) -> E.PrimExpr:
    """`cast(value, "dtype")` (or `cast("dtype", value)`, as the IR text writes it)."""
    value, dtype = (b, a) if isinstance(a, str) else (a, b)
    if not isinstance(value, E.PrimExpr):
        return const(value, dtype)
    check_dtype(dtype)
    return value if value.dtype == dtype else E.Cast(value, dtype)


def if_then_else(cond, true_value, false_value) -> E.PrimExpr:
    """`true_value` where `cond` holds, else `false_value` (a Select; only the chosen branch is
    evaluated, so a branch may load out of bounds when `cond` excludes it: padding)."""
    return E.select(E.const(cond), true_value, false_value)


def _bool_pair(name: str):
    def build(a, b) -> E.PrimExpr:
        return E.compare(name, a, b)

    build.__doc__ = f"The comparison `a {name} b` (a bool expression)."
    return build


equal, not_equal = _bool_pair("eq"), _bool_pair("ne")
less, less_equal = _bool_pair("lt"), _bool_pair("le")
greater, greater_equal = _bool_pair("gt"), _bool_pair("ge")


def logical_and(a, b) -> E.PrimExpr:
    """`a and b` of two bool expressions."""
    return E.Logic("and", E.const(a), E.const(b))


def logical_or(a, b) -> E.PrimExpr:
    """`a or b` of two bool expressions."""
    return E.Logic("or", E.const(a), E.const(b))


def logical_not(a) -> E.PrimExpr:
    """`not a` of a bool expression."""
    return E.Not(E.const(a))


def _intrinsic(name: str, arity: int = 1):
    dtype_of = (lambda args: "bool") if name in ("isnan", "isinf") else (lambda a: a[0].dtype)

    def build(*args) -> E.PrimExpr:
        if len(args) != arity:
            raise ShapeError(f"te.{name} takes {arity} arguments, got {len(args)}")
        first = next((a for a in args if isinstance(a, E.PrimExpr)), None)
        vals = tuple(E.const(a, first.dtype if first is not None else None) for a in args)
        if name != "abs" and not all(is_float(v.dtype) for v in vals):
            got = ", ".join(v.dtype for v in vals)
            raise ShapeError(f"te.{name} takes float arguments, got {got}; cast with te.cast")
        return E.Call(name, vals, dtype_of(vals))

    build.__name__ = name
    build.__doc__ = f"The math intrinsic `{name}` (an expr.Call)."
    return build


# Python's own names (abs, round, pow, sum, min, max) are shadowed on purpose: `te.abs(x)`.
exp, log, sqrt, rsqrt = (_intrinsic(n) for n in ("exp", "log", "sqrt", "rsqrt"))
tanh, erf, sigmoid = (_intrinsic(n) for n in ("tanh", "erf", "sigmoid"))
abs, floor, ceil = (_intrinsic(n) for n in ("abs", "floor", "ceil"))
round, trunc, nearbyint = (_intrinsic(n) for n in ("round", "trunc", "nearbyint"))


def reinterpret(x, dtype: str) -> E.PrimExpr:
    """The bits of `x` read as `dtype`, whose values tcc holds in as many bits: a bool as its
    byte, a bfloat16 as a float32, a low-precision value as its code byte (tcc.ir.dtype)."""
    x = E.const(x)
    if "string" in (x.dtype, dtype) or _held_bits(x.dtype) != _held_bits(check_dtype(dtype)):
        raise ShapeError(f"te.reinterpret: {x.dtype} and {dtype} differ in width")
    return E.Call("reinterpret", (x,), dtype)


def _held_bits(dtype: str) -> int:
    return to_numpy(dtype).itemsize * 8
sin, cos, tan = (_intrinsic(n) for n in ("sin", "cos", "tan"))
asin, acos, atan = (_intrinsic(n) for n in ("asin", "acos", "atan"))
sinh, cosh = (_intrinsic(n) for n in ("sinh", "cosh"))
asinh, acosh, atanh = (_intrinsic(n) for n in ("asinh", "acosh", "atanh"))
exp2, log2, log1p, expm1 = (_intrinsic(n) for n in ("exp2", "log2", "log1p", "expm1"))
isnan, isinf = (_intrinsic(n) for n in ("isnan", "isinf"))
pow, fmod = _intrinsic("pow", 2), _intrinsic("fmod", 2)
atan2, copysign = _intrinsic("atan2", 2), _intrinsic("copysign", 2)


def maximum(a, b) -> E.PrimExpr:
    """The larger of two values (elementwise max)."""
    return E.binop("max", a, b)


def minimum(a, b) -> E.PrimExpr:
    """The smaller of two values (elementwise min)."""
    return E.binop("min", a, b)


def max_value(dtype: str) -> E.PrimExpr:
    """The largest finite value of `dtype`."""
    return const(_limits(dtype)[1], dtype)


def min_value(dtype: str) -> E.PrimExpr:
    """The smallest finite value of `dtype`."""
    return const(_limits(dtype)[0], dtype)


def _limits(dtype: str) -> tuple:
    if dtype == "bool":
        return (0, 1)
    if dtype == "bfloat16":
        import ml_dtypes  # here: its import takes 0.4-0.6 s, which `tcc --help` need not pay

        info = ml_dtypes.finfo(ml_dtypes.bfloat16)
        return (float(info.min), float(info.max))
    npd = to_numpy(check_dtype(dtype))
    info = np.finfo(npd) if is_float(dtype) else np.iinfo(npd)
    return (
        info.min.item() if is_float(dtype) else int(info.min),
        info.max.item() if is_float(dtype) else int(info.max),
    )


# ---------------------------------------------------------------------------------------------
# reductions


def _reduction(kind: str):
    def build(source, axis, where=None) -> Reduce:
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if not axes:
            raise ShapeError(f"te.{kind} needs at least one reduce axis in axis=[...]")
        for a in axes:
            if not isinstance(a, E.Var) or a not in _REDUCE_EXTENT:
                raise ShapeError(
                    f"te.{kind}: axis {a} is not a te.reduce_axis; make each "
                    "reduction variable with te.reduce_axis(extent, name)"
                )
        if len({id(a) for a in axes}) != len(axes):
            raise ShapeError(f"te.{kind}: a reduce axis is listed twice in axis=[...]")
        where_e = None if where is None else E.const(where)
        if where_e is not None and where_e.dtype != "bool":
            raise ShapeError(f"te.{kind}: where= must be a bool condition, got {where_e.dtype}")
        return Reduce(kind, E.const(source), axes, where_e)

    build.__doc__ = f"The {kind} of `source` over the reduce axes (optionally only `where`)."
    return build


sum = _reduction("sum")
prod = _reduction("prod")
_max_reduce, _min_reduce = _reduction("max"), _reduction("min")


def max(a, b=None, axis=None, where=None):
    """`max(x, axis=[r])` reduces; `max(a, b)` is the elementwise maximum."""
    if axis is not None:
        return _max_reduce(a, axis, where)
    if b is None:
        raise ShapeError("te.max needs axis=[...] (a reduction) or two values (elementwise)")
    return maximum(a, b)


def min(a, b=None, axis=None, where=None):
    """`min(x, axis=[r])` reduces; `min(a, b)` is the elementwise minimum."""
    if axis is not None:
        return _min_reduce(a, axis, where)
    if b is None:
        raise ShapeError("te.min needs axis=[...] (a reduction) or two values (elementwise)")
    return minimum(a, b)


def reduce_identity(kind: str, dtype: str) -> E.PrimExpr:
    """The value a `kind` reduction starts from: 0, 1, or the lowest/highest value."""
    if kind in ("sum", "prod"):
        return const(0 if kind == "sum" else 1, dtype)
    lowest = kind == "max"
    if is_float(dtype):
        return E.FloatImm(-math.inf if lowest else math.inf, dtype)
    lo, hi = _limits(dtype)
    return const(lo if lowest else hi, dtype)


_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}


# ---------------------------------------------------------------------------------------------
# expression walking


def _children(e: E.PrimExpr):
    for fname in field_names(e):
        v = getattr(e, fname)
        if isinstance(v, E.PrimExpr):
            yield v
        elif isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, E.PrimExpr))


def _loads(e: E.PrimExpr):
    """Every BufferLoad of `e`, in pre-order."""
    if isinstance(e, E.BufferLoad):
        yield e
    for c in _children(e):
        yield from _loads(c)


def _substitute(e: E.PrimExpr, mapping: dict) -> E.PrimExpr:
    """`e` with variables replaced by identity, rebuilt node by node; nothing is simplified
    but a comparison of two integer immediates and a select on one (an inlined stage read
    at a constant index, such as a concat's, keeps only the branch that index takes)."""
    if isinstance(e, E.Var):
        return mapping.get(e, e)
    if isinstance(e, E.BufferLoad):
        return E.BufferLoad(e.buffer, tuple(_substitute(i, mapping) for i in e.indices))
    if isinstance(e, E.Cmp):
        return E.compare(e.op, _substitute(e.a, mapping), _substitute(e.b, mapping))
    if isinstance(e, E.Select):
        cond = _substitute(e.cond, mapping)
        if isinstance(cond, E.IntImm):
            return _substitute(e.true_value if cond.value else e.false_value, mapping)
    changes = {}
    for fname in field_names(e):
        v = getattr(e, fname)
        if isinstance(v, E.PrimExpr):
            new = _substitute(v, mapping)
        elif isinstance(v, tuple) and v and isinstance(v[0], E.PrimExpr):
            new = tuple(_substitute(x, mapping) for x in v)
        else:
            continue
        if new is not v:
            changes[fname] = new
    return dataclasses.replace(e, **changes) if changes else e


def _check_types(e: E.PrimExpr, stage: str) -> None:
    """Operand dtypes must agree: codegen has no implicit conversions."""
    for c in _children(e):
        _check_types(c, stage)
    bad = None
    if isinstance(e, E.BinOp) and not (e.a.dtype == e.b.dtype == e.dtype):
        bad = f"{e.op} of {e.a.dtype} and {e.b.dtype}"
    elif isinstance(e, E.Cmp) and e.a.dtype != e.b.dtype:
        bad = f"comparison {e.op} of {e.a.dtype} and {e.b.dtype}"
    elif isinstance(e, E.Select) and not (e.true_value.dtype == e.false_value.dtype == e.dtype):
        bad = f"if_then_else with branches of {e.true_value.dtype} and {e.false_value.dtype}"
    elif isinstance(e, (E.Select, E.Logic, E.Not)):
        conds = [e.cond] if isinstance(e, E.Select) else [e.a] + ([e.b] if hasattr(e, "b") else [])
        if any(c.dtype != "bool" for c in conds):
            bad = "a condition that is not bool"
    if bad:
        raise ShapeError(
            f"te.compute {stage!r}: {bad} in `{e}`; make the dtypes agree with te.cast"
        )


def _key(e) -> tuple:
    """An identity-aware key of an expression, to tell distinct accesses apart."""
    if isinstance(e, E.Var):
        return ("var", id(e))
    if isinstance(e, E.BufferLoad):
        return ("load", id(e.buffer), tuple(_key(i) for i in e.indices))
    if isinstance(e, E.PrimExpr):
        return (type(e).__name__, *(_key(getattr(e, fname)) for fname in field_names(e)))
    if isinstance(e, tuple):
        return tuple(_key(x) for x in e)
    return (e,)


def _is_plain_index(e: E.PrimExpr) -> bool:
    if isinstance(e, (E.Var, E.IntImm)):
        return True
    return (
        isinstance(e, E.BinOp)
        and e.op in _INDEX_OPS
        and all(_is_plain_index(c) for c in (e.a, e.b))
    )


# ---------------------------------------------------------------------------------------------
# PrimFunc construction


def _whole(buf: T.Buffer) -> T.BufferRegion:
    zero = E.IntImm(0, INDEX_DTYPE)
    return T.BufferRegion(buf, tuple((zero, E.const(d)) for d in buf.shape))


def _point(buf: T.Buffer, indices) -> T.BufferRegion:
    one = E.IntImm(1, INDEX_DTYPE)
    return T.BufferRegion(buf, tuple((i, one) for i in indices))


def read_regions(exprs: Sequence[E.PrimExpr]) -> tuple[T.BufferRegion, ...]:
    """The regions a block reading `exprs` declares, buffers in first-access order: a point
    per distinct access when every access of the buffer has plain indices (arithmetic of
    variables and ints), else the whole buffer (data-dependent accesses). A point read
    under a condition (padding: `select(0 <= y - 1, x[y - 1], 0)`) is read whenever it is
    evaluated; where the condition fails it may name an element past the buffer's edge,
    which nothing reads (compute_at guards a copy of such a box at the edges)."""
    accesses: dict[int, tuple[T.Buffer, list]] = {}
    whole: set[int] = set()
    for e in exprs:
        for load in _loads(e):
            buf = load.buffer
            entry = accesses.setdefault(id(buf), (buf, []))
            if not all(_is_plain_index(i) for i in load.indices):
                whole.add(id(buf))
            key = _key(load.indices)
            if all(k != key for k, _ in entry[1]):
                entry[1].append((key, load.indices))
    regions = []
    for bid, (buf, loads) in accesses.items():
        if bid in whole:
            regions.append(_whole(buf))
        else:
            regions.extend(_point(buf, idx) for _, idx in loads)
    return tuple(regions)


def _topo_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        stack = [(t, False)]
        while stack:  # iterative: long elementwise chains must not hit the recursion limit
            x, done = stack.pop()
            if done:
                order.append(x)
                continue
            if id(x) in seen:
                continue
            seen.add(id(x))
            stack.append((x, True))
            stack.extend((i, False) for i in reversed(x.inputs) if id(i) not in seen)

    for t in outputs:
        visit(t)
    return order


def _unique(name: str, used: set[str]) -> str:
    out, k = name, 1
    while out in used:
        out, k = f"{name}_{k}", k + 1
    used.add(out)
    return out


def _stage(t: Tensor, block_name: str) -> T.Stmt:
    """One compute stage: its loop nest around one block."""
    body = t.body
    reduce_axes = body.axis if isinstance(body, Reduce) else ()
    if any(isinstance(_REDUCE_EXTENT[r], int) and _REDUCE_EXTENT[r] == 0 for r in reduce_axes):
        # a reduction over no elements is its identity: a block with no reduction loop to
        # run its init in (a loop of extent 0 never would)
        body, reduce_axes = reduce_identity(body.kind, body.dtype), ()
    axes = [(a, E.const(d), T.IterKind.SPATIAL) for a, d in zip(t.axis, t.shape)]
    axes += [(r, E.const(_REDUCE_EXTENT[r]), T.IterKind.REDUCE) for r in reduce_axes]
    loops, iter_vars, mapping = [], [], {}
    for a, extent, kind in axes:
        loop_var, block_var = E.Var(a.name), E.Var(f"v_{a.name}")
        loops.append((loop_var, extent))
        iter_vars.append(T.IterVar(block_var, extent, kind, loop_var))
        mapping[a] = block_var
    out = t.buffer
    out_idx = tuple(mapping[a] for a in t.axis)
    init = None
    if isinstance(body, Reduce):
        source = _substitute(body.source, mapping)
        identity = reduce_identity(body.kind, body.dtype)
        reads = [source]
        if body.where is not None:
            cond = _substitute(body.where, mapping)
            reads.insert(0, cond)
            source = E.Select(cond, source, identity, source.dtype)
        value = E.BinOp(_COMBINE[body.kind], E.BufferLoad(out, out_idx), source, body.dtype)
        init = T.BufferStore(out, identity, out_idx)
    else:
        value = _substitute(body, mapping)
        reads = [value]
    stmt: T.Stmt = T.Block(
        block_name,
        tuple(iter_vars),
        read_regions(reads),
        (_point(out, out_idx),),
        T.BufferStore(out, value, out_idx),
        init,
    )
    for loop_var, extent in reversed(loops):
        stmt = T.For(loop_var, E.IntImm(0, INDEX_DTYPE), extent, T.ForKind.SERIAL, stmt)
    return stmt


def create_prim_func(tensors: Sequence[Tensor]) -> T.PrimFunc:
    """The PrimFunc computing the listed tensors: parameters in the given order (inputs,
    then outputs), one block per compute stage, intermediate stages allocated in "root".

    A size variable the program uses that is no whole dimension of a listed tensor (`seq`
    where the only shapes say `seq - 1` or `batch * seq`, or a value read from a tensor)
    becomes a scalar parameter after the buffers, in order of first use: the kernel cannot
    learn it from its buffers, so the caller passes it (`CallTIR.shape_args`)."""
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise ShapeError(f"te.create_prim_func takes te tensors, got {type(t).__name__}")
    if len({id(t) for t in tensors}) != len(tensors):
        raise ShapeError("te.create_prim_func: a tensor is listed twice; list each once")
    listed = {id(t) for t in tensors}
    order = _topo_order(tensors)
    for t in order:
        if t.is_placeholder and id(t) not in listed:
            user = next(x.name for x in order if t in x.inputs)
            raise ShapeError(
                f"te.create_prim_func: placeholder {t.name!r} (read by "
                f"{user!r}) is not in the tensor list; list every input"
            )
    whole = {id(d) for t in tensors for d in t.shape if isinstance(d, E.Var)}
    scalars: dict[int, E.Var] = {}
    for v in E.free_vars([d for t in tensors for d in t.shape]):
        if id(v) not in whole:
            scalars.setdefault(id(v), v)
    for t in order:
        if t.is_placeholder:
            continue
        body = t.body
        exprs = [*t.shape] + ([body.source, body.where] if isinstance(body, Reduce) else [body])
        exprs += [_REDUCE_EXTENT[r] for r in (body.axis if isinstance(body, Reduce) else ())]
        local = {id(a) for a in t.axis} | (
            {id(r) for r in body.axis} if isinstance(body, Reduce) else set()
        )
        for v in E.free_vars([e for e in exprs if e is not None]):
            if id(v) in local or id(v) in whole:
                continue
            if v in _REDUCE_EXTENT:
                raise ShapeError(
                    f"te.compute {t.name!r} uses reduce axis {v.name!r} outside "
                    "a reduction over it; list it in the reduction's axis=[...]"
                )
            if v.dtype not in ("int32", "int64"):
                raise ShapeError(
                    f"te.create_prim_func: stage {t.name!r} uses {v.dtype} variable "
                    f"{v.name!r}, which is no size variable; a kernel takes integer sizes only"
                )
            scalars.setdefault(id(v), v)
    used = {"root"}
    stages = [_stage(t, _unique(t.name, used)) for t in order if not t.is_placeholder]
    allocs = tuple(t.buffer for t in order if id(t) not in listed)
    root = T.Block("root", (), (), (), T.seq(*stages), alloc_buffers=allocs)
    return T.PrimFunc((*(t.buffer for t in tensors), *scalars.values()), root)


def scalar_params(func: T.PrimFunc) -> tuple[E.Var, ...]:
    """The size variables a caller passes to `func` (its `CallTIR.shape_args`), in order."""
    return tuple(p for p in func.params if isinstance(p, E.Var))


# ---------------------------------------------------------------------------------------------
# inlining


def inline_injective(outputs: Sequence[Tensor], keep: Sequence[Tensor] = ()) -> list[Tensor]:
    """The te program computing `outputs` with every intermediate stage that is not a
    reduction substituted at its load sites (its body with its indices replaced by the
    load's), so it gets no buffer of its own; placeholders, reductions, the outputs and the
    stages in `keep` stay stages. The listed tensors come back in order (a new tensor where
    its body changed), and the given tensors are not changed."""
    listed = {id(t) for t in (*outputs, *keep)}
    new: dict[int, Tensor] = {}  # stage or placeholder (by buffer id) -> its tensor now
    inlined: dict[int, tuple] = {}  # buffer id -> (axis, rewritten body) of an inlined stage
    for t in _topo_order(outputs):
        if t.is_placeholder:
            new[id(t.buffer)] = t
            continue
        body = _inline_body(t.body, new, inlined)
        if id(t) not in listed and not isinstance(body, Reduce):
            inlined[id(t.buffer)] = (t.axis, body)
            continue
        if body is t.body:
            new[id(t.buffer)] = t
            continue
        exprs = [body.source, body.where] if isinstance(body, Reduce) else [body]
        owners = {id(load.buffer): _OWNER[id(load.buffer)]
                  for e in exprs if e is not None for load in _loads(e)}
        buffer = T.Buffer(t.name, t.shape, t.dtype)
        new[id(t.buffer)] = Tensor(buffer, t.axis, body, owners.values())
    return [new[id(t.buffer)] for t in outputs]


def _inline_body(body, new: dict[int, Tensor], inlined: dict[int, tuple]):
    """A stage body with loads of inlined stages replaced by their bodies and loads of
    rebuilt stages redirected to the new buffers; `body` itself when nothing changes."""
    if isinstance(body, Reduce):
        source = _inline_expr(body.source, new, inlined)
        where = None if body.where is None else _inline_expr(body.where, new, inlined)
        if source is body.source and where is body.where:
            return body
        return Reduce(body.kind, source, body.axis, where)
    return _inline_expr(body, new, inlined)


def _inline_expr(e: E.PrimExpr, new: dict[int, Tensor], inlined: dict[int, tuple]):
    if isinstance(e, E.BufferLoad):
        indices = tuple(_inline_expr(i, new, inlined) for i in e.indices)
        stage = inlined.get(id(e.buffer))
        if stage is not None:
            axis, body = stage
            return _substitute(body, dict(zip(axis, indices)))
        buffer = new[id(e.buffer)].buffer if id(e.buffer) in new else e.buffer
        if buffer is e.buffer and all(a is b for a, b in zip(indices, e.indices)):
            return e
        return E.BufferLoad(buffer, indices)
    changes = {}
    for fname in field_names(e):
        v = getattr(e, fname)
        if isinstance(v, E.PrimExpr):
            out = _inline_expr(v, new, inlined)
        elif isinstance(v, tuple) and v and isinstance(v[0], E.PrimExpr):
            out = tuple(_inline_expr(x, new, inlined) for x in v)
            out = v if all(a is b for a, b in zip(out, v)) else out
        else:
            continue
        if out is not v:
            changes[fname] = out
    return dataclasses.replace(e, **changes) if changes else e
