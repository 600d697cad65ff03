"""Hypothesis strategies for random well-formed IRModules of both levels.

Graph functions: symbolic shapes (including a non-int64 size variable), op calls whose
types come from the op registry (so the parser's re-inference agrees), data-dependent
dims (topk with a run-time k), None operands, tuples and tuple items, constants,
call_tir with shape_args, shape values, aliases, control flow (if_/loop/scan calling
callee functions added to the module, with fresh result dims), and names no Python
identifier could hold. PrimFuncs: nested For of every kind (thread_binding with a thread tag, annotated
loops, int32 loop variables), Blocks with spatial/reduce iteration variables, regions,
init, alloc_buffers and annotations, BufferStore, IfThenElse, Allocate, Evaluate, the
same statement used twice (so a loop variable is bound in two sibling loops), and every
expression kind with immediates of several dtypes, negative constants, nan and inf.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from tcc.ir.builder import FunctionBuilder
from tcc.ir.dtype import is_float
from tcc.ir.expr import (
    BIN_OPS,
    CMP_OPS,
    INTRINSICS,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IntImm,
    Logic,
    Not,
    Select,
    Var,
)
from tcc.ir.graph import CallTIR, If, Loop, Scan, TensorType, infer_control_flow
from tcc.ir.module import IRModule
from tcc.ir.tir import (
    Allocate,
    Block,
    Buffer,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterKind,
    IterVar,
    PrimFunc,
    seq,
)

# Names that need sanitizing: keywords, names the syntax reserves, non-identifiers, clashes.
ODD_NAMES = ["x", "op", "const", "lambda", "1x", "a.b", "", "n", "v", "v_1", "Tensor",
             "__debug__", "exp", "i", "in put:0", "None", "float32", "axis", "x_1"]  # fmt: skip
names = st.one_of(st.sampled_from(ODD_NAMES), st.text(max_size=5))
INT_DTYPES = ["int64", "int32", "int8", "uint8"]
FLOAT_DTYPES = ["float32", "float64", "float16"]
floats = st.floats(allow_nan=True, allow_infinity=True)


# ---------------------------------------------------------------------------------------------
# scalar expressions


class Env:
    """What an expression may mention: scalar variables and buffers."""

    def __init__(self, vars_=(), buffers=()):
        self.vars = list(vars_)
        self.buffers = list(buffers)

    def plus(self, vars_=(), buffers=()) -> Env:
        return Env(self.vars + list(vars_), self.buffers + list(buffers))


def _immediate(draw, dtype: str):
    if dtype == "bool":
        return IntImm(draw(st.integers(0, 1)), "bool")
    if is_float(dtype):
        return FloatImm(draw(floats), dtype)
    lo = 0 if dtype.startswith("u") else -100
    return IntImm(draw(st.integers(lo, 100)), dtype)


@st.composite
def exprs(draw, dtype: str, env: Env, depth: int = 3):
    """A random expression of `dtype` over `env`."""
    leaves = [v for v in env.vars if v.dtype == dtype]
    loads = [b for b in env.buffers if b.dtype == dtype]
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if leaves and draw(st.booleans()):
            return draw(st.sampled_from(leaves))
        return _immediate(draw, dtype)
    sub = lambda dt: draw(exprs(dt, env, depth - 1))  # noqa: E731
    if dtype == "bool":
        kind = draw(st.sampled_from(["cmp", "logic", "not", "select", "isnan"]))
        if kind == "cmp":
            dt = draw(st.sampled_from(["int64", "float32", "int32"]))
            return Cmp(draw(st.sampled_from(CMP_OPS)), sub(dt), sub(dt))
        if kind == "logic":
            return Logic(draw(st.sampled_from(["and", "or"])), sub("bool"), sub("bool"))
        if kind == "not":
            return Not(sub("bool"))
        if kind == "isnan":
            return Call(draw(st.sampled_from(["isnan", "isinf"])), (sub("float32"),), "bool")
        return Select(sub("bool"), sub("bool"), sub("bool"), "bool")
    kinds = ["binop", "select", "cast", "call"] + (["load"] if loads else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "binop":
        ops = [o for o in BIN_OPS if is_float(dtype) or o != "div"]
        return BinOp(draw(st.sampled_from(ops)), sub(dtype), sub(dtype), dtype)
    if kind == "select":
        return Select(sub("bool"), sub(dtype), sub(dtype), dtype)
    if kind == "cast":
        return Cast(sub(draw(st.sampled_from(INT_DTYPES + FLOAT_DTYPES))), dtype)
    if kind == "call":
        name = draw(st.sampled_from(sorted(INTRINSICS - {"isnan", "isinf"})))
        nargs = 2 if name in ("pow", "fmod", "atan2", "copysign") else 1
        arg = dtype if draw(st.integers(0, 4)) else draw(st.sampled_from(FLOAT_DTYPES))
        return Call(name, tuple(sub(arg) for _ in range(nargs)), dtype)
    buf = draw(st.sampled_from(loads))
    return BufferLoad(buf, tuple(sub("int64") for _ in buf.shape))


def index_exprs(env: Env, depth: int = 2):
    return exprs("int64", env, depth)


# ---------------------------------------------------------------------------------------------
# attribute values


def attr_values(env: Env):
    """Plain data (lists and tuples kept apart) and scalar expressions."""
    leaf = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**40), 2**40), floats, st.text(max_size=4),
        exprs("int64", env, 1), exprs("float32", env, 0),
    )  # fmt: skip
    return st.recursive(
        leaf,
        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                st.lists(inner, max_size=3).map(tuple)),
        max_leaves=6,
    )


def attr_pairs(env: Env):
    return st.dictionaries(st.text(max_size=6), attr_values(env), max_size=3).map(
        lambda d: tuple(d.items())
    )


# ---------------------------------------------------------------------------------------------
# prim funcs


@st.composite
def buffers(draw, env: Env, scopes=("global",)):
    dims = st.integers(1, 16) | st.sampled_from(env.vars)
    shape = tuple(draw(st.lists(dims, max_size=3)))
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64", "bool"]))
    return Buffer(draw(names), shape, dtype, draw(st.sampled_from(scopes)))


@st.composite
def regions(draw, env: Env):
    buf = draw(st.sampled_from(env.buffers))
    ranges = []
    for _ in buf.shape:
        lo = draw(index_exprs(env, 1))
        extent = IntImm(1) if draw(st.booleans()) else draw(index_exprs(env, 1))
        ranges.append((lo, extent))
    return BufferRegion(buf, tuple(ranges))


def _new_var(draw, dtypes=("int64", "int64", "int32")) -> Var:
    return Var(draw(names), draw(st.sampled_from(dtypes)))


@st.composite
def stmts(draw, env: Env, depth: int = 3):
    """A random statement; `env` holds the variables and buffers in scope."""
    kinds = ["store", "evaluate"] if env.buffers else ["evaluate"]
    if depth > 0:
        kinds += ["for", "for", "block", "if", "allocate", "seq"]
    kind = draw(st.sampled_from(kinds))
    if kind == "store":
        buf = draw(st.sampled_from(env.buffers))
        indices = tuple(draw(index_exprs(env)) for _ in buf.shape)
        return BufferStore(buf, draw(exprs(buf.dtype, env)), indices)
    if kind == "evaluate":
        return Evaluate(draw(exprs(draw(st.sampled_from(["int32", "float32", "bool"])), env)))
    if kind == "for":
        return draw(loops(env, depth))
    if kind == "block":
        return draw(blocks(env, depth))
    if kind == "if":
        else_case = draw(st.none() | stmts(env, depth - 1))
        return IfThenElse(draw(exprs("bool", env, 2)), draw(stmts(env, depth - 1)), else_case)
    if kind == "allocate":
        buf = draw(buffers(env, ("local", "shared", "global")))
        return Allocate(buf, draw(stmts(env.plus(buffers=[buf]), depth - 1)))
    first = draw(stmts(env, depth - 1))
    rest = draw(st.lists(st.just(first) | stmts(env, depth - 1), max_size=2))
    return seq(first, *rest)


@st.composite
def loops(draw, env: Env, depth: int):
    var = _new_var(draw)
    kind = draw(st.sampled_from(list(ForKind)))
    tag = None
    if kind is ForKind.THREAD_BINDING:
        tag = draw(st.sampled_from(["threadIdx.x", "threadIdx.y", "blockIdx.x", "vthread"]))
    annotations = draw(attr_pairs(env)) if draw(st.integers(0, 3)) == 0 else ()
    lo, extent = draw(index_exprs(env, 1)), draw(index_exprs(env, 1))
    body = draw(stmts(env.plus([var]), depth - 1))
    return For(var, lo, extent, kind, body, tag, annotations)


@st.composite
def blocks(draw, env: Env, depth: int):
    iter_vars = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(list(IterKind)))
        extent, binding = draw(index_exprs(env, 1)), draw(index_exprs(env, 1))
        iter_vars.append(IterVar(_new_var(draw), extent, kind, binding))
    inner = env.plus([iv.var for iv in iter_vars])
    allocs = draw(st.lists(buffers(inner, ("local", "shared")), max_size=2))
    inner = inner.plus(buffers=allocs)
    reads = writes = ()
    if inner.buffers:
        reads = tuple(draw(st.lists(regions(inner), max_size=2)))
        writes = tuple(draw(st.lists(regions(inner), max_size=2)))
    init = draw(st.none() | stmts(inner, 0))
    body = seq() if draw(st.integers(0, 5)) == 0 else draw(stmts(inner, depth - 1))
    annotations = draw(attr_pairs(inner)) if draw(st.booleans()) else ()
    return Block(draw(names), tuple(iter_vars), reads, writes, body, init, tuple(allocs),
                 annotations)


@st.composite
def prim_funcs(draw):
    """A PrimFunc over buffers with symbolic shapes and optional scalar parameters."""
    n = Var(draw(names))
    scalars = [Var(draw(names), draw(st.sampled_from(["int64", "int32"])))
               for _ in range(draw(st.integers(0, 1)))]
    env = Env([n, *scalars])
    bufs = draw(st.lists(buffers(env, ("global", "shared")), min_size=1, max_size=3))
    params = bufs + scalars
    if draw(st.booleans()):
        params = scalars + bufs
    env = env.plus(buffers=bufs)
    attrs = draw(attr_pairs(env)) if draw(st.booleans()) else ()
    return PrimFunc(tuple(params), draw(stmts(env, 3)), attrs)


# ---------------------------------------------------------------------------------------------
# graph functions


@st.composite
def _shapes(draw, sizes: list):
    dims = st.one_of(st.integers(1, 8), st.sampled_from(sizes))
    return tuple(draw(st.lists(dims, min_size=1, max_size=3)))


def _callee(mod: IRModule, params: list[TensorType], body) -> str:
    """Add a graph function of `params` returning `body(builder, *params)` to `mod`; its
    name is longer than any drawn global name, so it never clashes with one."""
    bb = FunctionBuilder()
    args = [bb.param(f"p{i}", t) for i, t in enumerate(params)]
    outs = body(bb, *args)
    name = f"control.flow.{len(mod.functions)}"
    mod.functions[name] = bb.finish(outs, [f"o{i}" for i in range(len(outs))])
    return name


def _control_flow(draw, mod: IRModule, bb: FunctionBuilder, x, flag):
    """An if_, loop or scan over `x` (its callees added to `mod`); returns its values of
    rank 1 or more (the other steps need an axis)."""
    kind = draw(st.sampled_from(["if", "loop", "scan"] if flag is not None else ["loop", "scan"]))
    t = x.type
    if kind == "if":
        then = _callee(mod, [t], lambda b, p: [b.emit("relu", p), p])
        other = _callee(mod, [t], lambda b, p: [p, b.emit("exp", p)])
        node = If(flag, then, other, (x,))
    elif kind == "loop":
        flags = [TensorType((), "int64"), TensorType((), "bool")]
        body = _callee(mod, flags + [t], lambda b, i, c, p: [c, b.emit("relu", p), p])
        trips = mod.add_constant(mod.unique_constant_name("trips"), np.array(2, np.int64))
        node = Loop(body, trips, flag, (x,), ())
    else:
        state = bb.emit("reduce_sum", x, None, axes=[0], keepdims=False, name="state")
        body = _callee(mod, [state.type, state.type],
                       lambda b, acc, item: [b.emit("add", acc, item), acc])
        rev = draw(st.integers(0, 1))
        node = Scan(body, 1, (state, x), (), (0,), (rev,), (0,), (1 - rev,))
    rtype = infer_control_flow(node, mod.functions)
    out = bb.bind(node, rtype, draw(names))
    items = [bb.get_item(out, i, name=draw(names)) for i in range(len(rtype.fields))]
    return [v for v in items if v.type.ndim]


@st.composite
def graph_functions(draw, mod: IRModule, prim_names: list[str]):
    """A graph function whose calls are typed by the op registry; constants go into `mod`."""
    sizes = [Var(draw(names)), Var(draw(names)), Var(draw(names), "int32")]
    bb = FunctionBuilder()
    values = [bb.param(draw(names), TensorType(draw(_shapes(sizes)), "float32"))
              for _ in range(draw(st.integers(1, 3)))]
    k = bb.param(draw(names), TensorType((1,), "int64")) if draw(st.booleans()) else None
    flag = bb.param(draw(names), TensorType((), "bool")) if draw(st.booleans()) else None
    for _ in range(draw(st.integers(1, 8))):
        step = draw(st.sampled_from(["unary", "binary", "reduce", "topk", "reshape", "tuple",
                                     "call_tir", "shape", "alias", "const", "softmax",
                                     "control_flow"]))
        x = draw(st.sampled_from(values))
        name = draw(names)
        if step == "unary":
            values.append(bb.emit(draw(st.sampled_from(["relu", "exp", "identity"])), x, name=name))
        elif step == "binary":
            same = [v for v in values if v.type == x.type]
            op = draw(st.sampled_from(["add", "mul", "sub"]))
            values.append(bb.emit(op, x, draw(st.sampled_from(same)), name=name))
        elif step == "reduce":
            axes = [draw(st.integers(0, x.type.ndim - 1))]
            keep = x.type.ndim == 1 or draw(st.booleans())
            values.append(bb.emit("reduce_sum", x, None, axes=axes, keepdims=keep, name=name))
        elif step == "topk" and k is not None:
            t = bb.emit("topk", x, k, axis=-1, name=name)
            values.append(bb.get_item(t, 0, name=draw(names)))  # the values; 1 holds indices
        elif step == "reshape":
            values.append(bb.emit("reshape", x, shape=list(x.type.shape), name=name))
        elif step == "control_flow":
            values.extend(_control_flow(draw, mod, bb, x, flag))
        elif step == "softmax":
            values.append(bb.emit("softmax", x, axes=[-1], name=name))
        elif step == "tuple":
            t = bb.tuple([x, draw(st.sampled_from(values))], name=name)
            values.append(bb.get_item(t, draw(st.integers(0, 1)), name=draw(names)))
        elif step == "call_tir" and prim_names:
            out = TensorType(draw(_shapes(sizes)), draw(st.sampled_from(["float32", "int64"])))
            shape_args = tuple(draw(st.lists(st.sampled_from(sizes[:2]), max_size=2)))
            call = CallTIR(draw(st.sampled_from(prim_names)), (x,), out, shape_args)
            bb.bind(call, out, name)
        elif step == "shape":
            bb.shape([draw(st.sampled_from(sizes)), draw(st.integers(0, 9))], name=name)
        elif step == "alias":
            values.append(bb.bind(x, x.type, name))
        elif step == "const" and x.type.ndim and isinstance(x.type.shape[-1], int):
            cname = mod.unique_constant_name(draw(st.text(max_size=6)))
            c = mod.add_constant(cname, np.zeros(x.type.shape[-1:], "float32"))
            values.append(bb.emit("add", x, c, name=name))
    outs = draw(st.lists(st.sampled_from(values[1:] or values), min_size=1, max_size=2))
    return bb.finish(outs, [draw(names) for _ in outs])


@st.composite
def modules(draw):
    """An IRModule of 0-2 PrimFuncs and 1-2 graph functions that may call them."""
    mod = IRModule()
    global_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    n_prims = draw(st.integers(0, len(global_names) - 1))
    for name in global_names[:n_prims]:
        mod.functions[name] = draw(prim_funcs())
    for name in global_names[n_prims:]:
        mod.functions[name] = draw(graph_functions(mod, global_names[:n_prims]))
    return mod
