"""The CUDA backend's code generator: GPU-scheduled PrimFuncs -> CUDA C source and launches.

A scheduled PrimFunc (`tcc.lower.rules.cuda`) is a sequence of loop nests, each bound to
GPU blocks and threads: each top-level nest whose outer loops are bound to `blockIdx` is
one `extern "C" __global__` function, `<kernel>_launch<i>`, launched in order on one
stream; a top-level statement bound to no GPU axis runs as one thread of one block. `cuda_kernels` gives the source of a module's kernels and, per PrimFunc, its
`CudaKernel`: the launches with their grids as expressions of the PrimFunc's size
variables (the host computes them at run time) and their fixed block shapes, and the
global workspaces the launches pass intermediate results through (a reduction's result
that a later launch broadcasts), each sized by an expression of the size variables.

Every launch takes the same arguments, in this order: the PrimFunc's buffers (device
pointers), its workspaces (device pointers), then its size variables (`long long`: the
scalar parameters first, then those the buffers' shapes introduce). `launch_spec` writes
a `CudaKernel` down as the runtimes read it (docs/tvmpack.md, "device_kernels").
Statements map as:

* `For` bound to `blockIdx.*` / `threadIdx.*`: the variable is the block or thread index.
  A thread loop whose extent is below the block's threads on its axis runs its body only
  on the threads below the extent, so one launch can hold thread loops of several sizes.
  Serial loops are C loops; unrolled loops carry `#pragma unroll`; a vectorized loop is a
  C loop (each thread's lanes); a parallel loop is an error (a CPU loop kind).
* `Block`: iteration variables are bound from their bindings; `init` runs when every
  reduction variable is 0 (`init_condition`), as on the CPU.
* `Allocate` and a block's buffers: "local" buffers are per-thread arrays where they are
  allocated, "shared" buffers `__shared__` arrays declared once at the top of their launch
  (the copies of a loop that unswitching made allocate one buffer: one array, not two),
  both of constant size; global buffers in the root block are the workspaces.
* `evaluate(syncthreads())`: `__syncthreads()`.

A float16 value is computed with in float32 and rounded to float16 where it is stored or
cast, as the CPU backend does (its registers hold float16 as float32), so both targets
give the same bits. Expressions keep the IR's semantics: integer `//` and `%` round toward minus infinity,
float min/max propagate NaN as numpy's minimum/maximum do, `round` rounds half to even,
index arithmetic is 64-bit. An integer expression of the size variables alone is computed
once, at the top of its launch (`const long long s_<k>`), unless it divides by a size
(which a condition may guard against 0). Within a store, a subexpression that occurs
twice (structurally) is named once just before it (`const ... c_<k>`), unless only a
select's arm or the right of `&&`/`||` evaluates it and it reads memory or divides by a
variable. Names are made unique by counters in emit order, so the same input gives the
same source.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from tcc.emit.llvm_vector import init_condition
from tcc.emit.pack import DeviceKernels
from tcc.errors import TccError
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import LOW_PRECISION, bit_width
from tcc.ir.verify import PRECONDITIONS_ATTR


class CudaCodegenError(TccError):
    """A PrimFunc the CUDA backend cannot translate (not bound to GPU threads, say)."""


# The C type of each dtype a CUDA kernel may hold.
C_TYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
    "uint32": "unsigned int", "uint64": "unsigned long long", "float16": "__half",
    # tcc holds a bfloat16 value as the float32 it equals (docs/compile.md §3)
    "bfloat16": "float", "float32": "float", "float64": "double",
    # the float8, float4 and sub-byte integer types: one code byte a value, as on the CPU
    **{name: "unsigned char" for name in LOW_PRECISION},
}  # fmt: skip

# Math intrinsics: the float32 function (the float64 one drops the `f`).
_MATH = {
    "exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf",
    "erf": "erff", "abs": "fabsf", "floor": "floorf", "ceil": "ceilf", "round": "rintf",
    "trunc": "truncf", "sin": "sinf", "cos": "cosf", "tan": "tanf", "asin": "asinf",
    "acos": "acosf", "atan": "atanf", "sinh": "sinhf", "cosh": "coshf", "asinh": "asinhf",
    "acosh": "acoshf", "atanh": "atanhf", "pow": "powf", "fmod": "fmodf", "exp2": "exp2f",
    "log2": "log2f", "log1p": "log1pf", "expm1": "expm1f", "atan2": "atan2f",
    "copysign": "copysignf", "nearbyint": "rintf",
}  # fmt: skip

# cuda_fp16.h is not among NVRTC's built-in headers: a module with float16 values includes
# it (HALF_HEADERS), from the CUDA runtime wheel's folder (nvrtc.header_options).
HALF_HEADERS = "#include <cuda_fp16.h>\n"
PRELUDE = """\
typedef long long i64;
__device__ __forceinline__ i64 tcc_floordiv(i64 a, i64 b) {
  i64 q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ i64 tcc_floormod(i64 a, i64 b) {
  i64 r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
template <typename F> __device__ __forceinline__ F tcc_fmin(F a, F b) {
  return (a != a) ? a : (b != b) ? b : (a < b ? a : b); }
template <typename F> __device__ __forceinline__ F tcc_fmax(F a, F b) {
  return (a != a) ? a : (b != b) ? b : (a > b ? a : b); }
template <typename F> __device__ __forceinline__ F tcc_fdiv_floor(F a, F b) {
  return floor(a / b); }
template <typename F> __device__ __forceinline__ F tcc_fmod_floor(F a, F b) {
  F r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
"""

_AXES = "xyz"
# Names a kernel's own may not take: what the source calls (the math functions, the
# prelude's helpers, CUDA's built-in variables and functions) and C++'s keywords.
RESERVED = frozenset({
    *_MATH.values(), *(f[:-1] for f in _MATH.values()), "isnan", "isinf", "exp", "abs",
    "tcc_floordiv", "tcc_floormod", "tcc_fmin", "tcc_fmax", "tcc_fdiv_floor", "tcc_fmod_floor",
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "__syncthreads", "i64",
    "auto", "bool", "break", "case", "char", "const", "continue", "default", "delete", "do",
    "double", "else", "enum", "extern", "false", "float", "for", "goto", "if", "inline",
    "int", "long", "new", "operator", "register", "return", "short", "signed", "sizeof",
    "static", "struct", "switch", "template", "this", "true", "typedef", "typename", "union",
    "unsigned", "void", "volatile", "while", "class", "namespace", "private", "public",
    "floor", "ceil", "round", "trunc", "min", "max", "half", "float2", "int2", "dim3",
})  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """One `__global__` function of a kernel: its grid (expressions of the size variables,
    per axis x, y, z) and its block shape."""

    symbol: str
    grid: tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr]
    block: tuple[int, int, int]


@dataclass(frozen=True)
class CudaKernel:
    """A PrimFunc as the host runs it: its launches in order, and the global workspaces
    (name, dtype, element count as an expression of the size variables) they share."""

    name: str
    buffers: tuple[T.Buffer, ...]
    size_vars: tuple[E.Var, ...]
    workspaces: tuple[tuple[str, str, E.PrimExpr], ...]
    launches: tuple[Launch, ...]
    params: tuple = ()  # the PrimFunc's parameters: its buffers and scalar size variables
    written: frozenset[int] = frozenset()  # ids of the buffers some launch stores to
    preconditions: tuple = ()  # size conditions its accesses need (tcc.ir.verify)


def _c_type(dtype: str) -> str:
    if dtype not in C_TYPES:
        raise CudaCodegenError(f"the CUDA backend has no type for {dtype!r}; "
                               f"it takes {', '.join(C_TYPES)}")
    return C_TYPES[dtype]


def _float_literal(value: float, dtype: str) -> str:
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)" if dtype != "float64" else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(value):
        sign = "-" if value < 0 else ""
        return (f"{sign}__int_as_float(0x7f800000)" if dtype != "float64"
                else f"{sign}__longlong_as_double(0x7ff0000000000000LL)")
    if dtype == "float64":
        return repr(float(value))
    single = struct.unpack("<f", struct.pack("<f", value))[0]
    text = repr(single)
    text = text if ("e" in text or "." in text) else text + ".0"
    literal = f"{text}f"
    if dtype == "float16":  # the float16 value, computed with in float32 (see _Writer)
        return f"((float)(__half)({literal}))"
    return literal if dtype in ("float32", "bfloat16") else f"(({_c_type(dtype)}){literal})"


def _storage_bits(dtype: str) -> int:
    """Bits a value takes in memory: a low-precision value takes its code byte."""
    return 8 if dtype in LOW_PRECISION else bit_width(dtype)


def _product(dims) -> E.PrimExpr:
    total: E.PrimExpr = E.IntImm(1)
    for d in dims:
        total = E.simplify(E.binop("mul", total, E.as_dim(d)))
    return total


def _constant(e) -> int | None:
    if isinstance(e, int):
        return e
    e = E.simplify(e)
    return e if isinstance(e, int) else e.value if isinstance(e, E.IntImm) else None


class _Launches:
    """Splits a PrimFunc body into launches (top-level nests bound to blocks)."""

    @staticmethod
    def of(func: T.PrimFunc) -> tuple[list[T.Buffer], list[T.Stmt]]:
        body = func.body
        workspaces: list[T.Buffer] = []
        if isinstance(body, T.Block):  # the root block
            if body.init is not None or body.iter_vars:
                raise CudaCodegenError("the root block of a CUDA kernel has iteration variables")
            for buf in body.alloc_buffers:
                if buf.scope != "global":
                    raise CudaCodegenError(
                        f"buffer {buf.name!r} ({buf.scope}) is allocated outside every GPU "
                        "block; the schedule must allocate it under a blockIdx loop")
                workspaces.append(buf)
            body = body.body
        stmts = list(body.stmts) if isinstance(body, T.SeqStmt) else [body]
        return workspaces, stmts


def _bound_loops(s: T.Stmt, out: list[T.For]) -> list[T.For]:
    if isinstance(s, T.For):
        if s.kind is T.ForKind.THREAD_BINDING:
            out.append(s)
        _bound_loops(s.body, out)
    elif isinstance(s, T.SeqStmt):
        for c in s.stmts:
            _bound_loops(c, out)
    elif isinstance(s, T.IfThenElse):
        _bound_loops(s.then_case, out)
        if s.else_case is not None:
            _bound_loops(s.else_case, out)
    elif isinstance(s, T.Block):
        _bound_loops(s.body, out)
        if s.init is not None:
            _bound_loops(s.init, out)
    elif isinstance(s, T.Allocate):
        _bound_loops(s.body, out)
    return out


class _Writer:
    """CUDA C for the statements and expressions of one launch."""

    def __init__(self, block_dims: Mapping[str, int]):
        self.lines: list[str] = []
        self.stored: set[int] = set()  # ids of the buffers stored to
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.block_dims = block_dims
        # Integer expressions of the size variables alone are computed once, at the top of
        # the launch (`prelude`), each named once: the shape arithmetic of a dynamic export
        # nests min and max of the same sizes many levels deep, and as a tree of text it
        # grew one BERT kernel to half a megabyte of source.
        self.size_vars: set[int] = set()
        self.prelude: list[str] = []
        self.hoisted: dict[str, str] = {}
        self.rendered: dict[int, tuple[object, str, bool]] = {}  # id -> (e, text, invariant)
        # Within one store, a subexpression that occurs twice (a gathered index, clamped,
        # read in a condition and in both arms) is named once, just before the store
        # (`shared_values`): by structural key -> name
        self.shared: dict[int, str] = {}
        self.iter_exprs: dict[E.Var, E.PrimExpr] = {}  # a block's variable -> its binding
        self.keys: dict[int, tuple[object, int]] = {}  # id -> (e, structural key)
        self.interned: dict[tuple, int] = {}

    # -- names ------------------------------------------------------------------------------

    def bind(self, obj, hint: str) -> str:
        name = self.fresh(hint)
        self.names[id(obj)] = name
        return name

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
        base = base if base[0].isalpha() or base[0] == "_" else f"v_{base}"
        name, n = base, 0
        while name in self.used or name in RESERVED:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def name(self, obj) -> str:
        if id(obj) not in self.names:
            raise CudaCodegenError(f"unbound variable {getattr(obj, 'name', obj)!r} in a CUDA kernel")
        return self.names[id(obj)]

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e) -> str:
        if self.shared and not isinstance(e, int):
            named = self.shared.get(self.key(e))
            if named is not None:  # (a named value depends on a thread: not invariant)
                self.rendered[id(e)] = (e, named, False)
                return named
        hit = self.rendered.get(id(e))
        if hit is not None and hit[0] is e and hit[2]:  # (a loop variable may be bound anew)
            return hit[1]
        text = self.render(e)
        invariant = self._invariant(e)
        if invariant and isinstance(e, (E.BinOp, E.Cmp, E.Logic, E.Not, E.Select, E.Cast)):
            text = self.hoisted.get(text) or self._hoist(text, e.dtype)
        # the entry keeps `e` alive, so its id is not reused by a later temporary
        self.rendered[id(e)] = (e, text, invariant)
        return text

    def _invariant(self, e) -> bool:
        """Whether `e` is an integer expression of constants and size variables only, safe
        to compute before every branch: no load, and no division by a symbolic divisor
        (which a condition may guard against 0)."""
        if isinstance(e, (int, E.IntImm)):
            return True
        if getattr(e, "dtype", "") not in ("int64", "int32", "bool"):
            return False
        if isinstance(e, E.Var):
            return id(e) in self.size_vars
        if not isinstance(e, (E.BinOp, E.Cmp, E.Logic, E.Not, E.Select, E.Cast)):
            return False
        if _divides_by_variable(e):
            return False
        return all(isinstance(c, int) or self.rendered[id(c)][2] for c, _ in _operands(e))

    def key(self, e) -> int:
        """A number equal for structurally equal expressions (variables and buffers by
        identity), so that copies of one subexpression are named once."""
        hit = self.keys.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, (E.Var, T.Buffer)):
            parts: tuple = ("var", id(e))
        elif isinstance(e, E.PrimExpr):
            fields = []
            for name in e.__dataclass_fields__:
                v = getattr(e, name)
                if isinstance(v, (E.PrimExpr, T.Buffer)):
                    fields.append(("e", self.key(v)))
                elif isinstance(v, tuple):
                    fields.append(tuple(self.key(x) if isinstance(x, E.PrimExpr) else x
                                        for x in v))
                else:
                    fields.append(repr(v))
            parts = (type(e).__name__, *fields)
        else:
            parts = ("value", repr(e))
        number = self.interned.setdefault(parts, len(self.interned))
        self.keys[id(e)] = (e, number)  # keeps `e` alive, so its id is not reused
        return number

    def shared_values(self, roots: list, depth: int) -> None:
        """Declare each compound subexpression of `roots` that occurs twice, children
        first, as a `const` before the statement at `depth`. One that occurs only in a
        select's arm or right of `&&`/`||` is declared only if it can neither read memory
        nor divide by a variable (the condition may be what keeps it in bounds)."""
        refs: dict[int, int] = {}
        unconditional: set[int] = set()
        order: list = []  # one expression per key, children before parents
        unsafe: dict[int, bool] = {}

        def visit(e, conditional: bool) -> None:
            k = self.key(e)
            if not conditional:
                unconditional.add(k)
            refs[k] = refs.get(k, 0) + 1
            if refs[k] > 1:
                return
            operands = _operands(e)
            for child, lazy in operands:
                visit(child, conditional or lazy)
            own = isinstance(e, E.BufferLoad) or _divides_by_variable(e)
            unsafe[k] = own or any(unsafe[self.key(c)] for c, _ in operands)
            order.append(e)

        for root in roots:
            visit(root, False)
        for e in order:
            k = self.key(e)
            if refs[k] < 2 or _SHARED_TYPES.get(getattr(e, "dtype", "")) is None:
                continue
            if not isinstance(e, (E.BinOp, E.Cmp, E.Logic, E.Not, E.Select, E.Cast, E.Call,
                                  E.BufferLoad)):
                continue
            if k not in unconditional and unsafe[k]:
                continue
            text = self.expr(e)
            if re.fullmatch(r"[A-Za-z_]\w*", text):  # already a name (a hoisted size)
                continue
            name = self.fresh("c")
            self.line(depth, f"const {_SHARED_TYPES[e.dtype]} {name} = {text};")
            self.shared[k] = name

    def _hoist(self, text: str, dtype: str) -> str:
        name = self.fresh("s")
        self.prelude.append(f"  const {_c_type(dtype)} {name} = {text};")
        self.hoisted[text] = name
        return name

    def render(self, e) -> str:
        if isinstance(e, int):
            return f"{e}LL"
        if isinstance(e, E.IntImm):
            if e.dtype == "bool":
                return "true" if e.value else "false"
            suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}.get(e.dtype, "")
            text = f"{e.value}{suffix}"
            return text if e.dtype in ("int64", "int32", "uint64", "uint32") else f"(({_c_type(e.dtype)}){text})"
        if isinstance(e, E.FloatImm):
            return _float_literal(e.value, e.dtype)
        if isinstance(e, E.Var):
            return self.name(e)
        if isinstance(e, E.BufferLoad):
            load = f"{self.name(e.buffer)}[{self.offset(e.buffer, e.indices)}]"
            return f"((float)({load}))" if e.buffer.dtype == "float16" else load
        if isinstance(e, E.Cast):
            if e.dtype == "float16":  # rounded to float16, then computed with in float32
                return f"((float)(__half)({self.expr(e.value)}))"
            return f"(({_c_type(e.dtype)})({self.expr(e.value)}))"
        if isinstance(e, E.Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"
        if isinstance(e, E.Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, E.Logic):
            return f"({self.expr(e.a)} {'&&' if e.op == 'and' else '||'} {self.expr(e.b)})"
        if isinstance(e, E.Cmp):
            op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.op]
            return f"({self.expr(e.a)} {op} {self.expr(e.b)})"
        if isinstance(e, E.BinOp):
            return self.binop(e)
        if isinstance(e, E.Call):
            return self.call(e)
        raise CudaCodegenError(f"the CUDA backend cannot translate {type(e).__name__} {e}")

    def binop(self, e: E.BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        floating = e.dtype.startswith(("float", "bfloat"))
        if e.op in ("add", "sub", "mul"):
            return f"({a} {'+-*'[('add', 'sub', 'mul').index(e.op)]} {b})"
        if e.op == "div":
            return f"({a} / {b})"
        if e.op in ("min", "max"):
            if floating:
                return f"tcc_f{e.op}({a}, {b})"
            return f"({a} {'<' if e.op == 'min' else '>'} {b} ? {a} : {b})"
        if e.op == "floordiv":
            if floating:
                return f"tcc_fdiv_floor({a}, {b})"
            return f"(({_c_type(e.dtype)})tcc_floordiv({a}, {b}))"
        if e.op == "floormod":
            if floating:
                return f"tcc_fmod_floor({a}, {b})"
            return f"(({_c_type(e.dtype)})tcc_floormod({a}, {b}))"
        raise CudaCodegenError(f"the CUDA backend has no operator {e.op!r}")

    def call(self, e: E.Call) -> str:
        args = [self.expr(a) for a in e.args]
        if e.name in ("isnan", "isinf"):
            return f"{e.name}({args[0]})"
        if e.name == "sigmoid":
            one = _float_literal(1.0, e.dtype)
            return f"({one} / ({one} + {'exp' if e.dtype == 'float64' else 'expf'}(-{args[0]})))"
        if e.name == "reinterpret":
            source = e.args[0].dtype
            if _storage_bits(source) != _storage_bits(e.dtype):
                raise CudaCodegenError(f"reinterpret of {source} as {e.dtype}: widths differ")
            value = f"(__half)({args[0]})" if source == "float16" else args[0]
            cast = f"__builtin_bit_cast({_c_type(e.dtype)}, {value})"
            return f"((float)({cast}))" if e.dtype == "float16" else cast
        if e.name == "abs" and e.dtype.startswith("uint"):
            return args[0]
        if e.name == "abs" and e.dtype.startswith("int"):  # wraps at the minimum, as LLVM's
            t = _c_type(e.dtype)
            return f"(({args[0]}) < 0 ? ({t})(0ULL - (unsigned long long)({args[0]})) : ({args[0]}))"
        if e.name not in _MATH:
            raise CudaCodegenError(f"the CUDA backend has no intrinsic {e.name!r}")
        fn = _MATH[e.name]
        if e.dtype in ("float16", "bfloat16"):  # values held in float32 (see _Writer)
            return f"{fn}({', '.join(args)})"
        if e.dtype not in ("float32", "float64"):
            raise CudaCodegenError(f"{e.name} of {e.dtype}: the CUDA backend computes math "
                                   "intrinsics on floats only")
        return f"{fn[:-1] if e.dtype == 'float64' else fn}({', '.join(args)})"

    def offset(self, buf: T.Buffer, indices) -> str:
        """The flat offset of `buf[indices]`; for a thread's "local" array, with the
        enclosing blocks' bindings put in and simplified, so that its indices are constants
        when NVVM's SROA looks at them and the array stays in registers (as the CPU
        backend's `_offset` does for register tiles)."""
        if not indices:
            return "0"
        if buf.scope == "local" and self.iter_exprs:
            indices = [E.substitute(i, self.iter_exprs) for i in indices]
        flat: E.PrimExpr = E.IntImm(0)
        for dim, index in zip(buf.shape, indices):
            flat = E.binop("add", E.binop("mul", flat, E.as_dim(dim)), index)
        return self.expr(E.simplify(flat))

    # -- statements -------------------------------------------------------------------------

    def stmt(self, s: T.Stmt, depth: int) -> None:
        if isinstance(s, T.SeqStmt):
            for c in s.stmts:
                self.stmt(c, depth)
        elif isinstance(s, T.BufferStore):
            self.shared_values([s.value, *s.indices], depth)
            value = self.expr(s.value)
            self.stored.add(id(s.buffer))
            if s.buffer.dtype == "float16":
                value = f"(__half)({value})"
            self.line(depth, f"{self.name(s.buffer)}[{self.offset(s.buffer, s.indices)}] = {value};")
            self.shared.clear()
        elif isinstance(s, T.For):
            self.loop(s, depth)
        elif isinstance(s, T.IfThenElse):
            self.line(depth, f"if ({self.expr(s.cond)}) {{")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.line(depth, "} else {")
                self.stmt(s.else_case, depth + 1)
            self.line(depth, "}")
        elif isinstance(s, T.Allocate) and s.buffer.scope == "shared":
            if id(s.buffer) not in self.names:
                self.allocate(s.buffer, 1, self.prelude)
            self.stmt(s.body, depth)
        elif isinstance(s, T.Allocate):
            self.line(depth, "{")
            self.allocate(s.buffer, depth + 1)
            self.stmt(s.body, depth + 1)
            self.line(depth, "}")
        elif isinstance(s, T.Block):
            self.block(s, depth)
        elif isinstance(s, T.Evaluate):
            if isinstance(s.value, E.Call) and s.value.name == "syncthreads":
                self.line(depth, "__syncthreads();")
            elif not isinstance(s.value, E.IntImm):
                self.line(depth, f"(void)({self.expr(s.value)});")
        else:
            raise CudaCodegenError(f"the CUDA backend cannot translate {type(s).__name__}")

    def allocate(self, buf: T.Buffer, depth: int, lines: list[str] | None = None) -> None:
        size = _constant(_product(buf.shape))
        if size is None:
            raise CudaCodegenError(f"{buf.scope} buffer {buf.name!r} has a symbolic size "
                                   f"{tuple(buf.shape)}; GPU registers and shared memory are fixed")
        if buf.scope not in ("local", "shared"):
            raise CudaCodegenError(f"buffer {buf.name!r} in scope {buf.scope!r} inside a GPU "
                                   "kernel; only local and shared buffers live there")
        qualifier = "__shared__ " if buf.scope == "shared" else ""
        text = f"{qualifier}{_c_type(buf.dtype)} {self.bind(buf, buf.name)}[{max(size, 1)}];"
        (self.lines if lines is None else lines).append("  " * depth + text)

    def loop(self, s: T.For, depth: int) -> None:
        if s.kind is T.ForKind.PARALLEL:
            raise CudaCodegenError(f"loop {s.var.name!r} is parallel, a CPU loop kind; "
                                   "bind it to blockIdx or threadIdx for CUDA")
        if s.kind is T.ForKind.THREAD_BINDING:
            tag = s.thread_tag
            var = self.bind(s.var, s.var.name)
            index = f"(i64){tag}" if _constant(s.min) == 0 else f"((i64){tag} + {self.expr(s.min)})"
            self.line(depth, f"{{ const i64 {var} = {index};")
            extent = _constant(s.extent)
            if tag.startswith("threadIdx") and extent != self.block_dims.get(tag, 1):
                self.line(depth + 1, f"if ({tag} < {self.expr(s.extent)}) {{")
                self.stmt(s.body, depth + 2)
                self.line(depth + 1, "}")
            else:
                self.stmt(s.body, depth + 1)
            self.line(depth, "}")
            return
        var = self.bind(s.var, s.var.name)
        start, extent = self.expr(s.min), self.expr(s.extent)
        if s.kind is T.ForKind.UNROLLED:
            self.line(depth, "#pragma unroll")
        self.line(depth, f"for (i64 {var} = {start}; {var} < {start} + {extent}; ++{var}) {{")
        self.stmt(s.body, depth + 1)
        self.line(depth, "}")

    def block(self, s: T.Block, depth: int) -> None:
        self.line(depth, "{")
        for iv in s.iter_vars:
            binding = self.expr(iv.binding)
            self.line(depth + 1, f"const i64 {self.bind(iv.var, iv.var.name)} = {binding};")
        for iv in s.iter_vars:
            self.iter_exprs[iv.var] = E.substitute(iv.binding, self.iter_exprs)
        for buf in s.alloc_buffers:
            self.allocate(buf, depth + 1)
        if s.init is not None:
            cond = init_condition(s)
            if isinstance(cond, E.IntImm):
                self.stmt(s.init, depth + 1)
            else:
                self.line(depth + 1, f"if ({self.expr(cond)}) {{")
                self.stmt(s.init, depth + 2)
                self.line(depth + 1, "}")
        self.stmt(s.body, depth + 1)
        self.line(depth, "}")


# The C type a named subexpression of each dtype is held in (float16 and bfloat16 values
# are computed in float32); other dtypes are not named.
_SHARED_TYPES = {**{d: C_TYPES[d] for d in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                            "uint16", "uint32", "uint64", "float32", "float64")},
                 "float16": "float", "bfloat16": "float"}


def _divides_by_variable(e) -> bool:
    """An integer division whose divisor is not a constant (a condition may guard it)."""
    return (isinstance(e, E.BinOp) and e.op in ("div", "floordiv", "floormod")
            and not e.dtype.startswith(("float", "bfloat")) and not _constant(e.b))


def _operands(e) -> list[tuple[object, bool]]:
    """The operands of `e`, each with whether C evaluates it only on some paths."""
    if isinstance(e, E.Select):
        return [(e.cond, False), (e.true_value, True), (e.false_value, True)]
    if isinstance(e, E.Logic):
        return [(e.a, False), (e.b, True)]
    if isinstance(e, (E.BinOp, E.Cmp)):
        return [(e.a, False), (e.b, False)]
    if isinstance(e, E.Not):
        return [(e.a, False)]
    if isinstance(e, E.Cast):
        return [(e.value, False)]
    if isinstance(e, E.Call):
        return [(a, False) for a in e.args]
    if isinstance(e, E.BufferLoad):
        return [(i, False) for i in e.indices]
    return []


def _launch_shape(stmt: T.Stmt, where: str) -> tuple[tuple, tuple, dict[str, int]]:
    loops = _bound_loops(stmt, [])
    grid: dict[str, E.PrimExpr] = {}
    threads: dict[str, int] = {}
    for loop in loops:
        tag = loop.thread_tag
        if tag.startswith("blockIdx"):
            if tag in grid and not E.prove_equal(grid[tag], loop.extent):
                raise CudaCodegenError(f"{where}: two loops bound to {tag} with different extents")
            grid[tag] = E.simplify(E.as_dim(loop.extent))
        else:
            extent = _constant(loop.extent)
            if extent is None:
                raise CudaCodegenError(f"{where}: loop {loop.var.name!r} bound to {tag} has a "
                                       f"symbolic extent {loop.extent}; a block's threads are fixed")
            threads[tag] = max(threads.get(tag, 1), extent)
    if threads and not grid:
        raise CudaCodegenError(f"{where} binds threads but no blocks; bind its outer loop to "
                               "blockIdx.x")
    grid_dims = tuple(grid.get(f"blockIdx.{a}", E.IntImm(1)) for a in _AXES)
    block_dims = tuple(threads.get(f"threadIdx.{a}", 1) for a in _AXES)
    return grid_dims, block_dims, threads


def _kernel_source(name: str, func: T.PrimFunc) -> tuple[list[str], CudaKernel]:
    workspaces, stmts = _Launches.of(func)
    buffers = func.buffers
    size_vars = tuple(p for p in func.params if isinstance(p, E.Var))
    seen = {id(b) for b in buffers} | {id(v) for v in size_vars}
    for v in E.free_vars([E.as_dim(d) for b in buffers for d in b.shape]):
        if id(v) not in seen:  # size variables the buffers' shapes introduce
            size_vars += (v,)
            seen.add(id(v))
    lines: list[str] = []
    launches: list[Launch] = []
    written: set[int] = set()
    for i, stmt in enumerate(stmts):
        symbol = f"{name}_launch{i}"
        grid, block, threads = _launch_shape(stmt, f"kernel {name!r}, statement {i}")
        w = _Writer(threads)
        params = []
        for buf in (*buffers, *workspaces):
            params.append(f"{_c_type(buf.dtype)}* {w.bind(buf, buf.name)}")
        for v in size_vars:
            params.append(f"i64 {w.bind(v, v.name)}")
            w.size_vars.add(id(v))
        w.stmt(stmt, 1)
        written |= w.stored
        total = block[0] * block[1] * block[2]
        lines.append(f'extern "C" __global__ void __launch_bounds__({total}) '
                     f"{symbol}({', '.join(params)}) {{")
        lines.extend(w.prelude)
        lines.extend(w.lines)
        lines.append("}")
        lines.append("")
        launches.append(Launch(symbol, grid, block))
    spaces = tuple((b.name, b.dtype, _product(b.shape)) for b in workspaces)
    return lines, CudaKernel(name, buffers, size_vars, spaces, tuple(launches),
                             tuple(func.params), frozenset(written),
                             tuple(dict(func.attrs).get(PRECONDITIONS_ATTR, ())))


def cuda_kernels(funcs: Mapping[str, T.PrimFunc]) -> tuple[str, dict[str, CudaKernel]]:
    """The CUDA C source of every PrimFunc in `funcs` (scheduled for a CUDA target, by
    exported name, emitted in name order) and each one's `CudaKernel`."""
    lines: list[str] = []
    kernels: dict[str, CudaKernel] = {}
    for name in sorted(funcs):
        body, kernel = _kernel_source(name, funcs[name])
        lines.extend(body)
        kernels[name] = kernel
    source = "\n".join(lines)
    half = re.search(r"\b__half\b", source) is not None
    return (HALF_HEADERS if half else "") + PRELUDE + "\n" + source, kernels


def launch_spec(kernel: CudaKernel) -> dict:
    """`kernel` as the runtimes launch it (JSON, docs/tvmpack.md): per parameter its dtype
    and shape (or that it is a scalar), where each size variable is read (`[param, axis]`,
    axis -1 for a scalar parameter's value), the parameters written, the kernel's size
    preconditions, the workspaces' element counts, and per launch its function, grid and
    block. Shapes, conditions, counts and grids are shape programs over the size variables
    in order (docs/vm.md), so the host computes them without the compiler."""
    from tcc.emit.vm import shape_program

    slots = {v: i for i, v in enumerate(kernel.size_vars)}
    where = f"CUDA kernel {kernel.name!r}"

    def program(exprs, conditions: bool = False) -> list[int]:
        exprs = [E.simplify(e if conditions else E.as_dim(e)) for e in exprs]
        return list(shape_program(exprs, slots, where))

    params, bind = [], {}
    for i, p in enumerate(kernel.params):
        if isinstance(p, E.Var):
            params.append({"dtype": p.dtype, "scalar": True})
            bind.setdefault(p, [i, -1])
        else:
            params.append({"dtype": p.dtype, "shape": program(p.shape)})
            for axis, d in enumerate(p.shape):
                if isinstance(d, E.Var):
                    bind.setdefault(d, [i, axis])
    unbound = [v.name for v in kernel.size_vars if v not in bind]
    if unbound:
        raise CudaCodegenError(f"{where}: size variable {unbound[0]!r} is no parameter and no "
                               "buffer dimension of its own, so the host cannot know it")
    return {
        "params": params,
        "size_vars": [v.name for v in kernel.size_vars],
        "bind": [bind[v] for v in kernel.size_vars],
        "writes": [i for i, p in enumerate(kernel.params)
                   if not isinstance(p, E.Var) and id(p) in kernel.written],
        "preconditions": program(kernel.preconditions, conditions=True),
        "workspaces": [{"name": n, "dtype": dt, "count": program([c])}
                       for n, dt, c in kernel.workspaces],
        "launches": [{"function": launch.symbol, "grid": program(launch.grid),
                      "block": list(launch.block)} for launch in kernel.launches],
    }


@dataclass(frozen=True)
class CudaModule:
    """A module's CUDA kernels: the source, its binaries (`nvrtc.compile_for_archs`: a
    cubin per arch, PTX of the newest) and each PrimFunc's launches."""

    source: str
    binaries: dict[str, bytes]
    kernels: dict[str, CudaKernel]

    def device_kernels(self, target) -> DeviceKernels:
        """The kernel library a pack holds (tcc.emit.pack): binaries named `sm_XX` (cubins)
        and `compute_XX` (PTX), and each kernel's launch spec."""
        binaries = {name.removesuffix(".ptx"): data for name, data in self.binaries.items()}
        specs = {name: launch_spec(k) for name, k in self.kernels.items()}
        return DeviceKernels(str(target), binaries, self.source, specs)


def compile_cuda_module(funcs: Mapping[str, T.PrimFunc], target, schedule: bool = True,
                        tuned: Mapping[str, T.PrimFunc] | None = None) -> CudaModule:
    """The kernels `funcs` (legalized, by exported name) scheduled for the CUDA `target` by
    the default rules unless `schedule` is False (those in `tuned` as it gives them),
    translated and compiled."""
    from tcc.emit.nvrtc import compile_for_archs, header_options
    from tcc.lower.rules import schedule_prim_func

    tuned = dict(tuned or {})
    scheduled = {}
    for name, func in funcs.items():
        if name in tuned:
            scheduled[name] = tuned[name]
        elif schedule:
            # not through verify_if_asked (TCC_VERIFY=1) yet: the bounds prover cannot follow
            # a guarded split of a symbolic fused extent across blockIdx and threadIdx
            scheduled[name] = schedule_prim_func(func, target)
        else:
            scheduled[name] = func
    source, kernels = cuda_kernels(scheduled)
    binaries = compile_for_archs(source, "kernels.cu", target.archs, header_options(source))
    return CudaModule(source, binaries, kernels)
