"""An executor of GPU-scheduled PrimFuncs with CUDA semantics, on numpy arrays, with no GPU.

`run_gpu_prim_func(func, arrays)` takes what `tir_eval.run_prim_func` takes and writes the
outputs in place, but runs loops bound to GPU axes the way a CUDA launch would, so that the
GPU schedule rules can be checked on any machine and synchronization bugs show:

- Launches. Outside kernels the body runs serially, as in tir_eval (host code: the root
  block, serial loops, statements with no thread binding). Each outermost loop bound to a
  blockIdx axis is one kernel launch. A threadIdx loop outside any blockIdx loop, a blockIdx
  loop inside a threadIdx loop, and a loop inside another bound to the same axis are errors.
- Dimensions. The grid's (block's) size on a blockIdx (threadIdx) axis is the largest extent
  of the launch's loops bound to that axis, evaluated when it launches (size variables and
  host loop variables may appear, the kernel's own loop variables may not); 1 with no loop.
  A bound loop does not iterate: its variable is `min` + the block's (thread's) index on its
  axis, and its body runs only where that index is below its extent, as CUDA codegen guards
  it. Code inside the grid but outside threadIdx loops runs in every thread (SIMT).
- Memory. "global" buffers are the arguments and the host's allocations. Each block of the
  grid gets fresh "shared" buffers and each thread fresh "local" ones, whatever statement
  declares them; floats start as NaN and integers as a sentinel (the type's minimum, maximum
  if unsigned; True for bool), so a read before any write shows in the results. A kernel
  may not allocate "global" memory.
- Barriers. `evaluate(syncthreads())` (`tir.syncthreads()`) is CUDA's `__syncthreads()`. A
  block's threads run phase by phase: each runs (a generator) to its next barrier, one
  thread after another, and when all wait, the next phase starts. The live threads of a
  block must all wait at the same barrier statement or all finish; anything else (a barrier
  under a thread-dependent `if`, or in a loop whose trip count differs) is a GpuEvalError
  naming the barrier and the threads. Outside kernels a barrier does nothing.
- Races (unless `races=False`). Two accesses of one element, at least one a write, by two
  threads are a GpuEvalError unless a barrier orders them, which only happens for threads of
  one block in different phases: "shared" memory races within a phase of a block, "global"
  memory across blocks of a launch as well (threads of different blocks are never ordered).
  One thread's own accesses never race (a reduction's init and updates, say).

Statements compile once into closures, reusing tir_eval's compiler: a statement holding no
barrier is a tir_eval closure, one holding a barrier a generator function that yields at it.
Race detection swaps each tracked buffer (shared or global, written in the launch) for a
numpy-like view that records who touched each element.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import is_float, to_numpy
from tcc.ir.fields import field_names
from tcc.ir.tir_eval import (
    Env,
    StmtFn,
    TirEvalError,
    _allocate,
    _bind_params,
    _Compiler,
    execute,
    in_block,
)

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
SCOPES = ("global", "shared", "local")

GenFn = Callable[[Env], Iterator[str]]  # yields the name of each barrier it reaches


class GpuEvalError(TirEvalError):
    """A GPU-scheduled PrimFunc that a GPU would not run correctly: a misplaced thread
    binding, a barrier not every thread of a block reaches, a data race."""


def run_gpu_prim_func(func: T.PrimFunc, arrays: Sequence, *, races: bool = True) -> None:
    """Run `func` on `arrays` as a CUDA GPU would (see the module docstring), writing the
    outputs in place; `races=False` skips race detection."""
    env: Env = {}
    _bind_params(func, list(arrays), env, "run_gpu_prim_func")
    execute(_Host(_Marks(func.body), races).stmt(func.body), env)


# ---------------------------------------------------------------------------------------------
# the statement tree


def is_barrier(s: T.Stmt) -> bool:
    """Whether `s` is the barrier statement `evaluate(syncthreads())`."""
    v = s.value if isinstance(s, T.Evaluate) else None
    return isinstance(v, E.Call) and v.name == "syncthreads" and not v.args


def _children(s: T.Stmt) -> tuple[T.Stmt, ...]:
    if isinstance(s, T.SeqStmt):
        return s.stmts
    if isinstance(s, (T.For, T.Allocate)):
        return (s.body,)
    if isinstance(s, T.IfThenElse):
        return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)
    if isinstance(s, T.Block):
        return (s.body,) if s.init is None else (s.init, s.body)
    return ()


class _Marks:
    """Which statements (by id) hold a bound loop, and which a barrier."""

    def __init__(self, body: T.Stmt):
        self.bound: set[int] = set()
        self.syncs: set[int] = set()
        self._mark(body)

    def _mark(self, s: T.Stmt) -> tuple[bool, bool]:
        bound = isinstance(s, T.For) and s.kind is T.ForKind.THREAD_BINDING
        sync = is_barrier(s)
        for c in _children(s):
            b, y = self._mark(c)
            bound, sync = bound or b, sync or y
        if bound:
            self.bound.add(id(s))
        if sync:
            self.syncs.add(id(s))
        return bound, sync


def _loaded_buffers(e: E.PrimExpr) -> Iterator[T.Buffer]:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, E.BufferLoad):
            yield x.buffer
        for name in field_names(x):
            v = getattr(x, name)
            if isinstance(v, E.PrimExpr):
                stack.append(v)
            elif isinstance(v, tuple):
                stack.extend(i for i in v if isinstance(i, E.PrimExpr))


def _exprs(s: T.Stmt) -> list[E.PrimExpr]:
    """The expressions a statement evaluates itself (not those of its sub-statements)."""
    if isinstance(s, T.For):
        return [s.min, s.extent]
    if isinstance(s, T.IfThenElse):
        return [s.cond]
    if isinstance(s, T.BufferStore):
        return [s.value, *s.indices]
    if isinstance(s, T.Evaluate):
        return [s.value]
    if isinstance(s, T.Block):
        return [e for iv in s.iter_vars for e in (iv.binding, iv.extent)]
    return []


def _fresh(buf: T.Buffer, env: Env) -> np.ndarray:
    """Uninitialized GPU memory: NaN for floats, a sentinel for integers."""
    if is_float(buf.dtype):
        return _allocate(buf, env)
    shape = tuple(int(E.evaluate(d, env)) for d in buf.shape)
    dtype = to_numpy(buf.dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype)
    info = np.iinfo(dtype)
    return np.full(shape, info.max if info.min == 0 else info.min, dtype)


def _as_gen(fn: StmtFn) -> GenFn:
    def run(env):
        fn(env)
        return
        yield

    return run


# ---------------------------------------------------------------------------------------------
# host code


class _Host(_Compiler):
    """Host code: tir_eval's closures, except that each outermost blockIdx loop launches."""

    def __init__(self, marks: _Marks, races: bool):
        self.marks, self.races, self.kernels = marks, races, 0

    def stmt(self, s: T.Stmt) -> StmtFn:
        if id(s) in self.marks.bound and isinstance(s, T.For):
            tag = s.thread_tag
            if s.kind is T.ForKind.THREAD_BINDING and tag in BLOCK_TAGS:
                self.kernels += 1
                return _Kernel(self.marks, s, self.kernels, self.races).launch
            if s.kind is T.ForKind.THREAD_BINDING:
                raise GpuEvalError(
                    f"loop {s.var.name!r} is bound to {tag} outside any blockIdx loop; "
                    "bind an enclosing loop to blockIdx.x (a kernel's outermost loops are its grid)"
                )
        return super().stmt(s)


# ---------------------------------------------------------------------------------------------
# races


class _Access:
    """What the race check remembers of one element: its last writer and who read it."""

    __slots__ = ("writer", "first_reader", "other_block_reader", "phase", "readers")

    def __init__(self):
        self.writer = None  # (block, thread, phase)
        self.first_reader = None  # (block, thread)
        self.other_block_reader = None  # a reader of another block than first_reader's
        self.phase = None  # (block, phase) of the reads in `readers`
        self.readers: list = []  # up to two threads that read it in `phase`


class _Log:
    """Who runs now (block, thread, phase), and the race checks of tracked accesses."""

    def __init__(self, kernel: str):
        self.kernel, self.block, self.thread, self.phase, self.after = kernel, None, None, 0, None

    def _entry(self, buf: T.Buffer, table: dict, idx: tuple, verb: str) -> _Access:
        """The element's record, after checking this access against its last writer."""
        e = table.get(idx)
        if e is None:
            e = table[idx] = _Access()
        if e.writer is not None and self._unordered(e.writer, self.block, self.thread, self.phase):
            self._race(buf, idx, verb, e.writer, "wrote")
        return e

    def read(self, buf: T.Buffer, table: dict, idx: tuple) -> None:
        e = self._entry(buf, table, idx, "reads")
        b, t, p = self.block, self.thread, self.phase
        if e.first_reader is None:
            e.first_reader = (b, t)
        elif e.other_block_reader is None and e.first_reader[0] != b:
            e.other_block_reader = (b, t)
        if e.phase != (b, p):
            e.phase, e.readers = (b, p), [t]
        elif len(e.readers) < 2 and t not in e.readers:
            e.readers.append(t)

    def write(self, buf: T.Buffer, table: dict, idx: tuple) -> None:
        e = self._entry(buf, table, idx, "writes")
        b, t, p = self.block, self.thread, self.phase
        for reader in (e.first_reader, e.other_block_reader):
            if reader is not None and reader[0] != b:
                self._race(buf, idx, "writes", (*reader, None), "read")
        if e.phase == (b, p):
            for other in e.readers:
                if other != t:
                    self._race(buf, idx, "writes", (b, other, p), "read")
        e.writer = (b, t, p)

    @staticmethod
    def _unordered(access, b, t, p) -> bool:
        ab, at, ap = access
        return (ab, at) != (b, t) and (ab != b or ap == p)

    def _race(self, buf: T.Buffer, idx: tuple, verb: str, other, other_verb: str) -> None:
        ob, ot, op = other
        phase = self.phase_text()
        if ob == self.block:
            who = f"thread {ot} {other_verb} it in the same phase"
            fix = "put a syncthreads() barrier between the two accesses"
        else:
            when = "" if op is None else f" in its phase {op}"
            who = f"thread {ot} of block {ob} {other_verb} it{when}"
            fix = (
                "blocks are never ordered within a launch: let one thread own each element, "
                "or split the kernel in two launches"
            )
        raise GpuEvalError(
            f"data race on {buf.scope} buffer {buf.name!r} element {idx} in {self.kernel}: "
            f"thread {self.thread} of block {self.block} {verb} it in {phase}, and {who}; {fix}"
        )

    def phase_text(self) -> str:
        after = "before any barrier" if self.after is None else f"after {self.after}"
        return f"phase {self.phase} ({after})"


class _Watched:
    """A buffer's storage seen through the race log: indexing records the access."""

    __slots__ = ("array", "shape", "buf", "table", "log")

    def __init__(self, array: np.ndarray, buf: T.Buffer, log: _Log):
        self.array, self.shape, self.buf, self.table, self.log = array, array.shape, buf, {}, log

    def __getitem__(self, idx):
        self.log.read(self.buf, self.table, idx)
        return self.array[idx]

    def __setitem__(self, idx, value):
        self.log.write(self.buf, self.table, idx)
        self.array[idx] = value


# ---------------------------------------------------------------------------------------------
# kernels


class _Kernel(_Compiler):
    """One launch: checks where its loops are bound, sizes its grid and blocks, and runs it."""

    def __init__(self, marks: _Marks, root: T.For, ordinal: int, races: bool):
        self.marks, self.name = marks, f"kernel {ordinal} (loop {root.var.name!r})"
        self.extents: dict[str, list[tuple[str, E.PrimExpr]]] = {t: [] for t in BLOCK_TAGS}
        self.extents.update({t: [] for t in THREAD_TAGS})
        self.barriers, self.where = 0, f"loop {root.var.name!r}"  # to name barriers by
        self.used: dict[T.Buffer, None] = {}  # by first use, so runs are deterministic
        self.written: set[T.Buffer] = set()
        self._scan(root, {}, f"loop {root.var.name!r}")
        self.shared = [b for b in self.used if b.scope == "shared"]
        self.local = [b for b in self.used if b.scope == "local"]
        tracked = [b for b in self.used if b in self.written and b.scope != "local"]
        self.tracked = tracked if races else []
        self.log = _Log(self.name)
        self.sizes = {
            tag: [(name, ext, self.expr(ext)) for name, ext in loops]
            for tag, loops in self.extents.items()
        }
        self.body = self.part(root)

    # -- analysis ---------------------------------------------------------------------------

    def _scan(self, s: T.Stmt, axes: dict[str, str], where: str) -> None:
        if isinstance(s, T.For):
            if s.kind is T.ForKind.THREAD_BINDING:
                axes = self._bound_loop(s, axes)
            where = f"loop {s.var.name!r}"
        elif isinstance(s, T.Block):
            for buf in s.alloc_buffers:
                self._use(buf, f"block {s.name!r}", allocates=True)
            where = f"block {s.name!r}"
        elif isinstance(s, T.Allocate):
            self._use(s.buffer, where, allocates=True)
        elif isinstance(s, T.BufferStore):
            self._use(s.buffer, where)
            self.written.add(s.buffer)
        for e in _exprs(s):
            for buf in _loaded_buffers(e):
                self._use(buf, where)
        for c in _children(s):
            self._scan(c, axes, where)

    def _bound_loop(self, s: T.For, axes: dict[str, str]) -> dict[str, str]:
        tag, name = s.thread_tag, s.var.name
        if tag not in self.extents:
            raise GpuEvalError(
                f"{self.name}: loop {name!r} is bound to unknown thread axis {tag!r}; "
                f"use one of {', '.join(BLOCK_TAGS + THREAD_TAGS)}"
            )
        if tag in axes:
            raise GpuEvalError(
                f"{self.name}: loop {name!r} is bound to {tag} inside loop {axes[tag]!r}, "
                f"bound to it too; bind one of them to another axis"
            )
        inner = [t for t in THREAD_TAGS if t in axes]
        if tag in BLOCK_TAGS and inner:
            raise GpuEvalError(
                f"{self.name}: loop {name!r} is bound to {tag} inside loop {axes[inner[0]]!r}, "
                f"bound to {inner[0]}; blockIdx loops must enclose the threadIdx loops"
            )
        self.extents[tag].append((name, s.extent))
        return {**axes, tag: name}

    def _use(self, buf: T.Buffer, where: str, allocates: bool = False) -> None:
        if buf.scope not in SCOPES:
            raise GpuEvalError(
                f"{self.name}: buffer {buf.name!r} has unknown storage scope {buf.scope!r}; "
                f"use one of {', '.join(SCOPES)}"
            )
        if allocates and buf.scope == "global":
            raise GpuEvalError(
                f"{self.name}: {where} allocates global buffer {buf.name!r} inside the kernel; "
                "allocate it in the root block, or make it shared or local"
            )
        self.used.setdefault(buf, None)

    # -- statements without a barrier: tir_eval's, bound loops guarded ----------------------

    def _For(self, s: T.For) -> StmtFn:
        if s.kind is not T.ForKind.THREAD_BINDING:
            return super()._For(s)
        lo, ext, body = self.expr(s.min), self.expr(s.extent), self.stmt(s.body)
        var, tag = s.var, s.thread_tag

        def run(env):
            i = env[tag]
            if i < int(ext(env)):
                env[var] = int(lo(env)) + i
                body(env)

        return run

    def _Allocate(self, s: T.Allocate) -> StmtFn:
        alloc, body = self.allocation(s.buffer), self.stmt(s.body)

        def run(env):
            alloc(env)
            body(env)

        return run

    def allocation(self, buf: T.Buffer) -> StmtFn:
        if buf.scope == "shared":  # one per block of the grid, made when the block starts
            return lambda env: None

        def alloc(env):
            env[buf] = _fresh(buf, env)

        return alloc

    def _Call(self, e: E.Call):
        if e.name == "syncthreads":
            raise GpuEvalError(
                f"{self.name}: syncthreads() is used inside an expression; a barrier is the "
                "statement evaluate(syncthreads()) on its own"
            )
        return super()._Call(e)

    # -- statements holding a barrier: generators ------------------------------------------

    def part(self, s: T.Stmt) -> GenFn:
        if id(s) not in self.marks.syncs:
            return _as_gen(self.stmt(s))
        return getattr(self, f"_gen_{type(s).__name__}")(s)

    def _inside(self, where: str, s: T.Stmt) -> GenFn:
        outer, self.where = self.where, where
        try:
            return self.part(s)
        finally:
            self.where = outer

    def _gen_Evaluate(self, s: T.Evaluate) -> GenFn:
        self.barriers += 1
        name = f"barrier #{self.barriers} in {self.where}"

        def run(env):
            yield name

        return run

    def _gen_SeqStmt(self, s: T.SeqStmt) -> GenFn:
        parts = [self.part(x) for x in s.stmts]

        def run(env):
            for p in parts:
                yield from p(env)

        return run

    def _gen_For(self, s: T.For) -> GenFn:
        lo, ext = self.expr(s.min), self.expr(s.extent)
        body, var, tag = self._inside(f"loop {s.var.name!r}", s.body), s.var, s.thread_tag
        if s.kind is T.ForKind.THREAD_BINDING:

            def bound(env):
                i = env[tag]
                if i < int(ext(env)):
                    env[var] = int(lo(env)) + i
                    yield from body(env)

            return bound

        def run(env):
            start = int(lo(env))
            for v in range(start, start + int(ext(env))):
                env[var] = v
                yield from body(env)

        return run

    def _gen_IfThenElse(self, s: T.IfThenElse) -> GenFn:
        cond, then = self.expr(s.cond), self.part(s.then_case)
        other = self.part(s.else_case) if s.else_case is not None else None

        def run(env):
            if cond(env):
                yield from then(env)
            elif other is not None:
                yield from other(env)

        return run

    def _gen_Allocate(self, s: T.Allocate) -> GenFn:
        alloc, body = self.allocation(s.buffer), self.part(s.body)

        def run(env):
            alloc(env)
            yield from body(env)

        return run

    def _gen_Block(self, s: T.Block) -> GenFn:
        enter, name = self.block_entry(s), s.name
        where = f"block {name!r}"
        init = self._inside(where, s.init) if s.init is not None else None
        body = self._inside(where, s.body)

        def run(env):
            try:
                if enter(env) and init is not None:
                    yield from init(env)
                yield from body(env)
            except TirEvalError as err:
                located = in_block(err, name)
                if located is err:
                    raise
                raise located from None

        return run

    # -- running ------------------------------------------------------------------------------

    def _dims(self, env: Env, tags: tuple[str, ...]) -> tuple[int, ...]:
        dims = []
        for tag in tags:
            sizes = []
            for name, ext, fn in self.sizes[tag]:
                try:
                    sizes.append(int(fn(env)))
                except KeyError as e:
                    var = getattr(e.args[0], "name", e.args[0])
                    raise GpuEvalError(
                        f"{self.name}: the extent {ext} of loop {name!r}, bound to {tag}, "
                        f"uses {var!r}, which is not known at launch; a launch's grid and block "
                        "sizes must be fixed before it starts"
                    ) from None
            dims.append(max(0, *sizes) if sizes else 1)
        return tuple(dims)

    def launch(self, env: Env) -> None:
        try:
            self._launch(env)
        except TirEvalError as err:
            if getattr(err, "block", None) is None:
                err.block = self.name  # it names the kernel already: no enclosing block's name
            raise

    def _launch(self, env: Env) -> None:
        grid, block = self._dims(env, BLOCK_TAGS), self._dims(env, THREAD_TAGS)
        base = dict(env)
        shared_watched = [b for b in self.tracked if b.scope == "shared"]
        for buf in self.tracked:
            if buf.scope == "global":
                base[buf] = _Watched(env[buf], buf, self.log)
        for bz, by, bx in itertools.product(*(range(n) for n in reversed(grid))):
            benv = dict(base)
            benv.update(zip(BLOCK_TAGS, (bx, by, bz)))
            for buf in self.shared:
                benv[buf] = _fresh(buf, benv)
            for buf in shared_watched:
                benv[buf] = _Watched(benv[buf], buf, self.log)
            self._run_block(benv, (bx, by, bz), block)

    def _run_block(self, benv: Env, bidx: tuple, block: tuple[int, ...]) -> None:
        threads = []
        for tz, ty, tx in itertools.product(*(range(n) for n in reversed(block))):
            env = dict(benv)
            env.update(zip(THREAD_TAGS, (tx, ty, tz)))
            for buf in self.local:
                env[buf] = _fresh(buf, env)
            threads.append(((tx, ty, tz), self.body(env)))
        log = self.log
        log.block, log.phase, log.after = bidx, 0, None
        while threads:
            waiting, finished = [], []
            for tid, gen in threads:
                log.thread = tid
                try:
                    waiting.append((tid, gen, next(gen)))
                except StopIteration:
                    finished.append(tid)
                except GpuEvalError:
                    raise
                except TirEvalError as err:
                    where = f"{self.name}, block {bidx}, thread {tid}"
                    raise type(err)(f"{where}: {err}") from None
            if waiting and (finished or len({at for _, _, at in waiting}) > 1):
                self._diverged(waiting, finished)
            threads = [(tid, gen) for tid, gen, _ in waiting]
            log.phase += 1
            log.after = waiting[0][2] if waiting else None

    def _diverged(self, waiting: list, finished: list) -> None:
        groups: dict[str, list] = {}
        for tid, _, at in waiting:
            groups.setdefault(f"wait at {at}", []).append(tid)
        if finished:
            groups["finished the kernel"] = finished
        text = "; ".join(f"{_threads_text(tids)} {what}" for what, tids in groups.items())
        raise GpuEvalError(
            f"barrier divergence in {self.name}, block {self.log.block}, "
            f"{self.log.phase_text()}: {text}; every live thread of a block must reach the same "
            "barrier as often: move it out of thread-dependent conditions and loops"
        )


def _threads_text(tids: list[tuple[int, int, int]]) -> str:
    """`16 threads (threadIdx.x 0-15)` when only x varies, else the first few (x, y, z)."""
    n = f"{len(tids)} thread{'s' if len(tids) > 1 else ''}"
    if any(t[1:] != tids[0][1:] for t in tids):
        return f"{n} {', '.join(str(t) for t in tids[:4])}{', ...' if len(tids) > 4 else ''}"
    runs: list[list[int]] = []
    for x in sorted(t[0] for t in tids):
        if runs and runs[-1][1] == x - 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    xs = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    y, z = tids[0][1:]
    rest = "" if (y, z) == (0, 0) else f", threadIdx.y {y}, threadIdx.z {z}"
    return f"{n} (threadIdx.x {xs}{rest})"
