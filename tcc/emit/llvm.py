"""The CPU backend: PrimFuncs -> LLVM IR (llvmlite) -> optimized object code (+ a shared object).

`compile_prim_funcs` turns every PrimFunc into one exported kernel following the ABI of
docs/compile.md §3 (the entry and its checks live in `llvm_abi`), whose work is done by an
internal compute function built here, statement by statement:

* `For`: serial loops as plain LLVM loops; `unrolled` loops with a small constant extent
  are copied out (a select whose condition the copy's loop values decide emits only the
  branch it takes), longer ones carry `llvm.loop.unroll.enable`; `vectorized` loops become
  LLVM vector operations when `llvm_vector.plan_vector` finds that keeps their meaning
  (under a guard on the lanes, the last tile of a split, with masked stores and loads; a
  stack tile's accesses that stay inside it on every lane are whole, blended on store, so
  the tile stays in registers: a 68 x 196 x 68 matmul's guarded tiles had LLVM's
  gathers and a tile in memory, 44-62 us -> 32 us, 192 columns without guards 20 us),
  and otherwise a scalar loop marked `llvm.loop.vectorize.enable` (left to LLVM unmarked
  when a guard tests the lane, which LLVM would refuse with a warning); the gathers of an
  unrolled loop around one vector step load a tile of contiguous rows and transpose it in
  registers when they read all of it (`llvm_transpose`); `parallel` loops
  are outlined into a function that `GOMP_parallel` (libgomp, the OpenMP runtime shipped
  with the C compiler) runs on every thread, each thread taking one contiguous chunk; the
  calling thread runs it alone when one thread is asked for, or, for a loop nest whose size
  is symbolic at compile time, when at run time the loop has one iteration or the nest
  fewer than the rules' `MIN_PARALLEL_WORK`.
* `Block`: iteration variables are bound from their bindings, `init` runs when every
  reduction variable is 0.
* Local buffers (a block's `alloc_buffer`, an `Allocate`) of constant size up to 16 KiB
  are one `alloca` in the entry block of the function being built, however deep the loop
  they live in: the compute function, or the outlined function of the parallel loop around
  them, so each thread has its own copy. LLVM's SROA then promotes a register tile whose
  indices unrolling makes constant (what `compact_buffers` in tcc.lower.schedule makes of a
  micro-kernel's accumulator) to registers. Others are malloc'd where their scope begins
  and freed where it ends; but one that every iteration of a parallel loop allocates
  before any loop of its own, at a size the iteration does not change, is malloc'd once by
  each worker for its share of the iterations.

The module is built with llvmlite.ir, parsed and verified, optimized at O3 with the new pass
manager, and emitted for the target machine. Everything is named by counters in build order,
so the same input gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from tcc.emit.llvm_abi import (
    CHECK_TENSOR,
    RESERVED,
    SHARED_STATE,
    Runtime,
    build_entry,
    fmt_text,
    size_vars,
)
from tcc.emit.llvm_expr import (
    _LIBM,
    _LLVM_MATH,
    I1,
    I32,
    I64,
    PTR,
    DominatorBuilder,
    ExprEmitter,
    children,
    index_vars,
    lanes_of,
    mem_type,
    reg_type,
)
from tcc.emit.llvm_transpose import TileContext, lane_step, load_transposed, tile_context
from tcc.emit.llvm_vector import (
    access_kind,
    flat_index,
    init_condition,
    lane_guarded,
    plan_vector,
)
from tcc.emit.support import CodegenError, combine_objects, link_shared
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.errors import InternalError
from tcc.lower.rules.cpu.machine import MIN_PARALLEL_WORK
from tcc.lower.schedule.regions import Interval, bounds, const_value, iter_loads
from tcc.target import Target, parse_target

__all__ = ["CodegenError", "CpuModule", "ObjectFile", "compile_object", "compile_prim_funcs",
           "link_objects"]

STACK_LIMIT_BYTES = 16 * 1024  # larger local buffers go to the heap, away from thread stacks
UNROLL_COPY_LIMIT = 16  # unrolled loops up to this many iterations are copied out
# LLVM's optimization and code generation level: O2 compiled ResNet-50 16% faster but ran
# BERT 8% slower (docs/compile.md §6; benchmarks/compile_time.py --variants O3,O2)
OPT_LEVEL = 3
# whether LLVM's loop unroller runs: tcc unrolls the loops its schedule marks itself
LLVM_UNROLL = True
# whether LLVM's loop strength reduction runs: off, ResNet-50's kernels compiled 9% faster
# and ran level, but ShuffleNet and Inception v1 ran 2% slower (docs/compile.md §6)
LLVM_LSR = True
_LSR_NOW = [True]  # what LLVM's process-wide option says now
_C_MATH_NAMES = frozenset(n for base in (*_LIBM, *(v.split(".")[1] for v in _LLVM_MATH.values()))
                          for n in (base, base + "f"))  # fmt: skip


@dataclass(frozen=True)
class CpuModule:
    """Compiled kernels: the ELF object, the linked shared object (host only), and the IR."""

    target: str
    symbols: tuple[str, ...]
    object_code: bytes
    shared_object: bytes | None
    llvm_ir: str  # after optimization, when compiled as one module (compile_prim_funcs); else ""


@dataclass
class _Frame:
    """The LLVM function being filled: where allocas go and how a failure leaves it."""

    fn: ir.Function
    allocas: ir.IRBuilder
    fail: Callable[[], None]


_DIVIDES: dict = {}  # id -> (load, whether an index divides); see _divides_index


def _has_division(e: E.PrimExpr) -> bool:
    if isinstance(e, E.BinOp) and e.op in ("floordiv", "floormod"):
        return True
    return any(_has_division(c) for c in children(e))


def _divides_index(e: E.BufferLoad) -> bool:
    """Whether an index of `e` takes a quotient or remainder: where copies at different
    positions can read one element without LLVM's address arithmetic seeing it cheaply
    (a tile's `(4 * t + k) // 4`); affine indices it compares well itself."""
    hit = _DIVIDES.get(id(e))
    if hit is None or hit[0] is not e:
        found = any(_has_division(i) for i in e.indices)
        if len(_DIVIDES) > 100_000:
            _DIVIDES.clear()
        hit = _DIVIDES[id(e)] = (e, found)
    return hit[1]


class _KernelGen(ExprEmitter):
    """Lowers one PrimFunc's body into its compute function."""

    def __init__(self, rt: Runtime, name: str, func: T.PrimFunc):
        self.rt, self.name, self.func, self.module = rt, name, func, rt.module
        self.env: dict = {}
        self.bufs: dict[T.Buffer, ir.Value] = {}
        self.vec: tuple[E.Var, ir.Value] | None = None  # (int64 lane variable, its lane-0 value)
        self._vec_var: E.Var | None = None  # the vectorized loop's own variable
        self.outlined = 0
        self.iter_exprs: dict[E.Var, E.PrimExpr] = {}  # block iteration variable -> binding
        self.unrolled: dict[E.Var, E.IntImm] = {}  # loop variable of an unrolled copy -> value
        self._decided: dict[tuple, bool | None] = {}  # see decided
        self._canonical: dict[tuple, E.PrimExpr] = {}  # indices and loads: canonical_load
        self._store_guard: ir.Value | None = None  # the guard of the store next emitted (_if)
        self._loop_scopes: list = [None]  # the loops open around the builder (loop_scope)
        self._inside: dict[tuple, bool] = {}  # see _index_inside
        self._parallel_ranges: dict[int, Interval] = {}  # the parallel loops' variables
        # buffers alloca'd (register tile candidates) -> their element count
        self.stack_bufs: dict[T.Buffer, int] = {}
        self.ranges: dict[int, Interval] = {}  # serial, unrolled and lane loop variables
        self.reuse = {}
        self._stores: dict[T.Buffer, int] = {}  # stores emitted to each buffer (memory_state)
        # keyed by id, the object kept beside it (an id is unique only while it lives)
        self._plans: dict[int, tuple] = {}  # vectorized loop -> (loop, plan, lane variable)
        self._offsets: dict[tuple, tuple] = {}  # see _lane_offset
        self._tile: TileContext | None = None  # the unrolled loop whose gathers may be tiles
        self.open_loops = 0  # loops around the code being emitted, in its function
        # allocations a parallel loop's worker made once for all its iterations (_per_worker)
        self.per_worker: dict[int, tuple[T.Allocate, ir.Value]] = {}

    # -- functions and frames ------------------------------------------------------------------

    def build(self) -> ir.Function:
        for p in self.func.params:
            reg_type(p.dtype, f"{'buffer' if isinstance(p, T.Buffer) else 'parameter'} {p.name!r}")
        bound = size_vars(self.func)
        bufs = self.func.buffers
        fnty = ir.FunctionType(I32, [PTR] * len(bufs) + [reg_type(v.dtype) for v in bound])
        fn = ir.Function(self.module, fnty, f"{self.name}.compute")
        fn.linkage = "internal"
        for arg in fn.args[: len(bufs)]:
            arg.add_attribute("noalias")
        self.frame = self._new_frame(fn, lambda: self.b.ret(I32(-1)))
        self.bufs = dict(zip(bufs, fn.args))
        self.env = dict(zip(bound, fn.args[len(bufs) :]))
        self.stmt(self.func.body)
        self.b.ret(I32(0))
        build_entry(self.rt, self.name, self.func, fn, bound)
        return fn

    def _new_frame(self, fn: ir.Function, fail: Callable[[], None]) -> _Frame:
        # The entry block holds only allocas and a branch, so they never interleave with code.
        entry, start = fn.append_basic_block("entry"), fn.append_basic_block("start")
        allocas = ir.IRBuilder(entry)
        allocas.position_before(allocas.branch(start))
        self.b = DominatorBuilder(start)
        return _Frame(fn, allocas, fail)

    def alloca(self, t: ir.Type) -> ir.Value:
        """Stack space in the function's entry block, so loops reuse it instead of growing the stack."""
        slot = self.frame.allocas.alloca(t)
        slot.align = 64
        slot.type = PTR  # llvmlite types alloca results; every other pointer here is opaque
        return slot

    def _spare_slot(self, t: ir.Type) -> ir.Value:
        """A constant of type `t` in memory, all zeros: a speculated load reads it where its
        own address may be out of bounds (see `ExprEmitter.guard`). Not a stack slot: LLVM's
        SROA turns a load from a select of a stack slot back into branches."""
        name = "tcc.spare." + re.sub(r"\W+", "_", str(t)).strip("_")
        slot = self.module.globals.get(name)
        if slot is None:
            slot = ir.GlobalVariable(self.module, t, name)
            slot.initializer = ir.Constant(t, None)
            slot.global_constant = True
            slot.linkage = "internal"
            slot.align = 64
        return slot

    def _readable(self, p: ir.Value, t: ir.Type) -> ir.Value:
        """`p`, or where the guard does not hold, a spare slot of the same type."""
        if self.guard is None:
            return p
        return self.b.select(self.guard, p, self._spare_slot(t))

    def fail(self, fmt: str, *args: ir.Value) -> None:
        self.rt.set_error(self.b, f"{self.name}: {fmt}", *args)
        self.frame.fail()

    # -- statements ----------------------------------------------------------------------------

    def stmt(self, s: T.Stmt) -> None:
        handler = _STMTS.get(type(s))
        if handler is None:
            raise CodegenError(f"the LLVM backend cannot lower statement {type(s).__name__}")
        handler(self, s)

    def _seq(self, s: T.SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def _evaluate(self, s: T.Evaluate) -> None:
        pass  # tcc expressions have no side effects

    def _if(self, s: T.IfThenElse) -> None:
        cond = self.expr_as(s.cond, "bool")
        if self.vec is not None and lanes_of(cond):  # a guard on the lanes (plan_vector)
            outer = self.mask
            self.mask = cond if outer is None else self.b.and_(outer, cond)
            try:
                self.stmt(s.then_case)
            finally:
                self.mask = outer
            return
        if s.else_case is None:
            if self._speculable(s.then_case):
                self._store_guard = cond
                try:
                    self.stmt(s.then_case)
                finally:
                    self._store_guard = None
                return
            with self.b.if_then(cond):
                self.stmt(s.then_case)
            return
        with self.b.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then_case)
            with otherwise:
                self.stmt(s.else_case)

    def memory_state(self, buffer: T.Buffer) -> tuple | None:
        return self.bufs.get(buffer), self._stores.get(buffer, 0)

    def loop_scope(self) -> object:
        return self._loop_scopes[-1]

    def _speculable(self, s: T.Stmt) -> bool:
        """Whether a guarded statement is one store (in a block of its own) whose value
        `_store` may compute before the guard's branch: in unrolled copies (a cropped tile's,
        as the Winograd output transform's last tiles), where the copies' values are shared
        only if they are computed in one basic block."""
        if not self.unrolled or self.reuse is None or self.mask is not None or self.guard is not None:
            return False
        if isinstance(s, T.Block) and s.init is None and not s.alloc_buffers:
            s = s.body
        return isinstance(s, T.BufferStore)

    def _loads_in_bounds(self, value: E.PrimExpr) -> bool:
        """Whether every load of `value` reads inside its buffer wherever the loops being
        emitted run, its indices bounded by their loops' ranges: then it may run whatever
        guards the store."""
        for load in iter_loads(value):
            for idx, dim in zip(load.indices, load.buffer.shape):
                if not self._index_inside(idx, dim):
                    return False
        return True

    def _index_inside(self, idx: E.PrimExpr, dim) -> bool:
        dim = dim.value if isinstance(dim, E.IntImm) else dim
        if not isinstance(dim, int):
            return False
        if isinstance(idx, E.IntImm):
            return 0 <= idx.value < dim
        mapping = self._positions(idx, every_block_variable=True)
        if self._vec_var in (index_vars(idx) or ()) and self.vec is not None:
            mapping[self._vec_var] = self.vec[0]  # the lane variable, whose range is known
        # the loops' ranges too: a variable object may be reused by a loop of other bounds
        ranges = {**self.ranges, **self._parallel_ranges}
        loops = tuple((w, ranges.get(id(w))) for v in index_vars(idx) or ()
                      for w in ((index_vars(mapping[v]) or ()) if v in mapping else (v,)))
        key = (idx, tuple(mapping.items()), dim, loops)
        found = self._inside.get(key)
        if found is None:
            flat = E.simplify(E.substitute(idx, mapping)) if mapping else idx
            span = bounds(flat, ranges)
            lo, hi = (None, None) if span is None else (const_value(span[0]), const_value(span[1]))
            found = self._inside[key] = lo is not None and hi is not None and 0 <= lo and hi < dim
        return found

    def _store(self, s: T.BufferStore) -> None:
        guard, self._store_guard = self._store_guard, None
        if guard is not None and not self._loads_in_bounds(s.value):
            with self.b.if_then(guard):
                self._store(s)
            return
        value = self.expr_as(s.value, s.buffer.dtype)
        if guard is None:
            self._write(s, value)
            return
        # the value before the branch, in this block with the other copies' (_speculable)
        with self.b.if_then(guard):
            self._write(s, value)

    def _write(self, s: T.BufferStore, value: ir.Value) -> None:
        ptr, dtype = self._buffer(s.buffer), s.buffer.dtype
        self._stores[s.buffer] = self._stores.get(s.buffer, 0) + 1
        elem = mem_type(dtype)
        if self.vec is not None:  # the plan made every store contiguous
            lanes = self.env[self.vec[0]].type.count
            flat = self._lane_offset(s.buffer, s.indices)[0]
            p = self.b.gep(ptr, [self._lane0(flat)], source_etype=elem)
            value = self.reg_to_mem(self.splat(value, lanes), dtype)
            if self.mask is not None and self._whole_lanes_inside(s.buffer, flat):
                # a register tile: blend instead of a masked store, which would keep it in
                # memory (a masked store's value is not forwarded to the next load)
                old = self.b.load(p, typ=value.type, align=_align(elem))
                self.b.store(self.b.select(self.mask, value, old), p, align=_align(elem))
                return
            self.store_lanes(value, p, _align(elem), widen=s.buffer not in self.stack_bufs)
            return
        offset = self.expr(self._offset(s.buffer, s.indices))
        self.b.store(
            self.reg_to_mem(value, dtype),
            self.b.gep(ptr, [offset], source_etype=elem),
            align=_align(elem),
        )

    def load(self, buffer: T.Buffer, indices) -> ir.Value:
        ptr, dtype = self._buffer(buffer), buffer.dtype
        elem = mem_type(dtype)
        b = self.b
        if self.vec is None:
            offset = self.expr(self._offset(buffer, indices))
            p = self._readable(b.gep(ptr, [offset], source_etype=elem), elem)
            return self.mem_to_reg(b.load(p, typ=elem, align=_align(elem)), dtype)
        u = self.vec[0]
        flat, kind = self._lane_offset(buffer, indices)
        if kind == "contiguous":
            vt = ir.VectorType(elem, self.env[u].type.count)
            p = self._readable(b.gep(ptr, [self._lane0(flat)], source_etype=elem), vt)
            if self.mask is not None and self._whole_lanes_inside(buffer, flat):
                return self.mem_to_reg(b.load(p, typ=vt, align=_align(elem)), dtype)
            return self.mem_to_reg(
                self.load_lanes(p, vt, _align(elem), widen=buffer not in self.stack_bufs),
                dtype)
        if kind == "gather" and self._tile is not None and self.mask is None and self.guard is None:
            column = self._tile_column(buffer, indices, flat, ptr, elem)
            if column is not None:
                return self.mem_to_reg(column, dtype)
        offsets = self.expr(flat)  # uniform: a scalar; gather: one offset per lane
        if kind == "uniform" and self.mask is not None:
            # under a guard (plan_vector): the scalar program reads it when a lane is active;
            # with none, the offset may be out of bounds, so read a slot of this frame instead
            active = b.icmp_unsigned("!=", b.bitcast(self.mask, ir.IntType(lanes_of(self.mask))),
                                     ir.Constant(ir.IntType(lanes_of(self.mask)), 0))
            safe = b.select(active, self._readable(b.gep(ptr, [offsets], source_etype=elem), elem),
                            self._spare_slot(elem))
            return self.mem_to_reg(b.load(safe, typ=elem, align=_align(elem)), dtype)
        return self.mem_to_reg(
            self.lanewise(
                lambda off: b.load(
                    self._readable(b.gep(ptr, [off], source_etype=elem), elem), typ=elem,
                    align=_align(elem)
                ),
                offsets,
            ),
            dtype,
        )

    def _tile_column(self, buffer: T.Buffer, indices, flat: E.PrimExpr, ptr: ir.Value,
                     elem: ir.Type) -> ir.Value | None:
        """This copy's column of the transposed tile a gather belongs to (llvm_transpose),
        loaded at the first copy; None when the gather is not one."""
        ctx = self._tile
        if id(indices) not in ctx.loads or self._vec_var is not ctx.lane_var:
            return None
        k = self.unrolled[ctx.var].value - ctx.start
        key = id(indices)
        if key not in ctx.tiles:
            if k != 0:
                return None
            u = self.vec[0]
            lanes = self.env[u].type.count
            step = lane_step(flat, ctx, u)
            ctx.tiles[key] = None if step is None else load_transposed(
                self.b, ptr, elem, self._lane0(flat), step, ctx.rows, lanes, _align(elem))
        columns = ctx.tiles[key]
        return None if columns is None else columns[k]

    def _whole_lanes_inside(self, buf: T.Buffer, flat: E.PrimExpr) -> bool:
        """Whether a contiguous access to a stack buffer stays inside it on every lane,
        masked-off ones included, over the ranges of the loops around it: then it needs no
        mask (the lanes a guard turns off read or keep what is there)."""
        size = self.stack_bufs.get(buf)
        if size is None:
            return False
        span = bounds(flat, self.ranges)
        lo, hi = (None, None) if span is None else (const_value(span[0]), const_value(span[1]))
        return lo is not None and hi is not None and 0 <= lo and hi < size

    def _buffer(self, buf: T.Buffer) -> ir.Value:
        ptr = self.bufs.get(buf)
        if ptr is None:
            raise CodegenError(
                f"buffer {buf.name!r} is used but is neither a parameter nor allocated in scope; "
                "declare it with alloc_buffer or allocate around its uses"
            )
        return ptr

    def _offset(self, buf: T.Buffer, indices) -> E.PrimExpr:
        """The flat offset of `buf[indices]`; for a buffer on the stack, with the enclosing
        blocks' bindings put in and simplified, so that a register tile's indices are
        constants before LLVM's SROA looks at them (`v - t * 4` with `v = t * 4 + i` is
        `i`; LLVM folds it only after SROA has given up on the tile)."""
        if buf in self.stack_bufs and self.iter_exprs:
            indices = [E.substitute(i, self.iter_exprs) for i in indices]
        return flat_index(buf, indices)

    def _lane_offset(self, buf: T.Buffer, indices) -> tuple[E.PrimExpr, str]:
        """The flat offset of `buf[indices]` in a vector loop's body, over its int64 lane
        variable, and its `access_kind`. Unrolled copies of the body lower the same access
        again and again; it is worked out once."""
        u = self.vec[0]
        key = (id(buf), id(indices), id(u))
        hit = self._offsets.get(key)
        if hit is None or hit[0] is not buf or hit[1] is not indices or hit[2] is not u:
            flat = flat_index(buf, indices, {self._vec_var: u})
            hit = self._offsets[key] = (buf, indices, u, flat, access_kind(flat, u))
        return hit[3], hit[4]

    def _lane0(self, flat: E.PrimExpr) -> ir.Value:
        """The offset of lane 0 of a contiguous access."""
        u, base = self.vec
        lanes = self.env[u]
        self.env[u] = base
        try:
            return self.expr(flat)
        finally:
            self.env[u] = lanes

    def _allocate(self, s: T.Allocate) -> None:
        hit = self.per_worker.get(id(s))
        if hit is not None and hit[0] is s:
            self.bufs[s.buffer] = hit[1]
            self.stmt(s.body)
            del self.bufs[s.buffer]
            return
        free = self._alloc(s.buffer)
        self.stmt(s.body)
        self._release(s.buffer, free)

    def _per_worker(self, s: T.For) -> None:
        """Heap buffers that every iteration of the parallel loop `s` allocates before any
        loop of its own, at a size the iteration does not change (a softmax row group's exps
        over a symbolic row length): allocated once by the worker, before its share of the
        iterations, and used by each (`_allocate`), instead of a malloc and a free each."""
        found: list[T.Allocate] = []

        def visit(node) -> None:
            if isinstance(node, T.SeqStmt):
                for x in node.stmts:
                    visit(x)
            elif isinstance(node, T.IfThenElse):
                visit(node.then_case)
                if node.else_case is not None:
                    visit(node.else_case)
            elif isinstance(node, T.Allocate):
                count = _element_count(node.buffer)
                sized = all(v in self.env for v in E.free_vars([count]))
                if sized and not self._on_stack(node.buffer, count):
                    found.append(node)
                visit(node.body)

        visit(s.body)
        for node in found:
            self.per_worker[id(node)] = (node, self._heap(node.buffer, _element_count(node.buffer)))

    def _on_stack(self, buf: T.Buffer, count: E.PrimExpr) -> bool:
        nbytes = _size_bytes(mem_type(buf.dtype, f"buffer {buf.name!r}"))
        return isinstance(count, E.IntImm) and count.value * nbytes <= STACK_LIMIT_BYTES

    def _alloc(self, buf: T.Buffer) -> bool:
        """Give `buf` storage; True when it is on the heap (and must be freed)."""
        elem = mem_type(buf.dtype, f"buffer {buf.name!r}")
        count = _element_count(buf)
        if self._on_stack(buf, count):
            self.bufs[buf] = self.alloca(ir.ArrayType(elem, max(count.value, 1)))
            self.stack_bufs[buf] = count.value
            return False
        self.bufs[buf] = self._heap(buf, count)
        return True

    def _heap(self, buf: T.Buffer, count: E.PrimExpr) -> ir.Value:
        """`count` elements of `buf`'s type from malloc; without memory the kernel fails,
        a parallel loop's worker first freeing what it allocated for all its iterations."""
        nbytes = _size_bytes(mem_type(buf.dtype, f"buffer {buf.name!r}"))
        size = self.b.mul(self.expr_as(count, "int64"), I64(nbytes))
        size = self.b.select(self.b.icmp_signed("<", size, I64(1)), I64(1), size)
        ptr = self.b.call(self.rt.malloc, [size])
        with self.b.if_then(self.b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), likely=False):
            for _, other in self.per_worker.values():
                self.b.call(self.rt.free, [other])
            self.fail(
                f"out of memory allocating %lld bytes for buffer {fmt_text(repr(buf.name))}", size
            )
        return ptr

    def _release(self, buf: T.Buffer, heap: bool) -> None:
        if heap:
            self.b.call(self.rt.free, [self.bufs[buf]])
        del self.bufs[buf]

    def _positions(self, idx: E.PrimExpr, every_block_variable: bool) -> dict:
        """The variables of `idx` the unrolled copies fix, by their values: unrolled loop
        variables, and block variables by their bindings with those put in (all of them
        with `every_block_variable`, else those bound to an unrolled variable)."""
        mapping = {}
        for v in index_vars(idx) or ():
            if v in self.unrolled:
                mapping[v] = self.unrolled[v]
            elif v in self.iter_exprs and (every_block_variable or any(
                    u in self.unrolled for u in index_vars(self.iter_exprs[v]) or ())):
                mapping[v] = E.substitute(self.iter_exprs[v], self.unrolled)
        return mapping

    def canonical_load(self, e: E.BufferLoad) -> E.BufferLoad:
        """`e` with the unrolled copies' positions (and the block variables bound to them)
        put in its indices, which are simplified: two copies that read one element at
        different positions give one expression, and so one value. Only for loads whose
        indices divide (`_divides_index`)."""
        if not self.unrolled or not _divides_index(e):
            return e
        indices, changed = [], False
        for idx in e.indices:
            mapping = self._positions(idx, every_block_variable=False)
            if not mapping:
                indices.append(idx)
                continue
            key = (idx, tuple(mapping.items()))
            found = self._canonical.get(key)
            if found is None:
                found = self._canonical[key] = E.simplify(E.substitute(idx, mapping))
            indices.append(found)
            changed = True
        if not changed:
            return e
        key = (e.buffer, tuple(indices))  # one object per element, so its inputs are found once
        found = self._canonical.get(key)
        if found is None:
            found = self._canonical[key] = dataclasses.replace(e, indices=key[1])
        return found

    def decided(self, cond: E.PrimExpr) -> bool | None:
        """A condition the unrolled copies being emitted fix: a select on a position within
        a tile (the Winograd transforms') emits only the branch it takes, and so does a
        padding test that holds over the whole range of the loops it also depends on (the
        copies of a convolution's row away from its edges)."""
        if not self.unrolled:
            return None
        mapping = {}
        for v in index_vars(cond) or ():
            if v in self.unrolled:
                mapping[v] = self.unrolled[v]
            elif v in self.iter_exprs and any(u in self.unrolled
                                              for u in index_vars(self.iter_exprs[v]) or ()):
                mapping[v] = E.substitute(self.iter_exprs[v], self.unrolled)
        if not mapping:
            return None
        # the other block variables, by the loops they are bound to
        loops = {v: self.iter_exprs[v] for v in index_vars(cond) or ()
                 if v not in mapping and v in self.iter_exprs}
        key = (cond, tuple(mapping.items()), tuple(loops.items()))
        if key not in self._decided:  # the same selects come back in every term of a sum
            c = E.substitute(cond, mapping)
            if isinstance(c, E.IntImm):
                self._decided[key] = bool(c.value)
            else:
                self._decided[key] = E.simplify(E.substitute(c, loops)) if loops else c
        found = self._decided[key]
        return found if found is None or isinstance(found, bool) else self._within_ranges(found)

    def outside_loops(self) -> bool:
        """No loop of this function runs around the code being emitted (unrolled copies
        are no loop; the body of a parallel loop is its worker's, whose own loop over its
        share of the iterations does not count)."""
        return self.open_loops == 0

    def _within_ranges(self, cond: E.PrimExpr) -> bool | None:
        """`cond` (integer tests joined by and/or/not) when the ranges of the loops being
        emitted settle it, else None."""
        if isinstance(cond, E.IntImm):
            return bool(cond.value)
        if isinstance(cond, E.Not):
            inner = self._within_ranges(cond.a)
            return None if inner is None else not inner
        if isinstance(cond, E.Logic):
            a, b = self._within_ranges(cond.a), self._within_ranges(cond.b)
            settles = cond.op == "or"  # the value of one side that settles the whole
            if a is settles or b is settles:
                return settles
            return None if a is None or b is None else not settles
        if not isinstance(cond, E.Cmp) or not cond.a.dtype.startswith("int"):
            return None  # floats, and unsigned values whose difference wraps
        span = bounds(E.simplify(cond.a - cond.b), self.ranges)
        if span is None:
            return None
        lo, hi = const_value(span[0]), const_value(span[1])  # of a - b
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
        always, never = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0),
                         "gt": (lo > 0, hi <= 0), "ge": (lo >= 0, hi < 0),
                         "eq": (lo == hi == 0, lo > 0 or hi < 0),
                         "ne": (lo > 0 or hi < 0, lo == hi == 0)}[cond.op]
        return True if always else False if never else None

    def _block(self, s: T.Block) -> None:
        outer = [self.env.get(iv.var) for iv in s.iter_vars]
        outer_exprs = [self.iter_exprs.get(iv.var) for iv in s.iter_vars]
        for iv in s.iter_vars:
            self.env[iv.var] = self.expr_as(iv.binding, iv.var.dtype)
        for iv in s.iter_vars:
            self.iter_exprs[iv.var] = E.substitute(iv.binding, self.iter_exprs)
        heap = [self._alloc(buf) for buf in s.alloc_buffers]
        if s.init is not None:
            cond = init_condition(s)
            if isinstance(cond, E.IntImm):
                self.stmt(s.init)
            else:
                with self.b.if_then(self.expr(cond)):
                    self.stmt(s.init)
        self.stmt(s.body)
        for buf, h in zip(s.alloc_buffers, heap):
            self._release(buf, h)
        for iv, value, expr in zip(s.iter_vars, outer, outer_exprs):
            self._unbind(iv.var, value)
            if expr is None:
                del self.iter_exprs[iv.var]
            else:
                self.iter_exprs[iv.var] = expr

    # -- loops ---------------------------------------------------------------------------------

    def loop(
        self,
        start: ir.Value,
        stop: ir.Value,
        body: Callable[[ir.Value], None],
        signed: bool = True,
        hints: tuple[str, ...] = (),
    ) -> None:
        """`for (i = start; i < stop; ++i) body(i)`, with loop metadata `hints` on the latch."""
        b = self.b
        pre = b.block
        header = b.append_basic_block("loop")
        inner = b.append_basic_block("body")
        done = b.append_basic_block("done")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(start.type)
        i.add_incoming(start, pre)
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        b.cbranch(cmp("<", i, stop), inner, done)
        b.position_at_end(inner)
        self.open_loops += 1
        self._loop_scopes.append(header)
        body(i)
        self._loop_scopes.pop()
        self.open_loops -= 1
        nxt = b.add(i, ir.Constant(start.type, 1))
        i.add_incoming(nxt, b.block)
        latch = b.branch(header)
        if hints:
            latch.set_metadata("llvm.loop", self._loop_md(hints))
        b.position_at_end(done)

    def _loop_md(self, hints: tuple[str, ...]) -> ir.MDValue:
        m = self.module
        node = m.add_metadata([ir.MetaDataString(m, f"tcc.loop.{len(m.metadata)}")])
        props = [
            m.add_metadata(
                [ir.MetaDataString(m, h), I1(1)]
                if h.endswith("enable")
                else [ir.MetaDataString(m, h)]
            )
            for h in hints
        ]
        node.operands = (node, *props)  # a loop ID refers to itself (LangRef, "llvm.loop")
        return node

    def _for(self, s: T.For) -> None:
        kind = s.kind
        if kind is T.ForKind.THREAD_BINDING:
            raise CodegenError(
                f"loop {s.var.name!r} is bound to {s.thread_tag or 'a GPU thread axis'}, which needs "
                "the CUDA backend; compile for a cuda target or remove the binding"
            )
        if kind is T.ForKind.PARALLEL:
            return self._parallel(s)
        if kind is T.ForKind.VECTORIZED:
            hit = self._plan(s)
            if hit[1] is not None:
                return self._vector(s, hit[1], hit[2])
        dt = s.var.dtype
        outer = self.env.get(s.var)  # a variable object may be reused by a nested scope
        outer_range = self.ranges.get(id(s.var))
        self.ranges[id(s.var)] = (s.min, E.simplify(s.min + s.extent - 1))
        if (
            kind is T.ForKind.UNROLLED
            and isinstance(s.extent, E.IntImm)
            and s.extent.value <= UNROLL_COPY_LIMIT
        ):
            start = self.expr_as(s.min, dt)
            outer_value = self.unrolled.pop(s.var, None)
            outer_tile = self._tile
            self._tile = tile_context(s, lambda inner: self._plan(inner)[1])
            for k in range(s.extent.value):
                self.env[s.var] = self.int_op("add", start, ir.Constant(start.type, k), dt)
                if isinstance(s.min, E.IntImm):
                    self.unrolled[s.var] = E.IntImm(s.min.value + k, dt)
                self.stmt(s.body)
            self._tile = outer_tile
            self.unrolled.pop(s.var, None)
            if outer_value is not None:
                self.unrolled[s.var] = outer_value
            self._unbind(s.var, outer, outer_range)
            return
        hints = {
            T.ForKind.VECTORIZED: () if lane_guarded(s) else ("llvm.loop.vectorize.enable",),
            T.ForKind.UNROLLED: ("llvm.loop.unroll.enable",),
        }.get(kind, ())
        start = self.expr_as(s.min, dt)
        stop = self.int_op("add", start, self.expr_as(s.extent, dt), dt)

        def body(i):
            self.env[s.var] = i
            self.stmt(s.body)

        self.loop(start, stop, body, signed=not dt.startswith("uint"), hints=hints)
        self._unbind(s.var, outer, outer_range)

    def _plan(self, s: T.For) -> tuple:
        """(loop, its VectorPlan or None, its int64 lane variable), worked out once per loop;
        the offsets the plan found are `_lane_offset`'s."""
        hit = self._plans.get(id(s))
        if hit is None or hit[0] is not s:  # the same loop again in an unrolled copy
            u = E.Var(s.var.name, "int64")
            plan = plan_vector(s, u)
            for buf, indices, flat, kind in plan.offsets if plan is not None else ():
                self._offsets[(id(buf), id(indices), id(u))] = (buf, indices, u, flat, kind)
            hit = self._plans[id(s)] = (s, plan, u)
        return hit

    def _unbind(self, var: E.Var, outer: ir.Value | None, outer_range=None) -> None:
        if outer is None:
            del self.env[var]
        else:
            self.env[var] = outer
        if outer_range is None:
            self.ranges.pop(id(var), None)
        else:
            self.ranges[id(var)] = outer_range

    def _vector(self, s: T.For, plan, u: E.Var) -> None:
        """Run the plan's body once per step of `lanes` iterations, all lanes at once, with
        `u` as the loop's int64 lane variable."""
        lanes = plan.lanes
        self.ranges[id(u)] = (s.min, E.simplify(s.min + s.extent - 1))
        start = self.expr_as(s.min, "int64")
        iota = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

        def step(k: ir.Value) -> None:
            base = self.int_op("add", start, self.int_op("mul", k, I64(lanes), "int64"), "int64")
            if isinstance(base, ir.Constant) and isinstance(base.constant, int):
                self.env[u] = ir.Constant(iota.type, [base.constant + i for i in range(lanes)])
            else:
                self.env[u] = self.b.add(self.splat(base, lanes), iota)
            self.env[s.var] = self.convert(self.env[u], "int64", s.var.dtype)
            self.vec, self._vec_var = (u, base), s.var
            self.stmt(plan.body)
            self.vec = None
            del self.env[u], self.env[s.var]

        if plan.steps == 1:
            step(I64(0))
        else:
            self.loop(I64(0), I64(plan.steps), step)
        del self.ranges[id(u)]

    def _parallel(self, s: T.For) -> None:
        """Outline the loop into `void f(captures*)` and run it with GOMP_parallel."""
        b = self.b
        captured = [*self.env.items(), *self.bufs.items()]
        struct_t = ir.LiteralStructType([v.type for _, v in captured] + [I32])
        slot = self.alloca(struct_t)
        for k, (_, v) in enumerate(captured):
            b.store(v, b.gep(slot, [I32(0), I32(k)], source_etype=struct_t))
        flag_p = b.gep(slot, [I32(0), I32(len(captured))], source_etype=struct_t)
        b.store(I32(0), flag_p)
        fn = ir.Function(
            self.module,
            ir.FunctionType(ir.VoidType(), [PTR]),
            f"{self.name}.parallel{self.outlined}",
        )
        fn.linkage = "internal"
        # The worker only unpacks its captures and calls the loop's body, a function whose
        # buffer parameters are noalias as the compute function's are: inlined, they become
        # alias scopes, so a store to one buffer does not make LLVM load another again.
        body = ir.Function(
            self.module,
            ir.FunctionType(ir.VoidType(), [v.type for _, v in captured] + [PTR]),
            f"{self.name}.parallel{self.outlined}.body",
        )
        body.linkage = "internal"
        body.attributes.add("alwaysinline")
        for (key, _), arg in zip(captured, body.args):
            if isinstance(key, T.Buffer):
                arg.add_attribute("noalias")
        self.outlined += 1
        unpack = ir.IRBuilder(fn.append_basic_block("entry"))
        values = [unpack.load(unpack.gep(fn.args[0], [I32(0), I32(k)], source_etype=struct_t),
                              typ=v.type) for k, (_, v) in enumerate(captured)]
        unpack.call(body, [*values, fn.args[0]])
        unpack.ret_void()

        saved = (self.b, self.frame, self.env, self.bufs, self.open_loops)
        data = body.args[-1]

        def fail_worker():  # the worker cannot report; the caller does after the join
            self.b.store(
                I32(1), self.b.gep(data, [I32(0), I32(len(captured))], source_etype=struct_t)
            )
            self.b.ret_void()

        self.frame = self._new_frame(body, fail_worker)
        self.env, self.bufs = {}, {}
        for (key, _), value in zip(captured, body.args):
            (self.bufs if isinstance(key, T.Buffer) else self.env)[key] = value
        self.open_loops = 0
        self._worker_loop(s)
        self.b.ret_void()
        self.b, self.frame, self.env, self.bufs, self.open_loops = saved

        threads = b.load(self.rt.num_threads, typ=I32)
        work = nest_work(s)
        if work is not None and not isinstance(work, E.IntImm):
            # the rules took a symbolic extent for large; at run time it may not be (an
            # LSTM step at batch 1): one iteration, or too little work for threads, runs on
            # this one
            small = b.or_(
                b.icmp_signed("<", self.expr_as(work, "int64"), I64(MIN_PARALLEL_WORK)),
                b.icmp_signed("<=", self.expr_as(s.extent, "int64"), I64(1)),
            )
            threads = b.select(small, I32(1), threads)
        with b.if_else(b.icmp_signed("==", threads, I32(1))) as (alone, shared):
            with alone:  # outside a parallel region the worker's share is the whole loop
                b.call(fn, [slot])
            with shared:
                b.call(self.rt.gomp("GOMP_parallel"), [fn, slot, threads, I32(0)])
        failed = b.icmp_signed("!=", b.load(flag_p, typ=I32), I32(0))
        with b.if_then(failed, likely=False):
            self.fail(
                f"out of memory allocating a buffer inside parallel loop {fmt_text(repr(s.var.name))}"
            )

    def _worker_loop(self, s: T.For) -> None:
        """This thread's share of the loop: static chunks of ceil(extent / threads)."""
        b = self.b
        tid = b.sext(b.call(self.rt.gomp("omp_get_thread_num"), []), I64)
        nt = b.sext(b.call(self.rt.gomp("omp_get_num_threads"), []), I64)
        extent = self.expr_as(s.extent, "int64")
        chunk = b.sdiv(b.add(extent, b.sub(nt, I64(1))), nt)
        lo = b.mul(tid, chunk)
        lo = b.select(b.icmp_signed("<", lo, extent), lo, extent)
        hi = b.add(lo, chunk)
        hi = b.select(b.icmp_signed("<", hi, extent), hi, extent)
        start = self.expr_as(s.min, "int64")
        outer, self.per_worker = self.per_worker, {}
        self._per_worker(s)
        self._parallel_ranges[id(s.var)] = (s.min, E.simplify(s.min + s.extent - 1))

        def body(i):
            self.env[s.var] = self.convert(b.add(start, i), "int64", s.var.dtype)
            self.open_loops -= 1  # each iteration is the body's one run in a parallel loop
            self.stmt(s.body)
            self.open_loops += 1

        self.loop(lo, hi, body)
        del self._parallel_ranges[id(s.var)]
        for _, ptr in self.per_worker.values():
            b.call(self.rt.free, [ptr])
        self.per_worker = outer


def _element_count(buf: T.Buffer) -> E.PrimExpr:
    count: E.PrimExpr = E.IntImm(1, "int64")
    for d in buf.shape:
        count = E.simplify(E.BinOp("mul", count, E.const(d) if isinstance(d, int) else d, "int64"))
    return count


def nest_work(s: T.Stmt, inner: frozenset = frozenset()) -> E.PrimExpr | None:
    """How many times the statements innermost in `s` run (every branch taken), as an
    expression of the variables outside it; None when an extent depends on a loop inside
    (`inner`: the variables, by id, of the loops around the statement being counted)."""
    if isinstance(s, T.For):
        if any(id(v) in inner for v in E.free_vars([s.extent])):
            return None
        body = nest_work(s.body, inner | {id(s.var)})
        return None if body is None else E.binop("mul", s.extent, body)
    if isinstance(s, T.SeqStmt):
        parts = [nest_work(x, inner) for x in s.stmts]
        if any(p is None for p in parts):
            return None
        total = parts[0]
        for p in parts[1:]:
            total = E.binop("add", total, p)
        return total
    if isinstance(s, T.IfThenElse):
        parts = [nest_work(x, inner) for x in (s.then_case, s.else_case) if x is not None]
        if any(p is None for p in parts):
            return None
        return parts[0] if len(parts) == 1 else E.binop("add", *parts)
    if isinstance(s, (T.Block, T.Allocate)):
        return nest_work(s.body, inner)
    return E.const(1)


_STMTS = {
    T.SeqStmt: _KernelGen._seq,
    T.Evaluate: _KernelGen._evaluate,
    T.IfThenElse: _KernelGen._if,
    T.BufferStore: _KernelGen._store,
    T.Allocate: _KernelGen._allocate,
    T.Block: _KernelGen._block,
    T.For: _KernelGen._for,
}


def _size_bytes(t: ir.Type) -> int:
    return max(
        1,
        (t.width if isinstance(t, ir.IntType) else {"half": 16, "float": 32, "double": 64}[str(t)])
        // 8,
    )


def _align(t: ir.Type) -> int:
    return _size_bytes(t)


def _check_name(name: str) -> None:
    if not (name.isascii() and name.isidentifier()):
        raise CodegenError(
            f"kernel name {name!r} is not a C identifier; rename the PrimFunc (letters, digits, _)"
        )
    if name in RESERVED or name in _C_MATH_NAMES or name.startswith(("tcc_", "GOMP_", "omp_")):
        raise CodegenError(
            f"kernel name {name!r} clashes with a runtime or C library symbol; rename the PrimFunc"
        )


def build_module(funcs: Mapping[str, T.PrimFunc], target: Target,
                 part: str = "whole") -> tuple[ir.Module, Runtime]:
    """The unoptimized LLVM module holding every kernel (sorted by name) and the runtime glue
    (`part`: what of the glue, `Runtime`)."""
    tm = target.target_machine()
    module = ir.Module(name="tcc_kernels")
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    rt = Runtime(module, part)
    for name in sorted(funcs):
        _check_name(name)
        try:
            gen = _KernelGen(rt, name, funcs[name])
            gen.fp_contract = target.fp_contract
            gen.build()
        except CodegenError as e:
            raise CodegenError(f"kernel {name!r}: {e}") from None
    return module, rt


@dataclass(frozen=True)
class ObjectFile:
    """One compiled LLVM module: its ELF object, whether it calls libgomp, its optimized IR."""

    object_code: bytes
    uses_openmp: bool
    llvm_ir: str = ""


def compile_object(funcs: Mapping[str, T.PrimFunc], target: str | Target = "llvm",
                   part: str = "whole", keep_ir: bool = True) -> ObjectFile:
    """One object holding `funcs` (and the runtime glue `part` names, `Runtime`), optimized
    at `OPT_LEVEL`; with its optimized IR as text unless `keep_ir` is False (printing it
    costs as long as parsing it)."""
    target = parse_target(target)
    module, rt = build_module(funcs, target, part)
    if _LSR_NOW[0] != LLVM_LSR:
        llvm.set_option("", f"-disable-lsr={str(not LLVM_LSR).lower()}")
        _LSR_NOW[0] = LLVM_LSR
    tm = target.target_machine(OPT_LEVEL)
    try:
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
    except RuntimeError as e:
        raise InternalError(
            f"LLVM rejected the IR tcc generated (a tcc bug, please report): {e}"
        ) from None
    if part != "whole":
        for name in SHARED_STATE:
            parsed.get_global_variable(name).visibility = "hidden"
        parsed.get_function(CHECK_TENSOR).visibility = "hidden"
    pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    pto.loop_vectorization = True
    pto.loop_unrolling = LLVM_UNROLL
    # tcc vectorizes explicitly (`vectorized` loops); the SLP vectorizer would pack the
    # scalar chains of unrolled rows into gathers instead: a 512 x 256 layer norm with its
    # rows' sums interleaved ran 85 us with it, 47 without; ResNet-50 and matmul unchanged
    pto.slp_vectorization = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(parsed, pb)
    return ObjectFile(tm.emit_object(parsed), rt.uses_openmp, str(parsed) if keep_ir else "")


def link_objects(objects: Sequence[ObjectFile], symbols, target: str | Target) -> CpuModule:
    """Objects of `compile_object` (one "whole", or "state" once and "kernels" for the rest)
    as one CpuModule: one relocatable object of them all and, for the host, one shared
    object (None without a C compiler). Combining more than one object needs the C
    compiler's linker (`support.c_compiler`)."""
    target = parse_target(target)
    codes = [o.object_code for o in objects]
    libraries = ["m"] + (["gomp"] if any(o.uses_openmp for o in objects) else [])
    if target.is_host:  # two runs of the C compiler at once: each mostly waits on its start
        with ThreadPoolExecutor(1) as pool:
            combining = pool.submit(combine_objects, codes)
            shared = link_shared(codes, libraries)
            combined = combining.result()
    else:
        shared, combined = None, combine_objects(codes)
    return CpuModule(str(target), tuple(sorted(symbols)), combined, shared,
                     "\n".join(o.llvm_ir for o in objects if o.llvm_ir))


def compile_prim_funcs(funcs: Mapping[str, T.PrimFunc], target: str | Target = "llvm") -> CpuModule:
    """Compile PrimFuncs (by exported symbol) for a CPU target, as one LLVM module; see the
    module docstring (`tcc.emit.cpu_kernels` compiles a model's kernels apart, in parallel)."""
    return link_objects([compile_object(funcs, target)], funcs, target)
