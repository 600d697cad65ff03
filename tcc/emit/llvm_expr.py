"""Scalar expressions to LLVM values, lane-generic: every handler works on scalars and vectors.

Values live in registers with one type per dtype (`reg_type`): bool is i1, float16 is float
(rounded to half precision after each operation, as numpy rounds each float16 result), and
the other dtypes are themselves. Memory types differ only for bool (i8) and float16 (half).
The storage types tcc does no arithmetic on are held as tcc holds them: bfloat16 as float
(rounded to bfloat16), the low-precision types as their code byte (i8); loop programs read
and write them with `reinterpret` (tcc.ir.ops._storage_types).
When a vector meets a scalar (an operand that does not depend on the vectorized loop), the
scalar is broadcast, so vector code is scalar code run on all lanes at once.

Where the target allows it (`Target.fp_contract`), a float32/float64 `x * y + z` (or `- z`,
or `z - x * y`) in the expression tree becomes one `llvm.fmuladd`: a fused multiply-add on
machines that have one, rounding once. tcc picks the pairs from the expression, not LLVM's
instruction selection, so a kernel gives the same bits however it is scheduled or
vectorized. float16 keeps numpy's rounding after every operation.

A select that loads in a branch (padding) runs only the chosen branch. With a scalar
condition that is a branch and a phi; with one that differs between lanes (padding along a
vectorized loop) both branches run under a lane mask, and their loads become masked loads
that never touch the memory of a masked-off lane.

Integer division follows tcc's rules: `floordiv`/`floormod` round toward minus infinity, `div`
on integers truncates (C), and a divisor that is not a nonzero constant is guarded so that
division by zero gives 0 (as numpy does) instead of a hardware trap.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir

from tcc.emit.llvm_math import FAST_MATH, FastMath
from tcc.emit.support import CodegenError
from tcc.ir import expr as E
from tcc.ir.dtype import LOW_PRECISION, is_float, to_numpy

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()

_REG = {"bool": I1, "float16": F32, "float32": F32, "float64": F64, "bfloat16": F32}
_REG.update((name, I8) for name in LOW_PRECISION)
_MEM = {"bool": I8, "float16": F16}
_INT_BITS = {f"{s}int{b}": b for s in ("", "u") for b in (8, 16, 32, 64)}

# Intrinsics LLVM knows (and vectorizes or scalarizes itself), by tcc name.
_LLVM_MATH = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
    "sqrt": "llvm.sqrt", "abs": "llvm.fabs", "floor": "llvm.floor", "ceil": "llvm.ceil",
    "round": "llvm.roundeven", "trunc": "llvm.trunc", "nearbyint": "llvm.nearbyint",
    "sin": "llvm.sin", "cos": "llvm.cos", "pow": "llvm.pow", "copysign": "llvm.copysign",
}  # fmt: skip
# libm functions (the float32 variant adds "f"), called lane by lane on vectors.
_LIBM = frozenset({"tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
                   "atanh", "erf", "log1p", "expm1", "atan2"})  # fmt: skip
_INT_IDENTITY = frozenset({"floor", "ceil", "round", "trunc", "nearbyint"})
_FUSED = frozenset({"float32", "float64"})  # dtypes whose x * y + z may round once


def reg_type(dtype: str, what: str = "a value") -> ir.Type:
    """The register type holding a value of `dtype` (`what` names it in the error)."""
    if dtype in _REG:
        return _REG[dtype]
    if dtype in _INT_BITS:
        return ir.IntType(_INT_BITS[dtype])
    raise CodegenError(
        f"{what} has dtype {dtype}, which the LLVM backend does not support yet; "
        "cast it to float32 (or a supported integer type) before compiling"
    )


def mem_type(dtype: str, what: str = "a buffer") -> ir.Type:
    """The type one element of a `dtype` buffer has in memory."""
    return _MEM.get(dtype) or reg_type(dtype, what)


def lanes_of(v: ir.Value) -> int | None:
    return v.type.count if isinstance(v.type, ir.VectorType) else None


def with_lanes(t: ir.Type, lanes: int | None) -> ir.Type:
    return ir.VectorType(t, lanes) if lanes else t


def _signed(dtype: str) -> bool:
    return not dtype.startswith("uint") and dtype != "bool"


def _is_product(e: E.PrimExpr, dtype: str) -> bool:
    return isinstance(e, E.BinOp) and e.op == "mul" and e.dtype == dtype


def children(e: E.PrimExpr):
    """The operands of an expression (a load's indices included)."""
    for name in getattr(e, "__dataclass_fields__", ()):
        x = getattr(e, name)
        yield from (y for y in (x if isinstance(x, tuple) else (x,)) if isinstance(y, E.PrimExpr))


def _speculable(e: E.PrimExpr) -> bool:
    """Whether `e` is cheap enough to evaluate where a select does not choose it: no load, or
    one load (under casts) whose indices load nothing."""
    while isinstance(e, E.Cast):
        e = e.value
    if isinstance(e, E.BufferLoad):
        return not E.has_load(e.indices)
    return not E.has_load(e)


def const_value(dtype: str, value) -> ir.Constant:
    """An immediate in register form (floats rounded to their dtype, unsigned wrapped to two's
    complement, as LLVM spells them)."""
    t = reg_type(dtype)
    if is_float(dtype):
        return ir.Constant(t, float(to_numpy(dtype).type(value)))
    bits = t.width
    v = int(value) & ((1 << bits) - 1)
    return ir.Constant(t, v - (1 << bits) if bits > 1 and v >> (bits - 1) else v)


class DominatorBuilder(ir.IRBuilder):
    """An IRBuilder that knows which blocks dominate the one it is in, from the branches it
    emits. tcc emits structured code: when the builder first moves to a block, every
    branch into it is emitted but a loop's back edge, which does not change what dominates
    it; so the block's immediate dominator is then the nearest common dominator of the
    blocks that branch to it. A block no branch of this builder reaches (the function's
    first) is a root."""

    def __init__(self, block: ir.Block):
        self._preds: dict = {}  # block -> blocks that branch to it
        self._idom: dict = {block: None}
        self._depth: dict = {block: 0}
        super().__init__(block)

    def branch(self, target):
        self._preds.setdefault(target, []).append(self.block)
        return super().branch(target)

    def cbranch(self, cond, truebr, falsebr):
        for target in (truebr, falsebr):
            self._preds.setdefault(target, []).append(self.block)
        return super().cbranch(cond, truebr, falsebr)

    def _enter(self, block: ir.Block) -> None:
        if block in self._depth:
            return
        idom = None
        for p in self._preds.get(block, ()):
            if p not in self._depth:  # never positioned at: cannot reach here
                continue
            idom = p if idom is None else self._common(idom, p)
        self._idom[block] = idom
        self._depth[block] = 0 if idom is None else self._depth[idom] + 1

    def _common(self, a: ir.Block, b: ir.Block) -> ir.Block | None:
        depth, idom = self._depth, self._idom
        while a is not b and a is not None and b is not None:
            if depth[a] >= depth[b]:
                a = idom[a]
            else:
                b = idom[b]
        return a if a is b else None

    def position_at_end(self, block):
        self._enter(block)
        super().position_at_end(block)

    def position_at_start(self, block):
        self._enter(block)
        super().position_at_start(block)

    def position_before(self, instr):
        self._enter(instr.parent)
        super().position_before(instr)

    def position_after(self, instr):
        self._enter(instr.parent)
        super().position_after(instr)

    def dominates(self, block: ir.Block) -> bool:
        """Whether `block` dominates the builder's block (so its values may be used here)."""
        depth = self._depth.get(block)
        if depth is None:
            return False
        here = self.block
        while here is not None and self._depth[here] > depth:
            here = self._idom[here]
        return here is block


class _Spelled(ir.Constant):
    """A constant with the spelling given (llvmlite spells a vector constant lane by lane:
    a model's IR held thousands of 32-lane `undef` vectors and all-zero masks)."""

    def __init__(self, t: ir.Type, text: str, lanes=None):
        self.type, self.constant, self._text = t, lanes, text  # lanes: for llvmlite's checks

    def _get_reference(self) -> str:
        return self._text


def poison(t: ir.Type) -> ir.Constant:
    """A value of type `t` whose bits do not matter (what a splat inserts into)."""
    return _Spelled(t, "poison")


def zeros(t: ir.VectorType) -> ir.Constant:
    """The all-zero vector (a splat's shuffle mask)."""
    return _Spelled(t, "zeroinitializer", [ir.Constant(t.element, 0)] * t.count)


def _scalar_int(v: ir.Value) -> int | None:
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and isinstance(v.constant, int):
        return v.constant
    return None


def _fold_int(op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value | None:
    """`a op b` without an instruction where it is known now: both scalar constants (add,
    sub, mul, wrapped as the hardware wraps), or adding 0, multiplying by 1 or 0. Unrolled
    copies bind their loop variable to a constant, so most of their index arithmetic
    folds here."""
    x, y = _scalar_int(a), _scalar_int(b)
    if x is not None and y is not None and op in ("add", "sub", "mul"):
        return const_value(dtype, x + y if op == "add" else x - y if op == "sub" else x * y)
    if op == "add" and (x == 0 or y == 0):
        return b if x == 0 else a
    if op == "sub" and y == 0:
        return a
    if op == "mul" and (x == 1 or y == 1):
        return b if x == 1 else a
    if op == "mul" and (x == 0 or y == 0):
        return const_value(dtype, 0)
    return None


def _fold_float(op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value | None:
    """`a op b` without an instruction where the result is exactly known now: the product of
    two scalar float32/float64 constants (rounded as the hardware rounds), or adding -0.0,
    which changes no value (-0.0 + -0.0 is -0.0, x + -0.0 is x, NaN stays NaN). Decided
    selects leave both kinds in unrolled bodies (the Winograd transforms: 36 terms per
    output, most of them zero)."""
    if op == "mul" and dtype in ("float32", "float64"):
        x, y = _scalar_float(a), _scalar_float(b)
        if x is not None and y is not None:
            kind = to_numpy(dtype).type
            with np.errstate(all="ignore"):  # inf and NaN are values here
                return const_value(dtype, kind(x) * kind(y))
    if op == "add":
        if _is_negative_zero(b) and (lanes_of(a) or 0) >= (lanes_of(b) or 0):
            return a
        if _is_negative_zero(a) and (lanes_of(b) or 0) >= (lanes_of(a) or 0):
            return b
    return None


def _scalar_float(v: ir.Value) -> float | None:
    if isinstance(v, ir.Constant) and isinstance(v.constant, float):
        return v.constant
    return None


def _is_negative_zero(v: ir.Value) -> bool:
    if not isinstance(v, ir.Constant):
        return False
    items = v.constant if isinstance(v.constant, list) else [v]
    return all(isinstance(c, ir.Constant) and isinstance(c.constant, float) and c.constant == 0.0
               and math.copysign(1.0, c.constant) < 0 for c in items)


def _widened(lanes: int) -> int | None:
    """The power of two a contiguous access of `lanes` lanes is widened to, or None."""
    if lanes <= 2 or lanes & (lanes - 1) == 0:
        return None
    wide = 1 << lanes.bit_length()
    return wide if wide <= 64 else None


def _first_lanes(lanes: int, wide: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I1, wide), [1] * lanes + [0] * (wide - lanes))


class ExprEmitter:
    """Lowers PrimExprs with `self.b` (an IRBuilder); subclasses provide `env` and `load`."""

    b: ir.IRBuilder
    module: ir.Module
    env: dict
    fp_contract: bool = True  # the target's choice: fuse float x * y + z (one rounding)
    mask: ir.Value | None = None  # the lanes that run (a lane-varying select's branch, a guard)
    # Where a select is evaluated without a branch (`_speculated_select`): an i1 that says
    # whether the loads of the branch being lowered may read their addresses; where it does
    # not hold, a load reads a zero constant in memory instead and its value is discarded.
    guard: ir.Value | None = None
    # Values emitted before. An unrolled body computes the same indices, and often the same
    # loads and sums, in every copy; emitted once, the IR LLVM parses and optimizes is several
    # times smaller. Integer index arithmetic, by expression: (basic block, value, the values
    # its variables had), reused where its block dominates the builder's (`DominatorBuilder`)
    # and while its variables keep their values. Any other value (a load by the load, the
    # rest by the id of the expression): (the same, the state of the memory it loads,
    # `memory_state`, and the expression), reused later in its own basic block, or in one
    # it dominates inside the same loop (`loop_scope`), while its variables keep their values
    # and nothing has been stored to the buffers it loads: every run of the use has just run
    # the value (a cropped tile's copies, each store behind its guard, still share their
    # values: `_KernelGen._speculable`). A load is keyed by its
    # `canonical_load`, so copies at different positions of a tile that read one element
    # share it, and the float operations on shared values are numbered (`numbered`): the
    # Winograd output transform's copies, which share a position's inner sums, emit them
    # once. None: nothing is reused.
    reuse: dict | None = None

    # -- helpers -------------------------------------------------------------------------------

    def splat(self, v: ir.Value, lanes: int) -> ir.Value:
        if lanes_of(v) == lanes:
            return v
        vt = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vt, [v] * lanes)
        one = self.b.insert_element(poison(vt), v, I32(0))
        return self.b.shuffle_vector(one, poison(vt), zeros(ir.VectorType(I32, lanes)))

    def unify(self, *vals: ir.Value) -> list[ir.Value]:
        """Broadcast scalars to the lane count of the vectors among `vals`."""
        lanes = max((lanes_of(v) or 0 for v in vals), default=0)
        return [self.splat(v, lanes) for v in vals] if lanes else list(vals)

    def const(self, dtype: str, value, like: ir.Value | None = None) -> ir.Value:
        c = const_value(dtype, value)
        lanes = lanes_of(like) if like is not None else None
        return self.splat(c, lanes) if lanes else c

    def lanewise(self, fn, *vals: ir.Value) -> ir.Value:
        """Apply a scalar-only emitter to each lane of vector operands."""
        vals = tuple(self.unify(*vals))
        lanes = lanes_of(vals[0])
        if not lanes:
            return fn(*vals)
        out = None
        for i in range(lanes):
            r = fn(*(self.b.extract_element(v, I32(i)) for v in vals))
            if out is None:
                out = poison(ir.VectorType(r.type, lanes))
            out = self.b.insert_element(out, r, I32(i))
        return out

    def intrinsic(self, name: str, *args: ir.Value) -> ir.Value:
        t = args[0].type
        mangled = (
            f"v{t.count}{t.element.intrinsic_name}"
            if isinstance(t, ir.VectorType)
            else t.intrinsic_name
        )
        full = f"{name}.{mangled}"
        fn = self.module.globals.get(full)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(t, [t] * len(args)), full)
        return self.b.call(fn, list(args))

    def libm(self, name: str, *args: ir.Value) -> ir.Value:
        def call(*xs):
            sym = name + ("f" if xs[0].type == F32 else "")
            fn = self.module.globals.get(sym)
            if fn is None:
                fn = ir.Function(
                    self.module, ir.FunctionType(xs[0].type, [x.type for x in xs]), sym
                )
            return self.b.call(fn, list(xs))

        return self.lanewise(call, *args)

    def round_half(self, v: ir.Value) -> ir.Value:
        lanes = lanes_of(v)
        return self.b.fpext(self.b.fptrunc(v, with_lanes(F16, lanes)), with_lanes(F32, lanes))

    def finish(self, v: ir.Value, dtype: str) -> ir.Value:
        return self.round_half(v) if dtype == "float16" else v

    def mem_to_reg(self, v: ir.Value, dtype: str) -> ir.Value:
        """A value loaded from memory (scalar or vector) in register form."""
        if dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, None))
        if dtype == "float16":
            return self.b.fpext(v, with_lanes(F32, lanes_of(v)))
        return v

    def reg_to_mem(self, v: ir.Value, dtype: str) -> ir.Value:
        if dtype == "bool":
            return self.b.zext(v, with_lanes(I8, lanes_of(v)))
        if dtype == "float16":
            return self.b.fptrunc(v, with_lanes(F16, lanes_of(v)))
        return v

    def convert(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        """Cast a register value of dtype `src` to dtype `dst` (numpy's astype rules)."""
        if src == dst:
            return v
        b, lanes = self.b, lanes_of(v)
        dt = with_lanes(reg_type(dst), lanes)
        if dst == "bool":
            if is_float(src):
                return b.fcmp_unordered("!=", v, self.const(src, 0.0, v))
            return b.icmp_unsigned("!=", v, self.const(src, 0, v))
        if src == "bool":
            return b.uitofp(v, dt) if is_float(dst) else b.zext(v, dt)
        if is_float(src) and is_float(dst):
            if dst == "float16":  # one rounding, straight from the source precision
                return b.fpext(b.fptrunc(v, with_lanes(F16, lanes)), dt)
            if v.type == dt:
                return v
            return b.fpext(v, dt) if dst == "float64" else b.fptrunc(v, dt)
        if is_float(src):
            return b.fptosi(v, dt) if _signed(dst) else b.fptoui(v, dt)
        if is_float(dst):
            r = b.sitofp(v, dt) if _signed(src) else b.uitofp(v, dt)
            return self.finish(r, dst)
        sw, dw = (
            v.type.element.width if lanes else v.type.width,
            dt.element.width if lanes else dt.width,
        )
        if sw == dw:
            return v
        if sw > dw:
            return b.trunc(v, dt)
        return b.sext(v, dt) if _signed(src) else b.zext(v, dt)

    # -- expressions ---------------------------------------------------------------------------

    def expr_as(self, e: E.PrimExpr, dtype: str) -> ir.Value:
        return self.convert(self.expr(e), e.dtype, dtype)

    def expr(self, e: E.PrimExpr) -> ir.Value:
        handler = _HANDLERS.get(type(e))
        if handler is None:
            raise CodegenError(f"the LLVM backend cannot lower expression {e} ({type(e).__name__})")
        if self.reuse is None or type(e) not in _VALUE_OPS:
            return handler(self, e)
        free = index_vars(e) if type(e) in _INDEX_OPS else None
        if free is None:
            return self._value(e, handler)
        block, env = self.b.block, self.env
        hit = self.reuse.get(e)
        if (hit is not None and all(_same_value(env.get(v), x) for v, x in hit[2])
                and self.b.dominates(hit[0])):
            return hit[1]
        value = handler(self, e)
        if self.b.block is block:
            self.reuse[e] = (block, value, tuple((v, env.get(v)) for v in free))
        return value

    def _value(self, e: E.PrimExpr, handler) -> ir.Value:
        """`e`, not index arithmetic: emitted before in this basic block when `reuse` says
        so. A value emitted under a speculation guard or a lane mask is kept for no other
        use (its inactive lanes and unguarded loads hold anything), but may use one."""
        inputs = value_inputs(e)
        if inputs is None:
            return handler(self, e)
        free, buffers = inputs
        block, env = self.b.block, self.env
        # A load by its structure (two reads of one element are often two objects); anything
        # else by identity: the copies of a body emit the same objects, and comparing two
        # float trees by structure walks both.
        key = e
        if type(e) is E.BufferLoad:
            canonical = self.canonical_load(e)
            if canonical is not e:
                key = canonical
                free = value_inputs(canonical)[0]
        else:
            key = id(e)
        hit = self.reuse.get(key)
        if (hit is not None and (type(key) is not int or hit[4] is e)
                and (hit[0] is block or (hit[5] is self.loop_scope() and self.b.dominates(hit[0])))
                and all(_same_value(env.get(v), x) for v, x in hit[2])
                and all(_same_memory(self.memory_state(buf), m) for buf, m in hit[3])):
            return hit[1]
        value = handler(self, e)
        if self.guard is None and self.mask is None and self.b.block is block:
            memory = tuple((buf, self.memory_state(buf)) for buf in buffers)
            if all(m is not None for _, m in memory):
                self.reuse[key] = (block, value, tuple((v, env.get(v)) for v in free), memory, e,
                                   self.loop_scope())
        return value

    def loop_scope(self) -> object:
        """The innermost loop open around the code being emitted (None: none). A value is
        reused in a block its own dominates only inside the same loop: in a loop opened
        since, a store emitted after the use would change what later iterations read."""
        return None

    def canonical_load(self, e: E.BufferLoad) -> E.BufferLoad:
        """`e` in a form equal for any two loads of one element (provided by the statement
        emitter, which knows the unrolled copies' positions)."""
        return e

    def memory_state(self, buffer) -> tuple | None:
        """(the pointer a load of `buffer` reads through, how many stores to it have been
        emitted), which a load's value is reused only while it stays; None: loads of it are
        not reused."""
        return None

    def _var(self, e: E.Var) -> ir.Value:
        v = self.env.get(e)
        if v is None:
            raise CodegenError(
                f"variable {e.name!r} is used where it is not defined; bind it by a parameter, "
                "a loop or a block iteration variable"
            )
        return v

    def _imm(self, e) -> ir.Value:
        return const_value(e.dtype, e.value)

    def _binop(self, e: E.BinOp) -> ir.Value:
        if self.fp_contract and e.op in ("add", "sub") and e.dtype in _FUSED:
            fused = self._mul_add(e)
            if fused is not None:
                return fused
        a, b = self.expr_as(e.a, e.dtype), self.expr_as(e.b, e.dtype)
        if is_float(e.dtype):
            folded = _fold_float(e.op, a, b, e.dtype)
            if folded is not None:
                return folded
            a, b = self.unify(a, b)
            return self.finish(self.numbered(("float", e.op, e.dtype), (a, b),
                                             lambda x, y: self._float_bin(e.op, x, y, e.dtype)),
                               e.dtype)
        a, b = self.unify(a, b)
        if e.dtype == "bool":
            a, b = self.convert(a, "bool", "int8"), self.convert(b, "bool", "int8")
            return self.convert(self._int_bin(e.op, a, b, "int8", e.b), "int8", "bool")
        return self._int_bin(e.op, a, b, e.dtype, e.b)

    def _mul_add(self, e: E.BinOp) -> ir.Value | None:
        """`x * y + z`, `x * y - z` or `z - x * y` as one llvm.fmuladd (negating a value is
        exact); None when neither operand is a product of the same dtype."""
        if _is_product(e.a, e.dtype):
            product, addend = e.a, e.b
        elif _is_product(e.b, e.dtype):
            product, addend = e.b, e.a
        else:
            return None
        x, y, z = (self.expr_as(v, e.dtype) for v in (product.a, product.b, addend))
        if e.op == "sub" and product is e.a:
            z = self.numbered(("fneg",), (z,), lambda v: self.b.fneg(v))
        elif e.op == "sub":
            x = self.numbered(("fneg",), (x,), lambda v: self.b.fneg(v))
        return self.numbered(("fma",), tuple(self.unify(x, y, z)),
                             lambda *v: self.intrinsic("llvm.fmuladd", *v))

    def numbered(self, op: tuple, operands: tuple, make) -> ir.Value:
        """make(*operands), or the value it gave before in this basic block for the same
        operation on the same operands (constants by value): unrolled copies that compute
        one sum from the same loads emit it once."""
        if self.reuse is None or self.guard is not None or self.mask is not None:
            return make(*operands)
        table = self.__dict__.setdefault("_numbered", {})
        block = self.b.block
        key = (*op, *(_operand_key(v) for v in operands))
        hit = table.get(key)
        if hit is not None and (hit[0] is block or self.b.dominates(hit[0])):
            return hit[1]  # the same operation on the same values: the same value
        value = make(*operands)
        table[key] = (block, value, operands)  # the operands, so that their ids stay theirs
        return value

    def _float_bin(self, op: str, a, b, dtype: str) -> ir.Value:
        bld = self.b
        if op == "add":
            return bld.fadd(a, b)
        if op == "sub":
            return bld.fsub(a, b)
        if op == "mul":
            return bld.fmul(a, b)
        if op == "div":
            return bld.fdiv(a, b)
        if op in ("min", "max"):  # NaN-propagating, as numpy's minimum/maximum
            return self.intrinsic("llvm.minimum" if op == "min" else "llvm.maximum", a, b)
        q = self.intrinsic("llvm.floor", bld.fdiv(a, b))
        if op == "floordiv":
            return q
        if op == "floormod":  # numpy's float remainder: the sign of the divisor
            return bld.fsub(a, bld.fmul(q, b))
        raise CodegenError(f"unknown binary operator {op!r}")

    def int_op(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        """Integer `a op b` for op add, sub or mul: folded when `_fold_int` can, else one
        instruction (wrapping)."""
        folded = _fold_int(op, a, b, dtype)
        if folded is not None:
            return folded
        return getattr(self.b, op)(a, b)  # IRBuilder.add, .sub, .mul

    def _int_bin(self, op: str, a, b, dtype: str, b_expr: E.PrimExpr) -> ir.Value:
        bld, signed = self.b, _signed(dtype)
        if op in ("add", "sub", "mul"):
            return self.int_op(op, a, b, dtype)
        if op in ("min", "max"):
            cmp = bld.icmp_signed if signed else bld.icmp_unsigned
            return bld.select(cmp("<" if op == "min" else ">", a, b), a, b)
        if op in ("div", "floordiv", "floormod"):
            return self._int_div(op, a, b, dtype, b_expr)
        raise CodegenError(f"unknown binary operator {op!r}")

    def _int_div(self, op: str, a, b, dtype: str, b_expr: E.PrimExpr) -> ir.Value:
        bld, signed = self.b, _signed(dtype)
        zero, one = self.const(dtype, 0, a), self.const(dtype, 1, a)
        is_zero = is_m1 = None
        if not (isinstance(b_expr, E.IntImm) and b_expr.value not in (0, -1)):
            # x / 0 gives 0 (numpy); MIN / -1 would trap, so -1 divides by negation
            is_zero = bld.icmp_unsigned("==", b, zero)
            bad = is_zero
            if signed:
                is_m1 = bld.icmp_signed("==", b, self.const(dtype, -1, a))
                bad = bld.or_(is_zero, is_m1)
            b = bld.select(bad, one, b)
        q = bld.sdiv(a, b) if signed else bld.udiv(a, b)
        r = bld.srem(a, b) if signed else bld.urem(a, b)
        if signed and op != "div":
            # round toward minus infinity: adjust when the remainder's sign differs from b's
            differ = bld.icmp_signed(
                "!=", bld.icmp_signed("<", r, zero), bld.icmp_signed("<", b, zero)
            )
            adjust = bld.and_(bld.icmp_signed("!=", r, zero), differ)
            q = bld.select(adjust, bld.sub(q, one), q)
            r = bld.select(adjust, bld.add(r, b), r)
        result = r if op == "floormod" else q
        if is_m1 is not None:
            result = bld.select(is_m1, zero if op == "floormod" else bld.sub(zero, a), result)
        if is_zero is not None:
            result = bld.select(is_zero, zero, result)
        return result

    def _cmp(self, e: E.Cmp) -> ir.Value:
        dtype = e.a.dtype
        a, b = self.unify(self.expr(e.a), self.expr_as(e.b, dtype))
        sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.op]
        if is_float(dtype):
            if e.op == "ne":
                return self.b.fcmp_unordered(sym, a, b)
            return self.b.fcmp_ordered(sym, a, b)
        if _signed(dtype):
            return self.b.icmp_signed(sym, a, b)
        return self.b.icmp_unsigned(sym, a, b)

    def _logic(self, e: E.Logic) -> ir.Value:
        a, b = self.unify(self.expr_as(e.a, "bool"), self.expr_as(e.b, "bool"))
        return self.b.and_(a, b) if e.op == "and" else self.b.or_(a, b)

    def _not(self, e: E.Not) -> ir.Value:
        return self.b.not_(self.expr_as(e.a, "bool"))

    def decided(self, cond: E.PrimExpr) -> bool | None:
        """The condition's value when known at compile time (see the kernel emitter)."""
        return None

    def outside_loops(self) -> bool:
        """Whether no loop runs around the code being emitted, in its function (see the
        kernel emitter)."""
        return False

    def _select(self, e: E.Select) -> ir.Value:
        known = self.decided(e.cond)
        if known is not None:
            return self.expr_as(e.true_value if known else e.false_value, e.dtype)
        c = self.expr_as(e.cond, "bool")
        if E.has_load(e.true_value) or E.has_load(e.false_value):
            if lanes_of(c):
                return self._masked_select(c, e)
            if (_speculable(e.true_value) and _speculable(e.false_value)
                    and self.outside_loops()):
                return self._speculated_select(c, e)
            return self._guarded_select(c, e)
        t, f = self.expr_as(e.true_value, e.dtype), self.expr_as(e.false_value, e.dtype)
        if lanes_of(c):
            c, t, f = self.unify(c, t, f)
        else:
            t, f = self.unify(t, f)
        return self.b.select(c, t, f)

    def _speculated_select(self, c: ir.Value, e: E.Select) -> ir.Value:
        """A select whose branches are single loads or load nothing (padding: `x[i]` where
        `i` is inside, else 0), where no loop runs around it: both run, each load through an
        address that is always readable, and a select picks. An unrolled body stays
        straight-line code, so LLVM merges the loads of one address across its selects,
        where a branch per select keeps each load apart. (Inside a loop a select stays a
        branch, which LLVM can take out of the loop where the condition does not change in
        it: a convolution's padding test in its loop over input channels.)"""
        t = self._under_guard(lambda: c, e.true_value, e.dtype)
        f = self._under_guard(lambda: self.b.not_(c), e.false_value, e.dtype)
        return self.b.select(c, *self.unify(t, f))

    def _under_guard(self, holds: Callable[[], ir.Value], e: E.PrimExpr, dtype: str) -> ir.Value:
        """`e`, its loads reading their addresses only where `holds()` (and any enclosing
        guard) is true."""
        if not E.has_load(e):
            return self.expr_as(e, dtype)
        outer = self.guard
        self.guard = holds() if outer is None else self.b.and_(outer, holds())
        try:
            return self.expr_as(e, dtype)
        finally:
            self.guard = outer

    def _guarded_select(self, c: ir.Value, e: E.Select) -> ir.Value:
        """A select whose branches load: only the chosen branch runs (padding may index out of
        bounds where its condition is false), so it is a branch and a phi."""
        b = self.b
        with b.if_else(c) as (then, otherwise):
            with then:
                t, t_end = self.expr_as(e.true_value, e.dtype), b.block
            with otherwise:
                f, f_end = self.expr_as(e.false_value, e.dtype), b.block
        lanes = lanes_of(t) or lanes_of(f)
        if lanes and lanes_of(t) != lanes_of(f):  # broadcast the scalar side in its own block
            scalar_end = f_end if lanes_of(t) else t_end
            with b.goto_block(scalar_end):
                if lanes_of(t):
                    f = self.splat(f, lanes)
                else:
                    t = self.splat(t, lanes)
        phi = b.phi(t.type)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return phi

    def _masked_select(self, c: ir.Value, e: E.Select) -> ir.Value:
        """A select whose condition differs between lanes and whose branches load: each branch
        runs on all lanes, its loads masked to the lanes that choose it."""
        t = self._masked(c, e.true_value, e.dtype)
        f = self._masked(self.b.not_(c), e.false_value, e.dtype)
        return self.b.select(*self.unify(c, t, f))

    def _masked(self, lanes: ir.Value, e: E.PrimExpr, dtype: str) -> ir.Value:
        """`e` with its loads limited to `lanes` (and to the lanes of any enclosing mask)."""
        if not E.has_load(e):
            return self.expr_as(e, dtype)
        outer = self.mask
        self.mask = lanes if outer is None else self.b.and_(outer, lanes)
        try:
            return self.expr_as(e, dtype)
        finally:
            self.mask = outer

    def load_lanes(self, ptr: ir.Value, vt: ir.VectorType, align: int,
                   widen: bool = False) -> ir.Value:
        """A contiguous vector load from `ptr`; inside a lane-varying select only the active
        lanes read (`llvm.masked.load`, zero elsewhere), since the others may point out of
        bounds. The vectorizer's plan lets no other kind of load run under a mask but one
        the same for every lane (`load` reads it through a safe address). With `widen`, a
        lane count that is no power of two loads as the next power of two with the extra
        lanes masked off (one instruction; LLVM splits a 14-lane load into 8 + 4 + 2)."""
        wide = _widened(vt.count) if widen and self.mask is None else None
        if wide is not None:
            wt = ir.VectorType(vt.element, wide)
            loaded = self._masked_access("load", wt, ptr, align, _first_lanes(vt.count, wide))
            return self.b.shuffle_vector(loaded, poison(wt),
                                         ir.Constant(ir.VectorType(I32, vt.count),
                                                     list(range(vt.count))))
        if self.mask is None:
            return self.b.load(ptr, typ=vt, align=align)
        return self._masked_access("load", vt, ptr, align, self.mask)

    def store_lanes(self, value: ir.Value, ptr: ir.Value, align: int,
                    widen: bool = False) -> None:
        """A contiguous vector store to `ptr`; under a guard on the lanes only the active
        lanes write (`llvm.masked.store`); `widen` as for `load_lanes`."""
        vt = value.type
        wide = _widened(vt.count) if widen and self.mask is None else None
        if wide is not None:
            spread = list(range(vt.count)) + [0] * (wide - vt.count)  # masked off
            value = self.b.shuffle_vector(value, poison(vt),
                                          ir.Constant(ir.VectorType(I32, wide), spread))
            self._masked_access("store", value.type, ptr, align,
                                _first_lanes(vt.count, wide), value)
            return
        if self.mask is None:
            self.b.store(value, ptr, align=align)
            return
        self._masked_access("store", vt, ptr, align, self.mask, value)

    def _masked_access(self, kind: str, vt: ir.VectorType, ptr: ir.Value, align: int,
                       mask: ir.Value, value: ir.Value | None = None) -> ir.Value:
        """`llvm.masked.load` (zero in the lanes off) or `llvm.masked.store` of `value`."""
        name = f"llvm.masked.{kind}.v{vt.count}{vt.element.intrinsic_name}.p0"
        fn = self.module.globals.get(name)
        if fn is None:
            fnty = (ir.FunctionType(vt, [PTR, mask.type, vt]) if kind == "load"
                    else ir.FunctionType(ir.VoidType(), [vt, PTR, mask.type]))
            fn = ir.Function(self.module, fnty, name)
        if kind == "load":
            call = self.b.call(fn, [ptr, mask, ir.Constant(vt, None)], arg_attrs={0: ()})
            call.arg_attributes[0].align = align  # the alignment is the pointer's attribute
        else:
            call = self.b.call(fn, [value, ptr, mask], arg_attrs={1: ()})
            call.arg_attributes[1].align = align
        return call

    def _cast(self, e: E.Cast) -> ir.Value:
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def _call(self, e: E.Call) -> ir.Value:
        name = e.name
        if name == "reinterpret":
            x, src = self.expr(e.args[0]), e.args[0].dtype
            if src == "bool":  # its byte: 0 or 1
                return self.b.zext(x, with_lanes(reg_type(e.dtype), lanes_of(x)))
            if e.dtype == "bool":
                return self.b.icmp_unsigned("!=", x, self.const(src, 0, x))
            to = with_lanes(reg_type(e.dtype), lanes_of(x))
            return x if to == x.type else self.b.bitcast(x, to)
        if name in ("isnan", "isinf"):
            x = self.expr(e.args[0])
            src = e.args[0].dtype
            if not is_float(src):
                return self.const("bool", 0, x)
            if name == "isnan":
                return self.b.fcmp_unordered("uno", x, x)
            return self.b.fcmp_ordered(
                "==", self.intrinsic("llvm.fabs", x), self.const(src, float("inf"), x)
            )
        dtype = e.dtype
        if not is_float(dtype):
            return self._int_call(e)
        return self.math(name, self.unify(*(self.expr_as(a, dtype) for a in e.args)), dtype)

    def math(self, name: str, args: list[ir.Value], dtype: str) -> ir.Value:
        """A float intrinsic on register values of `dtype`."""
        x = args[0]
        if name in FAST_MATH and with_lanes(F32, lanes_of(x)) == x.type:
            r = FastMath(self).emit(name, x)
        elif name in _LLVM_MATH:
            r = self.intrinsic(_LLVM_MATH[name], *args)
        elif name in _LIBM:
            r = self.libm(name, *args)
        elif name == "rsqrt":
            r = self.b.fdiv(self.const(dtype, 1.0, x), self.intrinsic("llvm.sqrt", x))
        elif name == "sigmoid":
            one = self.const(dtype, 1.0, x)
            r = self.b.fdiv(one, self.b.fadd(one, self.math("exp", [self.b.fneg(x)], dtype)))
        elif name == "fmod":
            r = self.b.frem(args[0], args[1])
        else:
            raise CodegenError(f"the LLVM backend has no lowering for intrinsic {name!r}")
        return self.finish(r, dtype)

    def _int_call(self, e: E.Call) -> ir.Value:
        name, dtype = e.name, e.dtype
        args = self.unify(*(self.expr_as(a, dtype) for a in e.args))
        x = args[0]
        if name in _INT_IDENTITY:
            return x
        if name == "abs":
            if not _signed(dtype):
                return x
            neg = self.b.icmp_signed("<", x, self.const(dtype, 0, x))
            return self.b.select(neg, self.b.sub(self.const(dtype, 0, x), x), x)
        if name == "fmod":
            return self._int_rem(x, args[1], dtype)
        # the rest are float functions: computed in float64, converted back as numpy's astype
        wide = [self.convert(a, dtype, "float64") for a in args]
        return self.convert(self.math(name, wide, "float64"), "float64", dtype)

    def _int_rem(self, a, b, dtype: str) -> ir.Value:
        bld, signed = self.b, _signed(dtype)
        zero, one = self.const(dtype, 0, a), self.const(dtype, 1, a)
        bad = bld.icmp_unsigned("==", b, zero)
        if signed:
            bad = bld.or_(bad, bld.icmp_signed("==", b, self.const(dtype, -1, a)))
        r = (bld.srem if signed else bld.urem)(a, bld.select(bad, one, b))
        return bld.select(bad, zero, r)

    def _load(self, e: E.BufferLoad) -> ir.Value:
        return self.load(e.buffer, e.indices)

    def load(self, buffer, indices) -> ir.Value:  # provided by the statement emitter
        raise NotImplementedError


_INDEX_OPS = frozenset({E.BinOp, E.Cmp, E.Logic, E.Not, E.Select, E.Cast})
_VALUE_OPS = _INDEX_OPS | {E.BufferLoad, E.Call}  # tcc expressions have no side effects
_INDEX_VARS: dict = {}  # expression -> its variables, or None when it is not index arithmetic
_VALUE_INPUTS: dict = {}  # id -> (expression, (its variables, the buffers it loads) or None)


def _same_value(a: ir.Value | None, b: ir.Value | None) -> bool:
    """Whether two values a variable was bound to are the same: one value, or equal
    constants (an unrolled copy binds a new constant object each time)."""
    return a is b or (type(a) is ir.Constant and type(b) is ir.Constant and a.type == b.type
                      and a.constant == b.constant)


def _operand_key(v: ir.Value):
    if type(v) is ir.Constant:
        c = v.constant
        return (v.type, tuple(getattr(x, "constant", x) for x in c) if isinstance(c, list) else c)
    return id(v)


def _same_memory(a: tuple | None, b: tuple) -> bool:
    return a is not None and a[0] is b[0] and a[1] == b[1]


def index_vars(e: E.PrimExpr) -> tuple | None:
    """The variables of `e` when it is integer or boolean arithmetic on variables and
    constants (no loads, calls or floats: a value that depends only on its variables), else
    None."""
    if isinstance(e, E.Var):
        return (e,)
    if isinstance(e, E.IntImm):
        return ()
    if is_float(e.dtype):  # before hashing: a float tree can be deep
        return None
    try:
        return _INDEX_VARS[e]
    except KeyError:
        pass
    found: tuple | None = None
    if type(e) in _INDEX_OPS:
        parts = [index_vars(c) for c in children(e)]
        if all(p is not None for p in parts):
            found = tuple(dict.fromkeys(v for p in parts for v in p))
    if len(_INDEX_VARS) > 100_000:
        _INDEX_VARS.clear()
    _INDEX_VARS[e] = found
    return found


def value_inputs(e: E.PrimExpr) -> tuple[tuple, tuple] | None:
    """(the variables, the buffers loaded) of `e` when it is built of operators, loads,
    calls, variables and constants (its value depends on nothing else), else None."""
    if isinstance(e, E.Var):
        return (e,), ()
    if isinstance(e, (E.IntImm, E.FloatImm)):
        return (), ()
    hit = _VALUE_INPUTS.get(id(e))  # by identity, as `ExprEmitter._value` keys its values
    if hit is not None and hit[0] is e:
        return hit[1]
    found: tuple | None = None
    if type(e) in _VALUE_OPS:
        parts = [value_inputs(c) for c in children(e)]
        if all(p is not None for p in parts):
            loaded = (e.buffer,) if isinstance(e, E.BufferLoad) else ()
            found = (tuple(dict.fromkeys(v for p in parts for v in p[0])),
                     tuple(dict.fromkeys(loaded + tuple(b for p in parts for b in p[1]))))
    if len(_VALUE_INPUTS) > 100_000:
        _VALUE_INPUTS.clear()
    _VALUE_INPUTS[id(e)] = (e, found)  # the entry keeps `e` alive, so its id stays its own
    return found


_HANDLERS = {
    E.Var: ExprEmitter._var,
    E.IntImm: ExprEmitter._imm,
    E.FloatImm: ExprEmitter._imm,
    E.BinOp: ExprEmitter._binop,
    E.Cmp: ExprEmitter._cmp,
    E.Logic: ExprEmitter._logic,
    E.Not: ExprEmitter._not,
    E.Select: ExprEmitter._select,
    E.Cast: ExprEmitter._cast,
    E.Call: ExprEmitter._call,
    E.BufferLoad: ExprEmitter._load,
}
